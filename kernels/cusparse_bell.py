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

from kernels.cusparse import checked
from kernels.cusparse_blocks import PaddedBlockSpmm
from kernels.precision import precision
from storage.indexing import segment_ids

BLOCKED_ELL_ALG1 = 13  # cusparseSpMMAlg_t
MAX_BYTES = 4 << 30  # refuse Blocked-ELL layouts above this many bytes of values


def plan_blocked_ell(A, block: int = 16) -> dict:
    """Block rows, the longest block row's nonzero blocks (ell_blocks) and the value bytes (2-byte values) of A in
    Blocked-ELL, without building it."""
    A = sp.csr_array(A)
    rows = segment_ids(A.indptr) // block
    key = np.unique(rows * (-(-A.shape[1] // block)) + A.indices.astype(np.int64) // block)
    n_brows = -(-A.shape[0] // block)
    per_brow = np.bincount(key // max(-(-A.shape[1] // block), 1), minlength=n_brows)
    ell_blocks = int(per_brow.max()) if per_brow.size else 0
    return {"block": block, "block_rows": n_brows, "ell_blocks": ell_blocks, "nonzero_blocks": int(key.size),
            "value_bytes": n_brows * block * ell_blocks * block * 2,
            "fill": A.nnz / max(n_brows * ell_blocks * block * block, 1)}


class CusparseBlockedEll(PaddedBlockSpmm):
    """A (SciPy sparse) in Blocked-ELL on the current device, half precision values ("float16" or "bfloat16")."""

    ALGORITHM, ALGORITHM_NAME = BLOCKED_ELL_ALG1, "BLOCKED_ELL_ALG1"

    def __init__(self, A, *, block: int = 16, dtype: str = "float16", max_bytes: int = MAX_BYTES):
        import cupy

        A = sp.csr_array(A)
        info = plan_blocked_ell(A, block)
        if info["value_bytes"] > max_bytes:
            raise ValueError(f"Blocked-ELL does not apply: padding every block row to the longest "
                             f"({info['ell_blocks']} blocks of {block}x{block}) takes "
                             f"{info['value_bytes'] / 2**30:.1f} GiB > {max_bytes / 2**30:.1f} GiB")
        self._setup(dtype)
        ncs = self._ncs
        self.info, self.block = info, block
        self.shape = (int(A.shape[0]), int(A.shape[1]))
        self.padded_shape = (info["block_rows"] * block, -(-self.shape[1] // block) * block)
        nbc = self.padded_shape[1] // block
        rows = segment_ids(A.indptr)
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
        self.values = cupy.asarray(precision(dtype).to_storage(values).astype(self._np_dtype, copy=False))
        # create_blocked_ell(rows, cols, block size, ell_cols, col_ind, values, index type, base, value type) -> descr
        self.descr_a = checked(ncs, "cusparseCreateBlockedEll", ncs.create_blocked_ell, self.padded_shape[0],
                               self.padded_shape[1], block, ell * block, self.col_ind.data.ptr, self.values.data.ptr,
                               int(ncs.IndexType.INDEX_32I), int(ncs.IndexBase.ZERO), self._ctype)
