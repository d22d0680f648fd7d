"""Baseline: cuSPARSE Blocked-ELL SpMM (CUSPARSE_SPMM_BLOCKED_ELL_ALG1), cuSPARSE's Tensor Core path for half
precision: C = A @ B with A in Blocked-ELL (b x b dense blocks, every block row padded to the longest one), B and C
dense row-major, FP32 compute.

Blocked-ELL pads each block row to the block row with the most nonzero blocks, so it applies to matrices whose
block rows are alike (meshes, banded, block-sparse DNN weights); `plan_blocked_ell` says how many bytes it would
take, and `CusparseBlockedEll` refuses above a cap (the caller reports "does not apply" with that size). Rows and
columns are padded to multiples of b; `run` takes B and C already padded (``padded_b`` / ``padded_c``) so a timed
call moves only what cuSPARSE moves. cuSPARSE is reached through nvmath-python's bindings, as in kernels.cusparse.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from kernels.cusparse import CUDA_R_32F, VALUE_TYPES, DescriptorOwner, bindings, checked

BLOCKED_ELL_ALG1 = 13  # cusparseSpMMAlg_t
MAX_BYTES = 4 << 30  # refuse Blocked-ELL layouts above this many bytes of values


def plan_blocked_ell(A, block: int = 16) -> dict:
    """Block rows, the longest block row's nonzero blocks (ell_blocks) and the value bytes (2-byte values) of A in
    Blocked-ELL, without building it."""
    A = sp.csr_array(A)
    rows = np.repeat(np.arange(A.shape[0], dtype=np.int64), np.diff(A.indptr)) // block
    key = np.unique(rows * (-(-A.shape[1] // block)) + A.indices.astype(np.int64) // block)
    n_brows = -(-A.shape[0] // block)
    per_brow = np.bincount(key // max(-(-A.shape[1] // block), 1), minlength=n_brows)
    ell_blocks = int(per_brow.max()) if per_brow.size else 0
    return {"block": block, "block_rows": n_brows, "ell_blocks": ell_blocks, "nonzero_blocks": int(key.size),
            "value_bytes": n_brows * block * ell_blocks * block * 2,
            "fill": A.nnz / max(n_brows * ell_blocks * block * block, 1)}


class CusparseBlockedEll(DescriptorOwner):
    """A (SciPy sparse) in Blocked-ELL on the current device, half precision values ("float16" or "bfloat16")."""

    def __init__(self, A, *, block: int = 16, dtype: str = "float16", max_bytes: int = MAX_BYTES):
        import cupy

        from kernels.precision import precision

        A = sp.csr_array(A)
        info = plan_blocked_ell(A, block)
        if info["value_bytes"] > max_bytes:
            raise ValueError(f"Blocked-ELL does not apply: padding every block row to the longest "
                             f"({info['ell_blocks']} blocks of {block}x{block}) takes "
                             f"{info['value_bytes'] / 2**30:.1f} GiB > {max_bytes / 2**30:.1f} GiB")
        self.info, self.block, self.dtype = info, block, dtype
        ncs = bindings()
        self._ncs, self._cupy, self.descr_a = ncs, cupy, 0
        self._per_n: dict = {}  # (B ptr, C ptr, N) -> {"b", "c": descriptors, "buf", "args": sp_mm's arguments}
        self._ctype, np_dtype = VALUE_TYPES[dtype]
        self.shape = (int(A.shape[0]), int(A.shape[1]))
        self.padded_shape = (info["block_rows"] * block, -(-self.shape[1] // block) * block)
        nbc = self.padded_shape[1] // block
        rows = np.repeat(np.arange(self.shape[0], dtype=np.int64), np.diff(A.indptr))
        cols = A.indices.astype(np.int64)
        brow, bcol = rows // block, cols // block
        key = brow * nbc + bcol
        ukey, inverse = np.unique(key, return_inverse=True)
        ub = ukey // nbc
        first = np.searchsorted(ub, np.arange(info["block_rows"]))
        slot = np.arange(ukey.size) - first[ub]  # position of each block in its block row
        ell = max(info["ell_blocks"], 1)
        col_ind = np.full((info["block_rows"], ell), -1, dtype=np.int32)
        col_ind[ub, slot] = (ukey % nbc).astype(np.int32)
        values = np.zeros((self.padded_shape[0], ell * block), dtype=np.float32)
        values[rows, slot[inverse] * block + cols % block] = A.data
        self.col_ind = cupy.asarray(col_ind)
        self.values = cupy.asarray(precision(dtype).to_storage(values).astype(np_dtype, copy=False))
        self._np_dtype = np_dtype
        # create_blocked_ell(rows, cols, block size, ell_cols, col_ind, values, index type, base, value type) -> descr
        self.descr_a = checked(ncs, "cusparseCreateBlockedEll", ncs.create_blocked_ell, self.padded_shape[0],
                               self.padded_shape[1], block, ell * block, self.col_ind.data.ptr, self.values.data.ptr,
                               int(ncs.IndexType.INDEX_32I), int(ncs.IndexBase.ZERO), self._ctype)
        self.handle = cupy.cuda.device.get_cusparse_handle()
        self._op, self._order = int(ncs.Operation.NON_TRANSPOSE), int(ncs.Order.ROW)
        self._alpha, self._beta = np.ones(1, np.float32), np.zeros(1, np.float32)

    def padded_b(self, B):
        """B [K, N] -> the zero-padded [K_pad, N] copy cuSPARSE reads (in the value dtype)."""
        cupy = self._cupy
        out = cupy.zeros((self.padded_shape[1], B.shape[1]), dtype=self._np_dtype)
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
            raise RuntimeError(f"cusparseSetStream or cusparseSpMM(BLOCKED_ELL_ALG1) returned {err}") from err
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
                self._beta.ctypes.data, st["c"], CUDA_R_32F, BLOCKED_ELL_ALG1)
        size = checked(ncs, "cusparseSpMM_bufferSize(BLOCKED_ELL_ALG1)", ncs.sp_mm_buffer_size, *args)
        st["buf"] = cupy.empty(max(int(size), 1), dtype=cupy.uint8)
        st["args"] = (*args, st["buf"].data.ptr)
        return st
