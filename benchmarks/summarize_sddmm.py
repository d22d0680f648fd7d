"""The SDDMM section of docs/benchmarks.md (benchmarks/sddmm.py's files), for benchmarks/summarize.py: the public
``SddmmPlan(S, dtype=..., format="cvse").run(A, B)`` as issued against cuSPARSE SDDMM as torch users call it
(``torch.sparse.sampled_addmm``, float32), the kernels beside by graph replay, and issue 33's targets: >= 1.5x
(geomean) over graphs of 0.1-3M nonzeros, >= 2x on pruned DNN weights, FP16 faster than TF32. The target math and
the text table are shared with the benchmark, which prints both and stores the targets in its file.
"""
from __future__ import annotations

import math

PRECISIONS = ("float32", "float16", "bfloat16")
SHORT = {"float32": "TF32", "float16": "FP16", "bfloat16": "BF16"}
TIMING = {"issued": "CUDA events around a Python loop of back-to-back calls as issued, median per call "
                    "(kernels.launch.issued_ms; torch: the same with torch.cuda.Event)",
          "graph": "CUDA-graph replay, median per call (kernels.launch.graph_ms): the GPU's time without host "
                   "launch cost"}
GRAPH_NNZ = (1e5, 3e6)  # issue 33: "graphs of 0.1-3M nnz"
SPEEDUP_TARGETS = (("graph", "graphs of 0.1-3M nnz", 1.5), ("dnn", "pruned DNN weights (V = 8, 80 %)", 2.0))
DEFAULT_KD = (64, 256)
ROUTE = {"cvse": "cvse", "csr": "csr", "cusparse": "cusp"}  # the FP16 plan's route for the row's Kd (it timed them)
TITLE = "SDDMM as users call it (`SddmmPlan.run` vs `torch.sparse.sampled_addmm`)"


def speedup(r: dict, key: str = "cvse-float16") -> float | None:
    """torch's issued ms over ours (``key``, issued); None without both."""
    t, o = r.get("issued_ms", {}).get("torch"), r.get("issued_ms", {}).get(key)
    return t / o if t and o else None


def _geo(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def in_target(r: dict, cls: str) -> bool:
    """A row the class's target counts: graphs within GRAPH_NNZ, every pruned-weight row."""
    return r.get("class") == cls and (cls != "graph" or GRAPH_NNZ[0] <= r["nnz"] <= GRAPH_NNZ[1])


def target_names(kds=DEFAULT_KD) -> list[tuple[str, str]]:
    out = [(f"FP16 `run(A, B)` as issued over torch as issued, geomean over {what}, Kd = {kd}", f"≥ {thr:g}x")
           for kd in kds for _, what, thr in SPEEDUP_TARGETS]
    return out + [("FP16 faster than TF32 (`run(A, B)` as issued), every S and Kd", "FP16 ms < TF32 ms")]


def target_rows(rows: list) -> list[tuple]:
    """(target, threshold, measured, ok: True / False / None = not run) from the run's rows."""
    kds = sorted({r["Kd"] for r in rows}) or list(DEFAULT_KD)
    names = iter(target_names(kds))
    out = []
    for kd in kds:
        for cls, _, thr in SPEEDUP_TARGETS:
            name, thr_text = next(names)
            have = [(speedup(r), speedup(r, "cvse-float32"), r["matrix"]) for r in rows
                    if r["Kd"] == kd and in_target(r, cls) and speedup(r)]
            if not have:
                out.append((name, thr_text, "–", None))
                continue
            g, low = _geo([s for s, _, _ in have]), min(have, key=lambda x: x[0])
            tf32 = _geo([t for _, t, _ in have if t])
            got = (f"{g:.2f}x over {len(have)} matrices (min {low[0]:.2f}x, {low[2]})"
                   + (f"; TF32 {tf32:.2f}x" if tf32 else ""))
            out.append((name, thr_text, got, g >= thr))
    name, thr_text = next(names)
    pairs = [(r["issued_ms"]["cvse-float32"], r["issued_ms"]["cvse-float16"], f"{r['matrix']} Kd={r['Kd']}")
             for r in rows if r.get("issued_ms", {}).get("cvse-float32") and r["issued_ms"].get("cvse-float16")]
    if not pairs:
        return out + [(name, thr_text, "–", None)]
    faster = [p for p in pairs if p[1] < p[0]]
    worst = max(pairs, key=lambda p: p[1] / p[0])
    got = (f"{len(faster)} of {len(pairs)} (geomean TF32 / FP16 {_geo([a / b for a, b, _ in pairs]):.2f}x; "
           f"least gain {worst[0] / worst[1]:.2f}x, {worst[2]})")
    return out + [(name, thr_text, got, len(faster) == len(pairs))]


def fmt(v, p: int = 4) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{p}f}"


