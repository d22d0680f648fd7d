"""Community ordering: rows grouped by label propagation on the matrix graph. ``perm[new] = old`` (int64).

Why: a row-window partition over P GPUs moves, every resident iteration, the rows of B that a shard references
but does not own (its halo). TCA and the other similarity orderings pack nonzeros into dense 16 x 8 tiles, a
local property; they do not put a graph community's rows in one shard. On a stochastic block model with
communities of tens of thousands of nodes and ~24 neighbours per node, two rows of a community share almost no
columns (Jaccard ~ 0), so TCA sees no structure at all while the halo of a random split is ~half the edges.
Label propagation (Raghavan, Albert and Kumara, Phys. Rev. E 76, 2007) finds such communities in a few dozen
linear passes: every vertex takes the label most frequent among its neighbours.

On the CPU each pass is one SciPy sparse product, ``counts = G @ onehot(labels)`` (row i: label -> how many
neighbours carry it), then a per-row argmax. On a GPU (``device="gpu"``, CuPy) each pass sorts the (vertex,
neighbour's label) pairs of the edges as one int64 key; runs of equal keys are the counts. Either way the most
frequent label wins (random tie-breaking: the two devices give different, equally valid orders) and a random half
of the vertices adopt it (synchronous updates of all vertices oscillate on bipartite structure). It stops when
fewer than ``tol`` of the vertices change or after ``max_iters`` passes.

Square A: the graph is the symmetrized pattern without the diagonal. Rectangular A: the bipartite graph
[[0, P], [P^T, 0]] (rows and columns as vertices), keeping the row vertices' labels. Rows are then ordered by label
(labels in order of first appearance), ties in input order, so every community is contiguous.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def label_propagation_cpu(G: sp.csr_matrix, *, max_iters: int = 30, seed: int = 0,
                          tol: float = 1e-4) -> np.ndarray:
    """Community label per vertex (int64, a vertex id of its community) of the symmetric pattern G."""
    N = G.shape[0]
    labels = np.arange(N, dtype=np.int64)
    if N == 0 or G.nnz == 0:
        return labels
    rng = np.random.default_rng(seed)
    ids, ones = np.arange(N, dtype=np.int64), np.ones(N, dtype=np.float32)
    for _ in range(max_iters):
        counts = (G @ sp.csr_matrix((ones, (ids, labels)), shape=(N, N))).tocsr()  # sorted, no duplicates
        counts.data += rng.random(counts.nnz, dtype=np.float32) * 0.5  # integer counts: noise only breaks ties
        lengths = np.diff(counts.indptr)
        rows = np.flatnonzero(lengths)
        rowmax = np.maximum.reduceat(counts.data, counts.indptr[rows])
        pos = np.flatnonzero(counts.data == np.repeat(rowmax, lengths[rows]))
        owner = np.searchsorted(counts.indptr, pos, side="right") - 1
        first = np.concatenate(([True], owner[1:] != owner[:-1]))
        best = labels.copy()
        best[owner[first]] = counts.indices[pos[first]]
        move = (best != labels) & (rng.random(N) < 0.5)
        labels[move] = best[move]
        if move.sum() <= tol * N:
            break
    return labels


def _scatter(xp, op: str, out, index, values) -> None:
    """out[index] = op(out[index], values), repeated indices included (NumPy ufunc.at; CuPy's cupyx.scatter_*)."""
    if xp is np:
        getattr(np, op).at(out, index, values)
    else:
        import cupyx
        getattr(cupyx, f"scatter_{'max' if op == 'maximum' else 'min'}")(out, index, values)


def label_propagation_sorted(src, dst, n_vertices: int, *, xp=np, max_iters: int = 30, seed: int = 0,
                             tol: float = 1e-4):
    """The same on ``xp`` arrays of edges src -> dst (both directions listed), by sorting instead of a sparse
    product: the GPU path (CuPy), also runnable with NumPy. Ties: the highest (count, random 20-bit draw), then the
    smallest label, so a seed gives one result."""
    N = int(n_vertices)
    labels = xp.arange(N, dtype=xp.int64)
    if N == 0 or src.shape[0] == 0:
        return labels
    rng = xp.random.default_rng(seed)
    src = src.astype(xp.int64, copy=False)
    for _ in range(max_iters):
        key = xp.sort(src * N + labels[dst])
        start = xp.flatnonzero(xp.concatenate((xp.ones(1, dtype=bool), key[1:] != key[:-1])))
        count = xp.diff(xp.concatenate((start, xp.asarray([key.shape[0]], dtype=start.dtype))))
        pair = key[start]
        vertex, label = pair // N, pair % N
        score = count.astype(xp.int64) * (1 << 20) + rng.integers(0, 1 << 20, count.shape[0], dtype=xp.int64)
        top = xp.full(N, -1, dtype=xp.int64)
        _scatter(xp, "maximum", top, vertex, score)
        win = score == top[vertex]
        pick = xp.full(N, N, dtype=xp.int64)
        _scatter(xp, "minimum", pick, vertex[win], label[win])
        best = xp.where(pick < N, pick, labels)
        move = (best != labels) & (rng.random(N) < 0.5)
        labels[move] = best[move]
        if int(move.sum()) <= tol * N:
            break
    return labels


def community_order(A, *, max_iters: int = 30, seed: int = 0, tol: float = 1e-4,
                    device: str = "cpu") -> np.ndarray:
    """Rows grouped by community (see the module docstring); A is a canonical CSR matrix. ``device="gpu"`` runs
    the passes with CuPy on the current GPU."""
    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    m, n = A.shape
    if m == 0:
        return np.empty(0, dtype=np.int64)
    if device == "gpu":
        import cupy as xp
        rows = xp.repeat(xp.arange(m, dtype=xp.int64), xp.asarray(np.diff(A.indptr).astype(np.int64)))
        cols = xp.asarray(A.indices).astype(xp.int64)
        if m == n:  # the symmetrized pattern without self loops (an edge listed both ways counts twice: harmless)
            keep = rows != cols
            src, dst, N = xp.concatenate((rows[keep], cols[keep])), xp.concatenate((cols[keep], rows[keep])), m
        else:  # bipartite: row vertices 0..m-1, column vertices m..m+n-1
            src, dst, N = xp.concatenate((rows, cols + m)), xp.concatenate((cols + m, rows)), m + n
        del rows, cols
        labels = label_propagation_sorted(src, dst, N, xp=xp, max_iters=max_iters, seed=seed, tol=tol)[:m].get()
    else:
        P = sp.csr_matrix((np.ones(A.nnz, dtype=np.float32), A.indices, A.indptr), shape=(m, n))
        if m == n:
            G = (P + P.T).tocsr()
            G.setdiag(0)
            G.eliminate_zeros()
            G.data[:] = 1.0
        else:
            G = sp.bmat([[None, P], [P.T, None]], format="csr")
        labels = label_propagation_cpu(G, max_iters=max_iters, seed=seed, tol=tol)[:m]
    uniq, first_seen = np.unique(labels, return_index=True)
    rank = np.empty(uniq.shape[0], dtype=np.int64)
    rank[np.argsort(first_seen, kind="stable")] = np.arange(uniq.shape[0])
    key = rank[np.searchsorted(uniq, labels)]
    return np.argsort(key, kind="stable").astype(np.int64)
