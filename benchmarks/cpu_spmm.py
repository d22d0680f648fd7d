"""CPU SpMM: the pipeline's float32 CPU product (SpmmPlan(device="cpu"), i.e. kernels.cpu_spmm over row blocks)
against SciPy's CSR product, which runs on one core.

For each case (generated matrices, float32 values, B standard normal float32) and N, in interleaved rounds: SciPy's
``A @ B`` (csr_array float32 times a C-contiguous float32 array: what a user writes), ``SpmmPlan.run(B)`` with the
default threads (every CPU this process may use), and ``CpuCsr(A, threads=1)`` (the same kernel on one core).
Wall times per call include allocating C. Each result is checked against the float64 product (relative Frobenius
error, float32 tolerance 1e-5). Reports median and best of ``--repeats``, GFLOP/s = 2 nnz N / median, and the
speedup over SciPy from the medians. JSON to ``benchmarks/results/cpu_spmm-<cpus>cpu-<date>.json``; table last.

    python benchmarks/cpu_spmm.py [--repeats 7] [--n-cols 32 128] [--quick]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import scipy  # noqa: E402
from machine import cpu_model  # noqa: E402  (benchmarks/ is the script folder)

from kernels.cpu_spmm import CpuCsr, default_threads  # noqa: E402
from kernels.spmm import SpmmPlan  # noqa: E402
from tasks.fetch.generators import generate  # noqa: E402

CASES = {  # name -> generator spec (kind, params)
    "rmat-8M": ("rmat", "scale=20&edge_factor=8&seed=1"),  # the 8M-nnz R-MAT: ids shuffled, no locality
    "sbm-2M": ("sbm", "n=100000&blocks=500&p_in=0.1&p_out=0.00001&seed=1"),
    "mesh3d-2M": ("mesh", "nx=80&ny=80&nz=40&seed=1"),
}
QUICK = {"rmat-small": ("rmat", "scale=12&edge_factor=4&seed=1"), "banded-small": ("banded", "n=3000&bandwidth=6&seed=1")}
TOL = 1e-5  # float32 accumulation, relative to the norm


def _rel(C, ref) -> float:
    return float(np.linalg.norm(C.astype(np.float64) - ref) / max(np.linalg.norm(ref), 1e-300))


def run_case(name: str, kind: str, params: str, n_cols: list[int], repeats: int) -> list[dict]:
    A = generate(kind, params).astype(np.float32)
    A.sort_indices()
    plan = SpmmPlan(A, device="cpu")
    one = CpuCsr(A, threads=1)
    rows = []
    for N in n_cols:
        B = np.random.default_rng(N).standard_normal((A.shape[1], N), dtype=np.float32)
        ref = A.astype(np.float64) @ B.astype(np.float64)
        impls = {"scipy": lambda: A @ B, "plan": lambda: plan.run(B), "cpu_1thread": lambda: one.run(B)}
        errors = {k: _rel(f(), ref) for k, f in impls.items()}  # also the warm-up (numba compile, page faults)
        del ref
        times = {k: [] for k in impls}
        for _ in range(repeats):  # interleaved, so load from other processes hits every implementation alike
            for k, f in impls.items():
                start = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - start)
        row = {"case": name, "spec": f"gen:{kind}?{params}", "shape": list(A.shape), "nnz": int(A.nnz), "N": N,
               "threads": plan._cpu.csr.threads}
        for k in impls:
            med = float(np.median(times[k]))
            row[k] = {"median_ms": med * 1e3, "best_ms": min(times[k]) * 1e3, "gflops": 2 * A.nnz * N / med / 1e9,
                      "rel_error": errors[k], "correct": errors[k] <= TOL}
        row["speedup_vs_scipy"] = row["scipy"]["median_ms"] / row["plan"]["median_ms"]
        row["speedup_1thread_vs_scipy"] = row["scipy"]["median_ms"] / row["cpu_1thread"]["median_ms"]
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    head = f"{'case':<13}{'nnz':>10}{'N':>5}{'scipy ms':>10}{'ours ms':>10}{'1-thr ms':>10}{'GFLOP/s':>9}" \
           f"{'vs scipy':>9}{'1-thr':>7}  correct"
    lines = [head]
    for r in rows:
        ok = all(r[k]["correct"] for k in ("scipy", "plan", "cpu_1thread"))
        lines.append(f"{r['case']:<13}{r['nnz']:>10}{r['N']:>5}{r['scipy']['median_ms']:>10.1f}"
                     f"{r['plan']['median_ms']:>10.1f}{r['cpu_1thread']['median_ms']:>10.1f}"
                     f"{r['plan']['gflops']:>9.2f}{r['speedup_vs_scipy']:>8.2f}x{r['speedup_1thread_vs_scipy']:>6.2f}x"
                     f"  {'yes' if ok else 'NO'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--n-cols", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--quick", action="store_true", help="small matrices (a smoke run, seconds)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    load_at_start = list(os.getloadavg())  # other work on the 2 cores slows ours (both cores) more than SciPy's
    rows = []
    for name, (kind, params) in (QUICK if args.quick else CASES).items():
        rows += run_case(name, kind, params, args.n_cols, args.repeats)
    result = {"benchmark": "cpu_spmm", "date": datetime.date.today().isoformat(),
              "command": "python benchmarks/cpu_spmm.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "machine": {"cpu": cpu_model(), "cores": default_threads(), "cpus_usable": default_threads(),
                          "cpu_count": os.cpu_count(), "loadavg_at_start": load_at_start, "loadavg_at_end": None},
              "versions": {"python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
                           "numba": __import__("numba").__version__},
              "measures": "wall ms per call incl. allocating C; median and best of interleaved repeats; speedup from "
                          "medians; scipy = csr_array(float32) @ B on one core",
              "rows": rows}
    result["machine"]["loadavg_at_end"] = list(os.getloadavg())
    args.out.mkdir(parents=True, exist_ok=True)
    tag = "quick-" if args.quick else ""
    path = args.out / f"cpu_spmm-{tag}{default_threads()}cpu-{result['date']}.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    print(table(rows))
    if not all(r[k]["correct"] for r in rows for k in ("scipy", "plan", "cpu_1thread")):
        print("error: benchmarks/cpu_spmm.py: a product differs from the float64 reference beyond 1e-5", file=sys.stderr)
        sys.exit(1)
    return result


if __name__ == "__main__":
    main()
