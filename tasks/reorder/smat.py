"""SMaT's preprocessing (SC'24, section IV-C): Sylos Labini's greedy Jaccard row clustering, row-only, exact.

The paper's procedure: create a cluster c from the first unclustered row v; for all other unclustered rows w (in
order) check whether the Jaccard distance J(w, pc) = 1 - |w & pc| / |w | pc| to the cluster's union pattern pc is
below the threshold ``tau``; merge every row that is (pc grows by it); repeat until all rows are clustered. Rows
are compared by their pattern over column blocks of the BCSR block width (Sylos Labini et al. 2022 compress rows to
column blocks of width delta: padding is paid per block, not per column). ``perm[new] = old``, rows only (B is
never permuted).

How this differs from the project's ``jaccard`` method (tasks/reorder/greedy.py): that one scans only the next
``scan`` (32) unplaced rows in MinHash order, caps clusters at 16 rows and compares single columns; it is a fast
approximation. This module is the paper's algorithm: every later unclustered row is a candidate, clusters are
unbounded, patterns are column blocks. It stays exact without the quadratic scan: a row sharing no column block
with pc has distance 1 >= tau (tau <= 1), so only rows on the inverted lists of pc's blocks can join; they are
visited in increasing row order from a heap, and a block added to pc at row j queues its rows after j only (rows
before j were already passed with distance 1, as in the sequential scan). Cost: the inverted lists of each
cluster's blocks (a column block shared by most rows makes it quadratic again; ``COST_NS_PER_NNZ`` in the API is
measured on matrices without such hubs).

``bcsr_score`` scores any permutation as SMaT's schedule sees it: BCSR blocks and blocks per block row
(min/mean/max/cv; SMaT's kernel gives a block row to a warp, so a long block row is a straggler, cf. its cant
example). ``smat_order`` returns the identity when clustering does not lower the BCSR block count (SMaT VI-A:
on conf5_4-8x8, a band matrix, the clustering added blocks).
"""
from __future__ import annotations

import heapq

import numba
import numpy as np
import scipy.sparse as sp

from kernels.formats.metrics import markers_fit, window_counts
from storage.indexing import segment_ids

BLOCK_ROWS = 16


def block_patterns(A, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) int64 of each row's sorted distinct column blocks (column // width)."""
    A = sp.csr_array(A)
    indptr = A.indptr.astype(np.int64)
    rows = segment_ids(indptr)
    blocks = A.indices.astype(np.int64) // width
    keep = np.ones(blocks.size, dtype=bool)  # canonical CSR: a row's blocks are sorted, repeats are adjacent
    keep[1:] = (blocks[1:] != blocks[:-1]) | (rows[1:] != rows[:-1])
    pptr = np.zeros(A.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=A.shape[0]), out=pptr[1:])
    return pptr, blocks[keep]


@numba.njit(cache=True)
def _cluster(pptr, pidx, tptr, tidx, n, n_bcols, tau):
    assigned = np.zeros(n, dtype=np.bool_)
    in_p = np.full(n_bcols, -1, dtype=np.int64)  # cluster stamp of the blocks in pc
    queued = np.full(n, -1, dtype=np.int64)  # cluster stamp of the rows in the heap
    out = np.empty(n, dtype=np.int64)
    o = 0
    for i in range(n):
        if assigned[i]:
            continue
        assigned[i] = True
        out[o] = i
        o += 1
        p_len = pptr[i + 1] - pptr[i]
        if p_len == 0:  # empty pc: only empty rows are at distance 0 (< tau); nonempty rows at 1
            for j in range(i + 1, n):
                if not assigned[j] and pptr[j + 1] == pptr[j]:
                    assigned[j] = True
                    out[o] = j
                    o += 1
            continue
        heap = [np.int64(0)]
        heap.pop()
        for t in range(pptr[i], pptr[i + 1]):
            c = pidx[t]
            in_p[c] = i
            for u in range(tptr[c], tptr[c + 1]):
                j = tidx[u]
                if j > i and not assigned[j] and queued[j] != i:
                    queued[j] = i
                    heapq.heappush(heap, j)
        while len(heap) > 0:
            j = heapq.heappop(heap)
            if assigned[j]:
                continue
            inter = 0
            for t in range(pptr[j], pptr[j + 1]):
                if in_p[pidx[t]] == i:
                    inter += 1
            union = p_len + (pptr[j + 1] - pptr[j]) - inter
            if 1.0 - inter / union < tau:
                assigned[j] = True
                out[o] = j
                o += 1
                for t in range(pptr[j], pptr[j + 1]):
                    c = pidx[t]
                    if in_p[c] != i:
                        in_p[c] = i
                        p_len += 1
                        for u in range(tptr[c], tptr[c + 1]):
                            k = tidx[u]
                            if k > j and not assigned[k] and queued[k] != i:
                                queued[k] = i
                                heapq.heappush(heap, k)
    return out


