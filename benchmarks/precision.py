"""Half-precision SpMM benchmark on one GPU: ME-TCF in FP16 and BF16 (mma.m16n8k16, 16 x 16 blocks) against our
TF32 path and against the strongest baselines in the same precision.

    PYTHONPATH=. python3 benchmarks/precision.py [--suite quick|full] [--ns 128 256 512] [--out-dir DIR]

Per matrix (fixtures and seeded generators, as benchmarks/spmm.py) in its given order ("none": the ORIGINAL
matrix) and after TCA reordering for 16 x 16 blocks ("tca"), per N:
- our selected path per precision: `SpmmPlan(A, dtype=...)` autotuned (the fastest measured of its kernels and
  cuSPARSE in that precision), its device time by CUDA-graph replay (kernels.launch.graph_ms) and per call as
  issued (`plan.run(B, out)` in a Python loop between CUDA events, kernels.launch.median_ms);
- baselines in FP16: the best cuSPARSE CSR algorithm (CUDA_R_16F storage, FP32 compute) on the original and on the
  same reordered matrix, cuSPARSE Blocked-ELL (16 x 16, its Tensor Core path) where its padding fits
  (kernels.cusparse_bell), torch.sparse.mm on a float16 CSR tensor; and cuSPARSE CSR FP32 (TF32's baseline);
- the memory floor: A as the kernel reads it, B and C once, at the copy bandwidth measured in this run;
- correctness in the same run: relative error of every plan on 2048 sampled rows against float64 (the accuracy
  contract of kernels.precision).
JSON under benchmarks/results/ (device, versions, command, date), the table last.
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

from machine import gpu_meta  # noqa: E402  (benchmarks/ is the script folder)
from spmm import FIXTURES, fixture, generated, geomean, log  # noqa: E402

from kernels import launch
from kernels.formats.metcf import selector  # noqa: E402
from kernels.cusparse import CusparseSpmm  # noqa: E402
from kernels.precision import check_range, precision  # noqa: E402
from kernels.spmm import SpmmPlan  # noqa: E402

SUITES = {  # sizes: 1M-64M nnz; the 10M+ ones carry the FP16-over-TF32 target
    "quick": [("sbm-100k", "sbm", "n=100000&blocks=100&deg_in=16&deg_out=2"),
              ("mesh3d-80", "mesh", "nx=80&ny=80&nz=80&stencil=27")],
    "full": [("sbm-100k", "sbm", "n=100000&blocks=100&deg_in=16&deg_out=2"),
             ("mesh3d-80", "mesh", "nx=80&ny=80&nz=80&stencil=27"),
             ("banded-1M", "banded", "n=1000000&bandwidth=8"),
             ("sbm-1M", "sbm", "n=1000000&blocks=2000&deg_in=20&deg_out=2"),
             ("longrow-40k", "longrow", "rows=40000&min_row_nnz=300&max_row_nnz=600"),
             ("rmat-s20", "rmat", "scale=20&edge_factor=16"),
             ("mesh3d-128", "mesh", "nx=128&ny=128&nz=128&stencil=27")],
}
DTYPES = ("float32", "float16", "bfloat16")


def plan_times(A, dtype: str, B32: np.ndarray, repeats: int) -> dict:
    """Autotuned SpmmPlan in ``dtype``: selected kernel, graph-replay ms of every candidate, per-call-as-issued ms
    of the selected path, and the relative error on sampled rows."""
    import cupy

    prec = precision(dtype)
    t0 = time.perf_counter()
    plan = SpmmPlan(A, device="gpu", dtype=dtype, autotune=True)
    setup_s = time.perf_counter() - t0
    Bd = cupy.asarray(prec.to_storage(B32))
    out = cupy.empty((A.shape[0], B32.shape[1]), dtype=plan.out_dtype)
    plan.run(Bd, out)  # decides: times every candidate by graph replay
    ch = plan.choices[B32.shape[1]]
    measured = dict(ch.get("measured_ms", {}))
    selected = ch["kernel"]
    # the selected path's own median over `repeats` replays (autotune's candidate times use fewer)
    replay_ms = plan.benchmark(Bd, repeats=repeats)["median_ms"]
    issued_ms = launch.median_ms(lambda: plan.run(Bd, out), repeats=repeats, warmup=5)
    return {"plan": plan, "selected": selected, "ms": measured, "replay_ms": replay_ms, "issued_ms": issued_ms,
            "setup_s": setup_s, "out": out, "B": Bd}


def rel_err_rows(A, B32, C, rows, prec) -> float:
    import cupy

    ref = A[rows].astype(np.float64) @ B32.astype(np.float64)
    got = prec.to_float32(cupy.asnumpy(C[cupy.asarray(rows)])).astype(np.float64)
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)) if np.isfinite(got).all() \
        else float("nan")


def cusparse_ms(A, dtype: str, B32: np.ndarray, repeats: int) -> dict:
    import cupy

    prec = precision(dtype)
    op = CusparseSpmm(A, dtype=dtype)
    try:
        Bd = cupy.asarray(prec.to_storage(B32))
        out = cupy.empty((A.shape[0], B32.shape[1]), dtype=Bd.dtype)
        t = op.tune(Bd, out, repeats=repeats)
        bound = op.bind(Bd, out)  # the cheapest call CuPy allows: descriptors bound once (kernels.cusparse)
        stream = cupy.cuda.get_current_stream().ptr
        issued = launch.median_ms(lambda: bound(stream), repeats=repeats, warmup=5)
        return {"best": t["best"], "ms": t["ms"][t["best"]], "issued_ms": issued, "all_ms": t["ms"],
                "errors": t["errors"]}
    finally:
        op.close()


def bell_ms(A, B32: np.ndarray, repeats: int) -> dict:
    """cuSPARSE Blocked-ELL FP16 (16 x 16) device ms, or why it does not apply."""
    import cupy

    from kernels.cusparse_bell import CusparseBlockedEll

    try:
        op = CusparseBlockedEll(A, block=16, dtype="float16")
    except ValueError as err:
        return {"applies": False, "why": str(err)}
    try:
        Bp = op.padded_b(cupy.asarray(B32.astype(np.float16)))
        Cp = op.padded_c(B32.shape[1])
        op.run(Bp, Cp)
        rows = np.arange(min(2048, A.shape[0]))
        err = rel_err_rows(A, B32.astype(np.float16).astype(np.float32), Cp[:A.shape[0]], rows, precision("float16"))
        ms = launch.graph_ms(lambda: op.run(Bp, Cp), repeats=repeats, warmup=3)
        return {"applies": True, "ms": ms, "fill": op.info["fill"], "value_bytes": op.info["value_bytes"],
                "rel_err": err}
    finally:
        op.close()


def torch_half_ms(A, B32: np.ndarray, repeats: int) -> dict:
    """torch.sparse.mm on a float16 CSR tensor (graph replay when torch captures it, else single calls)."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    try:
        At = torch.sparse_csr_tensor(torch.as_tensor(A.indptr.astype(np.int64)),
                                     torch.as_tensor(A.indices.astype(np.int64)),
                                     torch.as_tensor(A.data.astype(np.float16)), size=A.shape, device="cuda")
        Bt = torch.as_tensor(B32.astype(np.float16), device="cuda")
        torch.sparse.mm(At, Bt)
        torch.cuda.synchronize()
    except RuntimeError as err:
        return {"error": str(err).splitlines()[0]}
    ts = []
    for _ in range(repeats):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        torch.sparse.mm(At, Bt)
        e1.record()
        e1.synchronize()  # synchronize!
        ts.append(e0.elapsed_time(e1))
    return {"ms": float(np.median(ts)), "timing": "single call as issued"}


