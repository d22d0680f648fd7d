"""A ``gnn.Graph`` as PyTorch Geometric and DGL objects, zero-copy on the CPU (``torch.from_numpy`` shares the
NumPy buffers; moving to a CUDA ``device`` copies once).

- ``to_torch_csr(graph)``: ``torch.sparse_csr_tensor`` of ``A[dst, src]`` = PyG's ``adj_t`` (its GCNConv and
  GATConv take it in place of ``edge_index``).
- ``to_pyg(graph)``: a ``torch_geometric.data.Data`` (``x``, ``y``, ``edge_index`` as PyG's ``EdgeIndex`` sorted by
  destination, ``edge_weight``, ``adj_t``; ``adj_t_sparse`` a ``torch_sparse.SparseTensor`` where torch_sparse
  imports); without PyG a ``types.SimpleNamespace`` with the same attributes and a plain ``edge_index`` tensor.
- ``to_dgl(graph)``: ``dgl.graph((src, dst))`` with ``ndata["feat"]``, ``ndata["label"]``, ``edata["w"]``; needs DGL.
"""
from __future__ import annotations

import types
import warnings

import numpy as np
import torch


def _t(array: np.ndarray | None, device=None) -> torch.Tensor | None:
    if array is None:
        return None
    t = torch.from_numpy(np.ascontiguousarray(array))  # zero-copy for the store's (contiguous, writable) arrays
    return t if device is None else t.to(device)


def to_torch_csr(graph, device=None) -> torch.Tensor:
    A = graph.adj
    idx = np.int64 if max(A.indptr[-1], A.shape[0]) >= 2**31 else A.indices.dtype
    crow, col = _t(A.indptr.astype(idx, copy=False)), _t(A.indices.astype(idx, copy=False))
    # the store's CSR is canonical (sorted, in range: storage checks it on write), so torch need not re-check it
    with warnings.catch_warnings():  # torch's once-per-process "CSR support is in beta" note is not actionable
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)
        warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly", category=UserWarning)
        t = torch.sparse_csr_tensor(crow, col, _t(A.data), size=A.shape, check_invariants=False)
    return t if device is None else t.to(device)


def to_pyg(graph, device=None):
    """PyG-style tensors of ``graph`` (see the module docstring)."""
    edge_index = _t(graph.edge_index, device)
    attrs = {"x": _t(graph.x, device), "y": _t(graph.y, device), "edge_weight": _t(graph.adj.data, device),
             "adj_t": to_torch_csr(graph, device), "num_nodes": graph.num_nodes}
    try:
        from torch_geometric.data import Data
    except ImportError:
        return types.SimpleNamespace(edge_index=edge_index, **attrs)
    try:
        from torch_geometric import EdgeIndex

        edge_index = EdgeIndex(edge_index, sparse_size=(graph.num_nodes, graph.num_nodes), sort_order="col")
    except ImportError:  # PyG before 2.5: a plain tensor
        pass
    try:
        from torch_sparse import SparseTensor

        A = graph.adj
        attrs["adj_t_sparse"] = SparseTensor(rowptr=_t(A.indptr.astype(np.int64), device),
                                             col=_t(A.indices.astype(np.int64), device), value=_t(A.data, device),
                                             sparse_sizes=A.shape, is_sorted=True, trust_data=True)
    except ImportError:
        pass
    return Data(edge_index=edge_index, **attrs)


def to_dgl(graph, device=None):
    """``dgl.graph`` of ``graph`` (edges src -> dst, CSR order) with its node arrays and edge weights."""
    try:
        import dgl
    except Exception as err:  # DGL without a GraphBolt build for this torch raises FileNotFoundError on import
        import torch

        raise ImportError(f"gnn.to_dgl needs DGL built for torch {torch.__version__.split('+')[0]}: import dgl "
                          f"failed ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); see the "
                          "README, \"DGL\"") from err
    ei = _t(graph.edge_index)
    g = dgl.graph((ei[0], ei[1]), num_nodes=graph.num_nodes)
    g.edata["w"] = _t(graph.adj.data)
    for name, array in graph.node_data.items():
        g.ndata["label" if name == graph.label else name] = _t(array)
    return g if device is None else g.to(device)
