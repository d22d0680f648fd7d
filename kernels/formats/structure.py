"""Structure statistics of A, computed once from its CSR, for ranking the formats without building them (issue 32).

`structure(A)` -> `Structure`: what each format's cost depends on, per 16-row window (every format's row group):

- ``vectors[V]`` for V in 1, 2, 4, 8, 16: distinct (row // V, col) pairs, CVSE's vectors at V (V = 1: nnz; V = 16:
  the windows' distinct columns, ME-TCF's condensed columns before padding); ``vectors_max[V]`` the most in one
  vector row (V = 1: the longest row);
- ``tc_blocks[w]`` for the mma widths w (8: TF32, 16: FP16/BF16): sum over windows of ceil(distinct columns / w),
  ME-TCF's TC blocks (Tiled-CSR cuts the same tiles), so MeanNnzTC = nnz / tc_blocks[w]; ``tc_blocks_max[w]``
  the most in one window;
- ``bcsr_blocks[w]``: aligned 16 x w blocks holding an entry (distinct (row // 16, col // w)), BCSR's blocks;
  ``bcsr_blocks_max[w]`` the most in one block row;
- from the row pointers alone (always exact): rows holding entries, the longest row and the rows' length spread
  (coefficient of variation: power-law hubs, the CUDA-core CSR kernel's concern).

Method (kernels.formats.structure_counts): a pass over the nonzeros with a marker per column (numba), or where the
columns far outnumber the nonzeros one sort per chunk of windows; the same counts either way. No loop over rows or
windows in Python.

Sampling: above ``sample_nnz`` nonzeros (default `SAMPLE_NNZ`) the statistics come from whole windows: the
heaviest windows (up to `HEAVY_SHARE` of the budget, at most `HEAVY_MAX`: they hold the hubs, so the maxima are
those of the whole matrix unless a lighter window has more distinct columns) plus one window drawn from each of k
equal strata of the others in row order (``np.random.default_rng(seed)``: deterministic), k chosen so that the
sample holds about ``sample_nnz`` nonzeros. Counts of the drawn windows are scaled by the others' nnz over the
drawn windows' nnz (a ratio estimator: block and vector counts grow with nnz). Cost on one core by sorting
(NumPy 2.4, AVX-512 sort; issue 32): 0.04 s at 1M nnz, 0.04-0.05 s at 10M nnz sampled (0.4-0.5 s counting every
window); on generated graphs and DNN weights at 10M nnz a 256K-nonzero sample was within 1 % of the exact counts.
Chunks of windows are counted on threads, each filling its own windows' counts: the result does not depend on the
thread count.

Per window: `window_stats(A)` -> `Windows`, the same counts kept per window (every window by default, or the
sample `structure` sums, with its weights: ``Structure.windows``). ``Windows.per_window()`` is a `Structure` whose
counts are arrays over the windows, so a format's cost terms (``kernels.formats.ranking.CostModel``), element-wise
arithmetic on those counts, give per-window amounts: what the hybrid split (``kernels.formats.ranking.split``)
compares window by window.
"""
from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from kernels.formats.blocks import WINDOW  # the mma's m16, every format's row group
from kernels.formats.structure_counts import BLOCK_WIDTHS, VECTOR_ROWS, _window_rows
from kernels.formats.structure_counts import counts as count_windows

SAMPLE_NNZ = 1 << 20  # above this many nonzeros, a sample of whole windows holding about this many
HEAVY_SHARE = 0.25  # the heaviest windows fill up to this share of the sample
HEAVY_MAX = 256