def floor_ms(plan, A, N: int, prec, copy_gbs: float) -> float:
    """Fewest bytes: A as the selected format holds it on the device, B and C once, over the copy bandwidth."""
    ops = next(iter(plan._ops.values()))
    dm = ops._dm
    a_bytes = sum(int(getattr(x, "nbytes", 0)) for x in vars(dm).values() if hasattr(x, "nbytes")
                  and not isinstance(x, np.ndarray))
    return (a_bytes + prec.itemsize * N * (A.shape[0] + A.shape[1])) / (copy_gbs * 1e6)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=sorted(SUITES), default="full")
    ap.add_argument("--matrices", nargs="+", help="only these labels")
    ap.add_argument("--ns", type=int, nargs="+", default=[128, 256, 512])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--tca-max-nnz", type=int, default=40_000_000)
    ap.add_argument("--part", help="suffix of the results file")
    ap.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--budget-s", type=float, default=480.0)
    ap.add_argument("--table-from", type=Path, help="reprint the table of a results JSON and exit (no GPU)")
    args = ap.parse_args(argv)
    if args.table_from:
        print_table(json.loads(args.table_from.read_text())["rows"], args.table_from)
        return 0
    import cupy

    from tasks.reorder import reorder_checked

    t_start = time.time()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    dev = selector.device_model()
    copy_gbs = dev.copy_gbs
    matrices = [(f"fixture:{n}", lambda n=n: fixture(n)) for n in FIXTURES]
    matrices += [(label, lambda k=kind, p=params: generated(k, p, 1)) for label, kind, params in SUITES[args.suite]]
    if args.matrices:
        matrices = [m for m in matrices if m[0] in args.matrices]
    meta = {**gpu_meta(), "copy_gbs": copy_gbs, "command": " ".join(sys.argv),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "timing": "replay: device ms per call from CUDA-graph replays (kernels.launch.graph_ms); issued: one "
                      "plan.run(B, out) per iteration of a Python loop between CUDA events (median)"}
    part = f"-{args.part}" if args.part else ""
    path = args.out_dir / f"precision-{selector.slug(dev.name)}-{dt.date.today().isoformat()}{part}.json"
    rows, rng = [], np.random.default_rng(0)
    for label, make in matrices:
        if time.time() - t_start > args.budget_s:
            log(f"budget reached: skipping {label} and the rest")
            break
        A = make()
        if A is None:
            continue
        A = sp.csr_array(A, dtype=np.float32)
        log(f"{label}: {A.shape} nnz {A.nnz}")
        orders = [("none", A)]
        if A.nnz <= args.tca_max_nnz:
            t0 = time.time()
            perm, before, after, applied = reorder_checked(A, "tca", seed=0, width=16)  # the flow's rule
            orders.append(("tca", A[perm]))
            log(f"  tca in {time.time() - t0:.1f}s: 16x16 blocks {before['n_tc_blocks']} -> {after['n_tc_blocks']}"
                f"{'' if applied else ' (not applied: it did not lower them)'}")
        base = {}
        for order, Ao in orders:
            for N in args.ns:
                B32 = rng.standard_normal((A.shape[1], N)).astype(np.float32)
                sample = np.sort(rng.choice(A.shape[0], min(2048, A.shape[0]), replace=False))
                row = {"matrix": label, "order": order, "shape": A.shape, "nnz": int(A.nnz), "N": N,
                       # float16 holds |x| <= 65504: the flow refuses such a matrix (kernels.precision.check_range);
                       # timed here all the same, its FP16 rows are left out of the targets
                       "float16_range": check_range(A.data, precision("float16"), label, allow_overflow=True)}
                for dtype in DTYPES:
                    prec = precision(dtype)
                    r = plan_times(Ao, dtype, B32, args.repeats)
                    r["rel_err"] = rel_err_rows(Ao, B32, r["out"], sample, prec)
                    r["floor_ms"] = floor_ms(r["plan"], Ao, N, prec, copy_gbs)
                    row[dtype] = {k: v for k, v in r.items() if k not in ("plan", "out", "B")}
                    del r
                    cupy.get_default_memory_pool().free_all_blocks()
                for dtype in ("float32", "float16"):
                    key = f"cusparse_{dtype}"
                    row[key] = cusparse_ms(Ao, dtype, B32, args.repeats)
                    if order == "none":
                        base[(dtype, N)] = row[key]["ms"]
                    row[f"{key}_original_ms"] = base[(dtype, N)]
                row["blocked_ell_float16"] = bell_ms(Ao, B32, args.repeats)
                row["torch_float16"] = torch_half_ms(Ao, B32, args.repeats)
                rows.append(row)
                log(f"  {order} N={N}: fp16 {row['float16']['selected']} {row['float16']['replay_ms']:.4f} ms, "
                    f"tf32 {row['float32']['replay_ms']:.4f} ms, cuSPARSE fp16 {row['cusparse_float16']['ms']:.4f}"
                    f" (orig {base[('float16', N)]:.4f}), err fp16 {row['float16']['rel_err']:.2e}")
            cupy.get_default_memory_pool().free_all_blocks()
        path.write_text(json.dumps({"meta": {**meta, "wall_s": time.time() - t_start}, "rows": rows}, indent=1,
                                   default=float))
    print_table(rows, path)
    return 0


