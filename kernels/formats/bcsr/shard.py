"""BCSR's `ShardOps` (kernels.formats.shard): a shard's block columns keep their w consecutive columns, so its
column remap is to positions in its own halo only, and the own/halo split goes through CSR (exact). Plain NumPy."""
from __future__ import annotations

import numpy as np

from kernels.formats.bcsr.container import BCSR
from kernels.formats.shard import ShardOps, csr_split, rebase, window_bytes
from storage.indexing import index_dtype


def _bcsr_hw(X) -> int:
    return 16 * X.width


def _bcsr_nbytes(X, partptr, tile_ptr, item_ptr):
    return window_bytes(partptr, tile_ptr, item_ptr, offset_bytes=X.indptr.dtype.itemsize,
                        tile_bytes=X.indices.dtype.itemsize + _bcsr_hw(X) * X.data.dtype.itemsize)


def _bcsr_halo(X, t0: int, t1: int) -> np.ndarray:
    """Every column of every block column the blocks read (w per block column, clipped to K): the B rows the
    kernel loads, padding columns of the last block column excepted."""
    w, K = X.width, int(X.shape[1])
    js = np.unique(X.indices[t0:t1].astype(np.int64))
    cols = (w * js[:, None] + np.arange(w, dtype=np.int64)).reshape(-1)
    return cols[cols < K]


def _bcsr_take(X, w0, w1, t0, t1, n_rows):
    return BCSR((int(n_rows), int(X.shape[1])), rebase(X.indptr, w0, w1), X.indices[t0:t1], X.data[t0:t1])


def _bcsr_remap(X, cols, local, n_local):
    """Block column j -> its rank among the shard's block columns; needs ``cols`` = `_bcsr_halo` of all of X and
    ``local`` = positions 0..len(cols)-1 (then column w*j + c lands at w*rank(j) + c, its position in cols)."""
    local = np.asarray(local, dtype=np.int64)
    halo = _bcsr_halo(X, 0, X.n_blocks)
    if not (np.array_equal(cols, halo) and np.array_equal(local, np.arange(cols.shape[0]))
            and int(n_local) == cols.shape[0]):
        raise ValueError("BCSR columns remap only to their positions in the shard's own halo (block columns keep "
                         "their w consecutive columns)")
    js, rank = np.unique(X.indices.astype(np.int64), return_inverse=True)
    n_local = int(n_local)
    return BCSR((int(X.shape[0]), n_local), X.indptr, rank.astype(index_dtype(-(-n_local // X.width))), X.data)


BCSR_SHARD = ShardOps(
    "bcsr", tiles=lambda X: X.indptr, items=lambda X, tp: np.asarray(tp, dtype=np.int64) * _bcsr_hw(X),
    nbytes=_bcsr_nbytes, halo=_bcsr_halo, take=_bcsr_take, remap=_bcsr_remap, any_order=False, split=csr_split)
