"""The CPU SpMM section of docs/benchmarks.md (benchmarks/cpu_spmm.py's files), for benchmarks/summarize.py.

Target (issue 16, CPU path): the pipeline's float32 CPU product (SpmmPlan(device="cpu")) at least 2x SciPy's single
CSR product on 2 cores, in every case of the benchmark (speedup from the medians of interleaved repeats).
"""
from __future__ import annotations

TARGET = 2.0


def cpu_section(runs, v0, older, *, h) -> list[str]:
    title = "CPU SpMM: the float32 CPU product against SciPy's CSR product"
    runs = [r for r in runs if "quick" not in r.path.name]  # --quick is a smoke run, not a measurement
    if not runs:
        return h.absent("cpu_spmm", title, [("vs SciPy, every case (min)", f">= {TARGET}x")])
    run = runs[0]
    rows = run.rows
    out = h.opening(
        title, run,
        f"Wall ms per call, allocating C included; median of interleaved repeats: SciPy's `csr_array(float32) @ B`"
        " (one core), ours = `SpmmPlan(A, device=\"cpu\").run(B)` (kernels/cpu_spmm.py, every usable core), "
        "1-thread = the same kernel on one core; GFLOP/s = 2 nnz N / ours; load average "
        f"{h.f(run.meta.get('machine', {}).get('loadavg_at_start', [None])[0], 2)} at the start and "
        f"{h.f((run.meta.get('machine', {}).get('loadavg_at_end') or [None])[0], 2)} at the end (other work on "
        "the cores slows ours, which uses both, more than SciPy's one).")
    out += h.table(("case", "nnz", "N", "threads", "SciPy ms", "ours ms", "1-thread ms", "GFLOP/s", "vs SciPy",
                    "1-thread vs SciPy", "correct"),
                   [(f"`{r['case']}`", h.mnnz(r["nnz"]), r["N"], r["threads"], h.f(r["scipy"]["median_ms"], 1),
                     h.f(r["plan"]["median_ms"], 1), h.f(r["cpu_1thread"]["median_ms"], 1),
                     h.f(r["plan"]["gflops"], 2), h.f(r["speedup_vs_scipy"], 2, "x"),
                     h.f(r["speedup_1thread_vs_scipy"], 2, "x"),
                     "yes" if all(r[k]["correct"] for k in ("scipy", "plan", "cpu_1thread")) else "**no**")
                    for r in rows])
    x = [r["speedup_vs_scipy"] for r in rows]
    worst = min(rows, key=lambda r: r["speedup_vs_scipy"]) if rows else None
    measured = f"{h.f(min(x), 2, 'x')} ({worst['case']} N={worst['N']}); geomean {h.f(h.geo(x), 2, 'x')}" if x else "–"
    out += h.targets([(f"vs SciPy's single CSR product, every case (min), {rows[0]['threads'] if rows else '?'} "
                       "cores", f">= {TARGET}x", measured, h.status(min(x) >= TARGET if x else None))])
    return out + h.older_note(older) + [h.reproduce("cpu_spmm", run), ""]
