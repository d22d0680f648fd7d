"""IGB homogeneous graphs: ``edge_index.npy`` from the extracted archive to an adjacency matrix.

Orientation (PyG convention): ``A[dst, src] = 1`` for every edge ``src -> dst``, so row i of ``A @ X`` sums the
features of the sources of i's incoming edges (message passing from sources to destinations). Column 0 of
``edge_index`` is the source, column 1 the destination. ``n`` is the row count of ``node_feat.npy`` (header only,
memory-mapped) when present, else the largest id + 1. Values are float32 ones; repeated edges sum. Both sizes
(edges from ``edge_index.npy``'s header, nodes from ``node_feat.npy``'s) are checked against the memory limit before
the edge list is read (``tasks.parse.sizes``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from configs.errors import FetchError, InputError
from configs.limits import Limits
from tasks.fetch.spec import RawMatrix
from tasks.parse.archive import extract_tar
from tasks.parse.csr import coo_to_csr
from tasks.parse.sizes import check_csr_memory


def extract(raw: RawMatrix, data_root: Path) -> Path:
    """The extracted archive folder (``data_root/extracted/<sha256>``), extracting it on first use."""
    if raw.kind != "igb" or raw.path is None:
        raise InputError(f"{raw.spec}: not an IGB matrix")
    return extract_tar(raw.path, raw.sha256, data_root, raw.source_url)


def load_igb(raw: RawMatrix, data_root: Path, limits: Limits | None = None) -> tuple[sp.csr_array, dict]:
    """Adjacency ``A[dst, src]`` of the citation graph, and meta (nodes, edges, orientation, members)."""
    root = extract(raw, data_root)
    member = raw.params["edge_index"]
    path = root / member
    if not path.is_file():
        raise FetchError(f"archive {raw.source_url} has no member {member}")
    try:
        edges = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as err:
        raise InputError(f"{raw.source_url}: {member} is not a readable .npy file: {err}") from err
    if edges.ndim != 2 or edges.shape[1] != 2 or edges.dtype.kind not in "iu":
        raise InputError(f"{raw.source_url}: {member} has shape {edges.shape} dtype {edges.dtype}, "
                         f"expected integer [E, 2]")
    n_edges = int(edges.shape[0])
    n_nodes = node_count(root / raw.params["node_feat"])
    # min/max over the memory map: nothing is allocated from the edge count yet
    low = int(edges.min()) if n_edges else 0
    high = int(edges.max()) if n_edges else -1
    if n_nodes is None:
        n_nodes = high + 1
    # int64 copies of both columns beside the CSR (float32 ones)
    check_csr_memory(f"igb:{raw.params['size']}", (n_nodes, n_nodes), n_edges, 4, limits, extra_bytes=16 * n_edges)
    src, dst = np.asarray(edges[:, 0], dtype=np.int64), np.asarray(edges[:, 1], dtype=np.int64)
    if low < 0 or high >= n_nodes:
        bad = low if low < 0 else high
        raise InputError(f"{raw.source_url}: {member} holds node id {bad}, outside [0, {n_nodes}) "
                         f"(the row count of node_feat.npy)")
    A = coo_to_csr(dst, src, np.ones(src.size, dtype=np.float32), (n_nodes, n_nodes))
    meta = {"field": "pattern", "symmetry": "general", "orientation": "A[dst, src]", "edges": int(src.size),
            "nonzero_entries": int(A.nnz)}
    return A, meta


def node_count(feat_path: Path) -> int | None:
    """Rows of ``node_feat.npy`` read from its header only (no data read, nothing mapped); None when absent."""
    if not feat_path.is_file():
        return None
    try:
        with open(feat_path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, _ = read(f)
    except ValueError as err:
        raise InputError(f"{feat_path.name} is not a readable .npy file: {err}") from err
    if not shape or int(shape[0]) < 0:
        raise InputError(f"{feat_path.name} has shape {shape}, expected [N, F]")
    return int(shape[0])


def load_features(raw: RawMatrix, data_root: Path) -> np.ndarray | None:
    """Node features ``[N, F]`` float32, memory-mapped from the extracted archive; None when it has none."""
    path = extract(raw, data_root) / raw.params["node_feat"]
    return np.load(path, mmap_mode="r", allow_pickle=False) if path.is_file() else None
