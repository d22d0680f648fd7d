"""The CVSE section of docs/benchmarks.md (benchmarks/cvse.py's files), for benchmarks/summarize.py.

Targets (issue 13, on the DNN-style set, FP16, V = 4 and 8, N = 256-1024): CVSE SpMM >= 2x geomean over cuSPARSE
half CSR (best algorithm) and over cuSPARSE Blocked-ELL; faster than dense cuBLAS FP16 from 80 % sparsity at V = 8;
SDDMM in FP16 and in TF32 >= 2x over cuSPARSE SDDMM on the same inputs.
"""
from __future__ import annotations

SPMM_TARGET, SDDMM_TARGET, DENSE_V, DENSE_SPARSITY = 2.0, 2.0, 8, 0.8


def ratio(r, base, ours="cvse"):
    ms = r["ms"]
    return ms[base] / ms[ours] if base in ms and ours in ms and ms[ours] > 0 else None


def dense_valid(run) -> bool:
    """Files before the dense column was timed as issued (their meta says it is invalid) have no usable dense."""
    return all("issued_ms" in r for r in run.rows if r["kind"] == "spmm")


def cvse_section(runs, v0, older, *, h) -> list[str]:
    title = "CVSE (VectorSparse / SSpMM): FP16 SpMM and SDDMM on DNN-style weights (issue 13)"
    target_rows = [("SpMM FP16 vs cuSPARSE half CSR, geomean", f">= {SPMM_TARGET}x"),
                   ("SpMM FP16 vs cuSPARSE Blocked-ELL, geomean", f">= {SPMM_TARGET}x"),
                   (f"faster than dense cuBLAS FP16 from sparsity {DENSE_SPARSITY} at V = {DENSE_V}", "crossing <= 0.8"),
                   ("SDDMM FP16 vs cuSPARSE SDDMM", f">= {SDDMM_TARGET}x"),
                   ("SDDMM TF32 vs cuSPARSE SDDMM", f">= {SDDMM_TARGET}x")]
    if not runs:
        return h.absent("cvse", title, target_rows)
    run = runs[0]
    spmm = [r for r in run.rows if r["kind"] == "spmm"]
    sddmm = [r for r in run.rows if r["kind"] == "sddmm"]
    dense_ok = dense_valid(run)
    out = [f"## {title}", ""] + h.env(run)
    both = run.meta.get("timing", {}).get("ms") == "graph"  # dense by graph replay too, cvse issued via SpmmPlan
    timing = ("Every ms column is device time by CUDA-graph replay (dense: torch.matmul in torch's own graph); the "
              "two `issued` columns are per call as users issue them (CUDA events around a Python loop): CVSE through "
              "`SpmmPlan(X, format=\"cvse\").run(B, out)`, dense through torch.matmul." if both else
              "CVSE, cuSPARSE half CSR (its fastest algorithm), cuSPARSE Blocked-ELL (16 x 16) and the SDDMM columns "
              "are device time by CUDA-graph replay; dense cuBLAS FP16 GEMM is timed as issued (events around a loop "
              "of calls), `*` where that loop was host-bound (an upper bound).")
    out += [f"Matrices: {run.meta.get('matrices', 'gen:dlmc')}. {timing} ms per call; every result checked against "
            "float64 on sampled rows in the same run. CVSE = the fastest of the per-vector kernel and the tiled "
            "kernel's two best a priori launch shapes (each timed and checked; `kernel` names it, `per-vector` is the "
            "per-vector kernel alone): what SpmmPlan(format=\"cvse\")'s autotune runs.", ""]
    if not dense_ok:
        out += ["The dense column of this file is not valid (" + str(run.meta.get("note", "see its meta"))[:160]
                + " ...): no crossing is reported from it.", ""]
    issued = ("CVSE issued", "dense issued", "x dense issued") if both else ()
    out += h.table(("V", "M = K", "sparsity", "N", "CVSE", "kernel", "per-vector", "cuSP CSR (alg)", "cuSP BELL",
                    "dense", "x CSR", "x BELL", "x dense") + issued + ("max rel err",),
                   [(r["V"], r["shape"][0], r["sparsity"], r["N"], h.f(r["ms"]["cvse"], 4),
                     r.get("cvse_kernel", "cvse-vector"), h.f(r["ms"].get("cvse-vector", r["ms"]["cvse"]), 4),
                     f"{h.f(r['ms'].get('cusparse-csr'), 4)} ({r.get('cusparse-csr-alg', '?')})",
                     h.f(r["ms"].get("cusparse-bell"), 4),
                     (h.f(r["ms"].get("dense"), 4) + ("*" if r.get("dense_host_bound") else "")) if dense_ok else "–",
                     h.f(ratio(r, "cusparse-csr"), 2, "x"), h.f(ratio(r, "cusparse-bell"), 2, "x"),
                     h.f(ratio(r, "dense"), 2, "x") if dense_ok else "–")
                    + ((h.f(r["issued_ms"].get("cvse"), 4), h.f(r["issued_ms"].get("dense"), 4),
                        h.f(ratio({"ms": r["issued_ms"]}, "dense"), 2, "x")) if both else ())
                    + (f"{max(r['rel_err'].values()):.1e}",)
                    for r in spmm])
    if sddmm:
        out += h.table(("V", "M = K", "sparsity", "Kd", "cuSPARSE SDDMM (fp32)", "CVSE FP16", "CVSE TF32", "x FP16",
                        "x TF32", "max rel err"),
                       [(r["V"], r["shape"][0], r["sparsity"], r.get("Kd"), h.f(r["ms"]["cusparse-sddmm"], 4),
                         h.f(r["ms"]["cvse-fp16"], 4), h.f(r["ms"]["cvse-tf32"], 4),
                         h.f(ratio(r, "cusparse-sddmm", "cvse-fp16"), 2, "x"),
                         h.f(ratio(r, "cusparse-sddmm", "cvse-tf32"), 2, "x"), f"{max(r['rel_err'].values()):.1e}")
                        for r in sddmm])
    targets = []
    for base, (name, thr) in zip(("cusparse-csr", "cusparse-bell"), target_rows):
        x = [ratio(r, base) for r in spmm if ratio(r, base)]
        g = h.geo(x)
        targets.append((name, thr, f"{h.f(g, 2)}x over {len(x)} cases (min {h.f(min(x, default=None), 2)}x)",
                        h.status(None if g is None else g >= SPMM_TARGET)))
    if dense_ok:
        cross = crossing([r for r in spmm if r["V"] == DENSE_V])
        text = (f"faster at every size and N from sparsity {cross}" if cross is not None
                else "not faster at every size and N even at the highest sparsity")
        targets.append((*target_rows[2], text + (" (graph against graph)" if both else ""),
                        h.status(cross is not None and cross <= DENSE_SPARSITY)))
        if both:
            c = crossing([{**r, "ms": r["issued_ms"]} for r in spmm if r["V"] == DENSE_V])
            out += [f"As issued (CVSE through SpmmPlan.run against torch.matmul), V = {DENSE_V} crosses dense from "
                    f"sparsity {c}." if c is not None else
                    f"As issued, V = {DENSE_V} does not cross dense at every N.", ""]
        for V in sorted({r["V"] for r in spmm} - {DENSE_V}):
            c = crossing([r for r in spmm if r["V"] == V])
            out += [f"V = {V} crosses dense cuBLAS FP16 from sparsity {c}." if c is not None
                    else f"V = {V} does not cross dense cuBLAS FP16 at every N.", ""]
    else:
        targets.append((*target_rows[2], "not measured (dense column invalid)", h.status(None)))
    for key, (name, thr) in zip(("cvse-fp16", "cvse-tf32"), target_rows[3:]):
        x = [ratio(r, "cusparse-sddmm", key) for r in sddmm if ratio(r, "cusparse-sddmm", key)]
        g = h.geo(x)
        targets.append((name, thr, f"{h.f(g, 2)}x over {len(x)} cases (min {h.f(min(x, default=None), 2)}x)"
                        if x else "–", h.status(None if g is None else g >= SDDMM_TARGET)))
    out += h.targets(targets)
    return out + h.older_note(older) + [h.reproduce("cvse", run), ""]


