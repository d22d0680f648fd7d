"""The four formats compared in FP16 (benchmarks/formats.py's files): the numbers both that script's stdout and the
"Formats (FP16)" section of docs/benchmarks.md (through benchmarks/summarize.py) are computed from. Runs of its
float32 mode (meta "dtype": "float32"; files before it have none and are FP16) have a shorter section of their own
after it, against cuSPARSE float32 CSR: the FP16 section and its targets read FP16 runs only.

Targets and questions (issues "Tiled-CSR with row shuffle" and "VectorSparse and SSpMM"):
- Tiled-CSR FP16, N = 128-1024, on the DNN-style, graph and SuiteSparse classes: >= 1.5x geomean over cuSPARSE
  half CSR (best algorithm). Judged here on Tiled-CSR in its paper's order (row shuffle, where it raised the
  effective computation rate; else the matrix as given) against cuSPARSE on the matrix AS GIVEN, both by CUDA-graph
  replay; the same-matrix ratio is shown beside it.
- Row shuffle's effective-computation gain (rate after / before, 16 x 16 tiles) next to the paper's 1.82x-3.89x
  (its measure: the rate over SR-BCRS's at 8 x 16 on DLMC; ours at 16 x 16 is given as well).
- Which format wins per class, and on graph matrices after reordering where CVSE wins or loses against ME-TCF and
  BCSR (each format in its paper's order: ME-TCF tca, BCSR smat, Tiled-CSR rowshuffle, CVSE as given).
"""
from __future__ import annotations

import math

FORMATS = ("metcf", "bcsr", "tiledcsr", "cvse")
NAMES = {"metcf": "ME-TCF", "bcsr": "BCSR", "tiledcsr": "Tiled-CSR", "cvse": "CVSE"}
PAPER_ORDER = {"metcf": "tca", "bcsr": "smat", "tiledcsr": "rowshuffle", "cvse": "given"}
CLASSES = ("dnn", "graph", "suitesparse", "fem")
TARGET_CLASSES = ("dnn", "graph", "suitesparse")  # issue 14's; fem is shown, not judged
TILED_TARGET = 1.5
PAPER_SHUFFLE_GAIN = (1.82, 3.89)
EXTRA = "cvse-genV"  # CVSE at the generator's V (DNN class): shown, not counted in wins or targets
BASELINE = {"float16": "cuSPARSE half CSR", "float32": "cuSPARSE float32 CSR"}  # "cusparse": CSR in the run's dtype
CONTRACT = {"float16": "FP16", "float32": "TF32"}


def dtype_of(meta: dict) -> str:
    """The precision a formats.py run timed in (runs before its --dtype option: float16)."""
    return meta.get("dtype") or "float16"


def geo(xs):
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def x_orig(r, key: str):
    """cuSPARSE half CSR on the matrix as given / ``key``'s ms (graph replay)."""
    ms, base = r["ms"].get(key), r.get("cusparse_original_ms")
    return base / ms if ms and base else None


def x_same(r, key: str):
    """cuSPARSE half CSR on the same (reordered) matrix / ``key``'s ms."""
    ms, base = r["ms"].get(key), r["ms"].get("cusparse")
    return base / ms if ms and base else None


def by_case(rows) -> dict:
    """(matrix, N) -> {order: row}, in the rows' order."""
    out: dict = {}
    for r in rows:
        out.setdefault((r["matrix"], r["N"]), {})[r["order"]] = r
    return out


def own_row(orders: dict, fmt: str):
    """The row of ``fmt`` in its paper's order (the given order when that reordering was not applied)."""
    r = orders.get(PAPER_ORDER[fmt])
    return r if r is not None and r["ms"].get(fmt) else orders.get("given")


def best_ms(orders: dict, fmt: str):
    return min((r["ms"][fmt] for r in orders.values() if r["ms"].get(fmt)), default=None)


