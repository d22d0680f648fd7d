"""TCA reordering (DTC-SpMM, ASPLOS'24, section 4.3, Algorithm 1): rows -> 16-row clusters -> SM-sized groups.

Hierarchy I: MinHash signatures of every row's column set, LSH banding to candidate pairs (`minhash` module),
exact Jaccard on the candidates, then a most-similar-first union-find merge capped at ``cluster_rows`` (16 = TC
block height) rows per cluster. Hierarchy II: the same over the clusters, whose signatures are the element-wise
minimum of their rows' signatures (exactly the MinHash of the union of their column sets), with similarity
estimated from signatures (fraction of equal values: no union sets are built), merged into groups capped at
``sm_count`` clusters (L2 locality: clusters of one group run at about the same time on different SMs).

Final order (``perm[new] = old``): full clusters (``cluster_rows`` rows) first, group by group, so each lands on
its own aligned window; then the partial clusters, packed first-fit (sizes descending) into 16-row bins within
their group, exactly-full bins first; then "loners" (rows with no candidate at either
level), sorted by their first MinHash value and degree so rows sharing a small-hash column sit together; then
empty rows; then hubs. Within a group clusters go by first MinHash value; within a cluster rows by row id.

Caps (all parameters): rows with more than ``hub_nnz`` (10,000) nonzeros are not clustered (their exact Jaccard
costs O(row length) per pair) and are placed last by degree, descending; each LSH band pairs a row with at most
``pair_window`` bucket-mates, so candidate pairs <= n_rows * bands * pair_window before deduplication.

The merge is sequential (a union-find in Numba, O(pairs)); signatures, band pairs and Jaccard run in blocks, on
threads (Numba kernels release the GIL) or on Dask workers when a ``client`` is given (`sharded`). The result is
the same for any number of workers, threads or block sizes: every block function is per-row or per-pair and the
driver concatenates block results in row / pair order.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from tasks.reorder import minhash as mh

DEFAULTS = dict(n_hashes=32, bands=None, band_rows=1, pair_window=None, cluster_rows=16, sm_count=132,
                hub_nnz=10_000)
# Mean row length from which the defaults widen the LSH search (bands 8 -> 16, window 2 -> 4: 64 candidate pairs
# per row instead of 16). At 64 that is still <= 1 pair per nonzero, so time stays linear in nnz; at 32 it was 2,
# and R-MAT at 100M nnz (mean 31.6 over non-empty rows) took 0.84 us per nonzero against 0.39 at 1M.
LONG_ROW_NNZ = 64


class LocalBackend:
    """Runs the block functions in this process, on ``n_threads`` threads (Numba kernels release the GIL)."""

    def __init__(self, indptr, indices, *, block_rows: int = 1 << 16, pair_shard: int = 1 << 21,
                 n_threads: int | None = None):
        self.indptr, self.indices = indptr, indices
        self.block_rows, self.pair_shard = int(block_rows), int(pair_shard)
        self.n_threads = n_threads or os.cpu_count() or 1

    def _map(self, fn, items):
        if self.n_threads == 1 or len(items) < 2:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(self.n_threads) as ex:
            return list(ex.map(fn, items))

    def minhash(self, params: np.ndarray) -> np.ndarray:
        n = self.indptr.size - 1
        ranges = [(r0, min(n, r0 + self.block_rows)) for r0 in range(0, n, self.block_rows)]
        parts = self._map(lambda r: mh.minhash_block(self.indptr, self.indices, r[0], r[1], params), ranges)
        return np.concatenate(parts) if parts else np.empty((0, params.shape[1]), dtype=np.uint32)

    def band_pairs(self, sig, valid, bands, band_rows, window) -> list[np.ndarray]:
        cols = [mh.band_columns(sig.shape[1], b, band_rows) for b in range(bands)]
        return self._map(lambda c: mh.band_pairs(mh.band_keys(sig[:, c], 0, band_rows), valid, window), cols)

    def jaccard(self, pairs: np.ndarray) -> np.ndarray:
        shards = [pairs[s:s + self.pair_shard] for s in range(0, pairs.shape[0], self.pair_shard)]
        n_cols = mh.column_bound(self.indices)  # once, not per shard
        parts = self._map(lambda p: mh.jaccard_block(self.indptr, self.indices, p, n_cols), shards)
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.float32)


def candidate_pairs(backend, sig, valid, bands, band_rows, window) -> np.ndarray:
    """Deduplicated LSH candidate pairs over all bands (sorted by (i, j))."""
    parts = backend.band_pairs(sig, valid, bands, band_rows, window)
    allp = np.concatenate(parts) if parts else np.empty((0, 2), dtype=np.int64)
    return mh.dedupe_pairs(allp, sig.shape[0])


@numba.njit(cache=True)
def _pack(units, sizes, groups, cap):
    """First-fit of partial clusters (in order) into bins of <= cap rows, bins confined to one group.

    Returns the units reordered: bins that came out exactly full first (each fills one aligned window), then the
    others, both in bin-opening order. O(units * open bins of the current group).
    """
    m = units.size
    bin_of = np.empty(m, dtype=np.int64)
    fill = np.zeros(m, dtype=np.int64)
    n_bins = 0
    first_open = 0  # bins of earlier groups are closed
    for q in range(m):
        if q > 0 and groups[q] != groups[q - 1]:
            first_open = n_bins
        placed = -1
        for b in range(first_open, n_bins):
            if fill[b] + sizes[q] <= cap:
                placed = b
                break
        if placed < 0:
            placed = n_bins
            n_bins += 1
        fill[placed] += sizes[q]
        bin_of[q] = placed
        while first_open < n_bins and fill[first_open] == cap:
            first_open += 1
    key = np.where(fill[bin_of] == cap, 0, 1) * (n_bins + 1) + bin_of
    return units[np.argsort(key, kind="mergesort")]


def _units(root: np.ndarray, members: np.ndarray):
    """Compact cluster ids for the items ``members`` given union-find roots: (unit_of_member, n_units)."""
    is_root = np.zeros(root.size, dtype=bool)
    is_root[root[members]] = True
    uid = np.cumsum(is_root) - 1
    return uid[root[members]], int(is_root.sum())


def tca_order(indptr, indices, n_cols: int, *, seed: int = 0, backend=None, n_hashes: int = 32,
              bands: int | None = None, band_rows: int = 1, pair_window: int | None = None,
              cluster_rows: int = 16, sm_count: int = 132, hub_nnz: int = 10_000,
              stats: dict | None = None) -> np.ndarray:
    """TCA permutation (``perm[new] = old``, int64) of the CSR rows (indptr, indices with sorted rows).

    ``bands`` / ``pair_window`` default to 8 / 2, or 16 / 4 when the mean length of the clustered rows is at least
    LONG_ROW_NNZ (long rows leave more candidate pairs per nonzero to spend, and have lower pairwise Jaccard:
    measured MeanNnzTC gain on generated long-row communities 1.70x -> 1.72x for the same time). ``stats``, when given, is
    filled with counts (candidate pairs, clusters, groups, loners, hubs) and the bands / window used.
    """
    n = indptr.size - 1
    backend = backend or LocalBackend(indptr, indices)
    deg = np.diff(np.asarray(indptr, dtype=np.int64))
    hub, empty = deg > hub_nnz, deg == 0
    valid = ~hub & ~empty
    long_rows = deg[valid].mean() >= LONG_ROW_NNZ if valid.any() else False
    bands = bands or (16 if long_rows else 8)
    pair_window = pair_window or (4 if long_rows else 2)
    if bands * band_rows > n_hashes:
        raise ValueError(f"bands * band_rows = {bands * band_rows} exceeds n_hashes = {n_hashes}")
    clock = [time.perf_counter()]
    sig = backend.minhash(mh.hash_params(n_hashes, seed))
    clock.append(time.perf_counter())
    # Hierarchy I: rows -> clusters of <= cluster_rows rows.
    pairs = candidate_pairs(backend, sig, valid, bands, band_rows, pair_window)
    clock.append(time.perf_counter())
    similarity = backend.jaccard(pairs)
    clock.append(time.perf_counter())
    root = mh.merge_pairs(n, pairs, similarity, cluster_rows)
    clock.append(time.perf_counter())
    rows = np.flatnonzero(valid)
    unit_of_row, n_units = _units(root, rows)
    by_unit = rows[np.argsort(unit_of_row, kind="stable")]
    unit_rows = np.bincount(unit_of_row, minlength=n_units)
    starts = np.concatenate([[0], np.cumsum(unit_rows)[:-1]]).astype(np.int64)
    usig = np.minimum.reduceat(sig[by_unit], starts, axis=0) if n_units else sig[:0]
    # Hierarchy II: clusters -> groups of <= sm_count clusters, similarity estimated from signatures.
    upairs = candidate_pairs(LocalBackend(None, None), usig, np.ones(n_units, dtype=bool), bands, band_rows,
                             pair_window)
    groot = mh.merge_pairs(n_units, upairs, mh.signature_similarity(usig, upairs), sm_count)
    group_units = np.bincount(groot, minlength=n_units)
    clock.append(time.perf_counter())
    loner = (group_units[groot] == 1) & (unit_rows == 1)
    full = unit_rows == cluster_rows
    # Unit order: class (0 full, 1 partial, 2 loner), then group, then first MinHash value, then unit id.
    cls = np.where(full, 0, np.where(loner, 2, 1))
    grp = np.where(loner, 0, groot)
    first_row = by_unit[starts] if n_units else by_unit
    sec = np.where(loner, -deg[first_row], 0)
    uorder = np.lexsort((np.arange(n_units), sec, usig[:, 0] if n_units else usig[:0, 0], grp, cls))
    part = uorder[cls[uorder] == 1]
    if part.size:  # partial clusters: pack into 16-row bins within their group (sizes descending inside a group)
        part = part[np.lexsort((np.arange(part.size), -unit_rows[part], grp[part]))]
        uorder[cls[uorder] == 1] = _pack(part, unit_rows[part], grp[part], int(cluster_rows))
    rank = np.empty(n_units, dtype=np.int64)
    rank[uorder] = np.arange(n_units)
    body = rows[np.argsort(rank[unit_of_row], kind="stable")]
    hubs = np.flatnonzero(hub)
    hubs = hubs[np.argsort(-deg[hubs], kind="stable")]
    if stats is not None:
        stats.update(candidate_pairs=int(pairs.shape[0]), clusters=int(n_units), full_clusters=int(full.sum()),
                     groups=int(np.count_nonzero(group_units)), cluster_pairs=int(upairs.shape[0]),
                     loners=int(loner.sum()), hubs=int(hubs.size), empty_rows=int(empty.sum()),
                     bands=int(bands), pair_window=int(pair_window))
        clock.append(time.perf_counter())
        phases = ("minhash", "lsh_pairs", "jaccard", "merge", "hierarchy2", "order")
        stats["seconds"] = {k: round(b - a, 3) for k, a, b in zip(phases, clock[:-1], clock[1:])}
    return np.concatenate([body, np.flatnonzero(empty), hubs]).astype(np.int64)
