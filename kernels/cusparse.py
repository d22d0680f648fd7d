"""Baseline: cuSPARSE generic SpMM, C = A @ B with A in CSR (float32, float16 or bfloat16 values, FP32 compute:
the same precision as our kernels; half CSR computes on CUDA cores, not Tensor Cores), B and C dense row-major
(CUSPARSE_ORDER_ROW), through NVIDIA's nvmath-python bindings (`nvmath.bindings.cusparse`: descriptors, buffer size,
SpMM_preprocess, SpMM, SetStream, DnMatSetValues) on CuPy's cuSPARSE handle and CuPy-allocated buffers. Not
cupyx.scipy.sparse's ``@`` (column-major C, default algorithm only), nor CuPy's own low-level bindings (no
SpMM_preprocess, and they refuse to run while a stream is captured into a CUDA graph; nvmath's do not).

Why nvmath, not hand-written ctypes as before (issue 16): on an H200 a bound call (set_stream + sp_mm) cost 2.2 us
less host time than our ctypes cusparseSetStream + cusparseSpMM (median of 4 matrices at N = 128, -2.9 .. -1.5 us;
as issued x0.994), on the same libcusparse (benchmarks/results/bindings-nvidia-h200-2026-11-25.json, made by
benchmarks/bindings.py). nvmath is imported on first use (`bindings()`), so `import kernels` and the CPU tests
never need it.

nvmath's functions take C's arguments in C's order, as integers (handles, descriptors, device and host pointers,
enum values), except that an output argument becomes the return value: ``create_csr(...)`` returns the descriptor,
``sp_mm_buffer_size(...)`` the size. (``sddmm_buffer_size`` is the exception: it keeps C's ``size_t*`` as an address;
kernels.cusparse_sddmm.) A failing status raises ``cuSPARSEError``, re-raised here as RuntimeError naming the call and
algorithm (`checked`), which `tune` catches per algorithm.

`CusparseSpmm(A, dtype=...).tune(B)` times CSR_ALG1/2/3 (preprocess where it applies, warm-up, CUDA events around a
captured graph) and keeps the fastest per N; `.run(B, out=None)` then uses it. Handle, descriptors and buffers are
cached per N. cuSPARSE's CSR SpMM is not bitwise repeatable: on an H200 (CUDA 13) all three algorithms gave
different float32 C on repeated calls with one B (tests/kernels/test_gpu_plan_precision.py), so `SpmmPlan` leaves
cuSPARSE out of its choice unless the caller gives up determinism. ``deterministic=True`` here makes `tune` run
each algorithm three times on the same B and drop those whose outputs differ: a check that catches most, not a
proof (a rare race can pass three runs), which is why the plan does not rely on it.
"""
from __future__ import annotations

import functools
import os

import numpy as np

from kernels import launch
from kernels.precision import precision
from storage.indexing import index_dtype

# cusparseSpMMAlg_t values (cusparse.h): ALG1 any layout; ALG2 and ALG3 row-major, ALG3 with preprocessing.
ALGORITHMS = {"CSR_ALG1": 4, "CSR_ALG2": 6, "CSR_ALG3": 12}
PREPROCESS = {"CSR_ALG3"}
CUDA_R_32F = 0  # cudaDataType_t (library_types.h)
VALUE_TYPES = {"float32": (CUDA_R_32F, np.float32), "float16": (2, np.float16), "bfloat16": (14, np.uint16)}
# bfloat16 values are uint16 bit patterns (kernels.precision): NumPy and CuPy have no bfloat16 dtype
INSTALL = ("pip install nvmath-python (or tcspmm's gpu extra: pip install '.[gpu]'; offline, from the wheelhouse: "
           "pip install --no-deps .whl/nvmath_python-*.whl .whl/cuda_pathfinder-*.whl)")


def _import_bindings():
    """nvmath.bindings.cusparse, or one ImportError line saying what to install."""
    try:
        import nvmath.bindings.cusparse as ncs
    except Exception as err:  # ImportError, or a library/version error raised while nvmath initialises
        raise ImportError(f"the cuSPARSE baselines (kernels.cusparse*) call cuSPARSE through nvmath-python, which "
                          f"is not importable here ({type(err).__name__}: {err}); {INSTALL}") \
            from (None if isinstance(err, ModuleNotFoundError) else err)
    return ncs


