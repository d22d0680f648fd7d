"""cuSPARSE bindings (issue 16): a ctypes cusparseSpMM call against nvmath-python's bindings, per call.

    PYTHONPATH=.:/tmp/nvm python3 benchmarks/bindings.py [--ns 128] [--matrices ...] [--label a]

After this measurement (benchmarks/results/bindings-nvidia-h200-2026-11-25.json: nvmath 2.2 us less host time per
call) the library code (kernels/cusparse*.py) calls cuSPARSE through ``nvmath.bindings.cusparse``; this script keeps
the ctypes path, with its own declarations of cusparseSetStream and cusparseSpMM (``CtypesSpmm``, the same
statements kernels/cusparse.py's CusparseBound ran before), only as the measured alternative, so that a rerun stays
comparable with that file.

For each matrix (SuiteSparse fixtures from .fixtures, 67 rows to 370k nnz, and a generated ~2M-nnz R-MAT in
shuffled order) and N, float32, B and C made once, every path runs cuSPARSE's fastest CSR algorithm for this N
(CusparseSpmm.tune: graph-replay medians of CSR_ALG1/2/3) on the same device arrays:
- ``ctypes_bound``: ``CtypesSpmm(bound)`` called as ``ct(stream)``: cusparseSetStream + cusparseSpMM through
  ctypes on the arguments of ``bound = CusparseSpmm.bind(B, out)`` (CuPy's handle, its descriptors and buffer): the
  per-call path SpmmPlan and the benchmarks' "cuSPARSE as issued" had before issue 16;
- ``ctypes_spmm``: the ctypes cusparseSpMM alone (stream set once): the floor of the ctypes path;
- ``nvmath_bound``: ``nvmath.bindings.cusparse`` with its own handle, CSR and dense descriptors, buffer (and
  CSR_ALG3's preprocessing) made once; per call ``set_stream`` + ``sp_mm``: the cheapest call nvmath allows;
- ``nvmath_spmm``: ``sp_mm`` alone (stream set once);
- ``nvmath_matmul``: nvmath's stateful API, ``nvmath.sparse.Matmul(A, B, C, beta=0)``, ``plan()`` once (the same
  algorithm, through NVMATH_CUSPARSE_ALGORITHM), ``execute()`` per call;
- ``cupyx``: ``cupyx.scipy.sparse`` ``A @ B`` (what a CuPy user writes: allocates C, its own algorithm).
Per path: ``issued_us``: CUDA events around a Python loop of back-to-back calls, divided by the calls, median of 5
loops (the method of kernels.launch.issued_ms); ``host_us``: perf_counter around a loop of 100 calls without
waiting, divided by 100, median of 5 (what a call costs the host while the launch queue has room: the binding's
overhead where the GPU is faster than the host); ``graph_us`` (the four cusparseSpMM paths):
kernels.launch.graph_ms, the device time of one call by replays of a captured graph. Each path's C is checked
against float64 SciPy on 2048 sampled rows (relative Frobenius error <= 1e-5). Import time of nvmath, the
libcusparse files mapped in the process (one expected: nvmath finds the one CuPy loaded) and versions are in the
JSON's meta. Without an importable nvmath-python this says so and exits 2. JSON under benchmarks/results/,
table last.
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata as md
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from machine import gpu_meta  # noqa: E402  (benchmarks/ is the script folder)
from spmm import fixture  # noqa: E402  (one fixture reader)

FIXTURES = ["HB/west0067", "HB/bcsstk13", "SNAP/email-Enron"]
GENERATED = {"rmat-s17": ("rmat", "scale=17&edge_factor=16&seed=1&shuffle=1")}  # ~2M nnz
PATHS = ("ctypes_bound", "ctypes_spmm", "nvmath_bound", "nvmath_spmm", "nvmath_matmul", "cupyx")
TOL = 1e-5  # float32 products against float64, relative to the norm
CUDA_R_32F = 0
DISTS = ("nvmath-python", "cuda-bindings", "cuda-core", "cuda-pathfinder", "cupy-cuda13x", "cupy-cuda12x")


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def mapped_libcusparse() -> list[str]:
    """The libcusparse files mapped in this process (real paths)."""
    with open("/proc/self/maps") as maps:
        return sorted({os.path.realpath(line.split()[-1]) for line in maps if "libcusparse.so" in line})


def versions() -> dict:
    out = {"python": sys.version.split()[0], "numpy": np.__version__}
    for name in DISTS:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out


def import_nvmath():
    """nvmath.bindings.cusparse and nvmath.sparse, imported after CuPy loaded its libcusparse (so that nvmath's
    cuda-pathfinder finds that one); (bindings, sparse, seconds); exits 2 with the reason when it cannot."""
    t0 = time.perf_counter()
    try:
        import nvmath.bindings.cusparse as ncs
        import nvmath.sparse as nsp
    except Exception as err:  # ImportError, or a library/version error raised while nvmath initialises
        found = {k: v for k, v in versions().items() if k.startswith(("cuda", "nvmath"))}
        print(f"error: benchmarks/bindings.py: nvmath-python is not importable here ({type(err).__name__}: {err}). "
              f"Installed: {found or 'none of nvmath-python, cuda-bindings, cuda-core, cuda-pathfinder'}. It needs "
              "cuda-bindings, cuda-core >= 0.5 and cuda-pathfinder >= 1.5.1 (the GPU image's, or from the "
              "wheelhouse); install: python3 -m pip install --no-deps --target /tmp/nvm .whl/nvmath_python-*.whl "
              "and run with PYTHONPATH=.:/tmp/nvm", file=sys.stderr)
        raise SystemExit(2) from None
    return ncs, nsp, time.perf_counter() - t0


def libcusparse_ctypes():
    """The libcusparse this process loaded for CuPy (from /proc/self/maps) through ctypes, with cusparseSetStream and
    cusparseSpMM declared as kernels/cusparse.py declared them before issue 16."""
    import ctypes

    paths = mapped_libcusparse()
    if not paths:
        raise RuntimeError("libcusparse is not loaded in this process; create a cuSPARSE handle through CuPy first")
    lib = ctypes.CDLL(paths[0])
    vp, i = ctypes.c_void_p, ctypes.c_int
    lib.cusparseSpMM.argtypes = [vp, i, i, vp, vp, vp, vp, vp, i, i, vp]
    lib.cusparseSpMM.restype = i
    lib.cusparseSetStream.argtypes = [vp, vp]
    lib.cusparseSetStream.restype = i
    return lib


class CtypesSpmm:
    """The ctypes per-call path, as kernels/cusparse.py's CusparseBound.__call__ ran it before issue 16: the same
    statements (cusparseSetStream, then cusparseSpMM, their statuses checked as one), on the argument tuple of a
    bound call of the library (``CusparseBound._args``: handle, ops, scalars, descriptors, algorithm, buffer)."""

    def __init__(self, bound):
        lib = libcusparse_ctypes()
        self.algorithm, self.out, self._empty = bound.algorithm, bound.out, bound._args is None
        self._spmm, self._set_stream = lib.cusparseSpMM, lib.cusparseSetStream
        self._args, self._handle = bound._args, bound._handle

    def __call__(self, stream_ptr: int):
        if self._empty:
            return self.out
        status = self._set_stream(self._handle, stream_ptr) or self._spmm(*self._args)
        if status:
            raise RuntimeError(f"cusparseSpMM({self.algorithm}) or cusparseSetStream returned cusparseStatus_t "
                               f"{status}")
        return self.out

    def spmm_only(self) -> int:
        """cusparseSpMM alone, its status returned unchecked (the floor of the ctypes path)."""
        return self._spmm(*self._args)

    def set_stream(self, stream_ptr: int) -> int:
        return self._set_stream(self._handle, stream_ptr)


class NvmathSpmm:
    """cusparseSpMM(A, B, C) through nvmath.bindings.cusparse with everything made once: handle, CSR and dense
    descriptors on the given device arrays, the algorithm's buffer and (CSR_ALG3) its preprocessing."""

    def __init__(self, ncs, op, B, C, alg: int):
        import cupy

        self.ncs, m, k, N = ncs, op.shape[0], op.shape[1], int(B.shape[1])
        itype = int(ncs.IndexType.INDEX_32I if op.indptr.dtype == np.int32 else ncs.IndexType.INDEX_64I)
        self.handle = ncs.create()
        self.descr_a = ncs.create_csr(m, k, op.nnz, op.indptr.data.ptr, op.indices.data.ptr, op.data.data.ptr,
                                      itype, itype, int(ncs.IndexBase.ZERO), CUDA_R_32F)
        row = int(ncs.Order.ROW)
        self.descr_b = ncs.create_dn_mat(k, N, N, B.data.ptr, CUDA_R_32F, row)
        self.descr_c = ncs.create_dn_mat(m, N, N, C.data.ptr, CUDA_R_32F, row)
        self.alpha, self.beta = np.ones(1, np.float32), np.zeros(1, np.float32)
        nt = int(ncs.Operation.NON_TRANSPOSE)
        args = (self.handle, nt, nt, self.alpha.ctypes.data, self.descr_a, self.descr_b, self.beta.ctypes.data,
                self.descr_c, CUDA_R_32F, alg)
        ncs.set_stream(self.handle, cupy.cuda.get_current_stream().ptr)
        self.buffer = cupy.empty(max(int(ncs.sp_mm_buffer_size(*args)), 1), dtype=cupy.uint8)
        if alg == int(ncs.SpMMAlg.CSR_ALG3):
            ncs.sp_mm_preprocess(*args, self.buffer.data.ptr)
        self.args = (*args, self.buffer.data.ptr)
        self._sp_mm, self._set_stream = ncs.sp_mm, ncs.set_stream
        self.cusparse_version = int(ncs.get_version(self.handle))

    def __call__(self, stream_ptr: int) -> None:
        self._set_stream(self.handle, stream_ptr)
        self._sp_mm(*self.args)

    def spmm_only(self) -> None:
        self._sp_mm(*self.args)

    def close(self) -> None:
        ncs = self.ncs
        ncs.destroy_dn_mat(self.descr_b)
        ncs.destroy_dn_mat(self.descr_c)
        ncs.destroy_sp_mat(self.descr_a)
        ncs.destroy(self.handle)


