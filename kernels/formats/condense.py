"""Row-window column condensing, the tiling ME-TCF (DTC-SpMM) and Tiled-CSR (ICCD'23) share: per 16-row window, the
all-zero columns are deleted and the window's distinct columns, sorted ascending, are cut into tiles of w (the last
padded with -1). The two formats differ only in how a tile stores its nonzeros (ME-TCF: one local id per nonzero;
Tiled-CSR: tile-local CSR), so both build on these arrays (`WindowTiles`):

- ``window_ptr`` [n_windows + 1], ``index_dtype(n_tiles)``: window w owns tiles ``window_ptr[w]:window_ptr[w+1]``;
- ``tile_ptr`` [n_tiles + 1], ``index_dtype(nnz)``: tile t owns nonzeros ``tile_ptr[t]:tile_ptr[t+1]``, >= 1 each;
- ``local_id`` [nnz] uint8: ``r * w + c`` (r the row in the window, c the tile slot), ascending within a tile;
- ``slot_cols`` [n_tiles, w], ``index_dtype(K)``: the original column of each slot, -1 for padding;
- ``data`` [nnz]: the values in ``local_id`` order, A's dtype.

`condense_windows(A, width)` builds them from CSR; `split_slots(T, keep_col)` re-condenses the slots of the kept
columns (a shard's own/halo split). Vectorised NumPy, chunked over window ranges.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kernels.formats.blocks import WINDOW, canonical_csr, window_chunks
from storage.indexing import index_dtype, segment_ids

DEFAULT_CHUNK_NNZ = 1 << 22  # nonzeros per conversion chunk: ~0.4 GB of temporaries


class WindowTiles(NamedTuple):
    """The condensed arrays (module docstring), in the order of ME-TCF's fields."""

    shape: tuple[int, int]
    window_ptr: np.ndarray
    tile_ptr: np.ndarray
    local_id: np.ndarray
    slot_cols: np.ndarray
    data: np.ndarray


