"""TCA's block work on a Dask cluster: the caller passes a ``distributed.Client``; this module never creates one.

Map / reduce (everything sent to workers is a module-level function of `tasks.reorder.minhash` or this module):
1. The CSR arrays (indptr, indices) are scattered once to every worker (``broadcast=True``) under fresh keys
   (``hash=False``): content-hashed keys are shared by every call on the same matrix, so a later call on a reused
   client could wait on data an earlier call had just released ("lost dependencies"); ``close`` releases them.
2. Map over row blocks of ``block_rows`` rows: ``minhash_block(indptr, indices, r0, r1, hash_params)`` ->
   signatures; the driver concatenates them in row order.
3. Reduce by band hash: one task per LSH band groups all rows by that band's key (a sort) and emits candidate pairs
   (``band_block``), at most ``n_rows * pair_window`` per band; each task gets only its band's signature columns.
   The driver concatenates the bands and deduplicates (sorted by (i, j)).
4. Map over shards of ``pair_shard`` pairs: ``jaccard_block`` -> exact Jaccard; concatenated in pair order.
5. The capped merge and Hierarchy II run on the driver (`tca.tca_order`), deterministically.
Every block result depends only on its rows / pairs, never on the partition, so the permutation is the same for
any number of workers, threads or block sizes (tested with 1, 2 and 4 workers).
"""
from __future__ import annotations

import numpy as np

from tasks.reorder import minhash as mh


def band_block(sig_cols: np.ndarray, valid: np.ndarray, band_rows: int, window: int) -> np.ndarray:
    """Candidate pairs of one LSH band over all rows (a worker task); ``sig_cols`` = the band's columns only."""
    return mh.band_pairs(mh.band_keys(sig_cols, 0, band_rows), valid, window)


class DaskBackend:
    """Runs `tca.tca_order`'s block functions on ``client``'s workers; same interface as `tca.LocalBackend`."""

    def __init__(self, client, indptr, indices, *, block_rows: int = 1 << 16, pair_shard: int = 1 << 21):
        self.client = client
        self.n = int(indptr.size - 1)
        self.block_rows, self.pair_shard = int(block_rows), int(pair_shard)
        self._n_cols = mh.column_bound(np.asarray(indices))  # jaccard_block's markers, once for every shard
        self._indptr = client.scatter(np.asarray(indptr), broadcast=True, hash=False)
        self._indices = client.scatter(np.asarray(indices), broadcast=True, hash=False)
        self._held = [self._indptr, self._indices]

    def minhash(self, params: np.ndarray) -> np.ndarray:
        futs = [self.client.submit(mh.minhash_block, self._indptr, self._indices, r0, min(self.n, r0 + self.block_rows),
                                   params, pure=False)
                for r0 in range(0, self.n, self.block_rows)]
        parts = self.client.gather(futs)
        return np.concatenate(parts) if parts else np.empty((0, params.shape[1]), dtype=np.uint32)

    def band_pairs(self, sig, valid, bands, band_rows, window) -> list[np.ndarray]:
        valid_f = self.client.scatter(valid, broadcast=True, hash=False)
        cols = [mh.band_columns(sig.shape[1], b, band_rows) for b in range(bands)]
        futs = [self.client.submit(band_block, np.ascontiguousarray(sig[:, c]), valid_f, band_rows, window, pure=False)
                for c in cols]
        out = self.client.gather(futs)
        for fut in (*futs, valid_f):
            fut.release()
        return out

    def jaccard(self, pairs: np.ndarray) -> np.ndarray:
        futs = [self.client.submit(mh.jaccard_block, self._indptr, self._indices, pairs[s:s + self.pair_shard],
                                   self._n_cols, pure=False)
                for s in range(0, pairs.shape[0], self.pair_shard)]
        parts = self.client.gather(futs)
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.float32)

    def close(self) -> None:
        """Release the scattered arrays so the workers can free them."""
        for fut in self._held:
            fut.release()
        self._held.clear()
        self._indptr = self._indices = None
