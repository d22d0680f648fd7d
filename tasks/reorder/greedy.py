"""Greedy sequential row orderings: Tiled-CSR row shuffle (ICCD'23) and Jaccard clustering (SMaT / Sylos Labini).

Both walk rows in a presorted order, start a slot (cluster) at the first unplaced row and pull later unplaced rows
into it, looking at a bounded number of candidates; sets are kept as stamp marks in an array over columns, so a
test costs O(row length). Both run in Numba (sequential by nature; measured about 1-3 s per 10M nonzeros).
``perm[new] = old`` for both.

rowshuffle (Tiled-CSR, Algorithms 1-3): rows presorted by sum of squared column indices (stable). A slot starts at
the seed row; a candidate joins when it is *similar* to the seed (Alg. 2: |seed | row| < (1 + threshold) * |seed|
or < (1 + threshold) * |row|) or *complementary* to the slot (Alg. 3: |slot union | row| < k_cols); a candidate
that fails goes to the bin. The slot closes when it has ``slot_rows`` rows or the bin has ``bin_len`` (K) rows.
Cost O(K * nnz) after the O(n log n) presort. Equal, permutation for permutation, to a line-by-line transcription
of the paper's pseudocode (tests/tasks/reorder/test_tiled_shuffle.py), with one repair: the pseudocode emits a slot
only when it or the bin fills, which would drop the rows of a slot whose scan runs out; here every slot is
emitted. The paper's parameters for a Tiled-CSR of h x w tiles are slot_rows = h and k_cols = w (16 x 16 for
FP16/BF16 here); the defaults (16 x 8) are TF32's. It scores by the paper's own measure in
benchmarks/rowshuffle.py (``kernels.formats.tiledcsr.effective_rate``).

jaccard (SMaT section IV-C, after Sylos Labini et al.): a cluster starts at the first unplaced row; a candidate
joins when its Jaccard distance 1 - |row & P| / |row | P| to the cluster's union pattern P is below ``tau``, and P
grows by the row. The paper scans all unclustered rows (quadratic); here the scan is restricted to the next
``scan`` unplaced rows in MinHash order (rows sorted by their first two MinHash values, so rows sharing a
small-hash column are adjacent) and clusters are capped at ``max_cluster`` rows: O(scan * nnz).
"""
from __future__ import annotations

import numba
import numpy as np

from tasks.reorder import minhash as mh


@numba.njit(cache=True)
def _greedy(indptr, indices, order, n_cols, mode, slot_rows, threshold, k_cols, scan):
    """mode 0: row shuffle (scan = bin length); mode 1: Jaccard clustering (threshold = tau)."""
    n = order.size
    nxt = np.arange(1, n + 1)
    prv = np.arange(-1, n - 1)
    seed_mark = np.full(n_cols, -1, dtype=np.int64)
    slot_mark = np.full(n_cols, -1, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    o = 0
    head = 0
    while head < n:
        p = head
        r = order[p]
        len_i = indptr[r + 1] - indptr[r]
        for t in range(indptr[r], indptr[r + 1]):
            seed_mark[indices[t]] = p
            slot_mark[indices[t]] = p
        slot_len = len_i
        out[o] = r
        o += 1
        size = 1
        head = nxt[p]  # unlink p (it is the list head)
        if head < n:
            prv[head] = -1
        misses = 0
        q = head
        while q < n and size < slot_rows and misses < scan:
            rq = order[q]
            lo, hi = indptr[rq], indptr[rq + 1]
            len_j = hi - lo
            inter_seed = 0
            new_cols = 0
            for t in range(lo, hi):
                c = indices[t]
                if seed_mark[c] == p:
                    inter_seed += 1
                if slot_mark[c] != p:
                    new_cols += 1
            if mode == 0:
                union = len_i + len_j - inter_seed
                take = union < (1.0 + threshold) * len_i or union < (1.0 + threshold) * len_j
                if not take:
                    take = slot_len + new_cols < k_cols
            else:
                union = slot_len + new_cols
                take = union == 0 or 1.0 - (len_j - new_cols) / union < threshold
            q_next = nxt[q]
            if take:
                for t in range(lo, hi):
                    slot_mark[indices[t]] = p
                slot_len += new_cols
                out[o] = rq
                o += 1
                size += 1
                if prv[q] >= 0:
                    nxt[prv[q]] = q_next
                else:
                    head = q_next
                if q_next < n:
                    prv[q_next] = prv[q]
            else:
                misses += 1
            q = q_next
    return out


def _arrays(A):
    indptr = np.asarray(A.indptr, dtype=np.int64)
    return indptr, np.asarray(A.indices, dtype=np.int64), int(A.shape[1])


def rowshuffle_order(A, *, slot_rows: int = 16, threshold: float = 0.5, k_cols: int = 8,
                     bin_len: int = 32) -> np.ndarray:
    """Tiled-CSR row shuffle permutation of CSR A (sorted rows): ``perm[new] = old``, int64."""
    indptr, indices, n_cols = _arrays(A)
    n = indptr.size - 1
    if n == 0:
        return np.empty(0, dtype=np.int64)
    sq = indices.astype(np.float64) ** 2
    key = np.zeros(n)
    nonempty = np.flatnonzero(np.diff(indptr))
    if nonempty.size:
        key[nonempty] = np.add.reduceat(sq, indptr[nonempty])
    order = np.argsort(key, kind="stable").astype(np.int64)
    return _greedy(indptr, indices, order, max(n_cols, 1), 0, int(slot_rows), float(threshold), int(k_cols),
                   int(bin_len))


def jaccard_order(A, *, tau: float = 0.8, max_cluster: int = 16, scan: int = 32, seed: int = 0) -> np.ndarray:
    """SMaT/Sylos Labini greedy Jaccard clustering permutation of CSR A (sorted rows): ``perm[new] = old``."""
    indptr, indices, n_cols = _arrays(A)
    n = indptr.size - 1
    if n == 0:
        return np.empty(0, dtype=np.int64)
    sig = mh.minhash_block(indptr, indices, 0, n, mh.hash_params(2, seed))
    order = np.lexsort((np.arange(n), sig[:, 1], sig[:, 0])).astype(np.int64)
    return _greedy(indptr, indices, order, max(n_cols, 1), 1, int(max_cluster), float(tau), 0, int(scan))
