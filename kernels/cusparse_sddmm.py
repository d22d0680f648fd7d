"""cuSPARSE SDDMM on one CSR pattern: ``out[k] = U[row_k] . V[col_k]`` for every stored nonzero k of A, i.e.
``C = (U @ V.T) * spy(A)`` read out in A's CSR order (U: [n_rows, K], V: [n_cols, K], both row-major float32).

Descriptors come from CuPy's low-level bindings (cupy_backends.cuda.libs.cusparse); the calls themselves
(cusparseSDDMM_bufferSize, _preprocess, cusparseSDDMM, cusparseSpMatSetValues, cusparseDnMatSetValues,
cusparseSetStream) go through ctypes on the libcusparse CuPy already loaded (kernels.cusparse._libcusparse), as
kernels.cusparse does for SpMM, so they run on the caller's current stream and inside a CUDA graph capture.

Algorithm: CUSPARSE_SDDMM_ALG_DEFAULT, the only one cuSPARSE offers for CSR (so it is also the best); each output
is one K-long dot product written by one thread group, with no atomics, so repeated calls are bit-identical
(checked in tests/gnn/test_gpu_layers.py). ``op(B) = V^T`` through CUSPARSE_OPERATION_TRANSPOSE on the row-major V,
so neither operand is copied. One sparse descriptor (and one preprocessed buffer) per K: cuSPARSE ties a
preprocessed buffer to its matC descriptor, and a layer calls with two K (attention logits and their gradients).

The NumPy twin is ``gnn.reference.sddmm``.
"""
from __future__ import annotations

import ctypes

import numpy as np

from kernels.cusparse import CUDA_R_32F, _libcusparse
from kernels.indexing import index_dtype

SDDMM_ALG_DEFAULT = 0  # cusparseSDDMMAlg_t (cusparse.h)
OP_N, OP_T = 0, 1  # cusparseOperation_t: NON_TRANSPOSE, TRANSPOSE


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    vp, i = ctypes.c_void_p, ctypes.c_int
    common = [vp, i, i, vp, vp, vp, vp, vp, i, i]
    lib.cusparseSDDMM_bufferSize.argtypes = [*common, ctypes.POINTER(ctypes.c_size_t)]
    lib.cusparseSDDMM_preprocess.argtypes = [*common, vp]
    lib.cusparseSDDMM.argtypes = [*common, vp]
    for name in ("cusparseSDDMM_bufferSize", "cusparseSDDMM_preprocess", "cusparseSDDMM", "cusparseSetStream",
                 "cusparseSpMatSetValues", "cusparseDnMatSetValues"):
        getattr(lib, name).restype = i
    lib.cusparseSpMatSetValues.argtypes = [vp, vp]
    lib.cusparseDnMatSetValues.argtypes = [vp, vp]
    lib.cusparseSetStream.argtypes = [vp, vp]
    return lib


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"kernels.cusparse_sddmm: {what} returned cusparseStatus_t {status}")


