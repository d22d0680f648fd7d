"""NumPy/SciPy twins of the GNN layers' sparse pieces, on a CSR pattern ``(indptr, indices)`` of A[dst, src].

These are the float64 references the torch layers are tested against, and the CPU path of the pieces that have no
SciPy one-liner. Per-edge arrays follow A's CSR order (edge k = the k-th stored nonzero, row ``dst``, col ``src``);
multi-head arrays carry the head as their last axis ([E, H]).

- ``sddmm(indptr, indices, U, V)``: ``out[k] = U[row_k] . V[col_k]`` (the sampled dense-dense product
  ``spy(A) * (U @ V.T)`` read out in CSR order).
- ``edge_softmax(indptr, e)``: per destination row, ``softmax`` over its incoming edges; its backward
  ``edge_softmax_backward(indptr, alpha, g) = alpha * (g - sum_row(alpha * g))``.
- ``transpose_order(indptr, indices, shape)``: ``t`` with ``A.T`` in CSR = ``(indptr_t, indices_t, data[t])``.
- ``gcn_layer`` / ``gat_layer``: whole layers in float64 (PyG's GCNConv/GATConv math), for the tests.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from storage.indexing import segment_ids


def edge_rows(indptr: np.ndarray) -> np.ndarray:
    """Row (destination) of every stored nonzero, int64."""
    return segment_ids(indptr)


def sddmm(indptr, indices, U: np.ndarray, V: np.ndarray) -> np.ndarray:
    """``out[k] = sum_f U[row_k, f] * V[col_k, f]`` for every stored nonzero k (U: [n_rows, K], V: [n_cols, K])."""
    U, V = np.asarray(U), np.asarray(V)
    if U.ndim != 2 or V.ndim != 2 or U.shape[1] != V.shape[1]:
        raise ValueError(f"sddmm: U {U.shape} and V {V.shape} must be 2-D with the same column count")
    rows = edge_rows(indptr)
    return np.einsum("ek,ek->e", U[rows], V[np.asarray(indices, dtype=np.int64)])


def _segment_max(indptr, e: np.ndarray) -> np.ndarray:
    """Per-row max of e ([E] or [E, H]); rows without edges get 0 (they own nothing to shift)."""
    n = len(indptr) - 1
    out = np.zeros((n, *e.shape[1:]), dtype=e.dtype)
    nonempty = np.flatnonzero(np.diff(indptr) > 0)
    if nonempty.size:
        out[nonempty] = np.maximum.reduceat(e, np.asarray(indptr)[nonempty], axis=0)
    return out


def _segment_sum(indptr, e: np.ndarray) -> np.ndarray:
    n = len(indptr) - 1
    out = np.zeros((n, *e.shape[1:]), dtype=e.dtype)
    np.add.at(out, edge_rows(indptr), e)
    return out


def edge_softmax(indptr, e: np.ndarray) -> np.ndarray:
    """``alpha[k] = exp(e[k]) / sum_{k' in row(k)} exp(e[k'])``, shifted by the row max for stability."""
    e = np.asarray(e)
    rows = edge_rows(indptr)
    ex = np.exp(e - _segment_max(indptr, e)[rows])
    return ex / _segment_sum(indptr, ex)[rows]


def edge_softmax_backward(indptr, alpha: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Gradient of ``edge_softmax`` at output ``alpha`` for upstream gradient ``g``."""
    rows = edge_rows(indptr)
    return alpha * (g - _segment_sum(indptr, alpha * g)[rows])


def transpose_order(indptr, indices, shape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr_t, indices_t, t)``: the CSR pattern of A.T and, for each of its nonzeros, the position of the same
    nonzero in A's CSR order (so ``data_t = data[t]``). Sorted column indices in A.T; explicit zeros kept."""
    nnz = len(indices)
    pos = sp.csr_array((np.arange(nnz, dtype=np.int64), np.asarray(indices), np.asarray(indptr)),
                       shape=tuple(shape))
    T = sp.csr_array(pos.T)  # CSC of A viewed as CSR of A.T: a counting sort, no summation, zeros kept
    T.sort_indices()
    return T.indptr, T.indices, T.data.astype(np.int64, copy=False)


def leaky_relu(x: np.ndarray, slope: float) -> np.ndarray:
    return np.where(x > 0, x, slope * x)


def gcn_layer(A_norm, X: np.ndarray, W: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """PyG ``GCNConv``: ``A_norm @ (X @ W.T) + b`` (W: [out, in] like ``torch.nn.Linear.weight``), float64."""
    H = sp.csr_array(A_norm, dtype=np.float64) @ (np.asarray(X, np.float64) @ np.asarray(W, np.float64).T)
    return H + (0.0 if b is None else np.asarray(b, np.float64))


def gat_layer(indptr, indices, X, W, att_src, att_dst, bias=None, *, heads: int, concat: bool = True,
              negative_slope: float = 0.2) -> np.ndarray:
    """PyG ``GATConv`` on the pattern (self loops already in it), float64, no dropout.

    ``W``: [heads * C, in]; ``att_src``/``att_dst``: [heads, C]. Logits ``e[k, h] = leaky_relu(a_src_h . x_j +
    a_dst_h . x_i)`` for edge k = (i <- j), softmax over i's incoming edges, ``out_i = sum_j alpha_ij x_j``;
    heads concatenated ([N, heads * C]) or averaged ([N, C]), then ``+ bias``."""
    n = len(indptr) - 1
    Xh = (np.asarray(X, np.float64) @ np.asarray(W, np.float64).T).reshape(n, heads, -1)
    a_src = np.einsum("nhc,hc->nh", Xh, np.asarray(att_src, np.float64))
    a_dst = np.einsum("nhc,hc->nh", Xh, np.asarray(att_dst, np.float64))
    rows, cols = edge_rows(indptr), np.asarray(indices, dtype=np.int64)
    alpha = edge_softmax(indptr, leaky_relu(a_src[cols] + a_dst[rows], negative_slope))
    out = np.zeros_like(Xh)
    for h in range(heads):
        A_h = sp.csr_array((alpha[:, h], indices, indptr), shape=(n, n))
        out[:, h] = A_h @ Xh[:, h]
    out = out.reshape(n, -1) if concat else out.mean(axis=1)
    return out + (0.0 if bias is None else np.asarray(bias, np.float64))
