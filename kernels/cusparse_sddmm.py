"""cuSPARSE SDDMM on one CSR pattern: ``out[k] = U[row_k] . V[col_k]`` for every stored nonzero k of A, i.e.
``C = (U @ V.T) * spy(A)`` read out in A's CSR order (U: [n_rows, K], V: [n_cols, K], both row-major float32).

Descriptors and calls (cusparseCreateCsr/DnMat, cusparseSDDMM_bufferSize, _preprocess, cusparseSDDMM,
cusparseSpMatSetValues, cusparseDnMatSetValues, cusparseSetStream) go through nvmath-python's bindings on CuPy's
handle (kernels.cusparse.bindings, as for SpMM), so they run on the caller's current stream and inside a CUDA graph
capture. nvmath's functions take C's arguments in C's order; ``sddmm_buffer_size`` (nvmath 1.0) does not return
the size as ``sp_mm_buffer_size`` does, it keeps C's ``size_t* bufferSize`` as its last argument: an address.

Algorithm: CUSPARSE_SDDMM_ALG_DEFAULT, the only one cuSPARSE offers for CSR (so it is also the best); each output
is one K-long dot product written by one thread group, with no atomics, so repeated calls are bit-identical
(checked in tests/gnn/test_gpu_layers.py). ``op(B) = V^T`` through CUSPARSE_OPERATION_TRANSPOSE on the row-major V,
so neither operand is copied. One sparse descriptor (and one preprocessed buffer) per K: cuSPARSE ties a
preprocessed buffer to its matC descriptor, and a layer calls with two K (attention logits and their gradients).

The NumPy twin is ``gnn.reference.sddmm``.
"""
from __future__ import annotations

import numpy as np

from kernels.cusparse import CUDA_R_32F, bindings, checked
from storage.indexing import index_dtype

SDDMM_ALG_DEFAULT = 0  # cusparseSDDMMAlg_t (cusparse.h)
OP_N, OP_T = 0, 1  # cusparseOperation_t: NON_TRANSPOSE, TRANSPOSE


def _checked(ncs, what: str, fn, *args):
    """kernels.cusparse.checked with this module's name: cuSPARSEError -> RuntimeError naming the call."""
    return checked(ncs, f"kernels.cusparse_sddmm: {what}", fn, *args)


class CusparseSddmm:
    """SDDMM on the pattern ``(indptr, indices)`` of an ``shape`` matrix, uploaded once to the current device.
    ``run(U, V)`` returns a new cupy float32 array [nnz] in CSR order (``out=`` to write into one)."""

    def __init__(self, indptr, indices, shape):
        import cupy

        self.shape = (int(shape[0]), int(shape[1]))
        self.nnz = int(len(indices))
        if len(indptr) != self.shape[0] + 1:
            raise ValueError(f"kernels.cusparse_sddmm: indptr has {len(indptr)} entries, expected n_rows + 1 = "
                             f"{self.shape[0] + 1}")
        ncs = bindings()
        self._ncs, self._cupy = ncs, cupy
        self._per_k: dict[int, dict] = {}
        idx = index_dtype(max(self.shape), self.nnz)  # one index type for indptr and indices
        self.indptr = cupy.asarray(np.asarray(indptr).astype(idx, copy=False))
        self.indices = cupy.asarray(np.asarray(indices).astype(idx, copy=False))
        self._itype = int(ncs.IndexType.INDEX_32I if idx == np.int32 else ncs.IndexType.INDEX_64I)
        self._base, self._order = int(ncs.IndexBase.ZERO), int(ncs.Order.ROW)
        self._scratch = cupy.zeros(max(self.nnz, 1), dtype=cupy.float32)  # values the descriptors start with
        self.handle = cupy.cuda.device.get_cusparse_handle()
        self._alpha, self._beta = np.ones(1, np.float32), np.zeros(1, np.float32)

    def _state(self, K: int, U, V, out) -> dict:
        ncs = self._ncs
        st = self._per_k.get(K)
        if st is None:
            # create_csr(rows, cols, nnz, indptr, indices, values, indptr type, indices type, base, value type);
            # create_dn_mat(rows, cols, ld, values, value type, order): C's order, the descriptor returned
            st = {"c": _checked(ncs, "cusparseCreateCsr", ncs.create_csr, self.shape[0], self.shape[1], self.nnz,
                                self.indptr.data.ptr, self.indices.data.ptr, self._scratch.data.ptr, self._itype,
                                self._itype, self._base, CUDA_R_32F),
                  "ptrs": (U.data.ptr, V.data.ptr, self._scratch.data.ptr), "buffer": None}
            self._per_k[K] = st  # from here close() frees what is made
            st["a"] = _checked(ncs, "cusparseCreateDnMat(U)", ncs.create_dn_mat, self.shape[0], K, K, U.data.ptr,
                               CUDA_R_32F, self._order)
            st["b"] = _checked(ncs, "cusparseCreateDnMat(V)", ncs.create_dn_mat, self.shape[1], K, K, V.data.ptr,
                               CUDA_R_32F, self._order)
        ptrs = (U.data.ptr, V.data.ptr, out.data.ptr)
        if st["ptrs"] != ptrs:
            self._set(st, ptrs)
        if st["buffer"] is None:
            size = np.zeros(1, np.uint64)  # size_t, written by sddmm_buffer_size through its address
            _checked(ncs, "cusparseSDDMM_bufferSize", ncs.sddmm_buffer_size, *self._args(st), size.ctypes.data)
            st["buffer"] = self._cupy.empty(max(int(size[0]), 1), dtype=self._cupy.uint8)
            _checked(ncs, "cusparseSDDMM_preprocess", ncs.sddmm_preprocess, *self._args(st),
                     st["buffer"].data.ptr)
        return st

    def _set(self, st: dict, ptrs: tuple) -> None:
        ncs = self._ncs
        _checked(ncs, "cusparseDnMatSetValues(U)", ncs.dn_mat_set_values, st["a"], ptrs[0])
        _checked(ncs, "cusparseDnMatSetValues(V)", ncs.dn_mat_set_values, st["b"], ptrs[1])
        _checked(ncs, "cusparseSpMatSetValues(out)", ncs.sp_mat_set_values, st["c"], ptrs[2])
        st["ptrs"] = ptrs

    def _args(self, st: dict) -> tuple:
        """cusparseSDDMM's arguments before the buffer (or the size's address), in C's order: handle, opA, opB,
        &alpha, A (dense U), B (dense V, transposed), &beta, C (sparse out), compute type, algorithm."""
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
        ncs = self._ncs
        _checked(ncs, "cusparseSetStream", ncs.set_stream, self.handle, cupy.cuda.get_current_stream().ptr)
        st = self._state(K, U, V, out)
        _checked(ncs, "cusparseSDDMM", ncs.sddmm, *self._args(st), st["buffer"].data.ptr)
        return out

    def close(self) -> None:
        ncs = self._ncs
        for st in self._per_k.values():
            for key in ("a", "b"):
                if st.get(key):
                    ncs.destroy_dn_mat(st[key])
            ncs.destroy_sp_mat(st["c"])
        self._per_k.clear()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the bindings may be gone already
            pass