def one_libcusparse(maps_lines) -> str | None:
    """The one libcusparse file mapped in a process, given its /proc/self/maps lines (None if none is mapped);
    RuntimeError if two different files are: CuPy's handle would then reach a library that did not create it."""
    paths = sorted({os.path.realpath(line.split()[-1]) for line in maps_lines if "libcusparse.so" in line})
    if len(paths) > 1:
        raise RuntimeError(f"{len(paths)} libcusparse files are loaded in this process, expected one "
                           f"({', '.join(paths)}): CuPy's cuSPARSE handle would reach a library that did not create "
                           "it. Import nvmath only after CuPy has made its cuSPARSE handle (kernels.cusparse.bindings()"
                           " does), so that nvmath's loader takes CuPy's library")
    return paths[0] if paths else None


@functools.cache
def bindings():
    """nvmath.bindings.cusparse, imported once CuPy has loaded its libcusparse (its handle made), so that nvmath's
    loader (cuda-pathfinder) takes that same library: checked once per process (`one_libcusparse`)."""
    import cupy

    cupy.cuda.device.get_cusparse_handle()
    ncs = _import_bindings()
    ncs.get_property(0)  # MAJOR_VERSION: nvmath has resolved its libcusparse after this call
    try:
        with open("/proc/self/maps") as maps:
            one_libcusparse(maps)
    except OSError:  # no /proc (not Linux): nothing to compare
        pass
    return ncs


def checked(ncs, what: str, fn, *args):
    """``fn(*args)`` (an nvmath.bindings.cusparse function); its cuSPARSEError re-raised as RuntimeError naming
    `what` (the call and algorithm), which `CusparseSpmm.tune` and the tests catch per algorithm."""
    try:
        return fn(*args)
    except ncs.cuSPARSEError as err:  # str(err): the status's name, value and cusparseGetErrorString
        raise RuntimeError(f"{what} returned {err}") from err


class DescriptorOwner:
    """What each cuSPARSE baseline here holds: nvmath's bindings ``_ncs``, a sparse descriptor ``descr_a`` and
    per-N dense descriptors in ``_per_n`` (dicts with "b" and "c"); `close` destroys them, also when the object is
    collected."""

    def close(self) -> None:
        ncs = self._ncs
        for st in self._per_n.values():
            ncs.destroy_dn_mat(st["b"])
            ncs.destroy_dn_mat(st["c"])
            if st.get("a"):
                ncs.destroy_sp_mat(st["a"])
        self._per_n.clear()
        if self.descr_a:
            ncs.destroy_sp_mat(self.descr_a)
            self.descr_a = 0

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown, or a constructor that failed half-way: nothing left to free
            pass


