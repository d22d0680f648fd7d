"""Index dtypes, decided in one place: int32 while every size fits, int64 once one passes int32."""
from __future__ import annotations

import numpy as np

INT32_MAX = np.iinfo(np.int32).max


def index_dtype(*sizes: int) -> type[np.integer]:
    """The narrowest of int32/int64 that holds every size (a dimension, nnz, rows x N, an offset)."""
    return np.int32 if max((int(s) for s in sizes), default=0) <= INT32_MAX else np.int64


def segment_ids(ptr, dtype=np.int64, start: int = 0) -> np.ndarray:
    """The segment of each item of a pointer array (CSR ``indptr``: the row of each stored entry; a window or tile
    pointer: the window of each block), ``[ptr[-1] - ptr[0]]`` in ``dtype``. Segments are numbered from ``start``:
    for a slice ``ptr[r0:r1 + 1]`` of a longer pointer array, ``start=r0`` gives the ids in the whole array
    (``np.repeat(np.arange(r0, r1, dtype=dtype), np.diff(ptr[r0:r1 + 1]))``)."""
    ptr = np.asarray(ptr)
    n = ptr.shape[0] - 1
    return np.repeat(np.arange(start, start + n, dtype=dtype), np.diff(ptr.astype(np.int64, copy=False)))


def cut_ranges(ptr, max_len: int, what: str, length_name: str = "max_len") -> tuple[np.ndarray, ...]:
    """Cut each range ``[ptr[i], ptr[i+1])`` into pieces of ``max_len`` items, the last one the rest (>= 1 piece per
    range, an empty range one empty piece), for kernels that give each piece its own warp or block and add the
    pieces of a cut range in a fixed order afterwards (csr_rows' row segments, Tiled-CSR's group pieces).

    Returns int32 arrays (piece_ptr int64): ``piece_ptr`` [S + 1] (piece s = items piece_ptr[s] .. piece_ptr[s+1] - 1),
    ``owner`` [S] (its range), ``slot`` [S] (-1 for a range left whole, else the piece's workspace row: pieces of
    cut ranges numbered in order), ``cut`` [R] (the ranges cut in more than one piece) and ``fix_ptr`` [R + 1] (the
    slots of cut range i are fix_ptr[i] .. fix_ptr[i+1] - 1, in piece order). ``what`` names a range and
    ``length_name`` the caller's argument in errors."""
    if max_len < 1:
        raise ValueError(f"{length_name} is {max_len}, expected >= 1")
    ptr = np.asarray(ptr, dtype=np.int64)
    n = ptr.shape[0] - 1
    if n > INT32_MAX:
        raise ValueError(f"A has {n} {what}s; the kernels take int32 {what} ids (<= {INT32_MAX})")
    k = np.maximum(1, -(-np.diff(ptr) // max_len))  # pieces per range
    S = int(k.sum())
    owner = np.repeat(np.arange(n, dtype=np.int64), k)
    j = np.arange(S, dtype=np.int64) - (np.cumsum(k) - k)[owner]  # index of the piece within its range
    piece_ptr = np.empty(S + 1, dtype=np.int64)
    piece_ptr[:S] = ptr[owner] + j * max_len
    piece_ptr[S] = ptr[-1]
    split = k[owner] > 1
    if int(split.sum()) > INT32_MAX:
        raise ValueError(f"{int(split.sum())} pieces of cut {what}s exceed the int32 workspace index")
    slot = np.where(split, np.cumsum(split) - 1, -1)
    cut = np.flatnonzero(k > 1)
    fix_ptr = np.zeros(cut.shape[0] + 1, dtype=np.int64)
    np.cumsum(k[cut], out=fix_ptr[1:])
    return (piece_ptr, owner.astype(np.int32), slot.astype(np.int32), cut.astype(np.int32),
            fix_ptr.astype(np.int32))


def longest_first(ptr, heavy: float) -> np.ndarray | None:
    """A launch order of the ranges of pointer array ``ptr`` (CSR rows, ME-TCF row windows): those of >= ``heavy`` x
    the mean length first, longest first (ties in the given order), then the others in the given order; None when
    that is the given order itself (no such range, or ``heavy`` <= 0). int64 ids."""
    lens = np.diff(np.asarray(ptr, dtype=np.int64))
    if heavy <= 0 or lens.size == 0 or lens.sum() == 0:
        return None
    big = np.flatnonzero(lens >= heavy * lens.mean())
    if big.size == 0:
        return None
    keys = -lens[big]  # a stable sort of 16-bit keys is NumPy's radix sort: ~10x faster on 500k rows
    big = big[np.argsort(keys.astype(np.int16) if keys.min() >= -32768 else keys, kind="stable")]
    rest = np.ones(lens.size, dtype=bool)
    rest[big] = False
    order = np.concatenate([big, np.flatnonzero(rest)])
    return None if np.array_equal(order, np.arange(lens.size)) else order
