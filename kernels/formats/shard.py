"""What a registered format needs to run per shard, and the formats that provide it.

A format shards over row windows when it provides (`ShardOps`):

- window-range storage: its ``BlockLayout`` groups tiles by 16-row windows (``rows_per_group = 16``), so
  ``MatrixStore.read_format(fmt, key, w0, w1)`` returns one shard, and ``tiles(obj)`` gives the tiles per window
  (``[n_windows + 1]`` offsets: ME-TCF ``row_window_offset``, BCSR ``indptr``, Tiled-CSR ``group_ptr``, CVSE
  ``window_ptr``, its V x 1 vectors being its tiles) for balancing and slicing; ``obj.n_blocks`` counts them;
- ``halo(obj, t0, t1)``: the sorted original columns (rows of B) that tiles ``[t0, t1)`` read;
- ``take(obj, w0, w1, t0, t1, n_rows)``: the in-memory shard, equal to the store's window-range read;
- a column remap ``remap(obj, cols, local, n_local)``: column ``cols[i]`` renamed ``local[i]``, width
  ``n_local``. ``any_order`` says whether ``local`` may be any injective map (ME-TCF, Tiled-CSR, CVSE: one column
  id per slot or vector, so a resident shard reads the exchange's extended B directly) or must be the positions
  ``0..len(cols)-1`` in the sorted ``cols`` (BCSR: a block's columns are implied by its block column, so the
  resident shard gathers its halo rows into that order before each kernel, one device gather of its halo rows);
- ``split(obj, keep_col, prec)``: the part of the shard over the columns ``keep_col`` (the overlap's own/halo
  split): ME-TCF and Tiled-CSR re-condense their slots, CVSE drops vectors; BCSR goes through CSR and back
  (exact, once per resident setup).

Each format's `Format` record carries its `ShardOps` (``Format.shard``); ME-TCF's and BCSR's are defined here,
Tiled-CSR's in ``kernels.formats.tiledcsr_plugin`` (through ME-TCF's arrays, which its tiles share) and CVSE's in
``kernels.formats.cvse_plugin``, from the generic helpers below (`distinct_columns`, `slot_halo`,
`window_bytes`, `rebase`, `relabel`, `keeps_order`, `split_columns`). A format without one is refused with one
line by ``tasks.distribute.formats.shard_ops``. Plain NumPy; no Dask.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from kernels.formats.metcf import METCF, WINDOW
from kernels.indexing import index_dtype


@dataclass(frozen=True)
class ShardOps:
    name: str
    tiles: Callable[[Any], np.ndarray]
    items: Callable[[Any, np.ndarray], np.ndarray]  # (obj, tile offsets) -> item (value) offsets at those tiles
    nbytes: Callable[[Any, np.ndarray, np.ndarray, np.ndarray], np.ndarray]  # (obj, partptr, tile_ptr, item_ptr)
    halo: Callable[[Any, int, int], np.ndarray]
    take: Callable[..., Any]
    remap: Callable[..., Any]
    any_order: bool
    split: Callable[..., Any] | None


def distinct_columns(n_cols: int, cols: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``cols`` (column ids in 0..n_cols-1, no padding) as int64: a halo."""
    mask = np.zeros(int(n_cols), dtype=bool)
    mask[cols] = True
    return np.flatnonzero(mask).astype(np.int64)


def slot_halo(n_cols: int, slots: np.ndarray) -> np.ndarray:
    """The halo of tiles whose slots name a column each, -1 for padding (ME-TCF, Tiled-CSR)."""
    cols = np.asarray(slots).reshape(-1)
    return distinct_columns(n_cols, cols[cols >= 0])


def window_bytes(partptr, tile_ptr, item_ptr, *, offset_bytes: int, tile_bytes: int, item_bytes: int = 0):
    """Bytes of each shard's arrays [P]: its window offsets (one more than its windows), tiles and items."""
    return ((np.diff(partptr) + 1) * offset_bytes + np.diff(tile_ptr) * tile_bytes
            + np.diff(item_ptr) * item_bytes)