class CusparseSpmm(DescriptorOwner):
    """cuSPARSE SpMM for one CSR matrix on the current device (scipy CSR in; uploaded once)."""

    def __init__(self, A, *, algorithms=tuple(ALGORITHMS), dtype: str = "float32", deterministic: bool = False):
        import cupy
        import scipy.sparse as sp

        if dtype not in VALUE_TYPES:
            raise ValueError(f"dtype {dtype!r} is not supported by the cuSPARSE baseline; one of {list(VALUE_TYPES)}")
        ncs = bindings()
        A = sp.csr_array(A)
        self._ncs, self._cupy = ncs, cupy
        self.shape = (int(A.shape[0]), int(A.shape[1]))
        self.nnz = int(A.nnz)
        idx = index_dtype(max(self.shape), self.nnz)  # cuSPARSE needs one index type for indptr and indices
        self.indptr = cupy.asarray(A.indptr.astype(idx, copy=False))
        self.indices = cupy.asarray(A.indices.astype(idx, copy=False))
        self.dtype, self.deterministic = dtype, bool(deterministic)
        self._ctype, self._np_dtype = VALUE_TYPES[dtype]
        values = A.data if A.dtype == self._np_dtype else precision(dtype).to_storage(A.data.astype(np.float32))
        self.data = cupy.asarray(values)
        itype = int(ncs.IndexType.INDEX_32I if idx == np.int32 else ncs.IndexType.INDEX_64I)
        self._op, self._order = int(ncs.Operation.NON_TRANSPOSE), int(ncs.Order.ROW)
        self.handle = cupy.cuda.device.get_cusparse_handle()
        self._alpha, self._beta = np.ones(1, np.float32), np.zeros(1, np.float32)
        self._beta_add = np.ones(1, np.float32)  # accumulate: C = A B + 1 C
        self._per_n: dict[int, dict] = {}  # N -> {"b", "c": descriptors, "ptrs", "buffers": {alg: buf}, "failed"}
        self.descr_a, self._itype = 0, itype
        self.descr_a = self._csr_descr()
        self.algorithms = tuple(algorithms)
        self.best: dict[int, str] = {}  # N -> fastest algorithm name
        self.timings: dict[int, dict] = {}  # N -> {alg: median ms}
        self.nondeterministic: set[str] = set()  # algorithms whose repeated outputs differed (tune)

    def _csr_descr(self) -> int:
        """A sparse descriptor on A's arrays: create_csr(rows, cols, nnz, indptr, indices, values, indptr type,
        indices type, base, value type)."""
        ncs = self._ncs
        return checked(ncs, "cusparseCreateCsr", ncs.create_csr, self.shape[0], self.shape[1], self.nnz,
                       self.indptr.data.ptr, self.indices.data.ptr, self.data.data.ptr, self._itype, self._itype,
                       int(ncs.IndexBase.ZERO), self._ctype)

    def _dn_mat(self, rows: int, X) -> int:
        """A row-major dense descriptor on X [rows, N]: create_dn_mat(rows, cols, ld, values, value type, order)."""
        N = int(X.shape[1])
        return checked(self._ncs, "cusparseCreateDnMat", self._ncs.create_dn_mat, rows, N, N, X.data.ptr, self._ctype,
                       self._order)

    def _state(self, N: int, B, C) -> dict:
        st = self._per_n.get(N)
        if st is None:  # A's descriptor per N: ALG3 keeps its preprocessing in it, for one buffer, so an A used
            # at two N (a GAT layer: N = 2 for the attention's gradients, the head width for the aggregation) would
            # re-preprocess at every switch, inside a caller's CUDA-graph capture too, which that invalidates
            st = {"a": self._csr_descr(), "b": self._dn_mat(self.shape[1], B), "c": self._dn_mat(self.shape[0], C),
                  "ptrs": (B.data.ptr, C.data.ptr), "buffers": {}, "failed": {}}
            self._per_n[N] = st
        elif st["ptrs"] != (B.data.ptr, C.data.ptr):
            ncs = self._ncs
            for key, arr in (("b", B), ("c", C)):
                checked(ncs, "cusparseDnMatSetValues", ncs.dn_mat_set_values, st[key], arr.data.ptr)
            st["ptrs"] = (B.data.ptr, C.data.ptr)
        return st

    def _args(self, st: dict, alg: str, beta) -> tuple:
        """cusparseSpMM's arguments before the buffer, in C's order (nvmath's sp_mm, sp_mm_buffer_size and
        sp_mm_preprocess take the same): handle, opA, opB, &alpha, A, B, &beta, C, compute type, algorithm."""
        return (self.handle, self._op, self._op, self._alpha.ctypes.data, st["a"], st["b"], beta.ctypes.data,
                st["c"], CUDA_R_32F, ALGORITHMS[alg])

    def _prepare(self, st: dict, alg: str):
        """Buffer (and preprocessing for ALG3) for one algorithm; raises if cuSPARSE refuses the algorithm."""
        if alg in st["buffers"]:
            return st["buffers"][alg]
        ncs, cupy = self._ncs, self._cupy
        args = self._args(st, alg, self._beta)
        size = checked(ncs, f"cusparseSpMM_bufferSize({alg})", ncs.sp_mm_buffer_size, *args)  # returns the size
        buf = cupy.empty(max(int(size), 1), dtype=cupy.uint8)
        if alg in PREPROCESS:
            checked(ncs, f"cusparseSpMM_preprocess({alg})", ncs.sp_mm_preprocess, *args, buf.data.ptr)
        st["buffers"][alg] = buf
        return buf

    def _check_b(self, B, out, accumulate: bool = False):
        cupy = self._cupy
        if not isinstance(B, cupy.ndarray) or B.dtype != self._np_dtype or B.ndim != 2 or not B.flags.c_contiguous:
            raise TypeError(f"B must be a C-contiguous 2-D cupy {np.dtype(self._np_dtype)} array ({self.dtype}), got "
                            f"{type(B).__name__} {getattr(B, 'dtype', None)}")
        if B.shape[0] != self.shape[1]:
            raise ValueError(f"B has {B.shape[0]} rows, expected A's column count {self.shape[1]}")
        N = int(B.shape[1])
        if out is None and accumulate:
            raise ValueError("accumulate=True adds A @ B to out: pass out")
        if out is None:
            out = cupy.empty((self.shape[0], N), dtype=self._np_dtype)
        elif out.shape != (self.shape[0], N) or out.dtype != self._np_dtype or not out.flags.c_contiguous:
            raise ValueError(f"out must be C-contiguous {np.dtype(self._np_dtype)} {(self.shape[0], N)}, got "
                             f"{out.dtype} {out.shape}")
        return out, N

    def run(self, B, out=None, algorithm: str | None = None, *, accumulate: bool = False):
        """C = A @ B with `algorithm` (default: the tuned best for this N, else CSR_ALG2); ``accumulate``:
        out += A @ B (beta = 1)."""
        out, N = self._check_b(B, out, accumulate)
        if self.nnz == 0 or N == 0:
            if not accumulate:
                out.fill(0)
            return out
        alg = algorithm or self.best.get(N, "CSR_ALG2")
        # The handle is CuPy's, shared per device (other code may have moved it): run on the caller's current
        # stream, as CuPy's own kernels do (streams, graph capture)
        ncs = self._ncs
        checked(ncs, "cusparseSetStream", ncs.set_stream, self.handle, self._cupy.cuda.get_current_stream().ptr)
        st = self._state(N, B, out)
        buf = self._prepare(st, alg)
        args = self._args(st, alg, self._beta_add if accumulate else self._beta)
        checked(ncs, f"cusparseSpMM({alg})", ncs.sp_mm, *args, buf.data.ptr)
        return out

    def bind(self, B, out, algorithm: str | None = None, *, accumulate: bool = False) -> "CusparseBound":
        """One cusparseSpMM on these B and out, checked and bound once (CusparseBound): the per-call path of
        repeated calls (SpmmPlan's, and the benchmark's cuSPARSE "as issued"). `algorithm`: default the tuned best
        for this N (tuned here first, into a scratch C), else CSR_ALG2."""
        out, N = self._check_b(B, out, accumulate)
        if algorithm is None and N not in self.best and self.nnz:
            self.tune(B)
        return CusparseBound(self, B, out, algorithm or self.best.get(N, "CSR_ALG2"), accumulate)

    def tune(self, B, out=None, repeats: int = 20, warmup: int = 3, timer=None) -> dict:
        """Median ms of each algorithm on this B (default timer kernels.launch.graph_ms: the device time of one
        call, CUDA events around a captured graph); keeps the fastest in self.best[N] (with ``deterministic``,
        the fastest whose three outputs on this B are bitwise equal)."""
        timer = timer or launch.graph_ms
        out, N = self._check_b(B, out)
        times, errors = {}, {}
        for alg in self.algorithms:
            try:
                self.run(B, out, alg)  # buffer and preprocessing (they allocate: not inside a capture)
                if self.deterministic and not self._repeatable(B, out, alg):
                    self.nondeterministic.add(alg)
                    errors[alg] = "outputs of repeated calls differ bitwise (deterministic=True)"
                    continue
                times[alg] = timer(lambda: self.run(B, out, alg), repeats=repeats, warmup=warmup)
            except Exception as err:  # cuSPARSE refuses some algorithm/layout/size combinations
                errors[alg] = f"{type(err).__name__}: {err}"
        if not times:
            raise RuntimeError(f"every cuSPARSE algorithm failed: {errors}")
        self.best[N] = min(times, key=times.get)
        self.timings[N] = {"ms": times, "errors": errors, "best": self.best[N]}
        return self.timings[N]

    def _repeatable(self, B, out, alg: str) -> bool:
        """Three calls of ``alg`` on the same B give bitwise-equal C (compared as raw bits: NaN patterns too)."""
        first = self.run(B, out, alg).copy()
        view = first.view(self._cupy.uint16 if first.itemsize == 2 else self._cupy.uint32)
        for _ in range(2):
            again = self.run(B, out, alg)
            if not bool((again.view(view.dtype) == view).all()):  # synchronize!
                return False
        return True