def print_table(rows, path):
    print(f"\nresults: {path}\n")
    head = (f"{'matrix':<22}{'order':<6}{'N':>5}{'tf32 ms':>9}{'fp16 ms':>9}{'fp16 kern':>11}{'x tf32':>7}"
            f"{'x cuSP16 orig':>14}{'x cuSP16 same':>14}{'BELL16':>9}{'torch16':>9}{'issued':>9}{'cuSP iss':>9}"
            f"{'floor%':>7}"
            f"{'err16':>9}{'err bf16':>9}")
    print(head)
    for r in rows:
        f16, f32 = r["float16"], r["float32"]
        bell = r["blocked_ell_float16"]
        print(f"{r['matrix'][:21]:<22}{r['order']:<6}{r['N']:>5}{f32['replay_ms']:>9.4f}{f16['replay_ms']:>9.4f}"
              f"{f16['selected'].replace('metcf-', ''):>11}{f32['replay_ms'] / f16['replay_ms']:>7.2f}"
              f"{r['cusparse_float16_original_ms'] / f16['replay_ms']:>14.2f}"
              f"{r['cusparse_float16']['ms'] / f16['replay_ms']:>14.2f}"
              f"{(bell['ms'] if bell.get('applies') else float('nan')):>9.4f}"
              f"{r['torch_float16'].get('ms', float('nan')):>9.4f}{f16['issued_ms']:>9.4f}"
              f"{r['cusparse_float16'].get('issued_ms', float('nan')):>9.4f}"
              f"{100 * f16['floor_ms'] / f16['replay_ms']:>7.0f}{f16['rel_err']:>9.1e}{r['bfloat16']['rel_err']:>9.1e}")
    tca = [r for r in rows if r["order"] == "tca" and not r["float16_range"]["overflow"]] or rows
    big = [r for r in tca if r["nnz"] >= 10_000_000]
    orig = [r["cusparse_float16_original_ms"] / r["float16"]["replay_ms"] for r in tca]
    print(f"\nFP16 selected path vs the best cuSPARSE FP16 CSR on the matrix as given ({len(tca)} cases after TCA): "
          f"geomean {geomean(orig):.2f}x, min {min(orig, default=float('nan')):.2f}x")
    if big:
        print(f"FP16 over our TF32 path on 10M+ nnz after TCA: geomean "
              f"{geomean([r['float32']['replay_ms'] / r['float16']['replay_ms'] for r in big]):.2f}x "
              f"({len(big)} cases)")


if __name__ == "__main__":
    sys.exit(main())