def crossing(rows) -> float | None:
    """The lowest sparsity from which CVSE is faster than dense at every (M, N) of ``rows`` (one V); None if never."""
    cross = None
    for key in sorted({(r["shape"][0], r["N"]) for r in rows}):
        pts = sorted((r["sparsity"], r["ms"]["cvse"] < r["ms"]["dense"]) for r in rows
                     if (r["shape"][0], r["N"]) == key and "dense" in r["ms"])
        c = None
        for s, faster in reversed(pts):
            if not faster:
                break
            c = s
        if c is None:
            return None
        cross = c if cross is None else max(cross, c)
    return cross


def svc_slack_section(runs, v0, older, *, h) -> list[str]:
    """benchmarks/svc_slack.py: the measured slack behind kernels/formats/cvse/svc.py's WORK_SLACK."""
    title = "CVSE: the Sparse Vector Compression slack (V = 16 against V = 8)"
    if not runs:
        return h.absent("svc-slack", title)
    run = runs[0]
    out = h.opening(
        title, run,
        "CVSE FP16 SpMM at V = 8 and V = 16 on the same matrix, device ms by CUDA-graph replay; w = mma work of "
        "V = 16 / V = 8 (vectors x n8 columns), t = ms(16) / ms(8). V = 16 is as fast as V = 8 while w <= "
        "1 / geomean(t / w): the slack `kernels/formats/cvse/svc.py` uses (WORK_SLACK).")
    out += h.table(("matrix", "N", "w", "ms V = 8", "ms V = 16", "t", "t / w", "max rel err"),
                   [(r["matrix"], r["N"], h.f(r["work_ratio"], 2), h.f(r["ms"]["8"], 4), h.f(r["ms"]["16"], 4),
                     h.f(r["time_ratio"], 2), h.f(r["time_per_work"], 3), f"{max(r['rel_err'].values()):.1e}")
                    for r in run.rows])
    g = h.geo(r["time_per_work"] for r in run.rows)
    out += [f"Break-even slack: 1 / geomean(t / w) = 1 / {h.f(g, 3)} = {h.f(1 / g if g else None, 2)} over "
            f"{len(run.rows)} rows; WORK_SLACK in the code when this ran: {run.meta.get('work_slack_in_code')}.", ""]
    return out + h.older_note(older) + [h.reproduce("svc-slack", run), ""]
