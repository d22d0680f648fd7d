"""The per-window counts behind `kernels.formats.structure` (every window of A, or a sample's): for each 16-row
window, the distinct (row // V, col) pairs summed over its vector rows and the most in one (V = 2, 4, 8, 16; V = 16:
the window's distinct columns), ME-TCF's TC blocks ceil(distinct / w) and the aligned 16 x w BCSR blocks, for the
mma widths w.

Two methods, the same numbers (tests compare them):

- markers (`marker_counts`, where the columns are few enough for ``MARKER_COLS_PER_NNZ``): one pass over the
  nonzeros in a numba kernel with a marker per column and level holding the last vector row that touched it; a
  nonzero is a new column of its 2-row group when that marker is older, and only then are its 4-, 8- and 16-row
  groups' markers checked (a column new in a group may be old in the group holding it, never the other way), and
  at the window level the aligned blocks' markers. O(nnz + columns) per chunk of windows, chunks on threads (the
  kernel releases the GIL), each with its own markers. Every window of R-MAT at 8M nonzeros took 0.22 s the
  sorting way on the H200's 16-core host, 0.08 s of a 10M-nonzero `auto` plan's hybrid candidate;
- sorting (`sorted_counts`): one sort per chunk of windows of the keys ``((window << bits | col) << 4) | row % 16``
  (2^bits >= the columns, a multiple of 16). The sorted keys shifted right by s are sorted too, so each statistic
  is a count of run boundaries: shift 1..4 gives (row // V, col) for V = 2..16, shift 4 + log2 w the aligned
  blocks. Each is taken from the previous one's distinct keys (a shorter array every step). From `PARALLEL_NNZ`
  nonzeros counted, chunks of windows go to a thread pool (NumPy's sorts and element-wise loops release the GIL;
  each chunk fills its own windows' counts, so the result does not depend on the thread count): on the 2-core CI
  host every window of R-MAT at 1M / 4M nonzeros 0.029 -> 0.017 s / 0.138 -> 0.064 s. One thread per
  `PARALLEL_NNZ` nonzeros at most: on a 16-core H200 host R-MAT at 1M took 0.052 / 0.032 / 0.025 / 0.028 / 0.040 s
  on 1 / 2 / 4 / 8 / 16 threads (more threads than that share the GIL-held steps between the sorts).

`kernels.formats.metrics._scan` is the one-level twin for scoring reorderings (a window's distinct columns and
aligned blocks, plus window groups' columns): kept apart because the four vector levels cost 2.4-4.6x its time
where a reordering needs none of them (one thread, every window, 8-10M nonzeros of R-MAT / SBM / mesh: 0.064 /
0.075 / 0.075 s against 0.193 / 0.344 / 0.178 s here, 2-core host, 2026-11-29); tests/kernels/formats/
test_structure.py checks that the counts both make agree.
"""
from __future__ import annotations

import numba
import numpy as np

from configs.threads import pool, usable_cpus
from kernels.formats.blocks import WINDOW, window_chunks  # WINDOW: the mma's m16, every format's row group
from kernels.precision import PRECISIONS

VECTOR_ROWS = (1, 2, 4, 8, 16)  # row groups dividing a window (CVSE's V)
BLOCK_WIDTHS = tuple(sorted({p.block_width for p in PRECISIONS.values()}))  # the mma's k: 8 (TF32), 16 (half)
if any(WINDOW % w or w & (w - 1) for w in BLOCK_WIDTHS):  # the key shifts of _chunk count on it
    raise RuntimeError(f"block widths {BLOCK_WIDTHS} must be powers of two dividing the {WINDOW}-row window")
if VECTOR_ROWS[1:] != (2, 4, 8, WINDOW):  # the marker kernel's four levels
    raise RuntimeError(f"vector rows {VECTOR_ROWS} must be 1, 2, 4, 8 and the {WINDOW}-row window")