def class_summary(rows) -> dict:
    """class -> {"cases", "formats": {fmt: {"own", "best", "wins"}}, "winner"}: geomean speedup over cuSPARSE on
    the matrix as given, in the format's paper order ("own") and in its fastest order ("best"); wins = (matrix, N)
    cases where the format's fastest order beats the other formats' fastest."""
    out = {}
    cases = by_case(rows)
    for cls in [c for c in CLASSES if any(r["class"] == c for r in rows)] + \
            sorted({r["class"] for r in rows} - set(CLASSES)):
        mine = {k: v for k, v in cases.items() if next(iter(v.values()))["class"] == cls}
        fmts = {f: {"own": [], "best": [], "wins": 0} for f in FORMATS}
        for orders in mine.values():
            base = next(iter(orders.values())).get("cusparse_original_ms")
            best = {f: best_ms(orders, f) for f in FORMATS}
            for f in FORMATS:
                own = own_row(orders, f)
                fmts[f]["own"].append(x_orig(own, f) if own else None)
                fmts[f]["best"].append(base / best[f] if base and best[f] else None)
            timed = {f: ms for f, ms in best.items() if ms}
            if timed:
                fmts[min(timed, key=timed.get)]["wins"] += 1
        summary = {f: {"own": geo(v["own"]), "best": geo(v["best"]), "wins": v["wins"]} for f, v in fmts.items()}
        winner = max(FORMATS, key=lambda f: (summary[f]["wins"], summary[f]["best"] or 0.0))
        out[cls] = {"cases": len(mine), "formats": summary, "winner": winner if summary[winner]["wins"] else None}
    return out


def tiled_target(rows) -> dict:
    """Tiled-CSR in its paper's order over cuSPARSE half CSR: per class and overall (TARGET_CLASSES) geomeans (as
    given / same matrix), the case count, and whether the overall one meets TILED_TARGET (None without cases)."""
    per, xo_all, xs_all = {}, [], []
    for orders in by_case(rows).values():
        r = own_row(orders, "tiledcsr")
        if r is None or not r["ms"].get("tiledcsr"):
            continue
        per.setdefault(r["class"], ([], []))
        per[r["class"]][0].append(x_orig(r, "tiledcsr"))
        per[r["class"]][1].append(x_same(r, "tiledcsr"))
        if r["class"] not in TARGET_CLASSES:
            continue
        xo_all.append(x_orig(r, "tiledcsr"))
        xs_all.append(x_same(r, "tiledcsr"))
    g = geo(xo_all)
    return {"per_class": {c: {"orig": geo(v[0]), "same": geo(v[1]), "n": len(v[0])} for c, v in per.items()},
            "overall": g, "overall_same": geo(xs_all), "n": len(xo_all),
            "met": None if g is None else g >= TILED_TARGET}


def cvse_versus(rows) -> list[dict]:
    """Per non-DNN matrix: ME-TCF (tca) ms / CVSE ms and BCSR (smat) ms / CVSE ms, geomean over N, CVSE in its
    fastest order (> 1: CVSE faster)."""
    out: dict = {}
    for (matrix, _), orders in by_case(rows).items():
        cls = next(iter(orders.values()))["class"]
        c = best_ms(orders, "cvse")
        if cls == "dnn" or not c:
            continue
        d = out.setdefault(matrix, {"matrix": matrix, "class": cls, "metcf": [], "bcsr": []})
        for f in ("metcf", "bcsr"):
            own = own_row(orders, f)
            d[f].append(own["ms"][f] / c if own and own["ms"].get(f) else None)
    return [{**d, "metcf": geo(d["metcf"]), "bcsr": geo(d["bcsr"])} for d in out.values()]


def shuffle_gains(matrices: dict) -> list[dict]:
    """Per matrix: effective computation rate (16 x 16 tiles) as given and after row shuffle, their ratio, the
    rate over SR-BCRS's after the shuffle, and whether the shuffled order was used."""
    out = []
    for name, m in matrices.items():
        rs = (m.get("orders") or {}).get("rowshuffle")
        if not rs or "rate_before" not in rs:
            continue
        out.append({"matrix": name, "class": m["class"], "before": rs["rate_before"], "after": rs["rate_after"],
                    "gain": rs["rate_after"] / rs["rate_before"] if rs["rate_before"] else None,
                    "over_srbcrs": rs.get("gain_over_srbcrs"), "applied": rs.get("applied")})
    return out


def errors_max(rows):
    errs = [e for r in rows for e in r.get("rel_err", {}).values() if e is not None]
    return max(errs, default=None) if all(math.isfinite(e) for e in errs) else float("nan")


