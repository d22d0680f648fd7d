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
from storage.features import node_array_names, read_node_array, write_node_array  # noqa: E402 (needs store)

__all__ = ["BlockStore", "MatrixStore", "perm_key", "validate_id", "default_data_root", "load_csr",
           "load_edge_index", "load_node_array", "node_array_names", "read_node_array", "write_node_array"]


def load_csr(matrix_id: str, data_root: str | os.PathLike | None = None) -> sp.csr_array:
    """The stored canonical CSR of ``matrix_id`` (data root: argument, else ``TCSPMM_DATA``, else ``./data``)."""
    return BlockStore(data_root).matrix(matrix_id).read_csr()


def load_node_array(matrix_id: str, name: str, data_root: str | os.PathLike | None = None) -> np.ndarray:
    """A stored node array (``feat`` [N, F], ``label_19`` [N], ...) of ``matrix_id`` in the CSR's node order."""
    return read_node_array(BlockStore(data_root).matrix(matrix_id), name)


def load_edge_index(matrix_id: str, data_root: str | os.PathLike | None = None) -> np.ndarray:
    """PyG ``edge_index`` [2, nnz] int64: row 0 = source = column index, row 1 = destination = row index."""
    return BlockStore(data_root).matrix(matrix_id).read_edge_index()
