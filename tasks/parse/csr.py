"""Canonical CSR (docs/architecture.md): sorted indices, duplicates summed, explicit zeros kept, index dtype from
``storage.indexing.index_dtype(max(shape), nnz)`` for both ``indptr`` and ``indices``."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from storage.indexing import index_dtype


def coo_to_csr(rows: np.ndarray, cols: np.ndarray, data: np.ndarray, shape: tuple[int, int]) -> sp.csr_array:
    """Canonical CSR from 0-based coordinates (duplicates summed, explicit zeros and their positions kept)."""
    A = sp.coo_array((data, (rows, cols)), shape=shape).tocsr()
    A.sum_duplicates()  # no-op when tocsr already summed; makes the canonical form explicit
    return with_index_dtype(A)


def with_index_dtype(A: sp.csr_array) -> sp.csr_array:
    """Cast ``indptr``/``indices`` in place to ``index_dtype(max(shape), nnz)``; return ``A``."""
    idx = index_dtype(max(A.shape), A.nnz)
    A.indices = A.indices.astype(idx, copy=False)
    A.indptr = A.indptr.astype(idx, copy=False)
    return A


def drop_explicit_zeros(A: sp.csr_array) -> sp.csr_array:
    A.eliminate_zeros()
    return with_index_dtype(A)
