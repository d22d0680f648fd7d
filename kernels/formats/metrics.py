"""Tensor-Core tiling statistics of a CSR matrix, without building the format.

``tc_stats(A)`` counts what ME-TCF (DTC-SpMM section 4.2) would store for A in its current row order:
16-row windows, each window's distinct columns condensed and cut into groups of ``width`` = 8, one TC block per
group. It also counts plain aligned BCSR 16x8 blocks (SMaT's format, no condensing) and an L2-locality proxy.
Reordering is judged by these numbers: fewer TC blocks = denser blocks = fewer MMA instructions.

Method (`window_counts`): one pass over the nonzeros in window order with a marker per column holding the last
window that touched it (a nonzero is a new column of its window when its column's marker is older; only then are
the aligned block's and the window group's markers checked), in a numba kernel: O(nnz + n_cols), the counts of
every block width at once. 9.9M nonzeros (SBM, 500k columns): 0.08 s on one core, where the sort-based count below
took 0.63 / 0.66 s on one / two threads (2-core CI host, 2026-11-29); `tasks.reorder.auto_reorder` scores each candidate
this way (both block widths and BCSR in one pass). The markers cost 4 bytes a column per marker array, so a matrix
with far more columns than nonzeros (hypersparse, wide) is counted the older way instead: in chunks of whole window
groups the keys ``window * n_cols + col`` are sorted (rows are already in window order, so a chunk-local sort is a
global one) and the run boundaries counted, threads on disjoint chunks. Both give the same numbers (tests compare).
`kernels.formats.structure_counts` counts the same windows at four vector levels for the plan's statistics; the
scan here stays one level (module docstring there: why two kernels).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import scipy.sparse as sp

# Nonzeros per chunk of the sort-based count: 8M keys = 64 MB of int64 keys plus the sorted copy.
_CHUNK_NNZ = 1 << 23
# The marker count's limit: columns at most this many times the nonzeros (plus _MARKER_SLACK): beyond it the markers
# (about 9 bytes a column) would outweigh the matrix, and the sort-based count runs instead.
_MARKER_COLS_PER_NNZ = 2
_MARKER_SLACK = 1 << 24


def _csr_arrays(A) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    if not sp.issparse(A):
        raise TypeError(f"tc_stats needs a scipy.sparse matrix, got {type(A).__name__}")
    if A.format != "csr":
        A = A.tocsr()
    return A.indptr, A.indices, (int(A.shape[0]), int(A.shape[1]))


@numba.njit(cache=True, nogil=True)
def _scan(indptr, indices, n_rows, window, widths, group_windows, col_mark, block_mark, group_mark):
    """Per window: distinct columns, distinct aligned blocks per width (``widths[k]``: row k of the second result),
    and per group of ``group_windows`` windows its distinct columns. The *_mark arrays start at -1 (dtype wide
    enough for a window index); col_mark / group_mark [n_cols], block_mark [len(widths), ceil(n_cols / min width)]."""
    n_windows = (n_rows + window - 1) // window
    distinct = np.zeros(n_windows, np.int64)
    blocks = np.zeros((widths.size, n_windows), np.int64)
    group_cols = np.zeros((n_windows + group_windows - 1) // group_windows, np.int64)
    for w in range(n_windows):
        g = w // group_windows
        for p in range(indptr[w * window], indptr[min(n_rows, (w + 1) * window)]):
            c = indices[p]
            if col_mark[c] != w:  # a new column of this window: its block and its group may be new too
                col_mark[c] = w
                distinct[w] += 1
                for k in range(widths.size):
                    b = c // widths[k]
                    if block_mark[k, b] != w:
                        block_mark[k, b] = w
                        blocks[k, w] += 1
                if group_mark[c] != g:
                    group_mark[c] = g
                    group_cols[g] += 1
    return distinct, blocks, group_cols


def markers_fit(shape, nnz: int) -> bool:
    """Whether `window_counts` takes a matrix of ``shape`` with ``nnz`` stored entries (its markers are O(columns))."""
    return int(shape[1]) <= _MARKER_COLS_PER_NNZ * int(nnz) + _MARKER_SLACK


def window_counts(A, *, window: int = 16, widths=(8,), group_windows: int = 8):
    """(distinct columns per window, {width: aligned ``window x width`` blocks per window}, distinct columns per
    group of ``group_windows`` windows), int64 arrays, for CSR ``A`` in its current row order (any index order,
    duplicates counted once). ME-TCF's TC blocks of a window are ceil(distinct / width); ``widths`` may be empty (no
    block counts: {}). Needs `markers_fit`."""
    if window < 1 or group_windows < 1 or (len(widths) and min(widths) < 1):
        raise ValueError(f"window, widths, group_windows must be >= 1, got {window}, {widths}, {group_windows}")
    indptr, indices, shape = _csr_arrays(A)
    return _marker_counts(indptr, indices, shape, window, widths, group_windows)


def _marker_counts(indptr, indices, shape, window: int, widths, group_windows: int):
    n_rows, n_cols = shape
    if not markers_fit(shape, int(indptr[-1])):
        raise ValueError(f"window_counts: {n_cols} columns for {int(indptr[-1])} nonzeros is past the markers' "
                         "limit (markers_fit); tc_stats counts such a matrix by sorting")
    nnz = int(indptr[-1])
    # the kernel indexes its markers by column unchecked: a malformed CSR (SciPy's constructors check this only on
    # request) gets a ValueError here, not a write past an array
    cols_ok = not nnz or (int(indices[:nnz].min()) >= 0 and int(indices[:nnz].max()) < n_cols)
    if len(indptr) != n_rows + 1 or nnz > len(indices) or not cols_ok:
        raise ValueError(f"window_counts: not a valid CSR of shape {shape}: {len(indptr)} row pointers (expected "
                         f"{n_rows + 1}), {nnz} nonzeros of {len(indices)} indices, column ids must lie in [0, "
                         f"{n_cols})")
    mark = np.int32 if -(-n_rows // window) < np.iinfo(np.int32).max else np.int64  # holds a window index
    widths_a = np.asarray(widths, dtype=np.int64)
    n_cols_k = max(n_cols, 1)
    distinct, blocks, group_cols = _scan(
        indptr, indices, n_rows, window, widths_a, group_windows, np.full(n_cols_k, -1, mark),
        np.full((widths_a.size, -(-n_cols_k // int(widths_a.min())) if widths_a.size else 1), -1, mark),
        np.full(n_cols_k, -1, mark))
    return distinct, {int(w): blocks[k] for k, w in enumerate(widths_a)}, group_cols


def tc_stats(A, window: int = 16, width: int = 8, group_windows: int = 8, n_threads: int | None = None) -> dict:
    """Tiling statistics of A in its current row order.

    Returns a dict with
    - ``n_tc_blocks``: sum over windows of ceil(distinct columns of the window / width) (ME-TCF blocks);
    - ``mean_nnz_tc``: nnz / n_tc_blocks (0.0 when there are no blocks), the paper's MeanNnzTC;
    - ``bcsr_blocks``: aligned ``window x width`` blocks holding at least one nonzero (no condensing);
    - ``blocks_per_window_min/mean/max/cv``: spread of TC blocks over all ceil(n_rows / window) windows
      (cv = std / mean, 0.0 when the mean is 0);
    - ``l2_distinct_cols_per_group``: mean number of distinct columns touched by a group of ``group_windows``
      consecutive windows (windows running at the same time on different SMs share B rows through L2; fewer
      distinct columns per group = better reuse);
    - ``n_windows``, ``nnz``, ``shape``, and the parameters.
    Explicit zeros count as nonzeros (they are stored). Duplicate entries count once for blocks, each for nnz.
    Counted by `window_counts` where `markers_fit`, else by sorting; ``n_threads`` (default: all cores) threads
    then work on disjoint chunks. The result depends on neither.
    """
    if window < 1 or width < 1 or group_windows < 1:
        raise ValueError(f"window, width, group_windows must be >= 1, got {window}, {width}, {group_windows}")
    indptr, indices, (n_rows, n_cols) = _csr_arrays(A)
    nnz = int(indptr[-1])
    n_windows = -(-n_rows // window)
    if markers_fit((n_rows, n_cols), nnz):
        distinct, blocks, group_cols = _marker_counts(indptr, indices, (n_rows, n_cols), window, (width,),
                                                      group_windows)
        per_window, bcsr_blocks = -(-distinct // width), int(blocks[width].sum())
    else:
        per_window, bcsr_blocks, group_cols = _sorted_counts(indptr, indices, (n_rows, n_cols), window, width,
                                                             group_windows, n_threads)
    n_groups = group_cols.size
    n_tc_blocks = int(per_window.sum())
    mean_w = float(per_window.mean()) if n_windows else 0.0
    return {
        "shape": (n_rows, n_cols),
        "nnz": nnz,
        "window": window,
        "width": width,
        "group_windows": group_windows,
        "n_windows": n_windows,
        "n_tc_blocks": n_tc_blocks,
        "mean_nnz_tc": nnz / n_tc_blocks if n_tc_blocks else 0.0,
        "bcsr_blocks": bcsr_blocks,
        "blocks_per_window_min": int(per_window.min()) if n_windows else 0,
        "blocks_per_window_mean": mean_w,
        "blocks_per_window_max": int(per_window.max()) if n_windows else 0,
        "blocks_per_window_cv": float(per_window.std() / mean_w) if mean_w > 0 else 0.0,
        "l2_distinct_cols_per_group": float(group_cols.mean()) if n_groups else 0.0,
    }


def _sorted_counts(indptr, indices, shape, window: int, width: int, group_windows: int, n_threads):
    """`tc_stats`' counts by sorting (module docstring): (TC blocks per window, BCSR blocks, distinct columns per
    window group)."""
    (n_rows, n_cols), indptr = shape, np.asarray(indptr, dtype=np.int64)
    n_windows = -(-n_rows // window)
    n_groups = -(-n_windows // group_windows)
    per_window = np.zeros(n_windows, dtype=np.int64)
    group_cols = np.zeros(n_groups, dtype=np.int64)
    n_cols_k = max(n_cols, 1)
    ncb = -(-n_cols_k // width)  # column blocks of BCSR
    rows_per_group = window * group_windows
    chunks, g0 = [], 0
    while g0 < n_groups:  # chunks of whole groups holding about _CHUNK_NNZ nonzeros (at least one group)
        target = np.searchsorted(indptr, indptr[g0 * rows_per_group] + _CHUNK_NNZ, side="right") - 1
        g1 = max(g0 + 1, min(n_groups, int(target) // rows_per_group))
        chunks.append((g0, g1))
        g0 = g1

    def chunk(g):
        g0, g1 = g
        r0, r1 = g0 * rows_per_group, min(n_rows, g1 * rows_per_group)
        lo, hi = indptr[r0], indptr[r1]
        if hi == lo:
            return 0
        w0, w1 = r0 // window, -(-r1 // window)
        lengths = np.diff(indptr[r0:r1 + 1])
        win = np.repeat(np.arange(w0, w1, dtype=np.int64), np.add.reduceat(lengths, np.arange(0, r1 - r0, window)))
        keys = np.sort(win * n_cols_k + np.asarray(indices[lo:hi], dtype=np.int64))
        first = np.empty(keys.size, dtype=bool)
        first[0] = True
        np.not_equal(keys[1:], keys[:-1], out=first[1:])
        ukeys = keys[first]
        uwin = ukeys // n_cols_k
        ucol = ukeys - uwin * n_cols_k
        distinct = np.bincount(uwin - w0, minlength=w1 - w0)
        per_window[w0:w1] = -(-distinct // width)
        bkey = uwin * ncb + ucol // width
        gkeys = np.sort((uwin // group_windows) * n_cols_k + ucol)
        gkeys = gkeys[np.r_[True, gkeys[1:] != gkeys[:-1]]]  # np.unique is hash-based and slow in NumPy 2.4
        group_cols[g0:g1] = np.bincount(gkeys // n_cols_k - g0, minlength=g1 - g0)
        return int(np.count_nonzero(bkey[1:] != bkey[:-1])) + 1

    # Chunks write disjoint slices; NumPy's sorts release the GIL, so threads scale (100M nnz: ~20 s on 1 core).
    n_threads = max(1, min(n_threads or os.cpu_count() or 1, len(chunks)))
    if n_threads == 1:
        bcsr_blocks = sum(map(chunk, chunks))
    else:
        with ThreadPoolExecutor(n_threads) as ex:
            bcsr_blocks = sum(ex.map(chunk, chunks))
    return per_window, bcsr_blocks, group_cols
