"""ME-TCF's `ShardOps` (kernels.formats.shard): window slice, halo, column remap and the own/halo split, which
re-condenses a window's kept slots into TC blocks. Plain NumPy."""
from __future__ import annotations

import numpy as np

from kernels.formats.metcf.container import METCF, WINDOW
from kernels.formats.shard import ShardOps, rebase, relabel, slot_halo, window_bytes
from storage.indexing import index_dtype


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