class CusparseSddmm:
    """SDDMM on the pattern ``(indptr, indices)`` of an ``shape`` matrix, uploaded once to the current device.
    ``run(U, V)`` returns a new cupy float32 array [nnz] in CSR order (``out=`` to write into one)."""

    def __init__(self, indptr, indices, shape):
        import cupy
        from cupy_backends.cuda.libs import cusparse

        self._cs, self._cupy = cusparse, cupy
        self.shape = (int(shape[0]), int(shape[1]))
        self.nnz = int(len(indices))
        if len(indptr) != self.shape[0] + 1:
            raise ValueError(f"kernels.cusparse_sddmm: indptr has {len(indptr)} entries, expected n_rows + 1 = "
                             f"{self.shape[0] + 1}")
        idx = index_dtype(max(self.shape), self.nnz)  # one index type for indptr and indices
        self.indptr = cupy.asarray(np.asarray(indptr).astype(idx, copy=False))
        self.indices = cupy.asarray(np.asarray(indices).astype(idx, copy=False))
        self._itype = cusparse.CUSPARSE_INDEX_32I if idx == np.int32 else cusparse.CUSPARSE_INDEX_64I
        self._scratch = cupy.zeros(max(self.nnz, 1), dtype=cupy.float32)  # values the descriptors start with
        self.handle = cupy.cuda.device.get_cusparse_handle()
        self._lib = _bind(_libcusparse())
        self._alpha, self._beta = np.ones(1, np.float32), np.zeros(1, np.float32)
        self._per_k: dict[int, dict] = {}

    def _state(self, K: int, U, V, out) -> dict:
        cs = self._cs
        st = self._per_k.get(K)
        if st is None:
            c = cs.createCsr(self.shape[0], self.shape[1], self.nnz, self.indptr.data.ptr, self.indices.data.ptr,
                             self._scratch.data.ptr, self._itype, self._itype, cs.CUSPARSE_INDEX_BASE_ZERO,
                             CUDA_R_32F)
            st = {"c": c, "a": cs.createDnMat(self.shape[0], K, K, U.data.ptr, CUDA_R_32F, cs.CUSPARSE_ORDER_ROW),
                  "b": cs.createDnMat(self.shape[1], K, K, V.data.ptr, CUDA_R_32F, cs.CUSPARSE_ORDER_ROW),
                  "ptrs": (U.data.ptr, V.data.ptr, self._scratch.data.ptr), "buffer": None}
            self._per_k[K] = st
        ptrs = (U.data.ptr, V.data.ptr, out.data.ptr)
        if st["ptrs"] != ptrs:
            self._set(st, ptrs)
        if st["buffer"] is None:
            size = ctypes.c_size_t(0)
            _check(self._lib.cusparseSDDMM_bufferSize(*self._args(st), ctypes.byref(size)), "cusparseSDDMM_bufferSize")
            st["buffer"] = self._cupy.empty(max(int(size.value), 1), dtype=self._cupy.uint8)
            _check(self._lib.cusparseSDDMM_preprocess(*self._args(st), st["buffer"].data.ptr),
                   "cusparseSDDMM_preprocess")
        return st

    def _set(self, st: dict, ptrs: tuple) -> None:
        _check(self._lib.cusparseDnMatSetValues(st["a"], ptrs[0]), "cusparseDnMatSetValues(U)")
        _check(self._lib.cusparseDnMatSetValues(st["b"], ptrs[1]), "cusparseDnMatSetValues(V)")
        _check(self._lib.cusparseSpMatSetValues(st["c"], ptrs[2]), "cusparseSpMatSetValues(out)")
        st["ptrs"] = ptrs

    def _args(self, st: dict) -> tuple:
        return (self.handle, OP_N, OP_T, self._alpha.ctypes.data, st["a"], st["b"], self._beta.ctypes.data,
                st["c"], CUDA_R_32F, SDDMM_ALG_DEFAULT)

    def run(self, U, V, out=None):
        """``out[k] = U[row_k] . V[col_k]``; U [n_rows, K], V [n_cols, K]: C-contiguous cupy float32."""
        cupy = self._cupy
        for name, X, rows in (("U", U, self.shape[0]), ("V", V, self.shape[1])):
            if not isinstance(X, cupy.ndarray) or X.dtype != cupy.float32 or X.ndim != 2 \
                    or not X.flags.c_contiguous:
                raise TypeError(f"kernels.cusparse_sddmm: {name} must be a C-contiguous 2-D cupy float32 array")
            if X.shape[0] != rows:
                raise ValueError(f"kernels.cusparse_sddmm: {name} has {X.shape[0]} rows, expected {rows}")
        K = int(U.shape[1])
        if V.shape[1] != K:
            raise ValueError(f"kernels.cusparse_sddmm: U has {K} columns and V {V.shape[1]}; they must match")
        if out is None:
            out = cupy.zeros(self.nnz, dtype=cupy.float32)
        elif out.shape != (self.nnz,) or out.dtype != cupy.float32 or not out.flags.c_contiguous:
            raise ValueError(f"kernels.cusparse_sddmm: out must be contiguous float32 ({self.nnz},), got "
                             f"{out.dtype} {out.shape}")
        if self.nnz == 0 or K == 0 or min(self.shape) == 0:
            out.fill(0)
            return out
        # CuPy's handle is shared per device: run on the caller's current stream (torch's, inside gnn)
        _check(self._lib.cusparseSetStream(self.handle, cupy.cuda.get_current_stream().ptr), "cusparseSetStream")
        st = self._state(K, U, V, out)
        _check(self._lib.cusparseSDDMM(*self._args(st), st["buffer"].data.ptr), "cusparseSDDMM")
        return out

    def close(self) -> None:
        cs = self._cs
        for st in self._per_k.values():
            cs.destroyDnMat(st["a"])
            cs.destroyDnMat(st["b"])
            cs.destroySpMat(st["c"])
        self._per_k.clear()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the bindings may be gone already
            pass
