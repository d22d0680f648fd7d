"""MinHash signatures, LSH candidate pairs, exact Jaccard on pairs, capped union-find: the pieces of TCA.

Every function here is a pure module-level block function (picklable, no global state), so the sharded path
(`tasks.reorder.sharded`) can send them to Dask workers unchanged.

Hashing: h_k(c) = ((a_k * c + b_k) mod 2**64) >> 32 with odd a_k (Dietzfelbinger's multiply-add-shift family, the
`(a*x + b) mod p` universal family with p = 2**64 keeping the high bits; no division, so it is fast). A row's
signature is the per-hash minimum over its columns (exact MinHash of the row's column set, long rows included);
an empty row's signature is all 0xFFFFFFFF.

Candidate pairs (LSH banding, b bands x r rows): a band's key is its r signature values (combined by a 64-bit
multiply-xor mix to 32 bits when r > 1). Rows are sorted by (band key, next signature value, row) and each row
is paired only with the next ``w`` rows of the same bucket in that order. So one band emits at most ``n * w``
pairs whatever its bucket sizes (a 100k-row bucket gives <= 100k * w pairs, not 5e9), and the neighbours it
pairs are the ones agreeing on more hashes. Rows flagged invalid (empty rows, hubs) emit no pairs.
"""
from __future__ import annotations

import numba
import numpy as np

_EMPTY = np.uint32(0xFFFFFFFF)


def hash_params(n_hashes: int, seed: int) -> np.ndarray:
    """(2, n_hashes) uint64: row 0 the odd multipliers a_k, row 1 the offsets b_k, drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    ab = rng.integers(0, np.iinfo(np.uint64).max, size=(2, n_hashes), dtype=np.uint64, endpoint=True)
    ab[0] |= np.uint64(1)
    return ab


@numba.njit(cache=True, nogil=True)
def _minhash_rows(indptr, indices, r0, r1, a, b, out):
    k = a.size
    for r in range(r0, r1):
        o = out[r - r0]
        for t in range(k):
            o[t] = 0xFFFFFFFF
        for p in range(indptr[r], indptr[r + 1]):
            x = np.uint64(indices[p])
            for t in range(k):
                h = np.uint32((a[t] * x + b[t]) >> np.uint64(32))
                if h < o[t]:
                    o[t] = h


def minhash_block(indptr, indices, r0: int, r1: int, hash_params: np.ndarray) -> np.ndarray:
    """MinHash signatures of rows r0:r1 of the CSR (indptr, indices): uint32 array (r1 - r0, n_hashes)."""
    out = np.empty((r1 - r0, hash_params.shape[1]), dtype=np.uint32)
    _minhash_rows(indptr, indices, r0, r1, hash_params[0], hash_params[1], out)
    return out


def band_columns(n_hashes: int, band: int, band_rows: int) -> list[int]:
    """Signature columns one band reads: its ``band_rows`` values, then the one after them (tie-breaker)."""
    return [(band * band_rows + t) % n_hashes for t in range(band_rows + 1)]


def band_keys(sig: np.ndarray, band: int, band_rows: int) -> np.ndarray:
    """(n,) uint64 sort keys of one band: band key (32 bits) << 32 | the signature value after the band.

    ``sig`` may be the full signature matrix or just ``sig[:, band_columns(...)]`` with ``band=0``. One uint64
    key sorts 4x faster than a lexsort over separate columns (0.14 s vs 0.58 s for 1.4M rows).
    """
    cols = band_columns(sig.shape[1], band, band_rows)
    key = sig[:, cols[0]].astype(np.uint64)
    for c in cols[1:-1]:  # mix in further rows of the band (splitmix-style multiply, xor-shift), keep 32 bits
        key = (key * np.uint64(0x9E3779B97F4A7C15)) ^ sig[:, c].astype(np.uint64)
        key ^= key >> np.uint64(29)
        key &= np.uint64(0xFFFFFFFF)
    return (key << np.uint64(32)) | sig[:, cols[-1]].astype(np.uint64)


def band_pairs(keys: np.ndarray, valid: np.ndarray, window: int) -> np.ndarray:
    """Candidate pairs of one band: (m, 2) int64, i < j, each valid row paired with <= ``window`` bucket-mates.

    keys: (n,) from `band_keys`; valid rows are ordered by (key, row) (a stable sort) and a row pairs with the
    next ``window`` valid rows whose key has the same high 32 bits (the same LSH bucket).
    """
    rows = np.flatnonzero(valid)
    if rows.size < 2:
        return np.empty((0, 2), dtype=np.int64)
    kv = keys[rows]
    srt = np.argsort(kv, kind="stable")
    order = rows[srt]
    bucket = kv[srt] >> np.uint64(32)
    out = []
    for d in range(1, min(window, order.size - 1) + 1):
        same = bucket[d:] == bucket[:-d]
        i, j = order[:-d][same], order[d:][same]
        out.append(np.stack([np.minimum(i, j), np.maximum(i, j)], axis=1))
    return np.concatenate(out).astype(np.int64, copy=False)


def dedupe_pairs(pairs: np.ndarray, n: int) -> np.ndarray:
    """Sorted, duplicate-free copy of (m, 2) pairs with i < j < n (deterministic order: by i, then j)."""
    if pairs.shape[0] == 0:
        return pairs.reshape(0, 2).astype(np.int64)
    key = np.sort(pairs[:, 0] * np.int64(n) + pairs[:, 1])
    key = key[np.r_[True, key[1:] != key[:-1]]]  # np.unique is hash-based and slow in NumPy 2.4
    return np.stack([key // n, key % n], axis=1)


@numba.njit(cache=True, nogil=True)
def _jaccard_pairs(indptr, indices, pi, pj, out):
    for q in range(pi.size):
        a0, a1 = indptr[pi[q]], indptr[pi[q] + 1]
        b0, b1 = indptr[pj[q]], indptr[pj[q] + 1]
        la, lb = a1 - a0, b1 - b0
        inter = 0
        while a0 < a1 and b0 < b1:
            x, y = indices[a0], indices[b0]
            if x == y:
                inter += 1
                a0 += 1
                b0 += 1
            elif x < y:
                a0 += 1
            else:
                b0 += 1
        union = la + lb - inter
        out[q] = inter / union if union > 0 else 0.0


@numba.njit(cache=True, nogil=True)
def _jaccard_pairs_marked(indptr, indices, pi, pj, mark, out):
    """`_jaccard_pairs` by column markers: row i's columns stamped once for its run of pairs (the pairs come sorted
    by i), then each row j's columns looked up; the same intersections, so the same values."""
    last = -1
    for q in range(pi.size):
        i = pi[q]
        if i != last:
            for a in range(indptr[i], indptr[i + 1]):
                mark[indices[a]] = q
            last, stamp = i, q
        inter = 0
        for b in range(indptr[pj[q]], indptr[pj[q] + 1]):
            if mark[indices[b]] == stamp:
                inter += 1
        union = (indptr[i + 1] - indptr[i]) + (indptr[pj[q] + 1] - indptr[pj[q]]) - inter
        out[q] = inter / union if union > 0 else 0.0


