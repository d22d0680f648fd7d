"""Baseline: cuSPARSE BSR SpMM (CUSPARSE_FORMAT_BSR via cusparseCreateBsr, CUSPARSE_SPMM_BSR_ALG1), C = A @ B with A
in BSR (b x b dense blocks on a fixed grid: the same blocks as our `bcsr` format at b = 16), B and C dense
row-major, FP32 compute, values float32, float16 or bfloat16 (uint16 bits).

The blocks are built by kernels.formats.bcsr.container (16 x 16; for float32 also 16 x 16, since cuSPARSE's BSR SpMM takes
square blocks, so TF32 comparisons are at 16 x 16, ours at 16 x 8). Rows and columns are padded to multiples of
b; `run` takes B and C already padded (``padded_b`` / ``padded_c``), so a timed call moves only what cuSPARSE moves.
cuSPARSE is reached through nvmath-python's bindings, as in kernels.cusparse.
"""
from __future__ import annotations

import numpy as np

from kernels.cusparse import checked
from kernels.cusparse_blocks import PaddedBlockSpmm
from kernels.formats.bcsr.container import csr_to_bcsr
from kernels.precision import precision

BSR_ALG1 = 14  # cusparseSpMMAlg_t CUSPARSE_SPMM_BSR_ALG1


class CusparseBsr(PaddedBlockSpmm):
    """A (SciPy sparse) in BSR with b x b blocks on the current device, in ``dtype``'s storage."""

    ALGORITHM, ALGORITHM_NAME = BSR_ALG1, "BSR_ALG1"

    def __init__(self, A, *, block: int = 16, dtype: str = "float16"):
        import cupy

        if block != 16:
            raise ValueError(f"block is {block}; this baseline builds 16 x 16 blocks (kernels.formats.bcsr.container)")
        p = precision(dtype)
        X = csr_to_bcsr(A, width=16, to_storage=p.to_storage)
        self._setup(dtype)
        ncs = self._ncs
        self.block, self.n_blocks = block, X.n_blocks
        self.shape = (int(A.shape[0]), int(A.shape[1]))
        self.padded_shape = (X.n_block_rows * block, -(-self.shape[1] // block) * block)
        self.indptr = cupy.asarray(X.indptr.astype(np.int32))
        self.indices = cupy.asarray(X.indices.astype(np.int32)) if X.n_blocks else cupy.zeros(1, cupy.int32)
        data = X.data if X.n_blocks else np.zeros((1, block, block), dtype=X.data.dtype)
        self.values = cupy.asarray(np.ascontiguousarray(data))
        # create_bsr(block rows, block cols, blocks, row block size, col block size, indptr, indices, values,
        #            indptr type, indices type, base, value type, order within a block: row-major) -> descr
        i32 = int(ncs.IndexType.INDEX_32I)
        self.descr_a = checked(ncs, "cusparseCreateBsr", ncs.create_bsr, X.n_block_rows,
                               self.padded_shape[1] // block, X.n_blocks, block, block, self.indptr.data.ptr,
                               self.indices.data.ptr, self.values.data.ptr, i32, i32, int(ncs.IndexBase.ZERO),
                               self._ctype, self._order)
