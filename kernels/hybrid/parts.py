"""The hybrid's host side: A's 16-row windows split by the cost model (`kernels.formats.ranking.split`) between a
Tensor Core format and the CUDA-core CSR format, the two row sets, the two sub-matrices, and the NumPy twin.

Row sets: the rows of the TC windows (``tc_rows``) and every other row (``cuda_rows``), ascending and disjoint,
together every row of A (empty rows included: each part writes zeros for its empty rows). Each part is a matrix of
its own rows and all of A's columns, so B is shared; original row ids are kept in the maps, and each row of C is
computed by exactly one part. When the TC windows are one run of consecutive windows (all of A, a degree-sorted
matrix's head), ``tc_range`` is its row range: the TC part writes that slice of C directly.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from configs.errors import InputError
from kernels.formats.blocks import WINDOW, canonical_csr
from kernels.formats.ranking import RANK_N, Split, split, split_cost
from kernels.formats import registry
from kernels.formats.registry import get
from kernels.formats.structure import window_stats
from kernels.precision import Precision
from kernels.precision import precision as as_precision

CUDA_CORE = "csr"  # the CUDA-core part's format: the deterministic CSR kernel, whose row map writes only its rows
# `_take_rows` copies slices per run of rows at or above this mean of nonzeros per run, else gathers: the measured
# crossover (8M-nnz float32 CSR, half its rows in runs of L rows, 2-core host): 128 nonzeros a run, slices 30 ms vs
# gather 24 ms; 160: both 24 ms; 256 (16-row windows): 15 vs 26 ms. Slices cost ~0.6 us a run, the gather ~5 ns a
# nonzero (its int64 positions built and read).
_SLICE_MIN_RUN_NNZ = 160


def tc_formats(precision) -> list:
    """Registered Tensor Core formats (blocks wider than one column) the hybrid may give its dense windows at
    ``precision``: those whose estimate is per window (``Format.per_window_cost``) and whose GPU kernels are ready."""
    name = as_precision(precision).name
    return [f for f in registry.REGISTRY.values() if f.per_window_cost and f.gpu_ready and f.estimate is not None
            and f.block_width.get(name, 1) > 1]


def applicable(precision) -> bool:
    """Whether a hybrid can be built at ``precision``: a TC format to run its dense windows and the CUDA-core one."""
    return CUDA_CORE in registry.REGISTRY and bool(tc_formats(precision))


def check_applicable(precision) -> None:
    """InputError in one line where no hybrid can be built at ``precision``."""
    if not applicable(precision):
        raise InputError(f"format 'hybrid' needs a registered Tensor Core format with a per-window estimate and "
                         f"the '{CUDA_CORE}' format at {as_precision(precision).name}; choose another format")


def choose_split(A, precision, N: int = RANK_N) -> Split:
    """The split of every window of SciPy ``A`` (exact statistics) at ``N`` columns."""
    prec = as_precision(precision)
    check_applicable(prec)
    return split(window_stats(A), tc_formats(prec), get(CUDA_CORE), prec, N)


@dataclass(frozen=True)
class HybridA:
    """A cut into its Tensor Core and CUDA-core parts (module docstring).

    - ``split``: the cost model's decision (which windows, which TC format, predicted microseconds);
    - ``tc_rows`` int64 [m_tc], ``cuda_rows`` int64 [M - m_tc]: ascending, disjoint, together 0 .. M - 1;
    - ``tc_range``: (r0, r1) when ``tc_rows`` is r0 .. r1 - 1 (the TC part then writes C[r0:r1]), else None;
    - ``tc_csr`` = A[tc_rows], ``cuda_csr`` = A[cuda_rows]: canonical SciPy CSR, A's values;
    - ``tc``, ``cuda``: those parts converted to their formats at ``precision`` (host objects: the NumPy twin's
      input), or None when only the device path was asked for (`split_matrix`).
    """

    shape: tuple[int, int]
    precision: str
    split: Split
    tc_rows: np.ndarray
    cuda_rows: np.ndarray
    tc_range: tuple[int, int] | None
    tc_csr: sp.csr_array
    cuda_csr: sp.csr_array
    tc: object = None
    cuda: object = None
    seconds: float = 0.0

    format_name = "hybrid"

    @property
    def nnz(self) -> int:
        return int(self.tc_csr.nnz + self.cuda_csr.nnz)

    def summary(self) -> dict:
        return {**self.split.summary(), "tc_rows": int(self.tc_rows.size), "cuda_rows": int(self.cuda_rows.size),
                "tc_nnz": int(self.tc_csr.nnz), "cuda_nnz": int(self.cuda_csr.nnz),
                "tc_range": list(self.tc_range) if self.tc_range else None, "split_s": round(self.seconds, 6)}


def split_matrix(A, precision, N: int = RANK_N, *, tc_windows=None, tc_format: str | None = None) -> HybridA:
    """A's split and its two SciPy parts (no format conversion: the device operators convert their part).
    ``tc_windows`` (bool [ceil(M / 16)]): these windows on the TC format, the rest on CUDA cores, instead of the
    model's split (tests and experiments; ``SpmmPlan`` takes the result as A); the TC format is ``tc_format``, or
    without it the one the cost model ranks first for A. Both given (a stored split, `rebuild`): the model is not
    consulted for the choice, only its estimates of that split are (the report's microseconds)."""
    t0 = time.perf_counter()
    A = canonical_csr(A, "the hybrid plan")
    n_rows = int(A.shape[0])
    if tc_format is not None and tc_windows is None:
        raise ValueError("tc_format names the TC part's format of a given split: pass tc_windows with it")
    s = choose_split(A, precision, N) if tc_format is None else _given_split(A, precision, N, tc_format)
    if tc_windows is not None:
        mask = np.asarray(tc_windows)
        if mask.dtype != bool or mask.shape != (s.windows.n_windows,):
            raise ValueError(f"tc_windows is {mask.dtype} {mask.shape}, expected bool ({s.windows.n_windows},): one "
                             f"entry per 16-row window of A's {n_rows} rows")
        fmt = get(s.tc_format)
        pred, scattered = split_cost(s.windows, mask, fmt, get(CUDA_CORE), precision, N)
        s = dataclasses.replace(s, tc=mask.copy(), predicted_us=pred, scattered=scattered)
    windows = s.windows.index[s.tc]
    tc_rows = (windows[:, None] * WINDOW + np.arange(WINDOW, dtype=np.int64)).ravel()
    tc_rows = tc_rows[tc_rows < n_rows]
    mask = np.ones(n_rows, dtype=bool)
    mask[tc_rows] = False
    cuda_rows = np.flatnonzero(mask).astype(np.int64)
    tc_range = None
    if tc_rows.size and int(tc_rows[-1]) - int(tc_rows[0]) + 1 == tc_rows.size:
        tc_range = (int(tc_rows[0]), int(tc_rows[-1]) + 1)
    return HybridA((n_rows, int(A.shape[1])), as_precision(precision).name, s, tc_rows, cuda_rows, tc_range,
                   _rows_of(A, tc_rows), _rows_of(A, cuda_rows), seconds=time.perf_counter() - t0)


def _given_split(A, precision, N: int, tc_format: str) -> Split:
    """A `Split` of every window of A on ``tc_format`` (a TC format the hybrid may use at ``precision``), with the
    estimates of all windows on either side; `split_matrix` then applies the given windows."""
    prec = as_precision(precision)
    check_applicable(prec)
    allowed = [f.name for f in tc_formats(prec)]
    if tc_format not in allowed:
        raise InputError(f"the hybrid's Tensor Core format is {tc_format!r}, expected one of {', '.join(allowed)} "
                         f"at {prec.name}; convert the matrix again")
    windows, fmt, cuda = window_stats(A), get(tc_format), get(CUDA_CORE)
    every = np.ones(windows.n_windows, dtype=bool)
    tc_us = split_cost(windows, every, fmt, cuda, prec, N)[0]
    cuda_us = split_cost(windows, ~every, fmt, cuda, prec, N)[0]
    return Split(tc_format, CUDA_CORE, prec.name, int(N), windows, every, tc_us, tc_us, cuda_us, False)


def record(A, precision) -> tuple[np.ndarray, dict]:
    """What the pipeline stores of A's split (its convert stage; the hybrid has no bytes of its own): `split_record`
    of `split_matrix`."""
    return split_record(split_matrix(A, precision))


def split_record(H: HybridA) -> tuple[np.ndarray, dict]:
    """The TC flag of every 16-row window of H's split (uint8 [ceil(M / 16)]) and the choice's parameters with the
    report's summary: `rebuild` turns them and the same A back into the same split."""
    s = H.split
    if not s.windows.exact:
        raise ValueError("a split of sampled windows cannot be stored: split_matrix splits every window")
    return s.tc.astype(np.uint8), {"tc_format": s.tc_format, "cuda_format": s.cuda_format, "N": int(s.N),
                                   "precision": H.precision, "shape": list(H.shape), "summary": H.summary()}


def rebuild(A, precision, tc_windows, meta: dict) -> HybridA:
    """The split `record` stored, rebuilt on the same (reordered) A: InputError in one line when A or the
    precision is not the one it was stored for."""
    prec = as_precision(precision)
    shape = [int(s) for s in A.shape]
    if list(meta.get("shape", [])) != shape or meta.get("precision") != prec.name:
        raise InputError(f"the stored hybrid split is of a {meta.get('shape')} matrix at {meta.get('precision')}, "
                         f"expected {shape} at {prec.name}; convert the matrix again")
    if meta.get("cuda_format") != CUDA_CORE:
        raise InputError(f"the stored hybrid split runs its other rows on {meta.get('cuda_format')!r}, expected "
                         f"{CUDA_CORE!r}; convert the matrix again")
    mask = np.asarray(tc_windows)
    n_windows = -(-shape[0] // WINDOW)
    if mask.ndim != 1 or mask.size != n_windows or (mask.size and int(mask.max()) > 1):
        raise InputError(f"the stored hybrid split has {mask.size} window flags (largest "
                         f"{int(mask.max()) if mask.size else 0}), expected {n_windows} flags of 0 or 1 for "
                         f"{shape[0]} rows; convert the matrix again")
    return split_matrix(A, prec, int(meta["N"]), tc_windows=mask.astype(bool), tc_format=meta["tc_format"])


def convert(A, precision: Precision) -> HybridA:
    """`split_matrix` with both parts converted to their formats (the CPU path's host object)."""
    return converted(split_matrix(A, precision), precision)


def converted(H: HybridA, precision: Precision) -> HybridA:
    """H with both parts converted to their formats at ``precision``."""
    tc = get(H.split.tc_format).convert(H.tc_csr, precision) if H.tc_rows.size else None
    cuda = get(CUDA_CORE).convert(H.cuda_csr, precision) if H.cuda_rows.size else None
    return HybridA(H.shape, H.precision, H.split, H.tc_rows, H.cuda_rows, H.tc_range, H.tc_csr, H.cuda_csr, tc,
                   cuda, H.seconds)


def reference_spmm(H: HybridA, B, precision: Precision | None = None) -> np.ndarray:
    """float64 C = A @ B as the two parts compute it: each part's format twin on its rows of C (a `split_matrix`
    result's parts are converted first, at ``precision`` or H's)."""
    if (H.tc is None and H.tc_rows.size) or (H.cuda is None and H.cuda_rows.size):
        H = converted(H, precision or as_precision(H.precision))
    B = np.asarray(B, dtype=np.float64)
    C = np.zeros((H.shape[0], B.shape[1]))
    if H.tc_rows.size:
        C[H.tc_rows] = get(H.split.tc_format).reference_spmm(H.tc, B, precision)
    if H.cuda_rows.size:
        C[H.cuda_rows] = get(CUDA_CORE).reference_spmm(H.cuda, B, precision)
    return C


def to_csr(H: HybridA) -> sp.csr_array:
    """A as SciPy CSR (values as the parts store them) from its parts."""
    parts = [(rows, get(name).to_csr(obj) if obj is not None else csr) for rows, name, obj, csr in
             ((H.tc_rows, H.split.tc_format, H.tc, H.tc_csr), (H.cuda_rows, CUDA_CORE, H.cuda, H.cuda_csr))
             if rows.size]
    if not parts:
        return sp.csr_array(H.shape, dtype=np.float32)
    rows = np.concatenate([r for r, _ in parts])
    order = np.argsort(rows, kind="stable")  # stacked row order[i] is A's row i
    stacked = [sp.csr_array(m) for _, m in parts]
    offsets = np.cumsum([0] + [m.nnz for m in stacked])
    indptr = np.concatenate([np.asarray(m.indptr[:-1], dtype=np.int64) + o for m, o in zip(stacked, offsets)] +
                            [[offsets[-1]]])
    whole = sp.csr_array((np.concatenate([m.data for m in stacked]), np.concatenate([m.indices for m in stacked]),
                          indptr), shape=(rows.size, H.shape[1]))
    return _take_rows(whole, order)


def _rows_of(A: sp.csr_array, rows: np.ndarray) -> sp.csr_array:
    """A[rows] as canonical CSR (rows ascending)."""
    return _take_rows(A, rows)


def _take_rows(A: sp.csr_array, rows: np.ndarray) -> sp.csr_array:
    """A[rows] by index arithmetic on its arrays (SciPy's row indexing refuses 16-bit values).

    ``rows`` (int64, any order) is cut into runs of consecutive rows (r, r + 1, ...); a run's nonzeros are one
    slice of A's arrays, so where runs are long (16-row windows, a whole part; also `to_csr`'s order, whose runs
    are the stretches of A's rows in one part) the result is those slices concatenated, else one gather of every
    nonzero. No order is assumed, so an unsorted ``rows`` needs no path of its own."""
    indptr = np.asarray(A.indptr, dtype=np.int64)
    start, length = indptr[rows], indptr[rows + 1] - indptr[rows]
    ptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(length, out=ptr[1:])
    shape = (int(rows.size), int(A.shape[1]))
    bounds = np.flatnonzero(np.diff(rows) != 1) + 1  # where a run begins, after the first
    if rows.size and int(ptr[-1]) >= _SLICE_MIN_RUN_NNZ * (bounds.size + 1):
        first = np.concatenate([[0], bounds])  # each run's first position in rows
        lo = start[first]
        hi = lo + np.diff(ptr[np.append(first, rows.size)])
        spans = list(zip(lo.tolist(), hi.tolist()))
        out = sp.csr_array((np.concatenate([A.data[a:b] for a, b in spans]),
                            np.concatenate([A.indices[a:b] for a, b in spans]), ptr), shape=shape)
    else:
        pos = np.repeat(start - ptr[:-1], length) + np.arange(int(ptr[-1]), dtype=np.int64)
        out = sp.csr_array((A.data[pos], A.indices[pos], ptr), shape=shape)
    if A.has_canonical_format:  # rows of a canonical CSR, in any order, are canonical: no check pass later
        out.has_canonical_format = True
    return out
