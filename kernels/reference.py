"""Float64 NumPy/SciPy references every SpMM and SDDMM kernel is tested against.

- `csr_spmm(A, B)`: C = A @ B with SciPy in float64 (the ground truth). Returns a float64 ndarray of shape (M, N)
  for B of shape (K, N), or (M,) for B of shape (K,).
- `csr_sddmm(S, A, B)`: (A @ B^T) (.) S at S's nonzeros in float64, in S's CSR order (the ground truth of SDDMM,
  and the CSR route's twin; `kernels.sddmm` re-exports it).
- `sddmm_scale(S)`: what an SDDMM kernel on S's CSR multiplies its dot products by: S's values, or None where all
  are one (the x S skipped: attention patterns).
Each format's own twin lives in its folder (ME-TCF: `kernels.formats.metcf.reference.metcf_spmm`). No GPU, no CuPy.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from storage.indexing import segment_ids


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


def csr_sddmm(S: sp.csr_array, A, B) -> np.ndarray:
    """float64 twin on CSR: out[k] = S.data[k] * (A[row_k] . B[col_k]) in S's CSR order."""
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    rows = segment_ids(S.indptr)
    cols = S.indices.astype(np.int64)
    out = np.empty(S.nnz)
    step = max(1, (1 << 22) // max(A.shape[1], 1))
    for k0 in range(0, S.nnz, step):  # chunks of nonzeros: temporaries stay ~32 MB
        k1 = min(S.nnz, k0 + step)
        out[k0:k1] = np.einsum("ij,ij->i", A[rows[k0:k1]], B[cols[k0:k1]])
    return out * np.asarray(S.data, dtype=np.float64)


def sddmm_scale(S: sp.csr_array) -> np.ndarray | None:
    """S's values (``S.data``), or None where every one is 1: the CSR routes (the CUDA-core kernel, cuSPARSE) then
    skip the x S."""
    return None if bool(np.all(S.data == 1)) else S.data
