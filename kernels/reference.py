"""Float64 NumPy/SciPy references every SpMM kernel is tested against.

- `csr_spmm(A, B)`: C = A @ B with SciPy in float64 (the ground truth).
- `metcf_spmm(M, B)`: C = A @ B computed from the ME-TCF arrays alone (the inverse index map
  row = 16 * window + r, col = sparse_a_to_b[block, c]), so a wrong conversion shows up as a wrong product.
Both return a float64 ndarray of shape (M, N) for B of shape (K, N), or (M,) for B of shape (K,). No GPU, no CuPy.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from kernels.formats.metcf import METCF, WINDOW, expand, window_chunks

# Windows per chunk are sized so a chunk's expanded triplets stay near this many nonzeros (~100 MB of temporaries).
DEFAULT_CHUNK_NNZ = 1 << 22


def _as_float64_dense(B, n_rows_expected: int) -> np.ndarray:
    B = np.asarray(B)
    if B.ndim not in (1, 2):
        raise ValueError(f"B has {B.ndim} dimensions, expected 1 or 2")
    if B.shape[0] != n_rows_expected:
        raise ValueError(f"B has {B.shape[0]} rows, expected A's column count {n_rows_expected}")
    if np.iscomplexobj(B):
        raise ValueError(f"B has complex dtype {B.dtype}; the references are real float64")
    return B.astype(np.float64, copy=False)


def csr_spmm(A, B) -> np.ndarray:
    """C = A @ B in float64 with SciPy (A any SciPy sparse matrix, B dense (K, N) or (K,))."""
    A = sp.csr_array(A)
    B64 = _as_float64_dense(B, int(A.shape[1]))
    return np.asarray(A.astype(np.float64) @ B64)


def metcf_spmm(M: METCF, B, *, chunk_nnz: int = DEFAULT_CHUNK_NNZ) -> np.ndarray:
    """C = A @ B in float64 from the ME-TCF arrays, one chunk of consecutive windows at a time.

    Each chunk expands its nonzeros to (row, col, value) triplets through the inverse map and multiplies them
    with SciPy's CSR kernel (sums in float64, same per-row column order as A's canonical CSR), so the result
    matches `csr_spmm` up to float rounding. Memory: O(chunk_nnz) plus C.
    """
    n_rows, n_cols = (int(s) for s in M.shape)
    B64 = _as_float64_dense(B, n_cols)
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
