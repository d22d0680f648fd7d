"""Node data and GCN variants in the store (plain functions; the ingest stage calls ``ingest_node_data``).

- ``ingest_node_data(raw, data_root, matrix_id)``: an IGB archive's ``node_feat.npy`` (float32 [N, F]),
  ``node_label_19.npy`` and ``node_label_2K.npy`` (float in the archive, integral) stored as node arrays ``feat``,
  ``label_19``, ``label_2K`` (labels int64) next to the matrix; other sources carry no node data. Reused when stored.
- ``gcn_variant(matrix_id, data_root)``: the GCN propagation matrix ``D^-1/2 (A + I) D^-1/2`` of a stored matrix
  as the stored matrix ``<matrix_id>.gcn`` (float32, meta ``normalization: gcn``), which the reorder and convert
  stages then treat like any other; ``gnn.load`` finds its node arrays under ``<matrix_id>``.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from configs.errors import InputError
from storage import BlockStore
from storage.features import has_node_array, write_node_array
from tasks.normalize import gcn_norm

IGB_NODE_FILES = {"feat": "node_feat.npy", "label_19": "node_label_19.npy", "label_2K": "node_label_2K.npy"}
GCN_SUFFIX = ".gcn"


def igb_node_paths(raw, data_root: Path) -> dict[str, Path]:
    """Node arrays present in the extracted IGB archive, by stored name."""
    from tasks.parse.igb import extract

    folder = (extract(raw, Path(data_root)) / raw.params["node_feat"]).parent
    return {name: folder / f for name, f in IGB_NODE_FILES.items() if (folder / f).is_file()}


def as_labels(values: np.ndarray, source: str) -> np.ndarray:
    """Integral float labels as int64; NaN (an unlabelled node) becomes -1."""
    v = np.asarray(values)
    if v.dtype.kind in "iu":
        return v.astype(np.int64)
    nan = np.isnan(v)
    if not np.array_equal(v[~nan], np.round(v[~nan])):
        raise InputError(f"{source}: labels are not integral")
    out = np.where(nan, -1, v).astype(np.int64)
    return out


def ingest_node_data(raw, data_root, matrix_id: str) -> dict:
    """Store the source's node arrays next to ``matrix_id`` (IGB only). Returns ``{"node_arrays": [...],
    "node_ms": ...}``; arrays already stored are kept."""
    t0 = time.perf_counter()
    if raw.kind != "igb":
        return {"node_arrays": [], "node_ms": 0.0}
    mstore = BlockStore(data_root).matrix(matrix_id)
    stored = []
    for name, path in igb_node_paths(raw, data_root).items():
        if not has_node_array(mstore, name):
            array = np.load(path, mmap_mode="r", allow_pickle=False)
            source = f"{raw.source_url}: {path.name}"
            array = np.asarray(array, dtype=np.float32) if name == "feat" else as_labels(array, source)
            write_node_array(mstore, name, array, {"source_url": raw.source_url, "member": path.name})
        stored.append(name)
    return {"node_arrays": stored, "node_ms": (time.perf_counter() - t0) * 1e3}


def gcn_variant(matrix_id: str, data_root, *, add_self_loops: bool = True) -> dict:
    """Store ``D^-1/2 (A + I) D^-1/2`` of the stored ``matrix_id`` as ``<matrix_id>.gcn`` (reused when stored)."""
    store = BlockStore(data_root)
    variant = matrix_id + GCN_SUFFIX + ("" if add_self_loops else "-noloops")
    target = store.matrix(variant)
    reused = target.has_csr()
    if not reused:
        source = store.matrix(matrix_id)
        A = gcn_norm(source.read_csr(), add_self_loops=add_self_loops, dtype=np.float32)
        target.write_csr(A, {**source.csr_meta().get("source", {}), "matrix_id": variant, "base_matrix": matrix_id,
                             "normalization": "gcn", "self_loops": add_self_loops})
    meta = target.csr_meta()
    return {"matrix_id": variant, "base_matrix": matrix_id, "shape": tuple(meta["shape"]), "nnz": int(meta["nnz"]),
            "reused": reused}
