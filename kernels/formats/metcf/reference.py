"""ME-TCF's float64 NumPy twin: `metcf_spmm(M, B)` is C = A @ B computed from the ME-TCF arrays alone (the inverse
index map row = 16 * window + r, col = sparse_a_to_b[block, c]), so a wrong conversion shows up as a wrong product.
Returns a float64 ndarray of shape (M, N) for B of shape (K, N), or (M,) for B of shape (K,). No GPU, no CuPy.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from kernels.formats.blocks import window_chunks
from kernels.formats.metcf.container import METCF, WINDOW, expand
from kernels.reference import as_float64_dense

# Windows per chunk are sized so a chunk's expanded triplets stay near this many nonzeros (~100 MB of temporaries).
DEFAULT_CHUNK_NNZ = 1 << 22


def metcf_spmm(M: METCF, B, *, chunk_nnz: int = DEFAULT_CHUNK_NNZ) -> np.ndarray:
    """C = A @ B in float64 from the ME-TCF arrays, one chunk of consecutive windows at a time.

    Each chunk expands its nonzeros to (row, col, value) triplets through the inverse map and multiplies them
    with SciPy's CSR kernel (sums in float64, same per-row column order as A's canonical CSR), so the result
    matches `csr_spmm` up to float rounding. Memory: O(chunk_nnz) plus C.
    """
    n_rows, n_cols = (int(s) for s in M.shape)
    B64 = as_float64_dense(B, n_cols)
    C = np.zeros((n_rows,) + B64.shape[1:], dtype=np.float64)
    if M.nnz == 0:
        return C
    wptr = M.tc_offset[M.row_window_offset].astype(np.int64)  # nonzeros before each window
    bounds = window_chunks(wptr, chunk_nnz)
    for w0, w1 in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if wptr[w0] == wptr[w1]:
            continue
        rows, cols, data = expand(M, w0, w1)
        r0, r1 = w0 * WINDOW, min(w1 * WINDOW, n_rows)
        # COO -> CSR sorts by (row, col) and keeps explicit zeros; ME-TCF has no duplicates to sum.
        chunk = sp.csr_array((data.astype(np.float64), (rows - r0, cols)), shape=(r1 - r0, n_cols))
        C[r0:r1] = chunk @ B64
    return C