MARKED_MAX_COLS = 1 << 24  # column markers (8 bytes each) up to this many columns: 128 MB; beyond, the merge


def column_bound(indices) -> int:
    """Columns `jaccard_block`'s markers need: the largest column id + 1 (0 without nonzeros)."""
    return int(indices.max()) + 1 if indices.size else 0


def jaccard_block(indptr, indices, pairs: np.ndarray, n_cols: int | None = None) -> np.ndarray:
    """Exact Jaccard |Ri & Rj| / |Ri | Rj| of each row pair (float32). Needs sorted, duplicate-free rows. With
    column markers where the columns are few enough (`MARKED_MAX_COLS`): the 5.8M candidate pairs of a 9.9M-nonzero
    SBM on one thread, 1.30 s against 1.74 s for the sorted merge of both rows (2-core host, 2026-11-29).
    ``n_cols``: `column_bound(indices)`, which a caller with many pair shards passes once (else computed here)."""
    out = np.empty(pairs.shape[0], dtype=np.float32)
    pi, pj = np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1])
    n_cols = column_bound(indices) if n_cols is None else int(n_cols)
    if n_cols <= MARKED_MAX_COLS:
        _jaccard_pairs_marked(indptr, indices, pi, pj, np.full(max(n_cols, 1), -1, dtype=np.int64), out)
    else:
        _jaccard_pairs(indptr, indices, pi, pj, out)
    return out


def signature_similarity(sig: np.ndarray, pairs: np.ndarray, chunk: int = 1 << 20) -> np.ndarray:
    """Estimated Jaccard of pairs: fraction of equal MinHash values (float32); unbiased, step 1 / n_hashes."""
    out = np.empty(pairs.shape[0], dtype=np.float32)
    for s in range(0, pairs.shape[0], chunk):
        p = pairs[s:s + chunk]
        out[s:s + chunk] = (sig[p[:, 0]] == sig[p[:, 1]]).mean(axis=1)
    return out


@numba.njit(cache=True)
def _capped_union(parent, size, pi, pj, cap):
    for q in range(pi.size):
        x = pi[q]
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        y = pj[q]
        while parent[y] != y:
            parent[y] = parent[parent[y]]
            y = parent[y]
        if x != y and size[x] + size[y] <= cap:
            if y < x:
                x, y = y, x
            parent[y] = x  # the smaller id is the root: labels do not depend on processing details
            size[x] += size[y]
    for v in range(parent.size):
        r = v
        while parent[r] != r:
            r = parent[r]
        parent[v] = r


def merge_pairs(n: int, pairs: np.ndarray, similarity: np.ndarray, cap: int,
                weights: np.ndarray | None = None) -> np.ndarray:
    """Most-similar-first capped merge (DTC-SpMM Alg. 1 lines 3-14 as a union-find).

    Pairs are taken by similarity descending (ties: pair order, which `dedupe_pairs` makes (i, j) ascending);
    two clusters merge when their total weight (default 1 per item) stays <= cap. Returns ``root`` (int64, n):
    each item's cluster representative, the smallest item id of its cluster. O(pairs) after one stable sort on a
    16-bit quantised similarity (radix sort). Measured: 10M pairs in about 0.4 s on one core.
    """
    parent = np.arange(n, dtype=np.int64)
    size = np.ones(n, dtype=np.int64) if weights is None else np.asarray(weights, dtype=np.int64).copy()
    if pairs.shape[0]:
        q = (65535 - np.round(np.clip(similarity, 0.0, 1.0) * 65535)).astype(np.uint16)
        order = np.argsort(q, kind="stable")
        _capped_union(parent, size, pairs[order, 0].copy(), pairs[order, 1].copy(), int(cap))
    else:
        _capped_union(parent, size, pairs[:0, 0].copy(), pairs[:0, 1].copy(), int(cap))
    return parent
