"""The half-precision section of docs/benchmarks.md (benchmarks/precision.py's files), for benchmarks/summarize.py.

Targets (issue "Formats as plugins, and half precision"), computed from the rows after TCA reordering:
- FP16 ME-TCF >= 1.6x faster than our own TF32 path on the same reordered matrices of 10M+ nnz;
- FP16 selected path >= 2x geomean over the best cuSPARSE FP16 CSR on the matrix as given, none < 0.95x.
"""
from __future__ import annotations


def _out_of_range(r) -> bool:
    return bool((r.get("float16_range") or {}).get("overflow"))


def _err16(r) -> str:
    return "out of range" if _out_of_range(r) else f"{r['float16']['rel_err']:.1e}"


def _speed(r, base_key: str) -> float:
    return r[base_key] / r["float16"]["replay_ms"]


def precision_section(runs, v0, older, *, h) -> list[str]:
    """``h``: summarize's helpers (env, table, targets, f, geo, status, mnnz, absent, older_note, reproduce)."""
    title = "Half precision: FP16 / BF16 ME-TCF (mma.m16n8k16) vs TF32 and cuSPARSE in the same precision"
    if not runs:
        return h.absent("precision", title, [("FP16 vs TF32, 10M+ nnz after TCA", ">= 1.6x"),
                                             ("FP16 vs cuSPARSE FP16 on the original, geomean", ">= 2x")])
    run = runs[0]
    rows = run.rows
    for r in rows:
        r["_tf32"] = r["float32"]["replay_ms"]
        r["_cus_orig"] = r["cusparse_float16_original_ms"]
        r["_cus_same"] = r["cusparse_float16"]["ms"]
    out = h.opening(
        title, run,
        "Times are device ms per call from CUDA-graph replays (`kernels.launch.graph_ms`) unless marked "
        "*issued* (one `plan.run(B, out)` per Python loop iteration between CUDA events: what a caller gets; for "
        "cuSPARSE one bound cusparseSpMM call, recorded from the next run on: – in files before it). "
        "Each plan is `SpmmPlan(A, dtype=...)` autotuned among its deterministic kernels; `x TF32` = TF32 "
        "selected ms / FP16 selected ms; `x cuSP16 orig` / `same` = best cuSPARSE FP16 CSR algorithm on the "
        "matrix as given / on the same (reordered) matrix, over FP16 selected; BELL16 = cuSPARSE Blocked-ELL "
        "16x16 FP16 (– where padding to the longest block row exceeds 4 GiB); floor = A as the kernel reads it "
        "plus B and C once at the measured copy bandwidth; errors are relative Frobenius errors on 2048 sampled "
        "rows against float64 of the un-rounded inputs (contract: 1e-2 FP16, 3e-2 BF16).")
    out += h.table(("matrix", "order", "nnz", "N", "TF32 ms", "FP16 ms", "FP16 kernel", "BF16 ms", "x TF32",
                    "x cuSP16 orig", "x cuSP16 same", "BELL16 ms", "torch16 ms", "FP16 issued ms",
                    "cuSP16 issued ms", "floor %",
                    "err FP16", "err BF16"),
                   [(f"`{r['matrix']}`", r["order"], h.mnnz(r["nnz"]), r["N"], h.f(r["_tf32"], 4),
                     h.f(r["float16"]["replay_ms"], 4), r["float16"]["selected"].replace("metcf-", ""),
                     h.f(r["bfloat16"]["replay_ms"], 4), h.f(_speed(r, "_tf32")), h.f(_speed(r, "_cus_orig")),
                     h.f(_speed(r, "_cus_same")),
                     h.f(r["blocked_ell_float16"]["ms"], 4) if r["blocked_ell_float16"].get("applies") else "–",
                     h.f(r["torch_float16"].get("ms"), 4), h.f(r["float16"]["issued_ms"], 4),
                     h.f(r["cusparse_float16"].get("issued_ms"), 4),
                     h.f(100 * r["float16"]["floor_ms"] / r["float16"]["replay_ms"], 0),
                     _err16(r), f"{r['bfloat16']['rel_err']:.1e}") for r in rows])
    out += [f"Out of float16's range (left out of the targets; the flow refuses them unless --allow-overflow): "
            + ", ".join(sorted({f"`{r['matrix']}` (max |x| {r['float16_range']['max_abs']:.3g})" for r in rows
                                if _out_of_range(r)})), ""] if any(_out_of_range(r) for r in rows) else []
    rows = [r for r in rows if not _out_of_range(r)]
    tca = [r for r in rows if r["order"] == "tca"]
    big = [r for r in tca if r["nnz"] >= 10_000_000]
    over_tf32 = h.geo([_speed(r, "_tf32") for r in big])
    over_cus = [_speed(r, "_cus_orig") for r in tca]
    g = h.geo(over_cus)
    out += h.targets([
        ("FP16 vs our TF32, same reordered matrices, 10M+ nnz (geomean)", ">= 1.6x", h.f(over_tf32, 2, "x"),
         h.status(None if over_tf32 is None else over_tf32 >= 1.6)),
        ("FP16 selected vs best cuSPARSE FP16 CSR on the original (geomean, after TCA)", ">= 2x", h.f(g, 2, "x"),
         h.status(None if g is None else g >= 2.0)),
        ("same, no case below", ">= 0.95x", h.f(min(over_cus), 2, "x") if over_cus else "–",
         h.status(None if not over_cus else min(over_cus) >= 0.95)),
        ("errors within the contract (FP16 1e-2, BF16 3e-2)", "all",
         f"max {max(r['float16']['rel_err'] for r in rows):.1e} / {max(r['bfloat16']['rel_err'] for r in rows):.1e}",
         h.status(all(r["float16"]["rel_err"] <= 1e-2 and r["bfloat16"]["rel_err"] <= 3e-2 for r in rows)))])
    below = sorted({f"`{r['matrix']}` {r['order']} N={r['N']} ({_speed(r, '_cus_orig'):.2f}x)" for r in tca
                    if _speed(r, "_cus_orig") < 0.95})
    floors = [100 * r["float16"]["floor_ms"] / r["float16"]["replay_ms"] for r in big]
    out += [f"Where the time goes: on the 10M+ nnz matrices after TCA the FP16 kernel runs at "
            f"{min(floors, default=0):.0f}-{max(floors, default=0):.0f}% of its memory floor, so it is bound by its "
            "instruction stream (per 16 x 16 block and 64 columns: one 16-byte A fragment, one 16-byte column-id "
            "load, four 16-byte B row loads, 16 byte permutes and 8 mma), not by bytes; a 16 x 16 block costs about "
            "what a TF32 16 x 8 block costs, and after TCA the 16-wide blocks are less full than two 8-wide ones, "
            "which caps FP16 over TF32 near the block-count ratio. "
            + (f"Below 0.95x of cuSPARSE FP16 on the original: {', '.join(below)} (small matrices, where the plan "
               "keeps to its deterministic kernels; `deterministic=False` lets it take cuSPARSE)." if below else ""),
            ""]
    return out + h.older_note(older) + [h.reproduce("precision", run), ""]


