"""Baseline: cuSPARSE BSR SpMM (CUSPARSE_FORMAT_BSR via cusparseCreateBsr, CUSPARSE_SPMM_BSR_ALG1), C = A @ B with A
in BSR (b x b dense blocks on a fixed grid: the same blocks as our `bcsr` format at b = 16), B and C dense
row-major, FP32 compute, values float32, float16 or bfloat16 (uint16 bits).

The blocks are built by kernels.formats.bcsr (16 x 16; for float32 also 16 x 16, since cuSPARSE's BSR SpMM takes
square blocks, so TF32 comparisons are at 16 x 16, ours at 16 x 8). Rows and columns are padded to multiples of
b; `run` takes B and C already padded (``padded_b`` / ``padded_c``), so a timed call moves only what cuSPARSE moves.
"""
from __future__ import annotations

import ctypes

import numpy as np

from kernels.cusparse import CUDA_R_32F, VALUE_TYPES, DescriptorOwner, _libcusparse

BSR_ALG1 = 14  # cusparseSpMMAlg_t CUSPARSE_SPMM_BSR_ALG1
ORDER_ROW = 2  # cusparseOrder_t CUSPARSE_ORDER_ROW: each block row-major


class CusparseBsr(DescriptorOwner):
    """A (SciPy sparse) in BSR with b x b blocks on the current device, in ``dtype``'s storage."""

    def __init__(self, A, *, block: int = 16, dtype: str = "float16"):
        import cupy
        from cupy_backends.cuda.libs import cusparse

        from kernels.formats.bcsr import csr_to_bcsr
        from kernels.precision import precision

        if block != 16:
            raise ValueError(f"block is {block}; this baseline builds 16 x 16 blocks (kernels.formats.bcsr)")
        p = precision(dtype)
        X = csr_to_bcsr(A, width=16, to_storage=p.to_storage)
        self.dtype, self.block, self.n_blocks = dtype, block, X.n_blocks
        self._cs, self._cupy, self._lib = cusparse, cupy, _libcusparse()
        self._ctype, self._np_dtype = VALUE_TYPES[dtype]
        self.shape = (int(A.shape[0]), int(A.shape[1]))
        self.padded_shape = (X.n_block_rows * block, -(-self.shape[1] // block) * block)
        self.indptr = cupy.asarray(X.indptr.astype(np.int32))
        self.indices = cupy.asarray(X.indices.astype(np.int32)) if X.n_blocks else cupy.zeros(1, cupy.int32)
        data = X.data if X.n_blocks else np.zeros((1, block, block), dtype=X.data.dtype)
        self.values = cupy.asarray(np.ascontiguousarray(data))
        lib = self._lib
        vp, i64, i = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
        lib.cusparseCreateBsr.argtypes = [ctypes.POINTER(vp), i64, i64, i64, i64, i64, vp, vp, vp, i, i, i, i, i]
        lib.cusparseCreateBsr.restype = i
        descr = vp()
        status = lib.cusparseCreateBsr(
            ctypes.byref(descr), X.n_block_rows, self.padded_shape[1] // block, X.n_blocks, block, block,
            self.indptr.data.ptr, self.indices.data.ptr, self.values.data.ptr, cusparse.CUSPARSE_INDEX_32I,
            cusparse.CUSPARSE_INDEX_32I, cusparse.CUSPARSE_INDEX_BASE_ZERO, self._ctype, ORDER_ROW)
        if status != 0:
            raise RuntimeError(f"cusparseCreateBsr returned cusparseStatus_t {status}")
        self.descr_a = descr.value
        self.handle = cupy.cuda.device.get_cusparse_handle()
        self._alpha, self._beta = np.ones(1, np.float32), np.zeros(1, np.float32)
        self._per_n: dict = {}

    def padded_b(self, B):
        """B [K, N] -> the zero-padded [K_pad, N] copy cuSPARSE reads (in the value dtype)."""
        out = self._cupy.zeros((self.padded_shape[1], B.shape[1]), dtype=self._np_dtype)
        out[:B.shape[0]] = B
        return out

    def padded_c(self, N: int):
        return self._cupy.empty((self.padded_shape[0], N), dtype=self._np_dtype)

    def run(self, Bp, Cp):
        """Cp = A @ Bp on padded operands (C's first M rows are A @ B)."""
        cs, N = self._cs, int(Bp.shape[1])
        key = (Bp.data.ptr, Cp.data.ptr, N)
        op = cs.CUSPARSE_OPERATION_NON_TRANSPOSE
        if key not in self._per_n:
            b = cs.createDnMat(self.padded_shape[1], N, N, Bp.data.ptr, self._ctype, cs.CUSPARSE_ORDER_ROW)
            c = cs.createDnMat(self.padded_shape[0], N, N, Cp.data.ptr, self._ctype, cs.CUSPARSE_ORDER_ROW)
            size = cs.spMM_bufferSize(self.handle, op, op, self._alpha.ctypes.data, self.descr_a, b,
                                      self._beta.ctypes.data, c, CUDA_R_32F, BSR_ALG1)
            self._per_n[key] = {"b": b, "c": c, "buf": self._cupy.empty(max(int(size), 1), dtype=self._cupy.uint8)}
        b, c, buf = (self._per_n[key][k] for k in ("b", "c", "buf"))
        self._lib.cusparseSetStream(self.handle, self._cupy.cuda.get_current_stream().ptr)
        status = self._lib.cusparseSpMM(self.handle, op, op, self._alpha.ctypes.data, self.descr_a, b,
                                        self._beta.ctypes.data, c, CUDA_R_32F, BSR_ALG1, buf.data.ptr)
        if status != 0:
            raise RuntimeError(f"cusparseSpMM(BSR_ALG1) returned cusparseStatus_t {status}")
        return Cp
