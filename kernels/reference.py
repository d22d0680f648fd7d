"""Float64 NumPy/SciPy references every SpMM kernel is tested against.

- `csr_spmm(A, B)`: C = A @ B with SciPy in float64 (the ground truth).
Each format's own twin lives in its folder (ME-TCF: `kernels.formats.metcf.reference.metcf_spmm`).
Returns a float64 ndarray of shape (M, N) for B of shape (K, N), or (M,) for B of shape (K,). No GPU, no CuPy.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def as_float64_dense(B, n_rows_expected: int) -> np.ndarray:
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
    B64 = as_float64_dense(B, int(A.shape[1]))
    return np.asarray(A.astype(np.float64) @ B64)
