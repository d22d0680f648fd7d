"""GNN consumers of the block store (data flows storage -> gnn): load a stored graph, train on it.

Two lines::

    g = gnn.load("igb.tiny")                               # adjacency, row order, features, labels
    out = gnn.GCNConv(g.x.shape[1], 19)(torch.from_numpy(g.x), g)

Without torch: ``load``/``Graph`` (NumPy/SciPy), ``gcn_norm``/``with_self_loops`` (gnn.norm) and the NumPy twins of
the sparse pieces (gnn.reference). With torch (the ``gnn`` extra): ``SparseOp``, the autograd functions
``spmm``/``linear_spmm``/``edge_spmm``/``sddmm``/``edge_sum``/``edge_softmax``/``edge_attention``
(gnn.functional),
``GCNConv``/``GATConv`` (gnn.layers), ``to_pyg``/``to_torch_csr``/``to_dgl`` (gnn.adapters), imported on first use.
"""
from __future__ import annotations

import importlib

from gnn.graph import Graph, load
from gnn.norm import gcn_norm, with_self_loops

_LAZY = {"SparseOp": "gnn.backend", "spmm": "gnn.functional", "edge_spmm": "gnn.functional",
         "linear_spmm": "gnn.functional", "sddmm": "gnn.functional", "edge_sum": "gnn.functional",
         "edge_softmax": "gnn.functional", "edge_attention": "gnn.functional", "GCNConv": "gnn.layers",
         "GATConv": "gnn.layers",
         "to_pyg": "gnn.adapters", "to_torch_csr": "gnn.adapters", "to_dgl": "gnn.adapters"}

__all__ = ["Graph", "load", "gcn_norm", "with_self_loops", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gnn' has no attribute {name!r}")