def _window_ptr(indptr: np.ndarray, n_rows: int) -> np.ndarray:
    """indptr at window boundaries, [n_windows + 1], int64."""
    n_windows = -(-n_rows // WINDOW)
    return indptr[np.minimum(np.arange(n_windows + 1, dtype=np.int64) * WINDOW, n_rows)].astype(np.int64)


def _convert_chunk(local_rows: np.ndarray, cols: np.ndarray, n_cols: int, n_windows: int, width: int):
    """Condense one window range. Inputs are the range's nonzeros in CSR order (row-major, columns ascending).

    Returns (tiles_per_window [n_windows], nnz_per_tile [n_tiles], slot_cols [n_tiles, width] with -1,
    order (permutation of the range's nonzeros into tile order), local_id uint8 in tile order).
    """
    window = local_rows >> 4
    key = window * np.int64(n_cols) + cols  # (window, col): the caller bounds n_windows * n_cols < 2**63
    # "stable" = timsort, which merges each window's 16 presorted row runs: 0.18 s vs 1.25 s (quicksort) on 4M keys.
    by_key = np.argsort(key, kind="stable")
    sorted_key = key[by_key]
    is_new = np.empty(sorted_key.shape[0], dtype=bool)
    is_new[:1] = True
    np.not_equal(sorted_key[1:], sorted_key[:-1], out=is_new[1:])
    unique_key = sorted_key[is_new]
    del sorted_key
    inverse = np.empty(key.shape[0], dtype=np.int64)
    inverse[by_key] = np.cumsum(is_new) - 1  # nonzero -> index of its (window, col) pair
    del by_key, is_new, key
    u_window = unique_key // n_cols
    u_col = unique_key - u_window * n_cols
    distinct = np.bincount(u_window, minlength=n_windows)  # distinct columns per window
    first_u = np.concatenate([[0], np.cumsum(distinct)[:-1]])
    u_rank = np.arange(unique_key.shape[0], dtype=np.int64) - first_u[u_window]  # k in the formats' maps
    tiles_per_window = -(-distinct // width)
    tile_start = np.concatenate([[0], np.cumsum(tiles_per_window)])
    u_tile = tile_start[u_window] + u_rank // width
    n_tiles = int(tile_start[-1])
    slot_cols = np.full((n_tiles, width), -1, dtype=index_dtype(n_cols))  # final dtype: no int64 copy kept
    slot_cols[u_tile, u_rank & (width - 1)] = u_col
    nz_tile = u_tile[inverse]
    local_id = ((local_rows & 15) * width + (u_rank[inverse] & (width - 1))).astype(np.uint8)
    del inverse
    # CSR order is (row, col) inside a window, i.e. (r, c) inside each tile, so a *stable* sort on the tile id
    # alone yields the canonical (tile, local_id) order.
    order = np.argsort(nz_tile, kind="stable")
    nnz_per_tile = np.bincount(nz_tile, minlength=n_tiles)
    return tiles_per_window, nnz_per_tile, slot_cols, order, local_id[order]


def condense_windows(A, *, width: int, chunk_nnz: int = DEFAULT_CHUNK_NNZ, who: str = "condense_windows"
                     ) -> WindowTiles:
    """Any SciPy sparse matrix (CSR preferred; rectangular, empty rows, int64 indices) -> its canonical 16 x
    ``width`` window tiles. Values and explicit zeros are kept as they are (A's dtype); duplicates are summed first
    (``who`` names the caller in the error for a non-sparse A). Work is done per chunk of consecutive windows
    holding about ``chunk_nnz`` nonzeros: peak extra memory is O(chunk_nnz) plus the output."""
    A = canonical_csr(A, who)
    n_rows, n_cols = (int(s) for s in A.shape)
    indptr, indices = A.indptr, A.indices
    nnz = int(indptr[-1]) if indptr.shape[0] else 0
    n_windows = -(-n_rows // WINDOW)
    wptr = _window_ptr(indptr, n_rows)
    # The (window, col) key must fit int64: cap windows per chunk (only matters for astronomically wide A).
    max_windows = max(1, (2**62) // max(n_cols, 1))
    bounds = window_chunks(wptr, chunk_nnz, max_windows if max_windows < n_windows else None)
    data = np.empty(nnz, dtype=A.data.dtype)
    local_id = np.empty(nnz, dtype=np.uint8)
    tiles_per_window = np.zeros(n_windows, dtype=np.int64)
    per_tile, slots = [], []
    for w0, w1 in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        r0, r1 = w0 * WINDOW, min(w1 * WINDOW, n_rows)
        p0, p1 = int(wptr[w0]), int(wptr[w1])
        if p0 == p1:
            continue
        local_rows = segment_ids(indptr[r0:r1 + 1])
        tpw, npt, slot_cols, order, lid = _convert_chunk(
            local_rows, indices[p0:p1].astype(np.int64, copy=False), n_cols, w1 - w0, width)
        tiles_per_window[w0:w1] = tpw
        per_tile.append(npt)
        slots.append(slot_cols)
        # The chunk's nonzeros occupy the same positions p0:p1 in tile order as in CSR (windows keep their order).
        data[p0:p1] = A.data[p0:p1][order]
        local_id[p0:p1] = lid
    nnz_per_tile = np.concatenate(per_tile) if per_tile else np.zeros(0, dtype=np.int64)
    n_tiles = int(nnz_per_tile.shape[0])
    window_ptr = np.zeros(n_windows + 1, dtype=index_dtype(n_tiles))
    np.cumsum(tiles_per_window, out=window_ptr[1:])
    tile_ptr = np.zeros(n_tiles + 1, dtype=index_dtype(nnz))
    np.cumsum(nnz_per_tile, out=tile_ptr[1:])
    slot_cols = np.concatenate(slots) if slots else np.zeros((0, width), dtype=index_dtype(n_cols))
    return WindowTiles((n_rows, n_cols), window_ptr, tile_ptr, local_id, slot_cols, data)


def split_slots(T: WindowTiles, keep_col: np.ndarray, *, sort: bool = False) -> WindowTiles:
    """The part of ``T`` whose columns have ``keep_col[col]`` True, same shape, re-condensed into tiles.

    Kept slots keep their relative order within each window (so a canonical T gives a canonical part), or with
    ``sort`` are sorted by column within each window (a canonical part of any T, e.g. one whose columns were
    renamed out of order); the parts for a mask and its complement sum to T.
    """
    nt, W = int(T.tile_ptr.shape[0]) - 1, int(T.slot_cols.shape[1])  # 8 (TF32) or 16 (FP16/BF16) slots per tile
    n_windows = -(-int(T.shape[0]) // WINDOW)
    flat = T.slot_cols.reshape(-1).astype(np.int64)
    keep_slot = flat >= 0
    keep_slot[keep_slot] = keep_col[flat[keep_slot]]
    kept = np.flatnonzero(keep_slot)
    tile_window = segment_ids(T.window_ptr, index_dtype(n_windows))
    slot_window = np.repeat(tile_window.astype(np.int64), W)[kept]
    if sort:  # window-major still (kept is), columns ascending within a window
        by = np.lexsort((flat[kept], slot_window))
        kept, slot_window = kept[by], slot_window[by]
    per_window = np.bincount(slot_window, minlength=n_windows)
    rank = np.arange(kept.shape[0], dtype=np.int64) - (np.cumsum(per_window) - per_window)[slot_window]
    tpw = -(-per_window // W)
    new_tile = (np.cumsum(tpw) - tpw)[slot_window] + rank // W
    n_tiles = int(tpw.sum())
    cols = np.full(n_tiles * W, -1, dtype=np.int64)
    cols[new_tile * W + rank % W] = flat[kept]
    slot_tile = np.full(nt * W, -1, dtype=np.int64)
    slot_tile[kept] = new_tile
    slot_c = np.zeros(nt * W, dtype=np.int64)
    slot_c[kept] = rank % W
    nz_slot = segment_ids(T.tile_ptr) * W + T.local_id % W
    nz_keep = keep_slot[nz_slot]
    nz_slot = nz_slot[nz_keep]
    tiles = slot_tile[nz_slot]
    lid = (T.local_id[nz_keep].astype(np.int64) // W) * W + slot_c[nz_slot]
    order = np.argsort(tiles * (WINDOW * W) + lid)  # unique per nonzero: canonical (tile, r, c) order
    nnz = int(order.shape[0])
    window_ptr = np.zeros(n_windows + 1, dtype=index_dtype(n_tiles))
    np.cumsum(tpw, out=window_ptr[1:])
    tile_ptr = np.zeros(n_tiles + 1, dtype=index_dtype(nnz))
    np.cumsum(np.bincount(tiles, minlength=n_tiles), out=tile_ptr[1:])
    return WindowTiles(T.shape, window_ptr, tile_ptr, lid[order].astype(np.uint8),
                       cols.reshape(n_tiles, W).astype(T.slot_cols.dtype), T.data[nz_keep][order])