CHUNK_NNZ = 1 << 22  # keys sorted per chunk of windows (32 MB of int64 keys), at most
PARALLEL_NNZ = 1 << 18  # nonzeros sorted per thread (below this many: one thread, no pool)
# nonzeros counted per thread by markers: every window of a 1M-nonzero R-MAT / 3-D mesh on the H200's 16-core host
# (one thread 15.5-15.8 ms) took 6.9 / 5.8 ms on 4 threads (1 << 18), 4.1 / 4.1 on 8 (1 << 17), 3.5 / 3.3 on 15-16
# (1 << 16) (the kernel holds no GIL, unlike the sorts); at 1 << 16 one `auto` plan in six then spent 123 ms in
# them (docs/kernels-notes.md "Session 39", not explained): 8 threads at 1M, most of the gain with half the threads
# to wait for
MARKER_PARALLEL_NNZ = 1 << 17
CHUNKS_PER_THREAD = 4  # chunks per thread (a hub window's chunk does not leave the others idle)
# markers: used while the columns are at most this many times the nonzeros counted (plus the slack): each chunk
# fills (4 + 1/8 + 1/16) markers a column, which should stay below the counting work
MARKER_COLS_PER_NNZ = 2
MARKER_SLACK = 1 << 20
MARKER_BYTES = 1 << 30  # the live markers of all threads together, at most (fewer threads past it)


def counts(indptr, indices, n_rows: int, n_cols: int, windows: np.ndarray) -> dict:
    """Per window of ``windows`` (ascending window ids): {(kind, size): int64 count array} for kinds "v" and "vmax"
    (V = 2, 4, 8, 16), "tc" and "bcsr" (the block widths)."""
    total = int(_window_nnz(indptr, windows, n_rows).sum())
    if n_cols <= MARKER_COLS_PER_NNZ * total + MARKER_SLACK:
        return marker_counts(indptr, indices, n_rows, n_cols, windows)
    return sorted_counts(indptr, indices, n_rows, n_cols, windows)


@numba.njit(cache=True, nogil=True)
def _marker_run(indptr, indices, n_rows, windows, w0, w1, widths, col_mark, block_mark, out):
    """Counts of windows[w0:w1] into out[:, w0:w1]: rows 2l / 2l + 1 the sum / max over the vector rows of level l
    (V = 2 << l), rows 8 + k the aligned blocks of width widths[k]. col_mark [n_cols, 4] (a column's four levels
    in one cache line) and block_mark [len(widths), ...] start at -1; a level-l group is numbered
    i * (16 >> (l + 1)) + its vector row, a window i."""
    per_row = np.zeros((4, 8), np.int64)
    blocks = np.zeros(widths.size, np.int64)
    shifts = np.zeros(widths.size, np.int64)  # widths are powers of two: shifts, not divisions, in the loop
    for k in range(widths.size):
        while (1 << shifts[k]) < widths[k]:
            shifts[k] += 1
    for i in range(w0, w1):
        per_row[:] = 0
        blocks[:] = 0
        r0 = windows[i] * 16
        for r in range(r0, min(n_rows, r0 + 16)):
            sub = r - r0
            for p in range(indptr[r], indptr[r + 1]):
                c = indices[p]
                for lvl in range(4):
                    vrow = sub >> (lvl + 1)  # the vector row of level lvl (V = 2 << lvl)
                    g = (i << (3 - lvl)) + vrow
                    if col_mark[c, lvl] == g:
                        break  # seen in this group, so in every group holding it
                    col_mark[c, lvl] = g
                    per_row[lvl, vrow] += 1
                    if lvl == 3:
                        for k in range(widths.size):
                            b = c >> shifts[k]
                            if block_mark[k, b] != i:
                                block_mark[k, b] = i
                                blocks[k] += 1
        for lvl in range(4):
            s = 0
            m = 0
            for j in range(8 >> lvl):
                s += per_row[lvl, j]
                m = max(m, per_row[lvl, j])
            out[2 * lvl, i] = s
            out[2 * lvl + 1, i] = m
        for k in range(widths.size):
            out[8 + k, i] = blocks[k]


