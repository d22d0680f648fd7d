"""ME-TCF's `ShardOps` (kernels.formats.shard): window slice, halo, column remap and the own/halo split, which
re-condenses a window's kept slots into TC blocks. Plain NumPy."""
from __future__ import annotations

import numpy as np

from kernels.formats.condense import WindowTiles, split_slots
from kernels.formats.metcf.container import METCF
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
    tiles = WindowTiles(S.shape, S.row_window_offset, S.tc_offset, S.tc_local_id, S.sparse_a_to_b, S.data)
    return METCF(*split_slots(tiles, keep_col, sort=sort))  # kernels.formats.condense: Tiled-CSR's split too


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
