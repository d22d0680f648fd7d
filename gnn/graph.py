"""``gnn.load(matrix_id)``: a stored matrix as a ``Graph`` (adjacency, row order for the Tensor Core kernels, node
features and labels), read from the block store. NumPy and SciPy only; the torch side is in gnn.layers/adapters.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import scipy.sparse as sp

from configs.errors import InputError
from storage import BlockStore
from storage.features import node_array_names, read_node_array
from storage.indexing import segment_ids

VARIANT_SUFFIXES = (".gcn-noloops", ".gcn")  # tasks.features.gcn_variant's ids; node data lives with the base


@dataclasses.dataclass
class Graph:
    """One stored graph. ``adj`` is ``A[dst, src]`` (PyG's message passing ``out = A @ x``) in the stored node
    order, which is also the order of every node array and of the features a layer takes and returns; ``perm``
    (``perm[new] = old``) is the row order the Tensor Core kernels run in, applied inside ``gnn.SparseOp``."""

    matrix_id: str
    adj: sp.csr_array
    perm: np.ndarray | None = None
    perm_key: str | None = None
    node_data: dict = dataclasses.field(default_factory=dict)
    label: str | None = None
    meta: dict = dataclasses.field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.adj.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.adj.nnz)

    @property
    def normalized(self) -> bool:
        """True for a stored GCN variant: ``adj`` is ``D^-1/2 (A + I) D^-1/2`` already."""
        return self.meta.get("normalization") == "gcn"

    @property
    def x(self) -> np.ndarray | None:
        return self.node_data.get("feat")

    @property
    def y(self) -> np.ndarray | None:
        return self.node_data.get(self.label) if self.label else None

    @property
    def edge_index(self) -> np.ndarray:
        """[2, E] int64: row 0 = source = column j, row 1 = destination = row i of A[i, j], in CSR order (sorted
        by destination), pairing with ``adj.data`` as edge weights."""
        out = np.empty((2, self.adj.nnz), dtype=np.int64)
        out[0] = self.adj.indices
        out[1] = segment_ids(self.adj.indptr)
        return out


def base_id(matrix_id: str) -> str:
    """The matrix a stored variant was derived from (``igb.tiny.gcn`` -> ``igb.tiny``); the id itself otherwise."""
    for suffix in VARIANT_SUFFIXES:
        if matrix_id.endswith(suffix):
            return matrix_id[: -len(suffix)]
    return matrix_id


def stored_perm_key(mstore) -> str | None:
    """The permutation of the most recently converted format of this matrix (what the pipeline ran), or None."""
    best = None
    for name, entry in mstore.manifest.read()["artifacts"].items():
        key = entry.get("meta", {}).get("source", {}).get("perm_key")
        if entry.get("kind") == "format" and key and mstore.has_perm(key) and mstore.manifest.complete(name):
            if best is None or entry.get("written_at", "") > best[0]:
                best = (entry.get("written_at", ""), key)
    return None if best is None else best[1]


def load(matrix_id: str, data_root: str | os.PathLike | None = None, *, perm: str | None = "auto",
         node_data: bool | list[str] = True, label: str | None = None) -> Graph:
    """The stored graph ``matrix_id`` with its node arrays.

    ``perm``: "auto" (the order the pipeline last converted the matrix in, else none), a stored perm key, or None.
    ``node_data``: True (every stored node array), False, or a list of names; arrays of a variant (``.gcn``) come
    from its base matrix. ``label``: the array ``Graph.y`` returns (default ``label_19``, else ``label``, else the
    first ``label*`` stored).
    """
    store = BlockStore(data_root)
    mstore = store.matrix(matrix_id)
    adj = mstore.read_csr()
    if adj.shape[0] != adj.shape[1]:
        raise InputError(f"gnn.load: matrix {matrix_id!r} has shape {adj.shape}; a graph needs a square adjacency")
    key = stored_perm_key(mstore) if perm == "auto" else perm
    order = None
    if key is not None:
        order = mstore.read_perm(key)
        if order is None:
            raise InputError(f"gnn.load: matrix {matrix_id!r} has no complete permutation {key!r}; run the reorder "
                             f"stage or pass perm=None")
    arrays = {}
    if node_data:
        home = mstore if node_array_names(mstore) else store.matrix(base_id(matrix_id))
        names = node_array_names(home) if node_data is True else list(node_data)
        arrays = {name: read_node_array(home, name) for name in names}
        for name, array in arrays.items():
            if len(array) != adj.shape[0]:
                raise InputError(f"gnn.load: node array {name!r} has {len(array)} rows, matrix {matrix_id!r} has "
                                 f"{adj.shape[0]} nodes")
    labels = [n for n in arrays if n.startswith("label")]
    if label is None:
        label = next((n for n in ("label_19", "label") if n in arrays), labels[0] if labels else None)
    elif label not in arrays:
        raise InputError(f"gnn.load: matrix {matrix_id!r} has no node array {label!r}; stored: {sorted(arrays)}")
    return Graph(matrix_id, adj, order, key, arrays, label, dict(mstore.csr_meta().get("source", {})))