@dataclass(frozen=True)
class Structure:
    """Statistics of an M x K sparse matrix (module docstring). Totals are floats (estimates when ``exact`` is
    False), maxima ints (over the sampled windows). ``windows``: the per-window counts they were summed from.
    From ``Windows.per_window()`` every count, shape[0] included, is an array over windows instead."""

    shape: tuple[int, int]
    nnz: int
    n_windows: int
    nonempty_rows: int
    row_nnz_max: int
    row_nnz_cv: float  # std / mean of the row lengths over all M rows (0 when there are none)
    vectors: dict  # V -> distinct (row // V, col)
    vectors_max: dict  # V -> most vectors in one vector row
    tc_blocks: dict  # w -> sum over windows of ceil(distinct columns / w)
    tc_blocks_max: dict
    bcsr_blocks: dict  # w -> aligned 16 x w blocks holding an entry
    bcsr_blocks_max: dict
    windows_sampled: int
    exact: bool
    seconds: float
    windows: "Windows | None" = field(default=None, compare=False, repr=False)

    def mean_nnz_tc(self, width: int) -> float:
        """DTC-SpMM's MeanNnzTC: nonzeros per condensed TC block of ``width`` columns."""
        return self.nnz / self.tc_blocks[width] if self.tc_blocks[width] else 0.0

    def summary(self) -> dict:
        """The numbers a report shows (JSON-ready)."""
        return {"shape": list(self.shape), "nnz": self.nnz, "exact": self.exact,
                "windows_sampled": self.windows_sampled, "n_windows": self.n_windows, "seconds": self.seconds,
                "mean_nnz_tc": {w: round(self.mean_nnz_tc(w), 3) for w in BLOCK_WIDTHS},
                "row_nnz_max": self.row_nnz_max, "row_nnz_cv": round(self.row_nnz_cv, 3)}


@dataclass(frozen=True)
class Windows:
    """Per-window statistics of the windows ``index`` of an M x K matrix (module docstring): every window
    (``exact``), or a sample whose counts scale to the whole matrix by ``weight``. Arrays are [n] over ``index``."""

    shape: tuple[int, int]
    n_windows: int  # windows of the whole matrix
    index: np.ndarray  # int64: window ids, ascending
    weight: np.ndarray  # float64: 1, or a drawn window's ratio-estimator scale
    rows: np.ndarray  # int64: rows of the window (16; fewer in the last)
    nnz: np.ndarray  # int64
    nonempty_rows: np.ndarray  # int64
    row_nnz_max: np.ndarray  # int64: the window's longest row
    row_nnz_sq: np.ndarray  # float64: sum of its squared row lengths (the row-length spread)
    counts: dict  # (kind, size) -> int64 array: ("v", V) vectors, ("vmax", V) most in one vector row,
    # ("tc", w) condensed TC blocks, ("bcsr", w) aligned blocks

    @property
    def exact(self) -> bool:
        return int(self.index.size) == self.n_windows

    def per_window(self) -> Structure:
        """A Structure whose counts are arrays over these windows, each window's own (its maxima are its own)."""
        c, rows, nnz = self.counts, self.rows, self.nnz
        mean = np.divide(nnz, rows, out=np.zeros(nnz.size), where=rows > 0)
        var = np.maximum(np.divide(self.row_nnz_sq, rows, out=np.zeros(nnz.size), where=rows > 0) - mean ** 2, 0)
        cv = np.divide(np.sqrt(var), mean, out=np.zeros(nnz.size), where=mean > 0)
        return Structure(
            shape=(rows, int(self.shape[1])), nnz=nnz, n_windows=np.ones(nnz.size, dtype=np.int64),
            nonempty_rows=self.nonempty_rows, row_nnz_max=self.row_nnz_max, row_nnz_cv=cv,
            vectors={1: nnz, **{V: c[("v", V)] for V in VECTOR_ROWS[1:]}},
            vectors_max={1: self.row_nnz_max, **{V: c[("vmax", V)] for V in VECTOR_ROWS[1:]}},
            tc_blocks={w: c[("tc", w)] for w in BLOCK_WIDTHS}, tc_blocks_max={w: c[("tc", w)] for w in BLOCK_WIDTHS},
            bcsr_blocks={w: c[("bcsr", w)] for w in BLOCK_WIDTHS},
            bcsr_blocks_max={w: c[("bcsr", w)] for w in BLOCK_WIDTHS},
            windows_sampled=int(nnz.size), exact=True, seconds=0.0)


