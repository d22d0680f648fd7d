"""Baseline: cuSPARSE generic SpMM, C = A @ B with A in CSR (float32, float16 or bfloat16 values, FP32 compute:
the same precision as our kernels; half CSR computes on CUDA cores, not Tensor Cores), B and C dense row-major
(CUSPARSE_ORDER_ROW), through CuPy's low-level bindings (cupy_backends.cuda.libs.cusparse: descriptors, buffer
size) plus ctypes, on the same libcusparse CuPy already has in the process, for cusparseSpMM_preprocess and
cusparseDnMatSetValues (no CuPy 14.2 binding) and for cusparseSpMM and cusparseSetStream (CuPy's refuse to run
while a stream is captured into a CUDA graph). Not cupyx.scipy.sparse's ``@`` (column-major C, default algorithm only).

`CusparseSpmm(A, dtype=...).tune(B)` times CSR_ALG1/2/3 (preprocess where it applies, warm-up, CUDA events around a
captured graph) and keeps the fastest per N; `.run(B, out=None)` then uses it. Handle, descriptors and buffers are
cached per N. cuSPARSE's CSR SpMM is not bitwise repeatable: on an H200 (CUDA 13) all three algorithms gave
different float32 C on repeated calls with one B (tests/kernels/test_gpu_plan_precision.py), so `SpmmPlan` leaves
cuSPARSE out of its choice unless the caller gives up determinism. ``deterministic=True`` here makes `tune` run
each algorithm three times on the same B and drop those whose outputs differ: a check that catches most, not a
proof (a rare race can pass three runs), which is why the plan does not rely on it.
"""
from __future__ import annotations

import ctypes

import numpy as np

from kernels.indexing import index_dtype

# cusparseSpMMAlg_t values (cusparse.h): ALG1 any layout; ALG2 and ALG3 row-major, ALG3 with preprocessing.
ALGORITHMS = {"CSR_ALG1": 4, "CSR_ALG2": 6, "CSR_ALG3": 12}
PREPROCESS = {"CSR_ALG3"}
CUDA_R_32F = 0  # cudaDataType_t (library_types.h)
VALUE_TYPES = {"float32": (CUDA_R_32F, np.float32), "float16": (2, np.float16), "bfloat16": (14, np.uint16)}
# bfloat16 values are uint16 bit patterns (kernels.precision): NumPy and CuPy have no bfloat16 dtype


