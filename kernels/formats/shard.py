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

Row subsets (the resident "rows" overlap: boundary rows, interior rows) need no per-format operation: `csr_rows`
takes any registered format's rows through its ``to_csr`` and ``convert`` (a window-range ``take`` cannot pick
arbitrary rows, and the parts are built once per resident setup).

Each format's `Format` record carries its `ShardOps` (``Format.shard``), defined in its folder
(``kernels/formats/<name>/shard.py``) from the generic helpers below (`distinct_columns`, `slot_halo`,
`window_bytes`, `rebase`, `relabel`, `keeps_order`, `csr_split`, `csr_rows`). A format without one is refused with one
line by ``tasks.distribute.formats.shard_ops``. Plain NumPy; no Dask.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from kernels.formats.registry import get
from storage.indexing import index_dtype  # noqa: F401


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
    """The halo of tiles whose slots name a column each, -1 for padding (ME-TCF, Tiled-CSR): one scatter into a
    mask whose extra last entry takes the padding (no pass to filter it out first)."""
    mask = np.zeros(int(n_cols) + 1, dtype=bool)
    mask[np.asarray(slots).reshape(-1)] = True
    return np.flatnonzero(mask[:-1]).astype(np.int64)


def window_bytes(partptr, tile_ptr, item_ptr, *, offset_bytes: int, tile_bytes: int, item_bytes: int = 0):
    """Bytes of each shard's arrays [P]: its window offsets (one more than its windows), tiles and items."""
    return ((np.diff(partptr) + 1) * offset_bytes + np.diff(tile_ptr) * tile_bytes
            + np.diff(item_ptr) * item_bytes)


def rebase(ptr: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Offsets ``ptr[lo:hi + 1]`` restarted at 0, in ``index_dtype`` of their new end (a shard's slice)."""
    p0 = int(ptr[lo])
    return (ptr[lo:hi + 1].astype(np.int64) - p0).astype(index_dtype(int(ptr[hi]) - p0))


def relabel(ids: np.ndarray, n_cols: int, cols: np.ndarray, local: np.ndarray) -> np.ndarray:
    """int64 ``ids`` (same shape) with column ``cols[i]`` renamed ``local[i]``; padding (-1) stays -1: one gather
    from a table whose extra last entry (-1) is where padding's -1 indexes."""
    lut = np.full(int(n_cols) + 1, -1, dtype=np.int64)
    lut[cols] = local
    return lut[np.asarray(ids)]


def keeps_order(cols: np.ndarray, local: np.ndarray) -> bool:
    """Whether renaming column ``cols[i]`` to ``local[i]`` keeps the columns' order (then a canonical shard stays
    canonical when only its column ids are rewritten)."""
    order = np.argsort(np.asarray(cols, dtype=np.int64), kind="stable")
    return bool(np.all(np.diff(np.asarray(local, dtype=np.int64)[order]) > 0))



def float32_csr(S, prec):
    """Any registered format's object (its ``format_name`` names it) as a float32 SciPy CSR through the format's
    ``to_csr`` (exact: the values are already in the precision; bfloat16 bits widened)."""
    import scipy.sparse as sp

    A = sp.csr_array(get(S.format_name).to_csr(S))
    if prec.name == "bfloat16" and A.dtype == np.uint16:
        A = sp.csr_array((prec.to_float32(A.data), A.indices, A.indptr), shape=A.shape)
    return A.astype(np.float32)


def csr_split(S, keep_col, prec):
    """Any registered format's object: the kept columns through a CSR round trip with the format's ``to_csr`` and
    ``convert`` (exact: the values are already in the precision)."""
    import scipy.sparse as sp

    A = float32_csr(S, prec)
    coo = A.tocoo()
    keep = keep_col[coo.col]
    part = sp.csr_array((coo.data[keep], (coo.row[keep], coo.col[keep])), shape=A.shape)
    part.sum_duplicates()
    return get(S.format_name).convert(part, prec)


def csr_rows(S, rows, prec):
    """Any registered format's object: its rows ``rows`` (int64, in that order; may be empty) as a new object of
    the same format, shape (len(rows), n_cols), through a CSR round trip (exact, as `csr_split`). Every row keeps
    its columns and their order, so a row-wise product (the CPU path) gives each row bitwise as S does; the
    resident "rows" overlap builds its boundary and interior parts with it."""
    A = float32_csr(S, prec)
    part = A[np.asarray(rows, dtype=np.int64)]
    part.sort_indices()
    return get(S.format_name).convert(part, prec)