def structure(A, *, sample_nnz: int | None = SAMPLE_NNZ, seed: int = 0) -> Structure:
    """The statistics of SciPy sparse ``A`` (module docstring); ``sample_nnz=None`` counts every window."""
    t0 = time.perf_counter()
    win, row_nnz = _window_stats(A, sample_nnz, seed)
    n_rows = win.shape[0]
    w, c = win.weight, win.counts
    totals = {key: float(np.dot(w, arr)) for key, arr in c.items()}
    top = {key: int(arr.max()) if arr.size else 0 for key, arr in c.items()}
    nnz = int(row_nnz.sum())
    mean = row_nnz.mean() if n_rows else 0.0
    return Structure(
        shape=win.shape, nnz=nnz, n_windows=win.n_windows, nonempty_rows=int(np.count_nonzero(row_nnz)),
        row_nnz_max=int(row_nnz.max()) if n_rows else 0,
        row_nnz_cv=float(row_nnz.std() / mean) if mean > 0 else 0.0,
        vectors={1: float(nnz), **{V: totals[("v", V)] for V in VECTOR_ROWS[1:]}},
        vectors_max={1: int(row_nnz.max()) if n_rows else 0, **{V: top[("vmax", V)] for V in VECTOR_ROWS[1:]}},
        tc_blocks={w: totals[("tc", w)] for w in BLOCK_WIDTHS},
        tc_blocks_max={w: top[("tc", w)] for w in BLOCK_WIDTHS},
        bcsr_blocks={w: totals[("bcsr", w)] for w in BLOCK_WIDTHS},
        bcsr_blocks_max={w: top[("bcsr", w)] for w in BLOCK_WIDTHS},
        windows_sampled=int(win.index.size), exact=win.exact, seconds=time.perf_counter() - t0, windows=win)


def window_stats(A, *, sample_nnz: int | None = None, seed: int = 0) -> Windows:
    """Per-window statistics of SciPy sparse ``A``: every window (default), or `structure`'s sample."""
    return _window_stats(A, sample_nnz, seed)[0]


def kept_windows(A) -> Windows | None:
    """The exact per-window counts of SciPy CSR ``A`` that the last `structure` / `window_stats` call on the same
    arrays kept (`_Last`), or None: a format's conversion takes them instead of counting again (CVSE's vector
    counts, 11 ms of a 1M-nonzero `auto` plan on the H200's host)."""
    if not sp.issparse(A) or A.format != "csr":
        return None
    return _Last.get(_arrays_key(A, np.asarray(A.indptr), np.asarray(A.indices)))


class _Last:
    """The last exact count, kept for the next call on the same CSR arrays: a plan of ``format="auto"`` ranks with
    `structure(A)` and its hybrid candidate then splits the same A with `window_stats(A)` (0.09 s of the auto plan's
    0.25 s at 1M nonzeros on the H200's host, counted twice before). Same arrays: the same index buffers (address
    and length of both) while the objects owning them are alive, so the memory cannot have been reused; a caller
    writing into A's indices in place between two calls gets the earlier counts, which steer a choice, never a
    result. One attribute holds (key, owners, value), replaced whole: plans built on concurrent threads never see
    one matrix's key with another's counts."""

    entry: tuple = (None, (), None)

    @classmethod
    def get(cls, key):
        found, owners, value = cls.entry
        return value if found == key and owners and all(ref() is not None for ref in owners) else None

    @classmethod
    def put(cls, key, arrays, value) -> None:
        cls.entry = (key, tuple(weakref.ref(_owner(a)) for a in arrays), value)


def forget() -> None:
    """Drop the kept count (`_Last`): benchmarks/plan_time.py times each plan as a user's first plan of A."""
    _Last.entry = (None, (), None)


def _arrays_key(A, indptr: np.ndarray, indices: np.ndarray) -> tuple:
    return (tuple(A.shape), indptr.ctypes.data, indptr.size, indices.ctypes.data, indices.size, indices.dtype.str)