def _x(v, suffix="x") -> str:
    return "–" if v is None else f"{v:.2f}{suffix}"


def text_summary(rows, matrices: dict, tolerance: float, dtype: str = "float16") -> list[str]:
    """The summary lines benchmarks/formats.py prints under its table."""
    base = BASELINE[dtype]
    out = ["", f"per class: geomean speedup over {base} on the matrix as given (graph replay), each format "
               "in its paper's order / in its fastest order; wins = (matrix, N) cases where it is fastest"]
    for cls, s in class_summary(rows).items():
        parts = [f"{NAMES[f]} {_x(v['own'])}/{_x(v['best'])} ({v['wins']} wins)" for f, v in s["formats"].items()]
        out.append(f"  {cls:<12} {s['cases']:>3} cases: " + "; ".join(parts)
                   + f" -> winner {NAMES.get(s['winner'], '-')}")
    t = tiled_target(rows)
    for cls, v in t["per_class"].items():
        out.append(f"Tiled-CSR (row-shuffled where it helps) over {base}, {cls}: {_x(v['orig'])} vs the "
                   f"matrix as given, {_x(v['same'])} vs the same matrix ({v['n']} cases)")
    status = "not run" if t["met"] is None else ("met" if t["met"] else "missed")
    out.append(f"Tiled-CSR over {', '.join(TARGET_CLASSES)}: {_x(t['overall'])} vs as given "
               f"({_x(t['overall_same'])} same matrix) over {t['n']} cases; target >= {TILED_TARGET}x: {status}")
    gains = shuffle_gains(matrices)
    if gains:
        out.append(f"row shuffle, effective computation rate at 16 x 16 (after / before; paper: "
                   f"{PAPER_SHUFFLE_GAIN[0]}x-{PAPER_SHUFFLE_GAIN[1]}x over SR-BCRS at 8 x 16 on DLMC):")
        out += [f"  {g['matrix']:<24} {g['before']:.4f} -> {g['after']:.4f} = {_x(g['gain'])}; over SR-BCRS "
                f"{_x(g['over_srbcrs'])}{'' if g['applied'] else ' (not applied: no gain)'}" for g in gains]
    vs = cvse_versus(rows)
    if vs:
        out.append("CVSE (fastest order) against ME-TCF (tca) and BCSR (smat), ms ratio geomean over N (> 1: CVSE "
                   "faster):")
        out += [f"  {v['matrix']:<24} {v['class']:<12} vs ME-TCF {_x(v['metcf'])}  vs BCSR {_x(v['bcsr'])}"
                for v in vs]
    e = errors_max(rows)
    out.append(f"max relative error on sampled rows vs float64: {'–' if e is None else f'{e:.1e}'} "
               f"({CONTRACT[dtype]} contract {tolerance})")
    return out


def text_report(rows, matrices: dict, path, tolerance: float, dtype: str = "float16") -> list[str]:
    """What benchmarks/formats.py prints last: the as-issued table, the graph-replay table, the summary."""
    def num(v, w, p=4):
        return f"{v:>{w}.{p}f}" if v is not None else f"{'-':>{w}}"

    out = [f"\nresults: {path}", "", "as issued (ms per plan.run(B, out) in a Python loop between CUDA events; "
           "cuSPARSE: one bound call):", f"{'matrix':<22} {'order':<10} {'N':>5} {'cuSP':>9} "
           + " ".join(f"{NAMES[f]:>9}" for f in FORMATS)]
    out += [f"{r['matrix'][:22]:<22} {r['order']:<10} {r['N']:>5} {num(r['issued_ms'].get('cusparse'), 9)} "
            + " ".join(num(r["issued_ms"].get(f), 9) for f in FORMATS) for r in rows]
    out += ["", f"graph replay: ms per call; xO / xS = {BASELINE[dtype]} (best algorithm) on the matrix as given / "
            "on the same matrix over the format; cvse@V: CVSE at the generator's V",
            f"{'matrix':<22} {'class':<11} {'order':<10} {'N':>5} {'cuSP':>8} {'BELL':>8} {'dense':>8} "
            + " ".join(f"{NAMES[f] + ' ms  xO/xS':>20}" for f in FORMATS) + f" {'cvse@V':>8} {'best':>9}"]
    for r in rows:
        ms = r["ms"]
        cells = [f"{ms[f]:>8.4f} {_x(x_orig(r, f), ''):>5}/{_x(x_same(r, f), ''):<5}" if ms.get(f) else f"{'-':>20}"
                 for f in FORMATS]
        timed = {f: ms[f] for f in FORMATS if ms.get(f)}
        best = NAMES[min(timed, key=timed.get)] if timed else "-"
        out.append(f"{r['matrix'][:22]:<22} {r['class']:<11} {r['order']:<10} {r['N']:>5} "
                   + " ".join(num(ms.get(k), 8) for k in ("cusparse", "cusparse-bell", "dense")) + " "
                   + " ".join(cells) + f" {num(ms.get(EXTRA), 8)} {best:>9}")
    return out + text_summary(rows, matrices, tolerance, dtype)


