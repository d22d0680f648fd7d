"""The Parquet block store: layout, schemas, atomic writes, readers. Knows array layouts, not algorithms.

Entry points: ``BlockStore(data_root).matrix(matrix_id)`` (see ``storage.store``), ``perm_key(method, params)``,
and the one-liners for GNN jobs ``load_csr(matrix_id)`` / ``load_edge_index(matrix_id)``.
Never imports Prefect or Dask.
"""
from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from storage.naming import default_data_root, perm_key, validate_id
from storage.store import BlockStore, MatrixStore

__all__ = ["BlockStore", "MatrixStore", "perm_key", "validate_id", "default_data_root", "load_csr",
           "load_edge_index"]


def load_csr(matrix_id: str, data_root: str | os.PathLike | None = None) -> sp.csr_array:
    """The stored canonical CSR of ``matrix_id`` (data root: argument, else ``TCSPMM_DATA``, else ``./data``)."""
    return BlockStore(data_root).matrix(matrix_id).read_csr()


def load_edge_index(matrix_id: str, data_root: str | os.PathLike | None = None) -> np.ndarray:
    """PyG ``edge_index`` [2, nnz] int64: row 0 = source = column index, row 1 = destination = row index."""
    return BlockStore(data_root).matrix(matrix_id).read_edge_index()