def _owner(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _window_stats(A, sample_nnz, seed) -> tuple[Windows, np.ndarray]:
    """(Windows, the row lengths of all rows)."""
    if not sp.issparse(A):
        raise TypeError(f"structure() needs a SciPy sparse matrix, got {type(A).__name__}")
    if sample_nnz is not None and int(sample_nnz) < 1:
        raise ValueError(f"sample_nnz is {sample_nnz}, expected a positive count or None (every window)")
    A = A if A.format == "csr" else sp.csr_array(A)
    n_rows, n_cols = (int(s) for s in A.shape)
    indices = np.asarray(A.indices)
    given_indptr = np.asarray(A.indptr)
    key = _arrays_key(A, given_indptr, indices)
    indptr = np.asarray(A.indptr, dtype=np.int64)
    row_nnz = np.diff(indptr)
    n_windows = -(-n_rows // WINDOW)
    starts = np.arange(n_windows, dtype=np.int64) * WINDOW
    window_nnz = np.diff(indptr[np.minimum(np.append(starts, n_rows), n_rows)])
    picked, weight = _sample(window_nnz, sample_nnz, seed)
    exact = picked.size == n_windows
    if exact and (win := _Last.get(key)) is not None:
        return win, row_nnz
    counts = count_windows(indptr, indices, n_rows, n_cols, picked)
    rows, local, first_row = _window_rows(picked, n_rows)
    lengths = row_nnz[rows]
    per = lambda x: np.bincount(local, weights=x, minlength=picked.size)  # noqa: E731
    win = Windows(shape=(n_rows, n_cols), n_windows=n_windows, index=picked, weight=weight, rows=np.diff(first_row),
                  nnz=window_nnz[picked], nonempty_rows=per(lengths > 0).astype(np.int64),
                  row_nnz_max=(np.maximum.reduceat(lengths, first_row[:-1]) if picked.size
                               else np.zeros(0, dtype=np.int64)),
                  row_nnz_sq=per(lengths.astype(np.float64) ** 2), counts=counts)
    if exact:
        _Last.put(key, (given_indptr, indices), win)
    return win, row_nnz


def _sample(window_nnz: np.ndarray, budget: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(windows, weights): every window with weight 1, or the heaviest ones (weight 1) and one drawn per stratum of
    the others (weight: the others' nnz over the drawn ones' nnz), in ascending window order."""
    n = int(window_nnz.size)
    total = int(window_nnz.sum())
    if budget is None or total <= budget:
        return np.arange(n, dtype=np.int64), np.ones(n)
    budget = int(budget)
    top = np.argsort(-window_nnz, kind="stable")[:min(HEAVY_MAX, n)]
    fits = np.cumsum(window_nnz[top]) <= HEAVY_SHARE * budget
    heavy = top[:int(np.argmin(fits)) if not fits.all() else top.size]
    rest = np.setdiff1d(np.arange(n, dtype=np.int64), heavy, assume_unique=True)
    rest_nnz = int(window_nnz[rest].sum())
    if rest.size == 0 or rest_nnz == 0:
        return np.sort(heavy), np.ones(heavy.size)
    room = budget - int(window_nnz[heavy].sum())
    k = int(min(rest.size, max(1, round(room / (rest_nnz / rest.size)))))
    edges = (np.arange(k + 1, dtype=np.int64) * rest.size) // k
    rng = np.random.default_rng(seed)
    drawn = rest[edges[:-1] + (rng.random(k) * (edges[1:] - edges[:-1])).astype(np.int64)]
    drawn_nnz = int(window_nnz[drawn].sum())
    scale = rest_nnz / drawn_nnz if drawn_nnz else rest.size / k
    windows = np.concatenate([heavy, drawn])
    weights = np.concatenate([np.ones(heavy.size), np.full(k, scale)])
    order = np.argsort(windows, kind="stable")
    return windows[order], weights[order]