def formats_section(runs, v0, older, *, h) -> list[str]:
    """``h``: summarize's helpers. ``runs``: the newest run per dtype. The FP16 section from the FP16 run, then the
    float32 one's; nothing (no section) when no formats-*.json exists."""
    fp16 = [r for r in runs if dtype_of(r.meta) == "float16"]
    out = fp16_section(fp16[0], older, h=h) if fp16 else []
    for run in runs:
        if dtype_of(run.meta) == "float32":
            out += float32_section(run, h=h)
    return out


def run_tables(run, h, baselines) -> list[str]:
    """A run's skipped cases, its `rows_table` and its `class_table` against cuSPARSE CSR in the run's dtype."""
    out = ["Skipped (budget or missing fixtures): " + ", ".join(run.meta["skipped"]), ""] \
        if run.meta.get("skipped") else []
    out += rows_table(run.rows, h, baselines)
    out += [f"Per class: geomean speedup over {BASELINE[dtype_of(run.meta)]} on the matrix as given, each format in "
            "its paper's order / its fastest order, and (matrix, N) wins:", ""]
    return out + class_table(run.rows, h)


def rows_table(rows, h, baselines) -> list[str]:
    """Per row: cuSPARSE, each format (ms, xO / xS, issued), then ``baselines`` ((column, key) of other timings) and
    CVSE at the generator's V."""
    def cell(r, f):
        return f"{h.f(r['ms'].get(f), 4)} ({h.f(x_orig(r, f))}/{h.f(x_same(r, f))})" if r["ms"].get(f) else "–"

    return h.table(("matrix", "class", "order", "N", "cuSP ms", "cuSP issued", *(f"{NAMES[f]} ms (xO/xS)"
                                                                                 for f in FORMATS),
                    *(f"{NAMES[f]} issued" for f in FORMATS), *(c for c, _ in baselines), "CVSE at gen. V"),
                   [(f"`{r['matrix']}`", r["class"], r["order"], r["N"], h.f(r["ms"].get("cusparse"), 4),
                     h.f(r.get("issued_ms", {}).get("cusparse"), 4), *(cell(r, f) for f in FORMATS),
                     *(h.f(r.get("issued_ms", {}).get(f), 4) for f in FORMATS),
                     *(h.f(r["ms"].get(k), 4) for _, k in baselines), cell(r, EXTRA))
                    for r in rows])


def class_table(rows, h) -> list[str]:
    return h.table(("class", "cases", *(NAMES[f] for f in FORMATS), "winner"),
                   [(c, s["cases"], *(f"{_x(s['formats'][f]['own'])} / {_x(s['formats'][f]['best'])} "
                                      f"({s['formats'][f]['wins']})" for f in FORMATS), NAMES.get(s["winner"], "–"))
                    for c, s in class_summary(rows).items()])


