"""CVSE (VectorSparse / SSpMM) benchmark on one GPU, issue 13: our CVSE SpMM in FP16 at V = 4 and 8 against
cuSPARSE half CSR (best of its algorithms), cuSPARSE Blocked-ELL (16 x 16, FP16) and dense cuBLAS FP16 GEMM
(torch.matmul; cupy.matmul when torch is absent), printing per V the sparsity where CVSE crosses dense; our CVSE
SDDMM in FP16 and TF32 against cuSPARSE SDDMM (float32, CSR) on the same S, A, B.

    PYTHONPATH=. python3 benchmarks/cvse.py [--ns 256 1024] [--sizes 4096] [--kd 64 256] [--repeats 20] [--quick]
        [--budget-s 480] [--out-dir DIR]

Matrices: the DNN-style set of tasks/fetch/generators.py's ``gen:dlmc`` (weights magnitude-pruned at V x 1, the
DLMC collection's style; DLMC itself is not reachable here), M = K in --sizes, sparsity 0.5 .. 0.98, V = 4 and 8.
This script calls kernels.launch_cvse directly and checks every result, dense included, against float64 on sampled
rows in the same run (a result over its precision's tolerance fails the run, exit 1). SpMM "cvse" is the fastest of
the per-vector kernel and the tiled kernel's two best a priori launch shapes (each timed and checked, under its own
key too): what SpmmPlan(format="cvse") runs, as its autotune picks the fastest measured of the same candidates.

Timing, per column (the table's header and the JSON's meta "timing" say the same):
- cvse, cusparse-csr, cusparse-bell, cusparse-sddmm, cvse-fp16/-tf32: CUDA-graph replay (kernels.launch.graph_ms),
  the device time of one call without host launch cost.
- dense: AS ISSUED, CUDA events around a Python loop of back-to-back calls on the library's current stream (median
  of --repeats loops / calls), not graph replay: torch.matmul runs on torch's stream, outside a CuPy capture (the
  first H200 run timed 0.1 us), and cupy.matmul cannot be captured at all (cuBLAS refuses stream capture). The
  host's issue time per call is recorded too; where it reaches the event time the loop was host-bound and the dense
  ms is an upper bound of the GEMM's device time (marked * in the table). cvse is also timed as issued
  (launch_cvse.spmm, Python checks included) for an issued-vs-issued crossing next to the graph-vs-issued one.
JSON under --out-dir (device, versions, command, date); the table last.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernels import launch, launch_cvse  # noqa: E402
from kernels.formats.cvse import csr_to_cvse  # noqa: E402
from kernels.precision import precision  # noqa: E402
from tasks.fetch.generators import generate  # noqa: E402

SPARSITIES = (0.5, 0.7, 0.8, 0.9, 0.95, 0.98)
SAMPLE_ROWS = 512


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def dense_gemm():
    """(name, fn(A16, B16) -> C) for cuBLAS FP16 GEMM through cupy.matmul into a C kept per shape, on CuPy's current
    stream. Not capturable in a CUDA graph (cuBLAS refuses stream capture): time it as issued (`DenseGemm`).
    benchmarks/formats.py imports this for its torch-less path."""
    import cupy

    outs = {}

    def run(A, B):
        C = outs.get((A.shape[0], B.shape[1]))
        if C is None:
            C = outs[(A.shape[0], B.shape[1])] = cupy.empty((A.shape[0], B.shape[1]), dtype=A.dtype)
        return cupy.matmul(A, B, out=C)
    return f"cupy.matmul (cuBLAS, CuPy {cupy.__version__})", run


class DenseGemm:
    """Dense cuBLAS FP16 GEMM C = A @ B (FP16 C) by torch.matmul, or cupy.matmul where torch (with CUDA) is absent,
    timed as issued: CUDA events of the same library around a loop of back-to-back calls (module docstring: why not
    graph replay)."""

    method = "as issued: CUDA events around a loop of back-to-back calls, median of --repeats loops / calls"

    def __init__(self):
        try:
            import torch

            self.torch = torch if torch.cuda.is_available() else None
        except ImportError:
            self.torch = None
        if self.torch is None:
            self.name, self.gemm = dense_gemm()
        else:
            self.name = f"torch.matmul (cuBLAS, torch {self.torch.__version__})"

    def time(self, A16, B16, repeats: int, target_ms: float = 0.5) -> tuple[float, float, object]:
        """(device ms per call as issued, host ms per call to issue, C as a cupy float16 array) for the host float16
        A16 and the cupy float16 B16."""
        import cupy

        cupy.cuda.Device().synchronize()  # synchronize! B16 was written on CuPy's stream; torch's may differ
        if self.torch is None:
            A = cupy.asarray(A16)
            fn = lambda: self.gemm(A, B16)  # noqa: E731
            event, elapsed, wrap = cupy.cuda.Event, cupy.cuda.get_elapsed_time, lambda C: C
        else:
            torch = self.torch
            A, B = torch.as_tensor(A16, device="cuda"), torch.as_tensor(B16, device="cuda")
            C = torch.empty((A.shape[0], B.shape[1]), dtype=torch.float16, device="cuda")
            fn = lambda: torch.matmul(A, B, out=C)  # noqa: E731
            event = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
            elapsed, wrap = (lambda e0, e1: e0.elapsed_time(e1)), cupy.asarray  # torch -> cupy, no copy

        def loop(calls: int) -> tuple[float, float]:
            e0, e1 = event(), event()
            e0.record()  # on the library's current stream
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            host_ms = (time.perf_counter() - t0) * 1e3 / calls
            e1.record()
            e1.synchronize()  # synchronize!
            return elapsed(e0, e1) / calls, host_ms

        for _ in range(3):  # warm up: cuBLAS handle, workspace, heuristics
            fn()
        one = min(loop(1)[0] for _ in range(3))
        calls = int(min(200, max(3, round(target_ms / max(one, 1e-3)))))
        ms, host = zip(*(loop(calls) for _ in range(repeats)))
        C = wrap(fn())
        if self.torch is not None:
            self.torch.cuda.synchronize()  # synchronize! C is read on CuPy's stream next
        return float(np.median(ms)), float(np.median(host)), C


def rel_err_rows(C, A, B, rows) -> float:
    ref = A[rows].astype(np.float64) @ B.astype(np.float64)
    return float(np.linalg.norm(np.asarray(C, dtype=np.float64)[rows] - ref) / max(np.linalg.norm(ref), 1e-30))


def spmm_case(A, V: int, N: int, repeats: int, rng, gemm) -> dict:
    import cupy

    from kernels.cusparse import CusparseSpmm
    from kernels.cusparse_bell import CusparseBlockedEll

    p = precision("float16")
    B32 = rng.standard_normal((A.shape[1], N)).astype(np.float32)
    Br = p.rounded(B32)
    rows = np.sort(rng.choice(A.shape[0], min(SAMPLE_ROWS, A.shape[0]), replace=False))
    Ar = sp.csr_array((p.rounded(A.data), A.indices, A.indptr), shape=A.shape)
    B16 = cupy.asarray(B32.astype(np.float16))
    ms, issued, err, extra = {}, {}, {}, {}
    X = csr_to_cvse(A, vector=V, to_storage=p.to_storage)
    dm = launch_cvse.upload(X, "float16")
    out = cupy.empty((A.shape[0], N), dtype=cupy.float16)
    kernels = {"cvse-vector": lambda: launch_cvse.spmm(dm, B16, out)}
    if launch_cvse.tiles_worthwhile(X) and N % 8 == 0:  # the tiled kernel's two best a priori launch shapes
        tl = launch_cvse.upload_tiles(X, "float16")
        smem, _, sms = launch_cvse.device_limits()
        for c in launch_cvse.tiled_configs(tl, A.shape[1], N, sms, smem)[:2]:
            kernels[f"cvse-tiled-{c['warps']}w{c['halves']}h"] = (
                lambda c=c: launch_cvse.spmm_tiled(dm, tl, B16, out, warps=c["warps"], halves=c["halves"]))
    for key, fn in kernels.items():
        out.fill(np.nan)
        ms[key] = launch.graph_ms(fn, repeats=repeats)
        issued[key] = launch.issued_ms(fn, repeats=repeats)
        err[key] = rel_err_rows(cupy.asnumpy(out).astype(np.float32), Ar, Br, rows)
    # "cvse" = what SpmmPlan(format="cvse") runs: its autotune picks the fastest measured of these kernels
    best = min(kernels, key=ms.get)
    ms["cvse"], issued["cvse"], err["cvse"], extra["cvse_kernel"] = ms[best], issued[best], err[best], best
    kernels.clear()  # frees the CVSE arrays before the baselines allocate
    csr = CusparseSpmm(A, dtype="float16")
    C16 = cupy.empty((A.shape[0], N), dtype=cupy.float16)
    t = csr.tune(B16, C16, repeats=repeats)
    ms["cusparse-csr"], extra["cusparse-csr-alg"] = t["ms"][t["best"]], t["best"]
    csr.run(B16, C16)
    err["cusparse-csr"] = rel_err_rows(cupy.asnumpy(C16).astype(np.float32), Ar, Br, rows)
    csr.close()
    try:
        bell = CusparseBlockedEll(A, block=16, dtype="float16")
        Bp, Cp = bell.padded_b(B16), bell.padded_c(N)
        ms["cusparse-bell"] = launch.graph_ms(lambda: bell.run(Bp, Cp), repeats=repeats)
        err["cusparse-bell"] = rel_err_rows(cupy.asnumpy(Cp[:A.shape[0]]).astype(np.float32), Ar, Br, rows)
        bell.close()
    except ValueError as e:  # padding every block row to the longest does not fit
        extra["cusparse-bell"] = str(e)
    ms["dense"], host_ms, Cd = gemm.time(A.toarray().astype(np.float16), B16, repeats)
    err["dense"] = rel_err_rows(cupy.asnumpy(Cd).astype(np.float32), Ar, Br, rows)
    issued["dense"], extra["dense_host_ms"] = ms["dense"], host_ms
    extra["dense_host_bound"] = host_ms >= 0.9 * ms["dense"]  # the loop waited on the host: ms is an upper bound
    del Cd
    return {"ms": ms, "issued_ms": issued, "rel_err": err, **extra}


def sddmm_case(S, Kd: int, repeats: int, rng) -> dict:
    import cupy

    from kernels.cusparse_sddmm import CusparseSddmm
    from kernels.sddmm import csr_sddmm

    A32 = rng.standard_normal((S.shape[0], Kd)).astype(np.float32)
    B32 = rng.standard_normal((S.shape[1], Kd)).astype(np.float32)
    sample = rng.choice(S.nnz, min(1 << 16, S.nnz), replace=False)
    ms, err = {}, {}
    op = CusparseSddmm(S.indptr, S.indices, S.shape)
    Ad, Bd = cupy.asarray(A32), cupy.asarray(B32)
    out = cupy.empty(S.nnz, dtype=cupy.float32)
    ms["cusparse-sddmm"] = launch.graph_ms(lambda: op.run(Ad, Bd, out), repeats=repeats)
    ones = sp.csr_array((np.ones(S.nnz), S.indices, S.indptr), shape=S.shape)
    ref = csr_sddmm(ones, A32, B32)
    err["cusparse-sddmm"] = float(np.linalg.norm(cupy.asnumpy(out)[sample] - ref[sample]) / np.linalg.norm(ref[sample]))
    op.close()
    for name in ("float16", "float32"):
        p = precision(name)
        X = csr_to_cvse(ones, vector=8, to_storage=p.to_storage)
        dm = launch_cvse.upload(X, name)
        Ap, Bp = cupy.asarray(p.to_storage(A32)), cupy.asarray(p.to_storage(B32))
        o = cupy.empty((X.n_vectors, 8), dtype=cupy.float32)
        key = f"cvse-{'fp16' if name == 'float16' else 'tf32'}"
        ms[key] = launch.graph_ms(lambda: launch_cvse.sddmm(dm, Ap, Bp, o), repeats=repeats)
        from kernels.sddmm import _gather_positions

        got = cupy.asnumpy(o).reshape(-1)[_gather_positions(X, ones)]
        err[key] = float(np.linalg.norm(got[sample] - ref[sample]) / np.linalg.norm(ref[sample]))
    return {"ms": ms, "rel_err": err}


TIMING = {"cvse": "graph", "cusparse-csr": "graph", "cusparse-bell": "graph", "dense": "issued",
          "cusparse-sddmm": "graph", "cvse-fp16": "graph", "cvse-tf32": "graph"}  # module docstring: the methods
TARGET = {"V": 8, "sparsity": 0.8}  # issue 13: CVSE faster than dense cuBLAS FP16 from 80 % sparsity at V = 8


def _cvse_ms(r, how):
    return r["ms"]["cvse"] if how == "graph" else r.get("issued_ms", {}).get("cvse")


def crossings(rows, how: str = "graph") -> dict:
    """(V, M, N) -> the lowest sparsity from which CVSE (timed by ``how``: 'graph' or 'issued') stays faster than
    dense (as issued); None if never. Per V over every (M, N): the lowest sparsity from which CVSE is faster at all
    of them, under "V=v all"."""
    out, per_v = {}, {}
    sp_rows = [r for r in rows if r["kind"] == "spmm" and "dense" in r["ms"] and _cvse_ms(r, how) is not None]
    for key in sorted({(r["V"], r["shape"][0], r["N"]) for r in sp_rows}):
        pts = sorted((r["sparsity"], _cvse_ms(r, how) < r["ms"]["dense"]) for r in sp_rows
                     if (r["V"], r["shape"][0], r["N"]) == key)
        cross = None
        for s, faster in reversed(pts):
            if not faster:
                break
            cross = s
        out[f"V={key[0]} M=K={key[1]} N={key[2]}"] = cross
        per_v.setdefault(key[0], []).append(cross)
    for V, crosses in sorted(per_v.items()):
        out[f"V={V} all"] = None if None in crosses else max(crosses)
    return out


def geomean(x):
    x = [v for v in x if v and np.isfinite(v)]
    return float(np.exp(np.mean(np.log(x)))) if x else float("nan")


def print_table(rows, path):
    print(f"\nresults: {path}")
    cols = ("cvse/tf32", "cusparse-csr", "cusparse-bell", "dense", "cusparse-sddmm", "cvse-fp16")
    how = {c: TIMING["cvse" if c == "cvse/tf32" else c] for c in cols}
    print("timing: [graph] = CUDA-graph replay (device time); [issued] = CUDA events around a loop of calls as "
          "issued; * = the dense loop was host-bound (its ms is an upper bound)")
    print(f"{'kind':6} {'V':>2} {'M=K':>6} {'sparsity':>8} {'N/Kd':>5} "
          + " ".join(f"{c + '[' + how[c] + ']':>22}" for c in cols))
    for r in rows:
        ms = r["ms"]
        vals = [ms.get("cvse", ms.get("cvse-tf32")), ms.get("cusparse-csr"), ms.get("cusparse-bell"),
                ms.get("dense"), ms.get("cusparse-sddmm"), ms.get("cvse-fp16")]
        marks = ["", "", "", "*" if r.get("dense_host_bound") else "", "", ""]
        print(f"{r['kind']:6} {r['V']:>2} {r['shape'][0]:>6} {r['sparsity']:>8} {r.get('N', r.get('Kd')):>5} "
              + " ".join(f"{f'{v:.4f}' + m:>22}" if v is not None else f"{'-':>22}" for v, m in zip(vals, marks)))
    sp_rows = [r for r in rows if r["kind"] == "spmm"]
    for base in ("cusparse-csr", "cusparse-bell", "dense"):
        print(f"SpMM FP16 geomean speedup of cvse [graph] over {base} [{TIMING[base]}]: "
              f"{geomean([r['ms'][base] / r['ms']['cvse'] for r in sp_rows if base in r['ms']]):.2f}x")
    sd_rows = [r for r in rows if r["kind"] == "sddmm"]
    for k in ("cvse-fp16", "cvse-tf32"):
        print(f"SDDMM geomean speedup of {k} over cusparse-sddmm [graph]: "
              f"{geomean([r['ms']['cusparse-sddmm'] / r['ms'][k] for r in sd_rows]):.2f}x")
    for how_cvse in ("graph", "issued"):
        print(f"crossing dense cuBLAS FP16 [issued] with cvse [{how_cvse}]:")
        for key, s in crossings(rows, how_cvse).items():
            print(f"  {key}: " + (f"faster from sparsity {s}" if s is not None
                                  else "never (not faster even at the highest sparsity)"))
    s = crossings(rows).get(f"V={TARGET['V']} all")
    if any(r["V"] == TARGET["V"] for r in sp_rows):
        ok = s is not None and s <= TARGET["sparsity"]
        print(f"issue 13 target (V = {TARGET['V']} faster than dense from sparsity {TARGET['sparsity']} at every "
              f"size and N, cvse [graph] vs dense [issued]): {'met' if ok else 'missed'} (crosses at {s})")


def main(argv=None) -> int:
    import cupy

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int, nargs="+", default=[256, 512, 1024])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096])
    ap.add_argument("--kd", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--quick", action="store_true", help="M = K = 2048, sparsities 0.8 and 0.95, N = 256")
    ap.add_argument("--budget-s", type=float, default=480.0, help="stop starting new cases after this")
    args = ap.parse_args(argv)
    sizes, sparsities, ns = (([2048], (0.8, 0.95), [256]) if args.quick else (args.sizes, SPARSITIES, args.ns))
    t_start = time.time()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    props = cupy.cuda.runtime.getDeviceProperties(0)
    device = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    gemm = DenseGemm()
    meta = {"device": device, "sm_count": props["multiProcessorCount"],
            "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(), "driver": cupy.cuda.runtime.driverGetVersion(),
            "cupy": cupy.__version__, "numpy": np.__version__, "scipy": scipy.__version__, "dense": gemm.name,
            "command": " ".join(sys.argv), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "timing": {"graph": "kernels.launch.graph_ms (CUDA graph replay, median), repeats per --repeats",
                       "issued": DenseGemm.method + " (dense); kernels.launch.issued_ms (issued_ms.cvse)",
                       "columns": TIMING},
            "matrices": "gen:dlmc (DLMC-style, generated: the DLMC collection is not reachable here)",
            "cvse_config": launch_cvse.CVSE_CONFIG.__dict__}
    slug = "".join(c if c.isalnum() else "-" for c in device.lower()).strip("-")
    path = args.out_dir / f"cvse-{slug}-{dt.datetime.now():%Y-%m-%d-%H%M}.json"
    rows, failures = [], []
    tol = {"cvse-tf32": precision("float32").tolerance}

    def record(row):
        rows.append(row)
        for k, e in row["rel_err"].items():
            limit = tol.get(k, precision("float16").tolerance)
            if not np.isfinite(e) or e > limit:
                failures.append(f"{row['kind']} V={row['V']} {row['shape']} s={row['sparsity']}: {k} rel err "
                                f"{e:.3g} > {limit}")
        path.write_text(json.dumps({"meta": {**meta, "wall_s": time.time() - t_start}, "rows": rows,
                                    "crossings": crossings(rows), "crossings_issued": crossings(rows, "issued"),
                                    "failures": failures}, indent=1, default=float))

    for M in sizes:
        for V in (4, 8):
            for s in sparsities:
                if time.time() - t_start > args.budget_s:
                    log(f"budget reached: skipping M={M} V={V} s={s} and the rest")
                    break
                A = generate("dlmc", f"rows={M}&cols={M}&sparsity={s}&vector={V}&seed=1")
                for N in ns:
                    res = spmm_case(A, V, N, args.repeats, np.random.default_rng(N), gemm)
                    record({"kind": "spmm", "V": V, "shape": [M, M], "sparsity": s, "nnz": int(A.nnz), "N": N, **res})
                    log(f"spmm V={V} M={M} s={s} N={N}: " + " ".join(f"{k}={v:.4f}" for k, v in res["ms"].items()))
                if V == 8:
                    for Kd in args.kd:
                        res = sddmm_case(A, Kd, args.repeats, np.random.default_rng(Kd))
                        record({"kind": "sddmm", "V": V, "shape": [M, M], "sparsity": s, "nnz": int(A.nnz),
                                "Kd": Kd, **res})
                        log(f"sddmm M={M} s={s} Kd={Kd}: " + " ".join(f"{k}={v:.4f}" for k, v in res["ms"].items()))
    print_table(rows, path)
    if failures:
        print("CORRECTNESS FAILURES:\n" + "\n".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