def rebase(ptr: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Offsets ``ptr[lo:hi + 1]`` restarted at 0, in ``index_dtype`` of their new end (a shard's slice)."""
    p0 = int(ptr[lo])
    return (ptr[lo:hi + 1].astype(np.int64) - p0).astype(index_dtype(int(ptr[hi]) - p0))


def relabel(ids: np.ndarray, n_cols: int, cols: np.ndarray, local: np.ndarray) -> np.ndarray:
    """int64 ``ids`` (same shape) with column ``cols[i]`` renamed ``local[i]``; padding (-1) stays -1."""
    lut = np.full(int(n_cols), -1, dtype=np.int64)
    lut[cols] = local
    flat = np.asarray(ids).astype(np.int64)
    return np.where(flat >= 0, lut[np.maximum(flat, 0)], -1)


def keeps_order(cols: np.ndarray, local: np.ndarray) -> bool:
    """Whether renaming column ``cols[i]`` to ``local[i]`` keeps the columns' order (then a canonical shard stays
    canonical when only its column ids are rewritten)."""
    order = np.argsort(np.asarray(cols, dtype=np.int64), kind="stable")
    return bool(np.all(np.diff(np.asarray(local, dtype=np.int64)[order]) > 0))


def remap_columns(S: METCF, cols: np.ndarray, local: np.ndarray, n_cols_local: int) -> METCF:
    """S with every column ``cols[i]`` renamed ``local[i]`` (a map over S's referenced columns) and width
    ``n_cols_local``. When ``local`` is increasing in ``cols`` the canonical order is kept."""
    out = relabel(S.sparse_a_to_b, int(S.shape[1]), cols, local)
    return METCF((int(S.shape[0]), int(n_cols_local)), S.row_window_offset, S.tc_offset, S.tc_local_id,
                 out.astype(index_dtype(n_cols_local)), S.data)


def split_columns(S: METCF, keep_col: np.ndarray, *, sort: bool = False) -> METCF:
    """The part of S whose columns have ``keep_col[col]`` True, same shape, re-condensed into TC blocks.

    Kept slots keep their relative order within each window (so a canonical S gives a canonical part), or with
    ``sort`` are sorted by column within each window (a canonical part of any S, e.g. one whose columns were
    renamed out of order); the parts for a mask and its complement sum to S:
    ``S @ B == part(mask) @ B + part(~mask) @ B``.
    """
    nb, W = S.n_blocks, int(S.sparse_a_to_b.shape[1])  # 8 (TF32) or 16 (FP16/BF16) slots per block
    flat = S.sparse_a_to_b.reshape(-1).astype(np.int64)
    keep_slot = flat >= 0
    keep_slot[keep_slot] = keep_col[flat[keep_slot]]
    kept = np.flatnonzero(keep_slot)
    slot_window = np.repeat(S.block_window().astype(np.int64), W)[kept]
    if sort:  # window-major still (kept is), columns ascending within a window
        by = np.lexsort((flat[kept], slot_window))
        kept, slot_window = kept[by], slot_window[by]
    per_window = np.bincount(slot_window, minlength=S.n_windows)
    rank = np.arange(kept.shape[0], dtype=np.int64) - (np.cumsum(per_window) - per_window)[slot_window]
    bpw = -(-per_window // W)
    new_block = (np.cumsum(bpw) - bpw)[slot_window] + rank // W
    n_blocks = int(bpw.sum())
    sab = np.full(n_blocks * W, -1, dtype=np.int64)
    sab[new_block * W + rank % W] = flat[kept]
    slot_block = np.full(nb * W, -1, dtype=np.int64)
    slot_block[kept] = new_block
    slot_c = np.zeros(nb * W, dtype=np.int64)
    slot_c[kept] = rank % W
    nz_slot = np.repeat(np.arange(nb, dtype=np.int64), np.diff(S.tc_offset)) * W + S.tc_local_id % W
    nz_keep = keep_slot[nz_slot]
    nz_slot = nz_slot[nz_keep]
    blocks = slot_block[nz_slot]
    lid = (S.tc_local_id[nz_keep].astype(np.int64) // W) * W + slot_c[nz_slot]
    order = np.argsort(blocks * (WINDOW * W) + lid)  # unique per nonzero: canonical (block, r, c) order
    nnz = int(order.shape[0])
    rwo = np.zeros(S.n_windows + 1, dtype=index_dtype(n_blocks))
    np.cumsum(bpw, out=rwo[1:])
    tco = np.zeros(n_blocks + 1, dtype=index_dtype(nnz))
    np.cumsum(np.bincount(blocks, minlength=n_blocks), out=tco[1:])
    return METCF(S.shape, rwo, tco, lid[order].astype(np.uint8), sab.reshape(n_blocks, W).astype(
        S.sparse_a_to_b.dtype), S.data[nz_keep][order])


# ---- ME-TCF -----------------------------------------------------------------------------------------------------
def _metcf_nbytes(M, partptr, tile_ptr, item_ptr):
    return window_bytes(partptr, tile_ptr, item_ptr, offset_bytes=M.row_window_offset.dtype.itemsize,
                        tile_bytes=M.tc_offset.dtype.itemsize + M.width * M.sparse_a_to_b.dtype.itemsize,
                        item_bytes=M.tc_local_id.dtype.itemsize + M.data.dtype.itemsize)


def _metcf_halo(M, t0: int, t1: int) -> np.ndarray:
    return slot_halo(M.shape[1], M.sparse_a_to_b[t0:t1])


def _metcf_take(M, w0, w1, t0, t1, n_rows):
    p0, p1 = int(M.tc_offset[t0]), int(M.tc_offset[t1])
    return METCF((int(n_rows), int(M.shape[1])), rebase(M.row_window_offset, w0, w1), rebase(M.tc_offset, t0, t1),
                 M.tc_local_id[p0:p1], M.sparse_a_to_b[t0:t1], M.data[p0:p1])


def _metcf_remap(S, cols, local, n_local):
    return remap_columns(S, cols, local, n_local)


def _metcf_split(S, keep_col, prec=None):
    return split_columns(S, keep_col)


METCF_SHARD = ShardOps(
    "metcf", tiles=lambda M: M.row_window_offset, items=lambda M, tp: M.tc_offset[tp].astype(np.int64),
    nbytes=_metcf_nbytes, halo=_metcf_halo, take=_metcf_take, remap=_metcf_remap, any_order=True,
    split=_metcf_split)


# ---- BCSR -------------------------------------------------------------------------------------------------------
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
    from kernels.formats.bcsr import BCSR
    return BCSR((int(n_rows), int(X.shape[1])), rebase(X.indptr, w0, w1), X.indices[t0:t1], X.data[t0:t1])


def _bcsr_remap(X, cols, local, n_local):
    """Block column j -> its rank among the shard's block columns; needs ``cols`` = `_bcsr_halo` of all of X and
    ``local`` = positions 0..len(cols)-1 (then column w*j + c lands at w*rank(j) + c, its position in cols)."""
    from kernels.formats.bcsr import BCSR
    local = np.asarray(local, dtype=np.int64)
    halo = _bcsr_halo(X, 0, X.n_blocks)
    if not (np.array_equal(cols, halo) and np.array_equal(local, np.arange(cols.shape[0]))
            and int(n_local) == cols.shape[0]):
        raise ValueError("BCSR columns remap only to their positions in the shard's own halo (block columns keep "
                         "their w consecutive columns)")
    js, rank = np.unique(X.indices.astype(np.int64), return_inverse=True)
    n_local = int(n_local)
    return BCSR((int(X.shape[0]), n_local), X.indptr, rank.astype(index_dtype(-(-n_local // X.width))), X.data)


def _csr_split(S, keep_col, prec):
    """Any format with ``to_csr`` and ``convert``: the kept columns through a CSR round trip (exact: the values
    are already in the precision)."""
    import scipy.sparse as sp

    from kernels.formats import get
    fmt = get(getattr(S, "format_name", "metcf"))
    A = sp.csr_array(fmt.to_csr(S))
    if prec.name == "bfloat16" and A.dtype == np.uint16:
        A = sp.csr_array((prec.to_float32(A.data), A.indices, A.indptr), shape=A.shape)
    A = A.astype(np.float32)
    coo = A.tocoo()
    keep = keep_col[coo.col]
    part = sp.csr_array((coo.data[keep], (coo.row[keep], coo.col[keep])), shape=A.shape)
    part.sum_duplicates()
    return fmt.convert(part, prec)


BCSR_SHARD = ShardOps(
    "bcsr", tiles=lambda X: X.indptr, items=lambda X, tp: np.asarray(tp, dtype=np.int64) * _bcsr_hw(X),
    nbytes=_bcsr_nbytes, halo=_bcsr_halo, take=_bcsr_take, remap=_bcsr_remap, any_order=False, split=_csr_split)