def float32_section(run, *, h) -> list[str]:
    """The float32 run: its rows and per-class speedups, and its errors against the TF32 contract (the Tiled-CSR
    target is FP16's)."""
    title = "Formats (float32, TF32): ME-TCF, BCSR, Tiled-CSR and CVSE against cuSPARSE float32 CSR"
    out = h.opening(
        title, run,
        "As the FP16 section, in float32: `SpmmPlan(..., dtype=\"float32\")`, float32 in and out, TF32 Tensor Core "
        "products (m16n8k8), FP32 accumulation; `xO` / `xS` against the best cuSPARSE float32 CSR algorithm (CUDA "
        "cores); dense = cuBLAS float32 GEMM with TF32 allowed (DNN class); no Blocked-ELL (cuSPARSE's "
        "half-precision Tensor Core path). Values as generated or stored (FP16's [-1, 1] replacement does not "
        "apply). The rows `benchmarks/rank_check.py --fit` fits the float32 ranking constants on.")
    out += run_tables(run, h, (("dense", "dense"),))
    tol, e = run.meta.get("tolerance", 2e-3), errors_max(run.rows)
    out += h.targets([("errors vs float64 on sampled rows (max)", f"<= {tol}", "–" if e is None else f"{e:.1e}",
                       h.status(None if e is None else e <= tol))])
    return out + [h.reproduce("formats", run), ""]


def fp16_section(run, older, *, h) -> list[str]:
    rows, matrices = run.rows, run.meta.get("matrices") or {}
    title = "Formats (FP16): ME-TCF, BCSR, Tiled-CSR and CVSE against cuSPARSE half CSR"
    out = h.opening(
        title, run,
        "Every format through `SpmmPlan(A, device=\"gpu\", dtype=\"float16\", format=...)` (autotuned among its "
        "own kernels), FP16 in and out, FP32 accumulation. ms = device ms per call by CUDA-graph replay; "
        "*issued* = `plan.run(B, out)` in a Python loop between CUDA events. `xO` / `xS` = best cuSPARSE half "
        "CSR algorithm on the matrix as given / on the same reordered matrix, over the format's ms. Orders: as "
        "given, and each format paper's reordering where the project has it (rowshuffle: Tiled-CSR, smat: "
        "BCSR, tca: ME-TCF; applied only when it improves its own measure). BELL = cuSPARSE Blocked-ELL 16x16 "
        "FP16; dense = cuBLAS FP16 GEMM (DNN class). DNN-style matrices are generated (`gen:dlmc`, DLMC is not "
        "reachable here).")
    out += run_tables(run, h, (("BELL", "cusparse-bell"), ("dense", "dense")))
    gains = shuffle_gains(matrices)
    if gains:
        out += [f"Row shuffle, effective computation rate nnz / (tiles x 16 x 16) before and after (the paper: "
                f"{PAPER_SHUFFLE_GAIN[0]}x-{PAPER_SHUFFLE_GAIN[1]}x over SR-BCRS at 8 x 16 on DLMC):", ""]
        out += h.table(("matrix", "class", "before", "after", "gain", "over SR-BCRS", "used"),
                       [(f"`{g['matrix']}`", g["class"], h.f(g["before"], 4), h.f(g["after"], 4), _x(g["gain"]),
                         _x(g["over_srbcrs"]), "yes" if g["applied"] else "no") for g in gains])
    vs = cvse_versus(rows)
    if vs:
        out += ["CVSE (fastest order) against ME-TCF after tca and BCSR after smat: ms ratio, geomean over N "
                "(> 1: CVSE faster):", ""]
        out += h.table(("matrix", "class", "vs ME-TCF", "vs BCSR"),
                       [(f"`{v['matrix']}`", v["class"], _x(v["metcf"]), _x(v["bcsr"])) for v in vs])
    t = tiled_target(rows)
    tol = run.meta.get("tolerance", 1e-2)
    e = errors_max(rows)
    trows = [(f"Tiled-CSR (row-shuffled where it helps) vs cuSPARSE half CSR as given, {c} (geomean; same matrix)",
              "–",
              f"{_x(v['orig'])}; {_x(v['same'])} ({v['n']} cases)", "–") for c, v in t["per_class"].items()]
    trows.append((f"Tiled-CSR vs cuSPARSE half CSR as given, {', '.join(TARGET_CLASSES)}, N = 128-1024 (geomean)",
                  f">= {TILED_TARGET}x", f"{_x(t['overall'])} ({t['n']} cases; same matrix {_x(t['overall_same'])})",
                  h.status(t["met"])))
    trows.append(("errors vs float64 on sampled rows (max)", f"<= {tol}", "–" if e is None else f"{e:.1e}",
                  h.status(None if e is None else e <= tol)))
    out += h.targets(trows)
    return out + h.older_note(older) + [h.reproduce("formats", run), ""]