def text_table(rows: list[dict]) -> list[str]:
    """Per S and Kd: torch and ours as issued (ms), ours over torch, the kernels by graph replay, the worst rel err."""
    head = (f"{'matrix':22} {'class':5} {'nnz':>9} {'Kd':>4} {'V':>2} {'route':>5} {'torch':>8} {'csr':>8} "
            f"{'tf32':>8} {'fp16':>8} {'bf16':>8} {'x tf32':>6} {'x fp16':>6} {'x bf16':>6} {'cusp[g]':>8} "
            f"{'tf32[g]':>8} {'fp16[g]':>8} {'bf16[g]':>8} {'max err':>8}")
    out = [f"timing: torch/csr/tf32/fp16/bf16 = {TIMING['issued']}, run(A, B) without out; x = torch ms / ours; "
           f"[g] = {TIMING['graph']}", head]
    for r in rows:
        iss, ms = r["issued_ms"], r["ms"]
        ours = [iss.get(f"cvse-{p}") for p in PRECISIONS]
        ratio = [speedup(r, f"cvse-{p}") for p in PRECISIONS]
        errs = list(r["rel_err_contract"].values())
        V = r["vector"].get("cvse-float16")
        route = ROUTE.get(r.get("route", {}).get("cvse-float16"), "-")
        out.append(f"{r['matrix'][:22]:22} {r['class']:5} {r['nnz']:>9} {r['Kd']:>4} {V if V else '-':>2} "
                   f"{route:>5} {fmt(iss.get('torch')):>8} {fmt(iss.get('csr')):>8} "
                   + " ".join(f"{fmt(v):>8}" for v in ours) + " "
                   + " ".join(f"{fmt(v, 2):>6}" for v in ratio) + " "
                   + " ".join(f"{fmt(ms.get(k)):>8}" for k in ("cusparse-sddmm", *(f"cvse-{p}" for p in PRECISIONS)))
                   + f" {max(errs) if errs else float('nan'):>8.1e}")
    return out


def _cell(iss: dict, key: str, f) -> str:
    """``ms (ms with out)`` of an issued key."""
    return f"{f(iss.get(key), 3)} ({f(iss.get(f'{key}-out'), 3)})"


def sddmm_table(rows: list, h) -> list[tuple]:
    out = []
    for r in rows:
        iss, ms = r.get("issued_ms", {}), r.get("ms", {})
        errs = [e for e in r.get("rel_err_contract", {}).values() if e is not None]
        counted = in_target(r, r["class"])
        out.append((r["matrix"] + ("" if counted else " (†)"), r["class"], h.mnnz(r["nnz"]), r["Kd"],
                    r.get("vector", {}).get("cvse-float16", "–"),
                    ROUTE.get(r.get("route", {}).get("cvse-float16"), "–"), h.f(iss.get("torch"), 3),
                    _cell(iss, "csr", h.f), *(_cell(iss, f"cvse-{p}", h.f) for p in PRECISIONS),
                    *(h.f(speedup(r, f"cvse-{p}")) for p in PRECISIONS), h.f(ms.get("cusparse-sddmm"), 3),
                    *(h.f(ms.get(f"cvse-{p}"), 3) for p in PRECISIONS), h.f(ms.get("cvse-float16-call"), 3),
                    f"{max(errs):.1e}" if errs else "–"))
    return out