def _libcusparse() -> ctypes.CDLL:
    """The libcusparse this process already loaded for CuPy (found in /proc/self/maps), so handles match."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "libcusparse.so" in line:
                lib = ctypes.CDLL(line.split()[-1])
                vp, i = ctypes.c_void_p, ctypes.c_int
                lib.cusparseSpMM_preprocess.argtypes = [vp, i, i, vp, vp, vp, vp, vp, i, i, vp]
                lib.cusparseSpMM_preprocess.restype = i
                lib.cusparseDnMatSetValues.argtypes = [vp, vp]
                lib.cusparseDnMatSetValues.restype = i
                # SpMM and SetStream too: CuPy's bindings refuse to run while a stream is being captured
                lib.cusparseSpMM.argtypes = [vp, i, i, vp, vp, vp, vp, vp, i, i, vp]
                lib.cusparseSpMM.restype = i
                lib.cusparseSetStream.argtypes = [vp, vp]
                lib.cusparseSetStream.restype = i
                return lib
    raise RuntimeError("libcusparse is not loaded in this process; create a cuSPARSE handle through CuPy first")


class DescriptorOwner:
    """What each cuSPARSE baseline here holds: a sparse descriptor ``descr_a`` and per-N dense descriptors in
    ``_per_n`` (dicts with "b" and "c"); `close` destroys them, also when the object is collected."""

    def close(self) -> None:
        cs = self._cs
        for st in self._per_n.values():
            cs.destroyDnMat(st["b"])
            cs.destroyDnMat(st["c"])
        self._per_n.clear()
        if self.descr_a:
            cs.destroySpMat(self.descr_a)
            self.descr_a = 0

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the bindings may be gone already
            pass


class CusparseSpmm(DescriptorOwner):
    """cuSPARSE SpMM for one CSR matrix on the current device (scipy CSR in; uploaded once)."""

    def __init__(self, A, *, algorithms=tuple(ALGORITHMS), dtype: str = "float32", deterministic: bool = False):
        import cupy
        import scipy.sparse as sp
        from cupy_backends.cuda.libs import cusparse

        A = sp.csr_array(A)
        self._cs, self._cupy = cusparse, cupy
        self.shape = (int(A.shape[0]), int(A.shape[1]))
        self.nnz = int(A.nnz)
        idx = index_dtype(max(self.shape), self.nnz)  # cuSPARSE needs one index type for indptr and indices
        self.indptr = cupy.asarray(A.indptr.astype(idx, copy=False))
        self.indices = cupy.asarray(A.indices.astype(idx, copy=False))
        from kernels.precision import precision

        if dtype not in VALUE_TYPES:
            raise ValueError(f"dtype {dtype!r} is not supported by the cuSPARSE baseline; one of {list(VALUE_TYPES)}")
        self.dtype, self.deterministic = dtype, bool(deterministic)
        self._ctype, self._np_dtype = VALUE_TYPES[dtype]
        values = A.data if A.dtype == self._np_dtype else precision(dtype).to_storage(A.data.astype(np.float32))
        self.data = cupy.asarray(values)
        itype = cusparse.CUSPARSE_INDEX_32I if idx == np.int32 else cusparse.CUSPARSE_INDEX_64I
        self.handle = cupy.cuda.device.get_cusparse_handle()
        self._lib = _libcusparse()
        self._alpha, self._beta = np.ones(1, np.float32), np.zeros(1, np.float32)
        self._beta_add = np.ones(1, np.float32)  # accumulate: C = A B + 1 C
        self.descr_a = cusparse.createCsr(self.shape[0], self.shape[1], self.nnz, self.indptr.data.ptr,
                                          self.indices.data.ptr, self.data.data.ptr, itype, itype,
                                          cusparse.CUSPARSE_INDEX_BASE_ZERO, self._ctype)
        self.algorithms = tuple(algorithms)
        self._per_n: dict[int, dict] = {}  # N -> {"b", "c": descriptors, "ptrs", "buffers": {alg: buf}, "failed"}
        self.best: dict[int, str] = {}  # N -> fastest algorithm name
        self.timings: dict[int, dict] = {}  # N -> {alg: median ms}
        self.nondeterministic: set[str] = set()  # algorithms whose repeated outputs differed (tune)

    def _state(self, N: int, B, C) -> dict:
        cs, cupy = self._cs, self._cupy
        st = self._per_n.get(N)
        if st is None:
            st = {"b": cs.createDnMat(self.shape[1], N, N, B.data.ptr, self._ctype, cs.CUSPARSE_ORDER_ROW),
                  "c": cs.createDnMat(self.shape[0], N, N, C.data.ptr, self._ctype, cs.CUSPARSE_ORDER_ROW),
                  "ptrs": (B.data.ptr, C.data.ptr), "buffers": {}, "failed": {}}
            self._per_n[N] = st
        elif st["ptrs"] != (B.data.ptr, C.data.ptr):
            for key, arr in (("b", B), ("c", C)):
                self._check(self._lib.cusparseDnMatSetValues(st[key], arr.data.ptr), "cusparseDnMatSetValues")
            st["ptrs"] = (B.data.ptr, C.data.ptr)
        return st

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what} returned cusparseStatus_t {status}")

    def _prepare(self, st: dict, alg: str):
        """Buffer (and preprocessing for ALG3) for one algorithm; raises if cuSPARSE refuses the algorithm."""
        if alg in st["buffers"]:
            return st["buffers"][alg]
        cs, cupy = self._cs, self._cupy
        op = cs.CUSPARSE_OPERATION_NON_TRANSPOSE
        args = (self.handle, op, op, self._alpha.ctypes.data, self.descr_a, st["b"], self._beta.ctypes.data, st["c"],
                CUDA_R_32F, ALGORITHMS[alg])
        size = cs.spMM_bufferSize(*args)
        buf = cupy.empty(max(int(size), 1), dtype=cupy.uint8)
        if alg in PREPROCESS:
            self._check(self._lib.cusparseSpMM_preprocess(*args, buf.data.ptr), f"cusparseSpMM_preprocess({alg})")
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
        self._check(self._lib.cusparseSetStream(self.handle, self._cupy.cuda.get_current_stream().ptr),
                    "cusparseSetStream")
        st = self._state(N, B, out)
        buf = self._prepare(st, alg)
        cs = self._cs
        op = cs.CUSPARSE_OPERATION_NON_TRANSPOSE
        beta = self._beta_add if accumulate else self._beta
        self._check(self._lib.cusparseSpMM(self.handle, op, op, self._alpha.ctypes.data, self.descr_a, st["b"],
                                           beta.ctypes.data, st["c"], CUDA_R_32F, ALGORITHMS[alg], buf.data.ptr),
                    f"cusparseSpMM({alg})")
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
        from kernels.launch import graph_ms

        timer = timer or graph_ms
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
    the algorithm's workspace (and ALG3's preprocessing) made, scalars' addresses and the ctypes argument tuple
    built. A call is cusparseSetStream(handle, stream) plus cusparseSpMM through ctypes (both capturable; CuPy's
    own bindings refuse to run during a capture): no check, allocation or lookup. ``set_io`` re-points the
    descriptors (cusparseDnMatSetValues) at new buffers of the same shape and dtype."""

    def __init__(self, op: CusparseSpmm, B, out, algorithm: str, accumulate: bool):
        cs, cupy = op._cs, op._cupy
        self.op, self.algorithm, self.B, self.out = op, algorithm, B, out  # op keeps A's descriptor alive
        N = int(B.shape[1])
        self.descr_b = cs.createDnMat(op.shape[1], N, N, B.data.ptr, op._ctype, cs.CUSPARSE_ORDER_ROW)
        self.descr_c = cs.createDnMat(op.shape[0], N, N, out.data.ptr, op._ctype, cs.CUSPARSE_ORDER_ROW)
        self._empty = op.nnz == 0
        beta = op._beta_add if accumulate else op._beta
        nt = cs.CUSPARSE_OPERATION_NON_TRANSPOSE
        args = (op.handle, nt, nt, op._alpha.ctypes.data, op.descr_a, self.descr_b, beta.ctypes.data, self.descr_c,
                CUDA_R_32F, ALGORITHMS[algorithm])
        self.buffer = None
        if not self._empty:  # op's buffer for (N, algorithm), preprocessed once (ALG3) on the caller's stream: ALG3
            # keeps its preprocessing in A's descriptor, tied to one buffer, so every binding of this N shares it
            # (a second buffer preprocessed here is the suspected cause of a later capture of op.run failing with
            # cudaErrorStreamCaptureInvalidated on email-Enron, H200)
            op._check(op._lib.cusparseSetStream(op.handle, cupy.cuda.get_current_stream().ptr), "cusparseSetStream")
            self.buffer = op._prepare(op._state(N, B, out), algorithm)
        self._args = (*args, self.buffer.data.ptr) if not self._empty else None
        self._spmm, self._set_stream, self._handle = op._lib.cusparseSpMM, op._lib.cusparseSetStream, op.handle
        self._zero = not accumulate

    def set_io(self, B, out) -> None:
        for descr, arr in ((self.descr_b, B), (self.descr_c, out)):
            self.op._check(self.op._lib.cusparseDnMatSetValues(descr, arr.data.ptr), "cusparseDnMatSetValues")
        self.B, self.out = B, out

    def __call__(self, stream_ptr: int):
        if self._empty:  # cuSPARSE refuses nnz = 0
            if self._zero:
                self.out.fill(0)
            return self.out
        status = self._set_stream(self._handle, stream_ptr) or self._spmm(*self._args)
        if status:
            raise RuntimeError(f"cusparseSpMM({self.algorithm}) or cusparseSetStream returned cusparseStatus_t "
                               f"{status}")
        return self.out

    def close(self) -> None:
        cs = self.op._cs
        for name in ("descr_b", "descr_c"):
            if getattr(self, name, 0):
                cs.destroyDnMat(getattr(self, name))
                setattr(self, name, 0)

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the bindings may be gone already
            pass