def issued_us(fn, calls: int | None = None, repeats: int = 5) -> float:
    """Microseconds per call as issued (kernels.launch.issued_ms's method, in us)."""
    from kernels.launch import issued_ms

    return 1e3 * issued_ms(fn, calls=calls, repeats=repeats)


def host_us(fn, calls: int = 100, repeats: int = 5) -> float:
    """Host microseconds per call: perf_counter around `calls` back-to-back calls, not waiting for the GPU (a
    synchronize between loops, outside the clock); median of `repeats`."""
    import cupy

    for _ in range(5):
        fn()
    times = []
    for _ in range(repeats):
        cupy.cuda.get_current_stream().synchronize()  # synchronize! (outside the clock: an empty queue)
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) * 1e6 / calls)
    cupy.cuda.get_current_stream().synchronize()  # synchronize!
    return float(np.median(times))


def measure(label: str, A, N: int, rng, ncs, nsp, rounds: int) -> dict:
    import cupy
    import cupyx.scipy.sparse as csp

    from kernels.cusparse import ALGORITHMS, CusparseSpmm
    from kernels.launch import graph_ms

    A = sp.csr_array(A, dtype=np.float32)
    rows = np.sort(rng.choice(A.shape[0], min(2048, A.shape[0]), replace=False))
    Bh = rng.standard_normal((A.shape[1], N)).astype(np.float32)
    ref = A[rows].astype(np.float64) @ Bh.astype(np.float64)
    B = cupy.asarray(Bh)
    outs = {p: cupy.zeros((A.shape[0], N), dtype=cupy.float32) for p in ("ctypes", "nvmath", "matmul")}
    op = CusparseSpmm(A)
    tuned = op.tune(B, outs["ctypes"])
    alg_name = tuned["best"]
    alg = ALGORITHMS[alg_name]
    bound = op.bind(B, outs["ctypes"], alg_name)  # the library's bound call (nvmath): its arguments, for ctypes
    ct = CtypesSpmm(bound)
    nv = NvmathSpmm(ncs, op, B, outs["nvmath"], alg)
    stream = cupy.cuda.get_current_stream()
    sptr = stream.ptr
    ct(sptr)
    nv(sptr)
    status = ct.spmm_only()  # ctypes_spmm below times this call, which returns its status unchecked
    if status:
        raise RuntimeError(f"{label} N={N}: cusparseSpMM through ctypes returned cusparseStatus_t {status}")
    Ad = csp.csr_matrix((op.data, op.indices, op.indptr), shape=A.shape)
    fns = {"ctypes_bound": lambda: ct(sptr), "ctypes_spmm": ct.spmm_only,  # cusparseSpMM without SetStream
           "nvmath_bound": lambda: nv(sptr), "nvmath_spmm": nv.spmm_only, "cupyx": lambda: Ad @ B}
    errors = {}
    mm = None
    try:  # nvmath's stateful API with the same algorithm (its plan reads the algorithm from this variable)
        os.environ["NVMATH_CUSPARSE_ALGORITHM"] = str(alg)
        mm = nsp.Matmul(Ad, B, outs["matmul"], alpha=1.0, beta=0.0)
        mm.plan()
        fns["nvmath_matmul"] = mm.execute
    except Exception as err:  # recorded, not fatal: the binding comparison does not need it
        errors["nvmath_matmul"] = f"{type(err).__name__}: {err}"
        log(f"  {label} N={N}: nvmath.sparse.Matmul failed: {errors['nvmath_matmul']}")
    finally:
        os.environ.pop("NVMATH_CUSPARSE_ALGORITHM", None)
    row = {"matrix": label, "shape": list(A.shape), "nnz": int(A.nnz), "N": N, "algorithm": alg_name,
           "tune_ms": tuned["ms"], "errors": errors, "cusparse_version": nv.cusparse_version}
    samples = {p: {"issued_us": [], "host_us": []} for p in fns}
    for _ in range(rounds):  # rounds of every path in turn, so clock or load drift hits them alike
        for p, fn in fns.items():
            samples[p]["issued_us"].append(issued_us(fn))
            samples[p]["host_us"].append(host_us(fn))
    for p in fns:
        row[p] = {k: float(np.median(v)) for k, v in samples[p].items()}
    def current() -> int:
        return cupy.cuda.get_current_stream().ptr

    graphed = {  # as above, on graph_ms's capture stream (the *_spmm paths point their handle at it first)
        "ctypes_bound": lambda: ct(current()),
        "ctypes_spmm": lambda: (ct.set_stream(current()), ct.spmm_only()),
        "nvmath_bound": lambda: nv(current()),
        "nvmath_spmm": lambda: (ncs.set_stream(nv.handle, current()), nv.spmm_only())}
    for p, fn in graphed.items():
        try:
            row[p]["graph_us"] = 1e3 * graph_ms(fn, repeats=20, warmup=3)
        except Exception as err:  # recorded: a binding that cannot be captured is a finding, not a crash
            row[p]["graph_us"] = float("nan")
            errors[f"{p}_graph"] = f"{type(err).__name__}: {err}"
            log(f"  {label} N={N}: graph replay of {p} failed: {errors[f'{p}_graph']}")
    results = {"ctypes_bound": outs["ctypes"], "nvmath_bound": outs["nvmath"], "cupyx": Ad @ B}
    for p, fn in (("ctypes_bound", lambda: ct(stream.ptr)), ("nvmath_bound", lambda: nv(stream.ptr))):
        results[p].fill(np.nan)
        fn()
    if mm is not None:
        outs["matmul"].fill(np.nan)
        mm.execute()
        results["nvmath_matmul"] = outs["matmul"]
    nrm = max(float(np.linalg.norm(ref)), 1e-30)
    for p, C in results.items():
        got = cupy.asnumpy(C)[rows].astype(np.float64)
        row[p]["rel_err"] = float(np.linalg.norm(got - ref) / nrm) if np.isfinite(got).all() else float("nan")
    if mm is not None:
        mm.free()
    nv.close()
    bound.close()
    op.close()
    log(f"  {label} N={N} {alg_name}: host us ctypes {row['ctypes_bound']['host_us']:.2f} nvmath "
        f"{row['nvmath_bound']['host_us']:.2f}; issued us ctypes {row['ctypes_bound']['issued_us']:.1f} nvmath "
        f"{row['nvmath_bound']['issued_us']:.1f}")
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int, nargs="+", default=[128])
    ap.add_argument("--matrices", nargs="+", default=FIXTURES + list(GENERATED),
                    help=f"fixture names ({', '.join(FIXTURES)}) and/or {', '.join(GENERATED)}")
    ap.add_argument("--rounds", type=int, default=3, help="rounds over all paths; each number is their median")
    ap.add_argument("--label", default="")
    ap.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--table-from", type=Path, help="reprint the table of a results file and exit (no GPU)")
    args = ap.parse_args(argv)
    if args.table_from:
        doc = json.loads(args.table_from.read_text())
        print_table(doc["rows"], doc["meta"], args.table_from)
        return 0
    import cupy

    cupy.cuda.device.get_cusparse_handle()  # CuPy loads its libcusparse first; nvmath's pathfinder then finds it
    before = mapped_libcusparse()
    ncs, nsp, import_s = import_nvmath()
    meta = {**gpu_meta(), "versions": versions(), "nvmath_import_s": import_s, "libcusparse_before_nvmath": before,
            "libcusparse_after_nvmath": mapped_libcusparse(), "command": " ".join([Path(sys.argv[0]).name] +
                                                                                  sys.argv[1:]),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "method": __doc__}
    log(f"{meta['device']}: nvmath imported in {import_s:.2f} s; libcusparse mapped: "
        f"{meta['libcusparse_after_nvmath']}")
    from tasks.fetch.generators import generate

    rng = np.random.default_rng(0)
    rows = []
    for name in args.matrices:
        A = generate(*GENERATED[name]) if name in GENERATED else fixture(name)
        if A is None:
            log(f"{name}: fixture not present (.fixtures is not carried?), skipped")
            continue
        for N in args.ns:
            rows.append(measure(name, A, N, rng, ncs, nsp, args.rounds))
    meta["libcusparse_at_end"] = mapped_libcusparse()
    label = f"-{args.label}" if args.label else ""
    path = args.out_dir / f"bindings-{meta['slug']}-{dt.date.today().isoformat()}{label}.json"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return print_table(rows, meta, path)