def gap_lines(rows: list, h) -> list[str]:
    """Per graph row the graph target counts whose FP16 call stays below its threshold: where the time goes (the
    two kernels by graph replay, the route the plan kept, the vector density where the run recorded it)."""
    thr = dict((cls, t) for cls, _, t in SPEEDUP_TARGETS)["graph"]
    low = [r for r in rows if in_target(r, "graph") and speedup(r) and speedup(r) < thr]
    if not low:
        return []
    out = [f"Graphs below the {thr:g}x target (FP16): the CVSE kernel computes whole V-row vectors, so its work "
           "grows with their padding (1 / vector density), and on these graphs cuSPARSE's per-nonzero kernel is as "
           "fast or faster. The plan keeps whichever route is faster as issued; the cuSPARSE route (\"cusp\") adds "
           "the float32 widening of A and B to that library call, so it cannot beat torch's own call of it by "
           "much. The CUDA-core kernel of kernels/formats/csr/sddmm.py (one dot product per nonzero, 16-bit inputs "
           "read as they are) is written for these; it becomes a route once it has passed its GPU tests.", ""]
    for r in low:
        ms, dens = r.get("ms", {}), r.get("vector_density", {}).get("cvse-float16")
        route = ROUTE.get(r.get("route", {}).get("cvse-float16"), "–")
        out.append(f"- {r['matrix']} (Kd = {r['Kd']}): torch / FP16 {h.f(speedup(r))}x, route {route}; kernels by "
                   f"graph replay: cuSPARSE {h.f(ms.get('cusparse-sddmm'), 3)} ms, CVSE FP16 "
                   f"{h.f(ms.get('cvse-float16'), 3)} ms"
                   + (f"; vector density {dens:.2f}" if dens is not None else "")
                   + ("; the CVSE kernel is the faster one here: a host-bound timing kept cusp "
                      "(kernels.sddmm.CUSPARSE_MARGIN now asks cuSPARSE to be clearly faster)"
                      if route == "cusp" and (ms.get("cvse-float16") or 1e9) < (ms.get("cusparse-sddmm") or 0)
                      else ""))
    return out + [""]


def sddmm_section(runs, v0, older, *, h) -> list[str]:
    if not runs:
        return h.absent("sddmm", TITLE, target_names())
    run = runs[0]
    out = h.opening(
        TITLE, run,
        "Per S (unit values) and Kd, with the same seeded A [M, Kd] and B [K, Kd]: \"torch\" is "
        "`torch.sparse.sampled_addmm(S, A, B.T, beta=0.0)` on CUDA float32 (cuSPARSE SDDMM; torch has no half "
        "SDDMM), i.e. `A[row_k] . B[col_k]` at every stored nonzero of S, a sparse CSR tensor of S's pattern "
        "returned; \"csr\" is `SddmmPlan(S, format=\"csr\").run(A, B)` (our cuSPARSE route: TF32-rounded copies "
        "of A and B, cuSPARSE SDDMM, x S); TF32 / FP16 / BF16 are `SddmmPlan(S, dtype=float32 / float16 / "
        "bfloat16, format=\"cvse\").run(A, B)` with CuPy A and B already in the plan's storage dtype; since "
        "2026-11-27 such a plan times its routes on the first call with a Kd (the CVSE kernel, the cuSPARSE "
        "route, and the CUDA-core CSR kernel once it is GPU-ready) and keeps the fastest (\"FP16 route\": what "
        "the FP16 plan kept; \"–\" in older runs, which ran the CVSE kernel only). Issued ms "
        f"({TIMING['issued']}), in parentheses the same call with `out=` (a float32 [nnz] made once); "
        "\"torch / X\": torch's issued ms over ours, without `out`. Graph ms "
        f"({TIMING['graph']}): cuSPARSE SDDMM float32 (kernels.cusparse_sddmm), the plan's CVSE kernel alone "
        "into its vector-order buffer, and FP16's whole call with `out` (kernel + gather into CSR order). V: "
        "the vector length Sparse Vector Compression chose (FP16 plan). Max rel err: the worst over the row's "
        "results, on up to 65,536 sampled nonzeros against float64 of the float32 inputs; the run also checks "
        "each against float64 of the inputs rounded to its precision, and fails beyond the precision's "
        "tolerance.")
    head = ("matrix", "class", "nnz", "Kd", "V", "FP16 route", "torch ms", "csr ms",
            *(f"{SHORT[p]} ms" for p in PRECISIONS),
            *(f"torch / {SHORT[p]}" for p in PRECISIONS), "cuSPARSE graph ms",
            *(f"{SHORT[p]} kernel graph ms" for p in PRECISIONS), "FP16 call graph ms", "max rel err")
    out += h.table(head, sddmm_table(run.rows, h))
    if any(not in_target(r, r["class"]) for r in run.rows):
        out += ["(†): a graph outside the targets' 0.1-3M nonzeros, shown, not counted.", ""]
    if run.meta.get("torch_missing"):
        out += [f"No torch baseline in this run: {run.meta['torch_missing']}.", ""]
    out += ["Skipped: " + "; ".join(run.meta["skipped"]), ""] if run.meta.get("skipped") else []
    out += gap_lines(run.rows, h)
    targets = [(n, thr, got, h.status(ok)) for n, thr, got, ok in target_rows(run.rows)]
    return out + h.older_note(older) + h.targets(targets) + [h.reproduce("sddmm", run), ""]
