"""Baseline: cuSPARSE BSR SpMM (CUSPARSE_FORMAT_BSR via cusparseCreateBsr, CUSPARSE_SPMM_BSR_ALG1), C = A @ B with A
in BSR (b x b dense blocks on a fixed grid: the same blocks as our `bcsr` format at b = 16), B and C dense
row-major, FP32 compute, values float32, float16 or bfloat16 (uint16 bits).

The blocks are built by kernels.formats.bcsr (16 x 16; for float32 also 16 x 16, since cuSPARSE's BSR SpMM takes
square blocks, so TF32 comparisons are at 16 x 16, ours at 16 x 8). Rows and columns are padded to multiples of
b; `run` takes B and C already padded (``padded_b`` / ``padded_c``), so a timed call moves only what cuSPARSE moves.
cuSPARSE is reached through nvmath-python's bindings, as in kernels.cusparse.
"""
from __future__ import annotations

import numpy as np

from kernels.cusparse import CUDA_R_32F, VALUE_TYPES, DescriptorOwner, bindings, checked

BSR_ALG1 = 14  # cusparseSpMMAlg_t CUSPARSE_SPMM_BSR_ALG1


class CusparseBsr(DescriptorOwner):
    """A (SciPy sparse) in BSR with b x b blocks on the current device, in ``dtype``'s storage."""

    def __init__(self, A, *, block: int = 16, dtype: str = "float16"):
        import cupy

        from kernels.formats.bcsr import csr_to_bcsr
        from kernels.precision import precision

        if block != 16:
            raise ValueError(f"block is {block}; this baseline builds 16 x 16 blocks (kernels.formats.bcsr)")
        p = precision(dtype)
        X = csr_to_bcsr(A, width=16, to_storage=p.to_storage)
        self.dtype, self.block, self.n_blocks = dtype, block, X.n_blocks
        ncs = bindings()
        self._ncs, self._cupy, self.descr_a = ncs, cupy, 0
        self._per_n: dict = {}  # (B ptr, C ptr, N) -> {"b", "c": descriptors, "buf", "args": sp_mm's arguments}
        self._ctype, self._np_dtype = VALUE_TYPES[dtype]
        self.shape = (int(A.shape[0]), int(A.shape[1]))
        self.padded_shape = (X.n_block_rows * block, -(-self.shape[1] // block) * block)
        self.indptr = cupy.asarray(X.indptr.astype(np.int32))
        self.indices = cupy.asarray(X.indices.astype(np.int32)) if X.n_blocks else cupy.zeros(1, cupy.int32)
        data = X.data if X.n_blocks else np.zeros((1, block, block), dtype=X.data.dtype)
        self.values = cupy.asarray(np.ascontiguousarray(data))
        self._op, self._order = int(ncs.Operation.NON_TRANSPOSE), int(ncs.Order.ROW)  # blocks row-major too
        # create_bsr(block rows, block cols, blocks, row block size, col block size, indptr, indices, values,
        #            indptr type, indices type, base, value type, order within a block) -> descr
        i32 = int(ncs.IndexType.INDEX_32I)
        self.descr_a = checked(ncs, "cusparseCreateBsr", ncs.create_bsr, X.n_block_rows,
                               self.padded_shape[1] // block, X.n_blocks, block, block, self.indptr.data.ptr,
                               self.indices.data.ptr, self.values.data.ptr, i32, i32, int(ncs.IndexBase.ZERO),
                               self._ctype, self._order)
        self.handle = cupy.cuda.device.get_cusparse_handle()
        self._alpha, self._beta = np.ones(1, np.float32), np.zeros(1, np.float32)

    def padded_b(self, B):
        """B [K, N] -> the zero-padded [K_pad, N] copy cuSPARSE reads (in the value dtype)."""
        out = self._cupy.zeros((self.padded_shape[1], B.shape[1]), dtype=self._np_dtype)
        out[:B.shape[0]] = B
        return out

    def padded_c(self, N: int):
        return self._cupy.empty((self.padded_shape[0], N), dtype=self._np_dtype)

    def run(self, Bp, Cp):
        """Cp = A @ Bp on padded operands (C's first M rows are A @ B)."""
        key = (Bp.data.ptr, Cp.data.ptr, int(Bp.shape[1]))
        st = self._per_n.get(key)
        if st is None:
            st = self._per_n[key] = self._bind(Bp, Cp)
        try:  # per call: one set_stream + one sp_mm on the bound arguments (capturable into a CUDA graph)
            self._ncs.set_stream(self.handle, self._cupy.cuda.get_current_stream().ptr)
            self._ncs.sp_mm(*st["args"])
        except self._ncs.cuSPARSEError as err:
            raise RuntimeError(f"cusparseSetStream or cusparseSpMM(BSR_ALG1) returned {err}") from err
        return Cp

    def _bind(self, Bp, Cp) -> dict:
        """Dense descriptors on Bp and Cp (create_dn_mat(rows, cols, ld, values, value type, order)), the buffer,
        and sp_mm's arguments in C's order: handle, opA, opB, &alpha, A, B, &beta, C, compute type, alg, buffer."""
        ncs, cupy, N = self._ncs, self._cupy, int(Bp.shape[1])
        st = {"b": checked(ncs, "cusparseCreateDnMat", ncs.create_dn_mat, self.padded_shape[1], N, N, Bp.data.ptr,
                           self._ctype, self._order),
              "c": checked(ncs, "cusparseCreateDnMat", ncs.create_dn_mat, self.padded_shape[0], N, N, Cp.data.ptr,
                           self._ctype, self._order)}
        args = (self.handle, self._op, self._op, self._alpha.ctypes.data, self.descr_a, st["b"],
                self._beta.ctypes.data, st["c"], CUDA_R_32F, BSR_ALG1)
        size = checked(ncs, "cusparseSpMM_bufferSize(BSR_ALG1)", ncs.sp_mm_buffer_size, *args)
        st["buf"] = cupy.empty(max(int(size), 1), dtype=cupy.uint8)
        st["args"] = (*args, st["buf"].data.ptr)
        return st