class CusparseBound:
    """cusparseSpMM(op's A, B, out) with everything bound once: dense descriptors created for these two buffers,
    the algorithm's workspace (and ALG3's preprocessing) made, scalars' addresses and the argument tuple built. A
    call is nvmath's set_stream(handle, stream) plus sp_mm(*args) (both capturable into a CUDA graph; CuPy's own
    bindings refuse to run during a capture): no check, allocation or lookup. ``set_io`` re-points the descriptors
    (cusparseDnMatSetValues) at new buffers of the same shape and dtype."""

    def __init__(self, op: CusparseSpmm, B, out, algorithm: str, accumulate: bool):
        ncs, cupy = op._ncs, op._cupy
        self.op, self.algorithm, self.B, self.out = op, algorithm, B, out  # op keeps A's descriptor alive
        self._ncs, self.descr_b, self.descr_c = ncs, 0, 0
        self.descr_b = op._dn_mat(op.shape[1], B)
        self.descr_c = op._dn_mat(op.shape[0], out)
        self._empty = op.nnz == 0
        self.buffer = None
        if not self._empty:  # op's buffer for (N, algorithm), preprocessed once (ALG3) on the caller's stream: ALG3
            # keeps its preprocessing in A's descriptor, tied to one buffer, so every binding of this N shares it
            # (a second buffer preprocessed here is the suspected cause of a later capture of op.run failing with
            # cudaErrorStreamCaptureInvalidated on email-Enron, H200)
            checked(ncs, "cusparseSetStream", ncs.set_stream, op.handle, cupy.cuda.get_current_stream().ptr)
            self.buffer = op._prepare(op._state(int(B.shape[1]), B, out), algorithm)
        st = {"a": op._per_n[int(B.shape[1])]["a"] if not self._empty else 0, "b": self.descr_b, "c": self.descr_c}
        self._args = None if self._empty else \
            (*op._args(st, algorithm, op._beta_add if accumulate else op._beta), self.buffer.data.ptr)
        self._sp_mm, self._set_stream, self._handle = ncs.sp_mm, ncs.set_stream, op.handle
        self._error = ncs.cuSPARSEError
        self._zero = not accumulate

    def set_io(self, B, out) -> None:
        ncs = self._ncs
        for descr, arr in ((self.descr_b, B), (self.descr_c, out)):
            checked(ncs, "cusparseDnMatSetValues", ncs.dn_mat_set_values, descr, arr.data.ptr)
        self.B, self.out = B, out

    def __call__(self, stream_ptr: int):
        if self._empty:  # cuSPARSE refuses nnz = 0
            if self._zero:
                self.out.fill(0)
            return self.out
        try:  # free unless raised (Python >= 3.11): the per-call path stays two binding calls
            self._set_stream(self._handle, stream_ptr)
            self._sp_mm(*self._args)
        except self._error as err:
            raise RuntimeError(f"cusparseSetStream or cusparseSpMM({self.algorithm}) returned {err}") from err
        return self.out

    def close(self) -> None:
        for name in ("descr_b", "descr_c"):
            if getattr(self, name, 0):
                self._ncs.destroy_dn_mat(getattr(self, name))
                setattr(self, name, 0)

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the bindings may be gone already
            pass
