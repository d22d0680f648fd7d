"""Tensor-Core tiling statistics of a CSR matrix, without building the format.

``tc_stats(A)`` counts what ME-TCF (DTC-SpMM section 4.2) would store for A in its current row order:
16-row windows, each window's distinct columns condensed and cut into groups of ``width`` = 8, one TC block per
group. It also counts plain aligned BCSR 16x8 blocks (SMaT's format, no condensing) and an L2-locality proxy.
Reordering is judged by these numbers: fewer TC blocks = denser blocks = fewer MMA instructions.

Method: the matrix is processed in chunks of whole window groups (so memory stays at a few bytes per nonzero of
one chunk); in each chunk the keys ``window * n_cols + col`` are sorted (rows are already in window order, so a
chunk-local sort is a global one) and the run boundaries counted. No Python loop over rows or windows.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

# Nonzeros per chunk: 8M keys = 64 MB of int64 keys plus the sorted copy.
_CHUNK_NNZ = 1 << 23


def _csr_arrays(A) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    if not sp.issparse(A):
        raise TypeError(f"tc_stats needs a scipy.sparse matrix, got {type(A).__name__}")
    if A.format != "csr":
        A = A.tocsr()
    return A.indptr, A.indices, (int(A.shape[0]), int(A.shape[1]))


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
    ``n_threads`` (default: all cores) threads work on disjoint chunks; the result does not depend on it.
    """
    if window < 1 or width < 1 or group_windows < 1:
        raise ValueError(f"window, width, group_windows must be >= 1, got {window}, {width}, {group_windows}")
    indptr, indices, (n_rows, n_cols) = _csr_arrays(A)
    indptr = np.asarray(indptr, dtype=np.int64)
    nnz = int(indptr[-1])
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