def sylos_labini_order(A, *, tau: float = 0.7, width: int = 16) -> np.ndarray:
    """The paper's greedy clustering permutation (``perm[new] = old``, int64) of CSR A (sorted rows), patterns over
    column blocks of ``width``; no identity fallback (see `smat_order`)."""
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"tau is {tau}, expected a Jaccard distance threshold in (0, 1]")
    n, n_cols = (int(s) for s in A.shape)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    pptr, pidx = block_patterns(A, width)
    n_bcols = max(-(-n_cols // width), 1)
    counts = np.bincount(pidx, minlength=n_bcols)
    tptr = np.zeros(n_bcols + 1, dtype=np.int64)
    np.cumsum(counts, out=tptr[1:])
    rows = segment_ids(pptr)
    tidx = rows[np.argsort(pidx, kind="stable")]  # each block's rows in increasing order
    return _cluster(pptr, pidx, tptr, tidx, n, n_bcols, float(tau))


def bcsr_score(A, width: int = 16) -> dict:
    """BCSR blocks (16 x width, fixed grid) and blocks per block row of A in its current row order: one marker pass
    (kernels.formats.metrics.window_counts) where it fits, else a sort of the rows' block keys."""
    A = sp.csr_array(A)
    if markers_fit(A.shape, A.nnz):
        return bcsr_summary(window_counts(A, window=BLOCK_ROWS, widths=(width,))[1][width], width)
    n = int(A.shape[0])
    pptr, pidx = block_patterns(A, width)
    rows = segment_ids(pptr)
    key = np.sort((rows // BLOCK_ROWS) * max(-(-int(A.shape[1]) // width), 1) + pidx)
    first = np.ones(key.size, dtype=bool)
    first[1:] = key[1:] != key[:-1]
    per = np.bincount(key[first] // max(-(-int(A.shape[1]) // width), 1), minlength=-(-n // BLOCK_ROWS))
    return bcsr_summary(per, width)


def bcsr_summary(per, width: int) -> dict:
    """`bcsr_score`'s fields from the BCSR blocks of each block row (``per``, int array)."""
    mean = float(per.mean()) if per.size else 0.0
    return {"bcsr_blocks": int(per.sum()), "bcsr_width": width,
            "bcsr_blocks_per_row_min": int(per.min()) if per.size else 0, "bcsr_blocks_per_row_mean": mean,
            "bcsr_blocks_per_row_max": int(per.max()) if per.size else 0,
            "bcsr_blocks_per_row_cv": float(per.std() / mean) if mean > 0 else 0.0}


def smat_order(A, *, tau: float = 0.7, width: int = 16) -> np.ndarray:
    """SMaT's preprocessing: `sylos_labini_order`, or the identity when it does not lower the BCSR block count."""
    perm = sylos_labini_order(A, tau=tau, width=width)
    if perm.size and bcsr_score(A[perm], width)["bcsr_blocks"] >= bcsr_score(A, width)["bcsr_blocks"]:
        return np.arange(A.shape[0], dtype=np.int64)
    return perm