def seam_section(runs, v0, older, *, h) -> list[str]:
    """TF32 kernel times before and after ME-TCF moved onto the format seam: the same benchmark command from both
    trees in one device call (files seam-ab-<device>-<date>-old.json / -new.json)."""
    title = "TF32 speed through the format seam (before / after, same device call)"
    if not runs:
        return [f"## {title}", "", "Status: not run yet (no `seam-ab-*.json` in the results folder).", ""]
    folder = runs[0].path.parent
    new = sorted(folder.glob("seam-ab-*-new.json"))
    pairs = [(h.load(p), h.load(p.with_name(p.name.replace("-new.json", "-old.json")))) for p in new
             if p.with_name(p.name.replace("-new.json", "-old.json")).exists()]
    if not pairs:
        return [f"## {title}", "", "Status: not run (no old/new pair).", ""]
    after, before = pairs[-1]
    old = {(r["matrix"], r["order"], r["N"]): r for r in before.rows}
    rows, ratios = [], []
    for r in after.rows:
        o = old.get((r["matrix"], r["order"], r["N"]))
        if o is None:
            continue
        ks = [k for k in ("metcf-window", "metcf-balanced", "metcf-split") if k in r["ms"] and k in o["ms"]]
        ratios += [r["ms"][k] / o["ms"][k] for k in ks]
        rows.append((f"`{r['matrix']}`", r["order"], r["N"],
                     *(f"{h.f(o['ms'].get(k), 4)} / {h.f(r['ms'].get(k), 4)}" for k in
                       ("metcf-window", "metcf-balanced", "metcf-split"))))
    out = h.opening(
        title, after,
        f"Before: `{before.path.name}` (commit e5a627a, before the seam); after: `{after.path.name}`. Device ms "
        "per call by graph replay, before / after.")
    out += h.table(("matrix", "order", "N", "window", "balanced", "split"), rows)
    g = h.geo(ratios)
    out += h.targets([("TF32 kernel time after / before (geomean; max)", "unchanged (within 3%)",
                       f"{h.f(g, 3)}; {h.f(max(ratios), 3)}", h.status(None if g is None else max(ratios) <= 1.03))])
    return out
