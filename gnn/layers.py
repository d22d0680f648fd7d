"""``GCNConv`` and ``GATConv``: PyTorch Geometric's layers (same parameters, initialisation and math) on tcspmm's
sparse products. ``forward(x, graph)``: ``x`` [N, F] in the user's node order; ``graph`` a ``gnn.Graph``, a SciPy
adjacency ``A[dst, src]``, or a ready ``SparseOp`` (used as the propagation matrix / attention pattern as is).
The propagation operator is built once per graph and cached (PyG's ``cached=True``), and shared by every layer
that builds the same operator of the same graph object (a 2-layer GCN's two layers: one ``SparseOp``, so one set
of plans, converted, uploaded and autotuned once, where each layer used to build its own).
"""
from __future__ import annotations

import math
import weakref

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from gnn.backend import SparseOp
from gnn.functional import edge_attention, edge_spmm, linear_spmm
from gnn.norm import with_self_loops


def _adjacency(graph):
    """(A, perm, already normalised) of a Graph or SciPy matrix."""
    if sp.issparse(graph):
        return graph, None, False
    if hasattr(graph, "adj"):
        return graph.adj, graph.perm, bool(getattr(graph, "normalized", False))
    raise TypeError(f"gnn layer: graph must be a gnn.Graph, a SciPy sparse adjacency or a gnn.SparseOp, "
                    f"got {type(graph).__name__}")


def _glorot(t: torch.Tensor) -> None:
    """PyG's glorot: U(-a, a), a = sqrt(6 / (fan_in + fan_out)) over the last two dims."""
    a = math.sqrt(6.0 / (t.size(-2) + t.size(-1)))
    with torch.no_grad():
        t.uniform_(-a, a)


_SHARED: dict = {}  # id(graph) -> (weakref to graph, {operator key: SparseOp}); entries go with their graph


def shared_op(graph, key: tuple, build) -> SparseOp:
    """The operator ``key`` (what the layer builds: its class and options) of ``graph``, built once per graph object
    and shared by the layers that ask for it; dropped when the graph is collected. A graph that takes no weak
    reference is not shared (built per call site, as before)."""
    entry = _SHARED.get(id(graph))
    if entry is None or entry[0]() is not graph:
        try:
            ref = weakref.ref(graph, lambda _r, gid=id(graph): _SHARED.pop(gid, None))
        except TypeError:  # no weak reference to it: nothing to key a shared cache on
            return build(*_adjacency(graph))
        entry = _SHARED[id(graph)] = (ref, {})
    ops = entry[1]
    if key not in ops:
        ops[key] = build(*_adjacency(graph))
    return ops[key]


class _Cached(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self._cache: tuple | None = None

    def _op(self, graph, build, key: tuple) -> SparseOp:
        if isinstance(graph, SparseOp):
            return graph
        if self._cache is None or self._cache[0]() is not graph:  # weakly held: the layer keeps no graph alive
            self._cache = (_strong_or_weak(graph), shared_op(graph, key, build))
        return self._cache[1]


def _strong_or_weak(graph):
    """A callable returning graph: a weak reference where it takes one."""
    try:
        return weakref.ref(graph)
    except TypeError:
        return lambda: graph


class GCNConv(_Cached):
    """PyG ``GCNConv``: ``out = A_hat @ (x @ W.T) + b``, ``A_hat = D^-1/2 (A + I) D^-1/2`` (computed once; skipped
    for a ``Graph`` of a stored ``.gcn`` variant, which is normalised already, or when ``normalize=False``)."""

    def __init__(self, in_channels: int, out_channels: int, *, bias: bool = True, normalize: bool = True,
                 add_self_loops: bool = True):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.normalize, self.add_self_loops = normalize, add_self_loops
        self.lin = torch.nn.Linear(in_channels, out_channels, bias=False)
        self.bias = torch.nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _glorot(self.lin.weight)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def propagation(self, graph) -> SparseOp:
        def build(A, perm, normalized):
            if self.normalize and not normalized:
                return SparseOp.gcn(A, perm, add_self_loops=self.add_self_loops)
            return SparseOp(A, perm)

        return self._op(graph, build, ("gcn", self.normalize, self.add_self_loops))

    def forward(self, x: torch.Tensor, graph) -> torch.Tensor:
        # one autograd node for the linear map, the product and the bias (gnn.functional.linear_spmm: the same
        # values as spmm(op, self.lin(x)) + self.bias, one node where that composition makes four)
        return linear_spmm(self.propagation(graph), x, self.lin.weight, self.bias)


class GATConv(_Cached):
    """PyG ``GATConv`` (v1 attention): ``e_ij = leaky_relu(a_dst . h_i + a_src . h_j)`` on the edges j -> i (self
    loops added, as PyG does), softmax over i's incoming edges, dropout on the coefficients, ``out_i = sum_j
    alpha_ij h_j`` per head; heads concatenated or averaged, plus bias.

    All heads go through one pattern, A + I itself, each step one call whatever the head count: the weights one
    ``gnn.functional.edge_attention`` on the [N, H] logit factors (softmax over each row of
    ``leaky_relu(a_dst_i + a_src_j)`` per head: on CUDA one kernel, its backward two), the aggregation one SpMM of
    the [nnz, H] weights with the node-major features [N, H C] (the Linear's output as it is; its backward an SDDMM
    per head and a transposed SpMM). Until 2026-11-29 the heads were H copies of the graph on the diagonal of
    ``kron(I_H, A + I)``, which took H times the pattern's memory and a transpose of the features to head-major
    order and back (a copy each way, forward and backward); per-head calls before that measured 2.5x PyG's epoch
    on a 200k-nnz graph (H200)."""

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, *, concat: bool = True,
                 negative_slope: float = 0.2, dropout: float = 0.0, add_self_loops: bool = True, bias: bool = True):
        super().__init__()
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.negative_slope, self.dropout, self.add_self_loops = negative_slope, dropout, add_self_loops
        self.lin = torch.nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        self.bias = torch.nn.Parameter(torch.empty(heads * out_channels if concat else out_channels)) if bias \
            else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for t in (self.lin.weight, self.att_src, self.att_dst):
            _glorot(t)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def pattern(self, graph) -> SparseOp:
        def build(A, perm, _normalized):
            A = with_self_loops(A) if self.add_self_loops else sp.csr_array(A, dtype=np.float32)
            return SparseOp(A)  # per-call values run on kernels.edge in the stored order: no row permutation

        return self._op(graph, build, ("gat", self.add_self_loops))  # one pattern for every head count

    def forward(self, x: torch.Tensor, graph, *, return_attention: bool = False):
        op = self.pattern(graph)
        H, C = self.heads, self.out_channels
        n = op.shape[0]
        h = self.lin(x)  # [N, H C]: node i's head k at columns k C .. (k + 1) C
        hv = h.view(n, H, C)
        a_src = (hv * self.att_src).sum(-1)  # [N, H]
        a_dst = (hv * self.att_dst).sum(-1)
        # softmax over i's edges of leaky_relu(a_dst[i] + a_src[j]) on each edge j -> i, per head: [nnz, H]
        alpha = edge_attention(op, a_dst, a_src, self.negative_slope)
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)
        out = edge_spmm(op, alpha, h)  # [N, H C]
        out = out if self.concat else out.view(n, H, C).mean(dim=1)
        if self.bias is not None:
            out = out + self.bias
        return (out, alpha) if return_attention else out
