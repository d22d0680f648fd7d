"""CSR's `ShardOps` (kernels.formats.shard): its tiles are the stored (non-empty) rows, grouped by window; a shard
is a window range, its halo the distinct columns it reads, its column remap a relabel of ``indices`` (each row
re-sorted when the new labels change the order), its own/halo split a mask over the nonzeros that drops the rows it
empties. Plain NumPy."""
from __future__ import annotations

import numpy as np

from kernels.formats.blocks import WINDOW
from kernels.formats.csr.container import CSR
from kernels.formats.shard import ShardOps, distinct_columns, keeps_order, rebase, relabel, window_bytes
from storage.indexing import index_dtype, segment_ids


def _nbytes(X, partptr, tile_ptr, item_ptr):
    return window_bytes(partptr, tile_ptr, item_ptr, offset_bytes=X.window_ptr.dtype.itemsize,
                        tile_bytes=X.indptr.dtype.itemsize + X.row_in_window.dtype.itemsize,
                        item_bytes=X.indices.dtype.itemsize + X.data.dtype.itemsize)


def _halo(X, t0: int, t1: int) -> np.ndarray:
    return distinct_columns(X.shape[1], X.indices[int(X.indptr[t0]):int(X.indptr[t1])])


def _take(X, w0, w1, t0, t1, n_rows):
    p0, p1 = int(X.indptr[t0]), int(X.indptr[t1])
    return CSR((int(n_rows), int(X.shape[1])), rebase(X.window_ptr, w0, w1).astype(np.int64),
               X.row_in_window[t0:t1], rebase(X.indptr, t0, t1), X.indices[p0:p1], X.data[p0:p1])


def _tile_of_nonzero(X) -> np.ndarray:
    return segment_ids(X.indptr)


def _remap(X, cols, local, n_local):
    n_local = int(n_local)
    idx = relabel(X.indices, int(X.shape[1]), cols, local).astype(index_dtype(n_local))
    if keeps_order(cols, local):
        return CSR((int(X.shape[0]), n_local), X.window_ptr, X.row_in_window, X.indptr, idx, X.data)
    order = np.lexsort((idx, _tile_of_nonzero(X)))  # each row's (column, value) pairs by the new column
    return CSR((int(X.shape[0]), n_local), X.window_ptr, X.row_in_window, X.indptr, idx[order], X.data[order])


def _split(X, keep_col, prec=None):
    keep = np.asarray(keep_col)[np.asarray(X.indices, dtype=np.int64)]
    per_tile = np.bincount(_tile_of_nonzero(X)[keep], minlength=X.n_blocks)
    kept = per_tile > 0  # rows the mask empties are no longer stored
    indptr = np.zeros(int(kept.sum()) + 1, dtype=np.int64)
    np.cumsum(per_tile[kept], out=indptr[1:])
    rows = X.rows()[kept]
    window_ptr = np.searchsorted(rows, np.arange(X.n_windows + 1, dtype=np.int64) * WINDOW).astype(np.int64)
    return CSR(X.shape, window_ptr, X.row_in_window[kept], indptr.astype(index_dtype(int(indptr[-1]))),
               X.indices[keep], X.data[keep])


CSR_SHARD = ShardOps("csr", tiles=lambda X: X.window_ptr,
                     items=lambda X, tp: np.asarray(X.indptr, dtype=np.int64)[np.asarray(tp, dtype=np.int64)],
                     nbytes=_nbytes, halo=_halo, take=_take, remap=_remap, any_order=True, split=_split)
