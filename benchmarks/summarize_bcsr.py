"""The BCSR (SMaT) section of docs/benchmarks.md (benchmarks/bcsr.py's files), for benchmarks/summarize.py.

Target (issue "SMaT: BCSR"): FP16 at N = 128-512, >= 1.5x geomean over the better of cuSPARSE BSR and Blocked-ELL
on block-structured matrices after reordering ("shuffled+smat": the generator's order shuffled, then SMaT's
clustering). Blocks before (shuffled) and after clustering are reported next to SMaT's published 1.3x-2.4x.
"""
from __future__ import annotations


def _best_block_baseline(r) -> float | None:
    ms = [r["ms"].get(k) for k in ("cusparse-bsr", "cusparse-bell") if r["ms"].get(k)]
    return min(ms) if ms else None


def bcsr_section(runs, v0, older, *, h) -> list[str]:
    title = "BCSR (SMaT): block Tensor Core kernel vs cuSPARSE BSR and Blocked-ELL, FP16"
    if not runs:
        return h.absent("bcsr", title, [("FP16 vs better of cuSPARSE BSR / Blocked-ELL after SMaT", ">= 1.5x")])
    run = runs[0]
    rows = run.rows
    out = h.opening(
        title, run,
        "Device ms per call by CUDA-graph replay. `bcsr` = our FP16 kernel at its fastest ksplit; baselines in "
        "FP16 at 16 x 16 blocks; `x best block` = the better of cuSPARSE BSR and Blocked-ELL over `bcsr`; "
        "ME-TCF = our FP16 ME-TCF path on the same matrix. Orders: the generator's natural order, shuffled "
        "rows, and shuffled then clustered by `--reorder smat` (SMaT's Jaccard clustering; kept only when it "
        "lowers the block count).")
    out += h.table(("matrix", "order", "N", "blocks", "bcsr", "BF16", "TF32", "cuSP BSR", "Blocked-ELL", "cuSP CSR",
                    "ME-TCF", "x best block"),
                   [(f"`{r['matrix']}`", r["order"], r["N"], r["bcsr_blocks"], h.f(r["ms"].get("bcsr"), 4),
                     h.f(r["ms"].get("bcsr-bf16"), 4), h.f(r["ms"].get("bcsr-tf32"), 4),
                     h.f(r["ms"].get("cusparse-bsr"), 4), h.f(r["ms"].get("cusparse-bell"), 4),
                     h.f(r["ms"].get("cusparse-csr"), 4), h.f(r["ms"].get("metcf"), 4),
                     h.f(_best_block_baseline(r) / r["ms"]["bcsr"], 2, "x") if _best_block_baseline(r) else "–")
                    for r in rows])
    blocks = {}
    for r in rows:
        blocks.setdefault(r["matrix"], {})[r["order"]] = r["bcsr_blocks"]
    out += ["Blocks before (shuffled) and after SMaT clustering (published reductions on SMaT's SuiteSparse set: "
            "1.3x-2.4x):", ""]
    out += h.table(("matrix", "natural", "shuffled", "after smat", "reduction"),
                   [(f"`{m}`", b.get("natural", "–"), b.get("shuffled", "–"), b.get("shuffled+smat", "–"),
                     h.f(b["shuffled"] / b["shuffled+smat"], 2, "x") if b.get("shuffled") and b.get("shuffled+smat")
                     else "–") for m, b in blocks.items()])
    after = [_best_block_baseline(r) / r["ms"]["bcsr"] for r in rows
             if r["order"] == "shuffled+smat" and _best_block_baseline(r) and r["ms"].get("bcsr")]
    g = h.geo(after)
    errs = [e for r in rows for k, e in r["rel_err"].items() if k.startswith("bcsr")]
    out += h.targets([
        ("FP16 vs better of cuSPARSE BSR / Blocked-ELL after SMaT (geomean; min)", ">= 1.5x",
         f"{h.f(g, 2, 'x')}; {h.f(min(after), 2, 'x')}" if after else "–", h.status(None if g is None else g >= 1.5)),
        ("errors of our BCSR kernels vs float64 (max)", "<= 3e-2 (BF16), 1e-2 (FP16)",
         f"{max(errs):.1e}" if errs else "–", h.status(None if not errs else max(errs) <= 3e-2))])
    return out + h.older_note(older) + [h.reproduce("bcsr", run), ""]
