"""Structural orderings: identity, degree, reverse Cuthill-McKee. ``perm[new] = old`` (int64)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee


def none_order(A) -> np.ndarray:
    """Identity."""
    return np.arange(A.shape[0], dtype=np.int64)


def degree_order(A) -> np.ndarray:
    """Rows by nonzero count, descending; ties keep input order (stable)."""
    return np.argsort(-np.diff(np.asarray(A.indptr, dtype=np.int64)), kind="stable").astype(np.int64)


def rcm_order(A) -> np.ndarray:
    """Reverse Cuthill-McKee on the row graph.

    Square A: RCM of the symmetrized pattern |A| + |A|^T. Rectangular A: RCM of the bipartite graph
    [[0, P], [P^T, 0]] (P the pattern of A; rows are vertices 0..m-1, columns m..m+n-1), keeping the row vertices
    in their RCM order. The bipartite form is linear in nnz, unlike the row-graph A @ A^T, which explodes on hub
    columns.
    """
    m, n = A.shape
    if m == 0:
        return np.empty(0, dtype=np.int64)
    P = sp.csr_matrix((np.ones(A.nnz, dtype=np.int8), A.indices, A.indptr), shape=(m, n))
    if m == n:
        G = (P + P.T).tocsr()
    else:
        G = sp.bmat([[None, P], [P.T, None]], format="csr")
    order = reverse_cuthill_mckee(G, symmetric_mode=True).astype(np.int64)
    return order[order < m] if m != n else order
