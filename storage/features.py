"""Node arrays next to a matrix: features [N, F] and labels [N], ``matrices/<id>/nodes/<name>/part-<r0>-<r1>.parquet``.

Layout: the dense layout (storage.results): one ``values`` column of the dtype holding the block's row-major
buffer, F Parquet rows per node (version 1 files, one Parquet row per node in a ``fixed_size_list<dtype, F>``
column, still read), so a block's bytes are the array's buffer plus a small header and read back without per-row
work; a 1-D array is stored as [N, 1] with ``ndim: 1`` in its metadata. Rows are nodes in the
stored CSR's order (the original ids), like the CSR itself: a stored permutation applies to both
(``read_node_array(..., perm=perm)`` returns ``array[perm]``, the nodes in the order of ``A[perm]``).
Manifest artifact ``nodes/<name>``; the write/read contract is ``MatrixStore``'s.
"""
from __future__ import annotations

import numpy as np

from configs.errors import InputError
from storage import results as res_io
from storage.naming import validate_id
from storage.store import MatrixStore

PREFIX = "nodes/"


def write_node_array(mstore: MatrixStore, name: str, array, meta: dict | None = None,
                     block_rows: int | None = None) -> dict:
    """Store ``array`` ([N] or [N, F], any NumPy numeric dtype) as node array ``name``; the row count must match
    the stored CSR's node count when a CSR is stored."""
    validate_id(name, "node array name")
    array = np.asarray(array)
    if array.ndim not in (1, 2) or array.dtype.kind not in "biuf":
        raise InputError(f"node array {name!r}: expected a numeric [N] or [N, F] array, got shape {array.shape} "
                         f"dtype {array.dtype}")
    if mstore.has_csr():
        n = int(mstore.csr_meta()["shape"][0])
        if array.shape[0] != n:
            raise InputError(f"node array {name!r} of matrix {mstore.matrix_id!r} has {array.shape[0]} rows, "
                             f"expected the matrix's {n} nodes")
    dense = array.reshape(len(array), -1) if array.ndim == 2 else array.reshape(-1, 1)
    meta = {**(meta or {}), "node_array": name, "ndim": array.ndim}
    # mstore._write_artifact is the store's one writer (atomic files, manifest entry last): node arrays reuse it
    # rather than copying its contract
    return mstore._write_artifact(PREFIX + name, "nodes", PREFIX + name, "C-part-*.parquet",
                                  res_io.result_tables(dense, block_rows, meta), threads=None,
                                  **res_io.write_options(dense.dtype, dense.shape[1]))


def has_node_array(mstore: MatrixStore, name: str) -> bool:
    return mstore.manifest.complete(PREFIX + validate_id(name, "node array name")) is not None


def node_array_names(mstore: MatrixStore) -> list[str]:
    """Names of the complete node arrays of this matrix, sorted."""
    return sorted(a[len(PREFIX):] for a in mstore.artifacts()
                  if a.startswith(PREFIX) and mstore.manifest.complete(a) is not None)


def read_node_array(mstore: MatrixStore, name: str, perm=None) -> np.ndarray:
    """The stored array ([N] or [N, F], dtype as written); ``perm`` (``perm[new] = old``) reorders its rows."""
    entry = mstore.manifest.require(PREFIX + validate_id(name, "node array name"))
    out = res_io.read_dense(mstore.folder, entry, None if perm is None else np.asarray(perm, dtype=np.int64))[0]
    return out.reshape(-1) if entry["meta"].get("source", {}).get("ndim") == 1 else out