def print_table(rows, meta, path) -> int:
    libs = meta.get("libcusparse_at_end", meta.get("libcusparse_after_nvmath", []))
    v = meta["versions"]
    print(f"{meta['device']}; nvmath-python {v.get('nvmath-python')}, cuda-bindings {v.get('cuda-bindings')}, "
          f"CuPy {meta['cupy']}; nvmath import {meta['nvmath_import_s']:.2f} s; libcusparse in the process: {libs}"
          + ("" if len(libs) == 1 else "  <-- not exactly one"))
    short = {"ctypes_bound": "ct", "ctypes_spmm": "ct1", "nvmath_bound": "nv", "nvmath_spmm": "nv1",
             "nvmath_matmul": "mm", "cupyx": "cpx"}
    head = f"{'matrix':<17}{'nnz':>9}{'N':>5} {'alg':<9}{'graph ct/nv':>13}"
    head += "".join(f"{'iss ' + short[p]:>9}" for p in PATHS) + "".join(f"{'host ' + short[p]:>9}" for p in PATHS)
    print(head + f"{'max err':>9}")
    for r in rows:
        g = "/".join(f"{r[p].get('graph_us', float('nan')):.1f}" for p in ("ctypes_bound", "nvmath_bound"))
        line = f"{r['matrix'][:16]:<17}{r['nnz']:>9}{r['N']:>5} {r['algorithm']:<9}{g:>13}"
        line += "".join(f"{r[p]['issued_us'] if p in r else float('nan'):>9.1f}" for p in PATHS)
        line += "".join(f"{r[p]['host_us'] if p in r else float('nan'):>9.2f}" for p in PATHS)
        errs = [r[p]["rel_err"] for p in PATHS if p in r and "rel_err" in r[p]]
        print(line + f"{max(errs):>9.1e}")
    print("us per call. iss = as issued (events around a Python loop / calls), host = host time per call (loop of "
          "100, not waiting); ct = CtypesSpmm (ctypes SetStream + SpMM), ct1 = ctypes SpMM alone, nv = nvmath "
          "set_stream + sp_mm, nv1 = nvmath sp_mm alone, mm = nvmath.sparse.Matmul.execute, cpx = cupyx A @ B; "
          "graph = device time by graph replay")
    d_host = np.array([r["nvmath_bound"]["host_us"] - r["ctypes_bound"]["host_us"] for r in rows])
    d_iss = np.array([r["nvmath_bound"]["issued_us"] / r["ctypes_bound"]["issued_us"] for r in rows])
    if rows:
        print(f"nvmath vs ctypes, per call: host {np.median(d_host):+.2f} us median ({d_host.min():+.2f} .. "
              f"{d_host.max():+.2f}); as issued x{np.median(d_iss):.3f} median ({d_iss.min():.3f} .. {d_iss.max():.3f})"
              f" -> nvmath's launch overhead is {'not higher' if np.median(d_host) <= 0.1 else 'higher'} "
              "(host difference <= 0.1 us)")
    bad = [(r["matrix"], r["N"], p) for r in rows for p in PATHS if p in r and not r[p].get("rel_err", 0) <= TOL]
    failed = [(r["matrix"], r["N"], k) for r in rows for k in r["errors"]]
    print(f"correctness: {'all paths within ' + str(TOL) if not bad else 'FAILED ' + str(bad)}"
          + (f"; errors: {failed}" if failed else ""))
    print(f"results: {path}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
