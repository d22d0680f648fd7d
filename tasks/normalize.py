"""GCN normalisation of an adjacency ``A[dst, src]`` (SciPy, no torch): ``D^-1/2 (A + I) D^-1/2``. Used by the
stored GCN variant (tasks.features.gcn_variant) and by GNN layers (gnn.norm re-exports it: gnn is above tasks).

Degrees are row sums of ``A + I``, i.e. weighted in-degrees of the destinations, as PyG's ``gcn_norm`` computes them
for ``flow="source_to_target"`` (``deg = scatter_add(edge_weight, col)`` over its ``edge_index[1]``, which is our
row). A node whose degree is 0 (no self loop added and no in-edges) gets a 0 factor, not an infinity, as in PyG.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from configs.errors import InputError
from storage.indexing import segment_ids


def with_self_loops(A, fill: float = 1.0) -> sp.csr_array:
    """``A`` plus a self loop of weight ``fill`` on every node that has none; existing loops keep their weight (PyG's
    ``add_remaining_self_loops``). Sorted indices; A's float dtype (float32 for an integer A); explicit zeros kept."""
    A = _square(A)
    n = A.shape[0]
    dtype = A.dtype if A.dtype.kind == "f" else np.dtype(np.float32)
    rows = segment_ids(A.indptr)
    has_loop = np.zeros(n, dtype=bool)
    has_loop[rows[rows == A.indices]] = True
    missing = np.flatnonzero(~has_loop)
    coo = sp.coo_array((np.concatenate([A.data.astype(dtype), np.full(missing.size, fill, dtype=dtype)]),
                        (np.concatenate([rows, missing]), np.concatenate([A.indices, missing]))), shape=A.shape)
    out = sp.csr_array(coo)  # COO -> CSR keeps explicit zeros; nothing is duplicated
    out.sort_indices()
    return out


def gcn_norm(A, *, add_self_loops: bool = True, dtype=np.float32) -> sp.csr_array:
    """``D^-1/2 (A + I) D^-1/2`` (``A`` alone when ``add_self_loops`` is False) with ``D = diag(row sums)``, in
    ``dtype``; the degree arithmetic runs in float64."""
    A = with_self_loops(A) if add_self_loops else sp.csr_array(_square(A), dtype=np.float64, copy=True)
    A = sp.csr_array(A, dtype=np.float64)
    deg = np.asarray(A.sum(axis=1)).ravel()
    with np.errstate(divide="ignore"):
        inv_sqrt = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    rows = segment_ids(A.indptr)
    # the two scales multiplied first: d_i d_j == d_j d_i exactly, so a symmetric A gives a symmetric result bit for
    # bit (a_ij d_i d_j left to right rounds differently from a_ji d_j d_i: an A.T plan built for nothing)
    data = A.data * (inv_sqrt[rows] * inv_sqrt[A.indices])
    out = sp.csr_array((data.astype(dtype), A.indices.copy(), A.indptr.copy()), shape=A.shape)
    out.has_sorted_indices = A.has_sorted_indices
    return out


def _square(A) -> sp.csr_array:
    if not sp.issparse(A) or A.ndim != 2:
        raise InputError(f"GCN normalisation: needs a 2-D SciPy sparse adjacency, got {type(A).__name__}")
    if A.shape[0] != A.shape[1]:
        raise InputError(f"GCN normalisation: adjacency has shape {A.shape}, expected a square matrix (nodes x nodes)")
    return sp.csr_array(A)