def marker_counts(indptr, indices, n_rows: int, n_cols: int, windows: np.ndarray) -> dict:
    """`counts` by column markers (module docstring), threads on chunks of windows."""
    indptr = np.asarray(indptr, dtype=np.int64)
    windows = np.asarray(windows, dtype=np.int64)
    widths = np.asarray(BLOCK_WIDTHS, dtype=np.int64)
    out = np.zeros((8 + widths.size, windows.size), dtype=np.int64)
    ptr = np.concatenate([[0], np.cumsum(_window_nnz(indptr, windows, n_rows))])  # nonzeros before each window
    total = int(ptr[-1])
    mark = np.int32 if windows.size * 8 < np.iinfo(np.int32).max else np.int64
    n_cols_k = max(int(n_cols), 1)
    block_cols = -(-n_cols_k // int(widths.min()))
    chunk_bytes = (4 * n_cols_k + widths.size * block_cols) * np.dtype(mark).itemsize
    threads = min(usable_cpus(), -(-total // MARKER_PARALLEL_NNZ), max(1, MARKER_BYTES // chunk_bytes)) \
        if total >= MARKER_PARALLEL_NNZ else 1
    cuts = window_chunks(ptr, -(-total // threads) if total else 1)

    def one(w0: int, w1: int) -> None:
        _marker_run(indptr, indices, n_rows, windows, w0, w1, widths, np.full((n_cols_k, 4), -1, mark),
                    np.full((widths.size, block_cols), -1, mark), out)

    spans = list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))
    if threads > 1 and len(spans) > 1:
        list(pool("structure", threads).map(one, *zip(*spans)))
    else:
        for w0, w1 in spans:
            one(w0, w1)
    found = {}
    for lvl, V in enumerate(VECTOR_ROWS[1:]):
        found[("v", V)], found[("vmax", V)] = out[2 * lvl], out[2 * lvl + 1]
    for k, w in enumerate(BLOCK_WIDTHS):
        found[("tc", w)] = -(-out[6] // w)
        found[("bcsr", w)] = out[8 + k]
    return {key: found[key] for key in _KEYS}


def _window_nnz(indptr, windows, n_rows: int) -> np.ndarray:
    """Stored entries of each window of ``windows``, int64."""
    starts = np.asarray(windows, dtype=np.int64) * WINDOW
    return (indptr[np.minimum(starts + WINDOW, n_rows)] - indptr[starts]).astype(np.int64, copy=False)


def _window_rows(windows: np.ndarray, n_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows of ``windows`` in order, each row's position in ``windows``, [n + 1] offsets of each window's rows)."""
    if windows.size == -(-n_rows // WINDOW):  # every window (ascending, distinct): no search
        rows = np.arange(n_rows, dtype=np.int64)
        return rows, rows // WINDOW, np.minimum(np.arange(windows.size + 1, dtype=np.int64) * WINDOW, n_rows)
    rows = (windows[:, None] * WINDOW + np.arange(WINDOW, dtype=np.int64)).ravel()
    rows = rows[rows < n_rows]
    local = np.searchsorted(windows, rows // WINDOW)  # the window's position in `windows` (non-decreasing)
    return rows, local, np.searchsorted(local, np.arange(windows.size + 1))


def sorted_counts(indptr, indices, n_rows: int, n_cols: int, windows: np.ndarray) -> dict:
    """`counts` by sorting (the module docstring's second method)."""
    bits = max(n_cols - 1, WINDOW - 1).bit_length()  # the column field: 2^bits >= n_cols, a multiple of 16
    if bits > 58:
        raise ValueError(f"A has {n_cols} columns; the structure keys hold at most 2^58")
    rows, local, first_row = _window_rows(windows, n_rows)  # their nonzeros: one gathered range per row
    lengths = indptr[rows + 1] - indptr[rows]
    ptr = np.concatenate([[0], np.cumsum(lengths)])[first_row]  # nonzeros before each picked window
    counts = {key: np.zeros(windows.size, dtype=np.int64) for key in _KEYS}
    total = int(ptr[-1])
    threads = min(usable_cpus(), -(-total // PARALLEL_NNZ)) if total >= PARALLEL_NNZ else 1
    chunk_nnz = min(CHUNK_NNZ, max(PARALLEL_NNZ // 4, -(-total // (CHUNKS_PER_THREAD * threads))))
    cuts = window_chunks(ptr, chunk_nnz, max_windows=1 << (58 - bits))
    every = windows.size == -(-n_rows // WINDOW)  # all windows: a chunk's nonzeros are one run of A's

    def one(w0: int, w1: int) -> None:  # the windows w0 .. w1 - 1: their own slices of the counts
        sel = slice(first_row[w0], first_row[w1])
        r, n = rows[sel], lengths[sel]
        if not n.sum():
            return
        if every:
            cols = np.asarray(indices[indptr[r[0]]:indptr[r[-1] + 1]], dtype=np.int64)
        else:
            pos = np.repeat(indptr[r] - np.cumsum(n) + n, n) + np.arange(int(n.sum()), dtype=np.int64)
            cols = np.asarray(indices[pos], dtype=np.int64)
        keys = np.repeat(((local[sel] - w0) << (bits + 4)) | (r % WINDOW), n)  # window and row, then the column
        keys |= cols << 4
        keys.sort()
        _chunk(keys, int(w1 - w0), bits, {k: c[w0:w1] for k, c in counts.items()})

    spans = list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))
    if threads > 1 and len(spans) > 1:  # NumPy's sorts and element-wise loops release the GIL
        list(pool("structure", threads).map(one, *zip(*spans)))
    else:
        for w0, w1 in spans:
            one(w0, w1)
    return counts


_KEYS = ([(kind, V) for kind in ("v", "vmax") for V in VECTOR_ROWS[1:]]
         + [(kind, w) for kind in ("tc", "bcsr") for w in BLOCK_WIDTHS])


def _distinct(sorted_keys: np.ndarray) -> np.ndarray:
    keep = np.empty(sorted_keys.size, dtype=bool)
    keep[:1] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=keep[1:])
    return sorted_keys[keep]


def _chunk(keys: np.ndarray, n_win: int, bits: int, counts: dict) -> None:
    """Fill the chunk's per-window counts (views into the whole arrays) from its sorted keys
    ``((window << bits | col) << 4) | row % 16`` (shifted in place: the caller's keys are used up)."""
    u = keys
    for V in VECTOR_ROWS[1:]:  # distinct (row // V, col): the previous distinct keys shifted once more
        u >>= 1  # in place: (window << bits | col) << s | vector row in the window, s = log2(16 / V)
        u = _distinct(u)
        s = 4 - (V.bit_length() - 1)
        if s:
            slot = u >> (bits + s)  # (window, vector row) as window << s | vector row
            slot <<= s
            slot |= u & ((1 << s) - 1)
            per_vec_row = np.bincount(slot, minlength=n_win << s).reshape(n_win, 1 << s)
            counts[("v", V)][:] = per_vec_row.sum(axis=1)
            counts[("vmax", V)][:] = per_vec_row.max(axis=1)
        else:  # V = 16: one vector row per window
            counts[("v", V)][:] = counts[("vmax", V)][:] = np.bincount(u >> bits, minlength=n_win)
    distinct_cols = counts[("v", WINDOW)]  # u now holds window << bits | col
    for w in BLOCK_WIDTHS:
        tc = -(-distinct_cols // w)
        counts[("tc", w)][:] = tc
        blocks = np.bincount(_distinct(u >> (w.bit_length() - 1)) >> (bits - w.bit_length() + 1), minlength=n_win)
        counts[("bcsr", w)][:] = blocks
