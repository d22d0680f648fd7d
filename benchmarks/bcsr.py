"""BCSR (SMaT) benchmark on one GPU: our bcsr kernel against cuSPARSE BSR (BSR_ALG1, 16 x 16), cuSPARSE Blocked-ELL
(16 x 16, its Tensor Core path), cuSPARSE CSR (best of ALG1-3) and our ME-TCF, all in FP16 (FP32 compute); our bcsr
also in BF16 and TF32.

    PYTHONPATH=. python3 benchmarks/bcsr.py [--ns 128 256 512] [--repeats 20] [--out-dir DIR] [--quick]

Matrices: generated block-structured ones (FEM on a 3-D grid with 2, 3 and 6 dof per node, a dense band,
block-sparse DNN weights 4096 x 4096 at 50 / 80 / 95% block sparsity) in their natural order, row-shuffled, and
row-shuffled then reordered by SMaT's preprocessing (tasks/reorder/smat.py, kept only when it lowers BCSR blocks),
plus the SuiteSparse fixtures (given order and SMaT-reordered). Per case: BCSR blocks and blocks-per-block-row
spread, device ms of every kernel by CUDA-graph replay (kernels.launch.graph_ms), and the relative error of every
kernel on sampled rows against float64 (checked in the same run: a kernel over its precision's contract fails the
run), and the BCSR conversion's seconds per precision on the host and on the GPU (``<kernel>_convert_s``). JSON
under benchmarks/results/ (device, versions, command, date); the table last.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernels import launch
from kernels.formats.bcsr import launch as launch_bcsr  # noqa: E402
from kernels.formats import get  # noqa: E402
from kernels.formats.bcsr.gpu import csr_to_bcsr_gpu_from_scipy  # noqa: E402
from kernels.precision import precision  # noqa: E402
from tasks.reorder.smat import bcsr_score, smat_order  # noqa: E402

from spmm import FIXTURES, fixture  # noqa: E402,F811  (benchmarks/ is the script folder: one fixture reader)

SAMPLE_ROWS = 2048


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def fem(n: int, dof: int, stencil: int = 7) -> sp.csr_array:
    """n^3 grid nodes, 7- or 27-point node coupling, a dense dof x dof block per coupled node pair."""
    one = sp.diags([np.ones(n - 1), np.ones(n), np.ones(n - 1)], [-1, 0, 1], shape=(n, n), format="csr")
    eye = sp.eye(n, format="csr")
    if stencil == 27:
        G = sp.kron(sp.kron(one, one), one)
    else:
        G = sp.kron(sp.kron(one, eye), eye) + sp.kron(sp.kron(eye, one), eye) + sp.kron(sp.kron(eye, eye), one)
    G = sp.csr_array(G)
    G.data[:] = 1.0
    return sp.csr_array(sp.kron(G, np.ones((dof, dof)), format="csr"), dtype=np.float32)


def banded(n: int, half: int) -> sp.csr_array:
    return sp.csr_array(sp.diags([np.ones(n - abs(k)) for k in range(-half, half + 1)], list(range(-half, half + 1)),
                                 shape=(n, n), format="csr"), dtype=np.float32)


def dnn(n: int, sparsity: float, seed: int) -> sp.csr_array:
    S = sp.random(n // 16, n // 16, density=1.0 - sparsity, random_state=seed, format="csr")
    S.data[:] = 1.0
    return sp.csr_array(sp.kron(S, np.ones((16, 16)), format="csr"), dtype=np.float32)


def with_values(A, seed: int) -> sp.csr_array:
    A = sp.csr_array(A, dtype=np.float32)
    A.data = np.random.default_rng(seed).uniform(-1.0, 1.0, A.nnz).astype(np.float32)
    A.sort_indices()
    return A


def generated(quick: bool):
    fem_n = 24 if quick else 32
    out = [(f"fem{fem_n}-dof{d}", lambda d=d: fem(fem_n, d, 27 if d <= 3 else 7)) for d in (2, 3, 6)]
    out.append(("banded-200k-b16", lambda: banded(200_000, 16)))
    out += [(f"dnn4096-s{int(s * 100)}", lambda s=s: dnn(4096, s, 7)) for s in (0.5, 0.8, 0.95)]
    return out


def rel_err_rows(C, A, B, rows) -> float:
    ref = A[rows] @ B.astype(np.float64)
    got = np.asarray(C, dtype=np.float64)[rows]
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-300))


def time_case(A, N: int, repeats: int, rng) -> dict:
    """Every kernel at N on A (in its current order): device ms and sampled relative error."""
    import cupy

    from kernels.cusparse import CusparseSpmm
    from kernels.cusparse_bell import CusparseBlockedEll
    from kernels.cusparse_bsr import CusparseBsr
    from kernels.spmm import SpmmPlan

    B32 = rng.standard_normal((A.shape[1], N)).astype(np.float32)
    rows = np.sort(rng.choice(A.shape[0], min(SAMPLE_ROWS, A.shape[0]), replace=False))
    ms, err, extra = {}, {}, {}
    for dtype in ("float16", "bfloat16", "float32"):
        p = precision(dtype)
        name = {"float16": "bcsr", "bfloat16": "bcsr-bf16", "float32": "bcsr-tf32"}[dtype]
        t0 = time.perf_counter()
        X = get("bcsr").convert(A, p)
        convert_s = {"host": time.perf_counter() - t0}  # csr_to_bcsr in NumPy, upload not included
        t0 = time.perf_counter()
        # CSR upload + device conversion, what BcsrDevice does for a CSR; a process's first call includes CuPy's
        # kernel compiles
        G = csr_to_bcsr_gpu_from_scipy(A, p)
        cupy.cuda.Device().synchronize()  # synchronize!
        convert_s["gpu"] = time.perf_counter() - t0
        extra[f"{name}_convert_s"] = convert_s
        del G
        dm = launch_bcsr.upload(X, dtype)
        Bd = cupy.asarray(p.to_storage(B32))
        out = cupy.empty((A.shape[0], N), dtype=cupy.float32)
        by_k = {}
        for k in (1, *launch_bcsr.ksplits(N)):
            by_k[k] = launch.graph_ms(lambda: launch_bcsr.spmm(dm, Bd, out, ksplit=k), repeats=repeats)
        best = min(by_k, key=by_k.get)
        launch_bcsr.spmm(dm, Bd, out, ksplit=best)
        ms[name], err[name] = by_k[best], rel_err_rows(cupy.asnumpy(out), A, p.rounded(B32), rows)
        extra[f"{name}_ms_by_ksplit"] = by_k
        del dm, X
    p = precision("float16")
    B16 = cupy.asarray(B32.astype(np.float16))
    B16r = p.rounded(B32)
    bsr = CusparseBsr(A, dtype="float16")
    Bp, Cp = bsr.padded_b(B16), bsr.padded_c(N)
    ms["cusparse-bsr"] = launch.graph_ms(lambda: bsr.run(Bp, Cp), repeats=repeats)
    err["cusparse-bsr"] = rel_err_rows(cupy.asnumpy(Cp[:A.shape[0]]), A, B16r, rows)
    bsr.close()
    try:
        bell = CusparseBlockedEll(A, block=16, dtype="float16")
        Bp, Cp = bell.padded_b(B16), bell.padded_c(N)
        ms["cusparse-bell"] = launch.graph_ms(lambda: bell.run(Bp, Cp), repeats=repeats)
        err["cusparse-bell"] = rel_err_rows(cupy.asnumpy(Cp[:A.shape[0]]), A, B16r, rows)
        bell.close()
    except ValueError as e:  # padding every block row to the longest does not fit
        extra["cusparse-bell"] = str(e)
    csr = CusparseSpmm(A, dtype="float16")
    C16 = cupy.empty((A.shape[0], N), dtype=cupy.float16)
    t = csr.tune(B16, C16, repeats=repeats)
    ms["cusparse-csr"] = t["ms"][t["best"]]
    csr.run(B16, C16)
    err["cusparse-csr"] = rel_err_rows(cupy.asnumpy(C16), A, B16r, rows)
    extra["cusparse-csr-alg"] = t["best"]
    csr.close()
    plan = SpmmPlan(A, dtype="float16", format="metcf", autotune=True, out_dtype=np.float32)
    C = plan.run(B32)
    ms["metcf"] = plan.benchmark(B32, repeats=repeats)["median_ms"]
    err["metcf"] = rel_err_rows(C, A, B16r, rows)
    extra["metcf-kernel"] = plan.choices[N]["kernel"]
    return {"ms": ms, "rel_err": err, **extra}


def main(argv=None) -> int:
    from machine import gpu_meta

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int, nargs="+", default=[128, 256, 512])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--quick", action="store_true", help="smaller FEM grids")
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting new matrices after this")
    ap.add_argument("--only", nargs="+", help="only matrices whose label starts with one of these (e.g. dnn fixture)")
    args = ap.parse_args(argv)
    t_start = time.time()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    meta = {**gpu_meta(), "command": " ".join(sys.argv),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "timing": "kernels.launch.graph_ms (CUDA graph replay, median), repeats per --repeats",
            "bcsr_config": launch_bcsr.BCSR_CONFIG.__dict__}
    path = args.out_dir / f"bcsr-{meta['slug']}-{dt.datetime.now():%Y-%m-%d-%H%M}.json"
    rng = np.random.default_rng(0)
    cases = [(label, make, True) for label, make in generated(args.quick)]
    cases += [(f"fixture:{n}", lambda n=n: fixture(n), False) for n in FIXTURES]
    if args.only:
        cases = [c for c in cases if c[0].startswith(tuple(args.only))]
    rows, failures = [], []
    for label, make, shuffle in cases:
        if time.time() - t_start > args.budget_s:
            log(f"budget reached: skipping {label} and the rest")
            break
        A = make()
        if A is None:
            log(f"{label}: fixture missing, skipped")
            continue
        A = with_values(A, 1)
        orders = {"natural": np.arange(A.shape[0])}
        base = A
        if shuffle:
            orders["shuffled"] = np.random.default_rng(2).permutation(A.shape[0])
            base = A[orders["shuffled"]]
        t0 = time.perf_counter()
        perm = smat_order(base, width=16)
        smat_s = time.perf_counter() - t0
        key = "shuffled+smat" if shuffle else "smat"
        orders[key] = (orders["shuffled"] if shuffle else orders["natural"])[perm]
        for order, rp in orders.items():
            Ao = A[rp]
            score = bcsr_score(Ao, 16)
            for N in args.ns:
                t0 = time.time()
                res = time_case(Ao, N, args.repeats, np.random.default_rng(N))
                for k, e in res["rel_err"].items():
                    tol = precision({"bcsr-bf16": "bfloat16", "bcsr-tf32": "float32"}.get(k, "float16")).tolerance
                    if not np.isfinite(e) or e > tol:
                        failures.append(f"{label} {order} N={N} {k}: rel err {e:.3g} > {tol}")
                row = {"matrix": label, "order": order, "shape": list(Ao.shape), "nnz": int(Ao.nnz), "N": N,
                       **score, "smat_s": smat_s if order == key else None,
                       "smat_applied": bool(order == key and not np.array_equal(perm, np.arange(len(perm)))),
                       **res}
                rows.append(row)
                log(f"{label} {order} N={N}: blocks {score['bcsr_blocks']} "
                    + " ".join(f"{k}={v:.4f}" for k, v in res["ms"].items()) + f" ({time.time() - t0:.1f} s)")
                path.write_text(json.dumps({"meta": {**meta, "wall_s": time.time() - t_start}, "rows": rows,
                                            "failures": failures}, indent=1, default=float))
    print_table(rows, path)
    if failures:
        print("CORRECTNESS FAILURES:\n" + "\n".join(failures))
        return 1
    return 0


def geomean(x):
    x = [v for v in x if v > 0 and np.isfinite(v)]
    return float(np.exp(np.mean(np.log(x)))) if x else float("nan")


def print_table(rows, path):
    cols = ["bcsr", "cusparse-bsr", "cusparse-bell", "cusparse-csr", "metcf", "bcsr-bf16", "bcsr-tf32"]
    print(f"\nresults: {path}")
    print(f"{'matrix':22} {'order':14} {'N':>4} {'blocks':>8} {'bpr max/mean':>12} "
          + " ".join(f"{c:>13}" for c in cols) + f" {'vs best BSR/BELL':>16}")
    speed = []
    for r in rows:
        ms = r["ms"]
        base = min(ms.get("cusparse-bsr", np.inf), ms.get("cusparse-bell", np.inf))
        s = base / ms["bcsr"]
        if r["order"] != "natural" or r["matrix"].startswith("fixture"):
            speed.append(s) if r["order"] in ("shuffled+smat", "smat") else None
        spread = f"{r['bcsr_blocks_per_row_max']}/{r['bcsr_blocks_per_row_mean']:.1f}"
        print(f"{r['matrix'][:22]:22} {r['order']:14} {r['N']:>4} {r['bcsr_blocks']:>8} {spread:>12} "
              + " ".join(f"{ms[c]:>13.4f}" if c in ms else f"{'-':>13}" for c in cols) + f" {s:>15.2f}x")
    print(f"(ms: device time per call; FP16 unless named; 'vs best BSR/BELL' = min(cuSPARSE BSR, Blocked-ELL) / "
          f"bcsr FP16)\ngeomean speedup of bcsr FP16 over the better of cuSPARSE BSR and Blocked-ELL after SMaT "
          f"reordering: {geomean(speed):.2f}x over {len(speed)} cases")


if __name__ == "__main__":
    sys.exit(main())
