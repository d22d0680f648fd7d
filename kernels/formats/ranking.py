"""Ranking formats by their cost estimates, so that ``format="auto"`` builds and times only the likely best (issue 32).

A format declares its estimate on its record (``Format.estimate``): a `CostModel`, whose ``terms(stats, precision,
N)`` says what its kernels move for A (`kernels.formats.structure.Structure`) at N columns of B, in megabytes:

- ``a_mb``: A as the kernel reads it (padded blocks or vectors, values, indices);
- ``b_mb``: B's rows gathered, one per stored column of a block, vector or row (the work: each gathered row meets
  a block's mma or a nonzero's FMA), times N times the itemsize;
- ``c_mb``: C written (M x N);
- ``hub_mb``: the B rows of the heaviest row group (window, block row, vector row or row) for one column chunk of
  ``HUB_COLUMNS``: the critical path of one thread block; ``hub_all_mb`` the same over all N (a kernel that
  cannot split that group's work over column chunks);

plus ``launch`` (1). The estimate is ``sum(us[term] * amount)``: microseconds, a predicted time whose order is
what matters. ``us`` is fitted per format by ``benchmarks/rank_check.py --fit`` (non-negative least squares on
relative error) against measured per-format times; the ranking's agreement with the measured order is what
``benchmarks/rank_check.py`` reports. Precisions enter through the block width and the itemsize
(`kernels.precision`) and through the constants: one set fitted in FP16 (BF16 uses it as it is) and one in float32
(TF32 products, 4-byte B and C: `CostModel.per_precision`).

How well, FP16 (benchmarks/results/formats-nvidia-h200-2026-11-29-s35.json and -s36.json, the runs the FP16
constants are fitted on: 45 and 53 orders of 21 and 23 matrices x N = 128..1024, H200; s36 adds a scalar 27-point
mesh and an R-MAT with a planted community): the measured best is ranked first in 77 %, among the first two in
97 %; what a plan builds and times (ranked at N = 128) holds the best in 99 %; the predicted first ran at most
1.27x (geomean 1.02x) the best. Fitted leaving each matrix out (`rank_check.py --leave-one-out`): 75 %, 93 %, 89 %
(at most 1.65x). The constants fitted on s35 alone did 76 %, 95 %, 99 % (1.35x) on both runs. The constants before
those (fitted on 2026-11-25's run, before CVSE's tiled kernel and the CSR kernel's batched loads) ranked s35's best
first in 31 %, in the first two in 62 %, in the plan's two in 71 % (up to 2.61x): refit when a format's kernels
change.

float32 (benchmarks/results/formats-nvidia-h200-2026-11-29-float32-s37.json, 216 rows in TF32 with the CSR kernel
over B's 16-bit copy, H200, the run the float32 constants are fitted on): the measured best is ranked first in 82 %,
among the first two in 99.5 %, in what a plan builds in 99 % (predicted first at most 1.54x the best); fitted
leaving each matrix out 78 %, 96 %, 96 % (at most 2.48x). The set before it, fitted on the first float32 run
(-float32.json, 180 rows, before the copy), ranked these rows 74 %, 92 %, 93 %.

`rank(formats, stats, precision, N)` orders formats by estimate (a format without one after those with one, in
registry order); `select(A, formats, precision, k)` computes the statistics once and keeps the first k (`pick`:
a format whose kernels another kept format times as its fallbacks takes no slot).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from kernels.formats.structure import Structure, Windows, structure
from kernels.precision import PRECISIONS, Precision
from kernels.precision import precision as as_precision

TERMS = ("launch", "a_mb", "b_mb", "c_mb", "hub_mb", "hub_all_mb")
HUB_COLUMNS = 64  # B columns of one thread block's chunk (every format's kernels cut N in chunks of 32-128)
RANK_N = 128  # the N a plan ranks at: it is built before it sees a B (its a-priori choice is for N = 128 too)
AUTO_CANDIDATES = 2  # formats a plan of format="auto" builds and times, at most
# ... among those predicted within AUTO_MARGIN x the cheapest prediction (`within_margin`): in the runs the constants
# are fitted on (rank-check-...-float16-float32.json: FP16 392 and float32 216 rows) the measured best was
# predicted at most 1.55x the cheapest
AUTO_MARGIN = 2.0
# where the formats' constants come from (each CostModel's ``source``)
FIT_SOURCE = ("python benchmarks/rank_check.py --fit --results benchmarks/results/formats-nvidia-h200-2026-11-29-s35"
              ".json benchmarks/results/formats-nvidia-h200-2026-11-29-s36.json (FP16, H200; censored rows: a "
              "fallback that lost)")
FIT_SOURCE_TF32 = ("python benchmarks/rank_check.py --fit --results "
                   "benchmarks/results/formats-nvidia-h200-2026-11-29-float32-s37.json (TF32, H200; censored rows)")


@dataclass(frozen=True)
class CostModel:
    """A format's cost estimate: ``model(stats, precision_name, N)`` -> predicted microseconds (module docstring).
    ``terms(stats, precision, N)`` -> {term: amount}; ``us``: microseconds per unit of each term (absent: 0), fitted
    in FP16 and used for every precision without its own set; ``per_precision``: {precision name: constants}
    fitted in that precision (TF32's Tensor Core products and float32 B and C move and compute differently);
    ``source``: where ``us`` was fitted (the registered formats' float32 sets: `FIT_SOURCE_TF32`)."""

    terms: Callable[[Structure, Precision, int], dict]
    us: dict
    source: str = ""
    per_precision: dict = field(default_factory=dict)

    def __post_init__(self):
        for constants in (self.us, *self.per_precision.values()):
            unknown = set(constants) - set(TERMS)
            if unknown:
                raise ValueError(f"cost terms {sorted(unknown)} are not among {', '.join(TERMS)}")
        unknown = set(self.per_precision) - set(PRECISIONS)
        if unknown:
            raise ValueError(f"cost constants for {sorted(unknown)}: not a precision ({', '.join(PRECISIONS)})")

    def constants(self, precision) -> dict:
        """The {term: us} this model weighs ``precision``'s terms with."""
        return self.per_precision.get(as_precision(precision).name, self.us)

    def __call__(self, stats: Structure, precision, N: int) -> float:
        prec = as_precision(precision)
        amounts = self.terms(stats, prec, int(N))
        us = self.constants(prec)
        return sum(us.get(term, 0.0) * amount for term, amount in amounts.items())


def work_terms(stats: Structure, prec: Precision, N: int, *, a_bytes: float, b_rows: float, hub_rows: float) -> dict:
    """The terms of a kernel that reads ``a_bytes`` of A, gathers ``b_rows`` rows of B (each N x itemsize) and
    whose heaviest row group gathers ``hub_rows``; C is written once in the storage dtype."""
    row_mb = prec.itemsize / 1e6
    return {"launch": 1.0, "a_mb": a_bytes / 1e6, "b_mb": b_rows * N * row_mb,
            "c_mb": stats.shape[0] * N * row_mb, "hub_mb": hub_rows * min(N, HUB_COLUMNS) * row_mb,
            "hub_all_mb": hub_rows * N * row_mb}


def rank(formats: list, stats: Structure, precision, N: int = RANK_N) -> list[tuple]:
    """[(format, predicted us or None)], cheapest first; formats without an estimate follow in the given order."""
    scored = [(f, f.estimate(stats, precision, N) if f.estimate is not None else None) for f in formats]
    return sorted(scored, key=lambda fs: (fs[1] is None, fs[1] if fs[1] is not None else 0.0))


def pick(ranked: list, k: int, anchor=None) -> tuple[list, list]:
    """(formats to build, formats timed through a built one's fallbacks) from formats in rank order: the shortest
    prefix holding ``k`` formats not covered by another's ``fallbacks`` (a format is covered when every kernel of
    its operator is a fallback of a format kept: ME-TCF times the CUDA-core CSR kernel anyway, so CSR takes no
    slot beside it). ``anchor`` (one of ``ranked``, with k >= 2): kept whatever its rank, in one of the k slots,
    so the fastest measured is never slower than the anchor's own plan; both lists stay in rank order."""
    prefix: list = [] if anchor is None or k < 2 else [anchor]
    for f in ranked:
        if len(_uncovered(prefix)) >= k:
            break
        if f is not anchor or k < 2:
            prefix.append(f)
    prefix.sort(key=ranked.index)
    built = _uncovered(prefix)
    return built, [f for f in prefix if f not in built]


def within_margin(ranked: list, margin: float = AUTO_MARGIN, keep=None) -> tuple[list, list]:
    """(formats of ``ranked`` ([(format, predicted us or None)], `rank`'s order) predicted within ``margin`` x the
    cheapest prediction, and ``keep``; the others), both in rank order. A format without a prediction beside ones
    with is outside (the hybrid's None: its best split is all one side); with no prediction at all, every format
    is inside."""
    known = [us for _, us in ranked if us is not None]
    if not known:
        return [f for f, _ in ranked], []
    limit = margin * min(known)
    inside = [f for f, us in ranked if f is keep or (us is not None and us <= limit)]
    return inside, [f for f, _ in ranked if f not in inside]


def _uncovered(formats: list) -> list:
    fallbacks = {kernel for f in formats for kernel in f.fallbacks}
    return [f for f in formats if not set(f.device_class().kernels) <= fallbacks]


def check_candidates(k) -> int:
    """``auto_candidates`` as given, or ValueError in one line."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"auto_candidates is {k!r}, expected a positive number of formats to build and time")
    return int(k)


def select(A, formats: list, precision, k: int = AUTO_CANDIDATES, *, N: int = RANK_N,
           anchor: str | None = None) -> tuple[list, dict]:
    """(the formats to build, in rank order: `pick` of the ranking's formats `within_margin`; the ranking's record
    for reports). With ``k`` >= the candidates every format is kept, in the given order, and no statistics are
    computed. ``anchor``: the name of a format always built when k >= 2 (SpmmPlan's: the default format, so
    "auto" never loses to the default by more than timing noise; on an H100, email-Enron at N = 128 had ranked
    ME-TCF out of the two and ran 1.18x slower than the default's balanced kernel). Fewer than k are built where
    fewer are predicted within the margin: R-MAT (float32 and FP16), where the CSR kernel (ME-TCF's fallback) is
    predicted first and the next format after ME-TCF about 3x it, builds ME-TCF alone."""
    k = check_candidates(k)
    if k >= len(formats):
        return list(formats), {"k": k, "built": [f.name for f in formats], "ranked": False,
                               "reason": f"auto_candidates={k} >= the {len(formats)} candidates: all built"}
    t0 = time.perf_counter()
    stats = structure(A)
    ranked = rank(formats, stats, precision, N)
    keep = next((f for f, _ in ranked if f.name == anchor), None) if k >= 2 else None
    order, beyond = within_margin(ranked, AUTO_MARGIN, keep)
    built, covered = pick(order, k, keep)
    return built, {"k": k, "N": N, "ranked": True, "built": [f.name for f in built], "anchor": anchor,
                   "timed_as_fallback": [f.name for f in covered], "margin": AUTO_MARGIN,
                   "beyond_margin": [f.name for f in beyond],
                   "estimate_us": {f.name: (round(us, 3) if us is not None else None) for f, us in ranked},
                   "statistics_s": stats.seconds, "ranking_s": time.perf_counter() - t0,
                   "structure": stats.summary()}


# ----- the hybrid split: windows to a Tensor Core format or to CUDA cores (kernels.hybrid) -----
ADDITIVE = ("a_mb", "b_mb", "c_mb")  # terms a part's cost sums over its windows
PEAK = ("hub_mb", "hub_all_mb")  # terms of a part's heaviest window: the part's cost takes the largest
if set(TERMS) != {"launch", *ADDITIVE, *PEAK}:
    raise RuntimeError(f"every cost term must be additive or a peak for the hybrid split: {TERMS}")
COPY_BYTES = 8  # per element of a scattered TC part's rows: written as float32 to the workspace, read back


def window_costs(fmt, per_window: Structure, precision, N: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(additive us per window, peak us per window, launch us) of ``fmt``'s estimate evaluated window by window on
    ``Windows.per_window()``: summed over all windows (and the peak's maximum taken) they give its estimate."""
    prec = as_precision(precision)
    amounts = fmt.estimate.terms(per_window, prec, int(N))
    us = fmt.estimate.constants(prec)
    n = int(np.size(per_window.nnz))

    def weighed(terms):
        out = np.zeros(n)
        for t in terms:
            out = out + us.get(t, 0.0) * np.broadcast_to(np.asarray(amounts.get(t, 0.0), dtype=float), (n,))
        return out

    return weighed(ADDITIVE), weighed(PEAK), us.get("launch", 0.0) * float(amounts.get("launch", 1.0))


@dataclass(frozen=True)
class Split:
    """Which 16-row windows of A go to the Tensor Core format ``tc_format`` and which to the CUDA-core format
    ``cuda_format``, with the predicted microseconds (`split`): ``tc`` bool [n] over ``windows.index``."""

    tc_format: str
    cuda_format: str
    precision: str
    N: int
    windows: Windows
    tc: np.ndarray
    predicted_us: float  # the hybrid (both parts; the copy of a scattered TC part included)
    tc_us: float  # every window on the TC format (its estimate)
    cuda_us: float  # every window on CUDA cores (its estimate)
    scattered: bool  # the TC windows form more than one run: their rows reach C through the workspace copy

    @property
    def degenerate(self) -> bool:
        """Every window on one side: the hybrid is then one of its parts."""
        return bool(self.tc.all() or not self.tc.any())

    def summary(self) -> dict:
        w = self.windows.weight
        return {"tc_format": self.tc_format, "cuda_format": self.cuda_format, "N": self.N,
                "tc_windows": float(np.dot(w, self.tc)), "windows": self.windows.n_windows,
                "tc_nnz_share": round(float(np.dot(w, self.windows.nnz * self.tc)) /
                                      max(float(np.dot(w, self.windows.nnz)), 1.0), 4),
                "scattered": self.scattered, "predicted_us": round(self.predicted_us, 3),
                "tc_us": round(self.tc_us, 3), "cuda_us": round(self.cuda_us, 3), "exact": self.windows.exact}


def split(windows: Windows, tc_formats: list, cuda_format, precision, N: int = RANK_N) -> Split | None:
    """The cheapest split of ``windows`` (every window of A, or `structure`'s sample) between one of
    ``tc_formats`` and ``cuda_format`` by their estimates evaluated per window (`window_costs`; formats whose
    ``Format.per_window_cost`` is False are skipped). Per TC format: a window goes to Tensor Cores where its
    additive cost there, with the copy of its rows (``COPY_BYTES`` per element at the CUDA-core model's C rate),
    is below its CUDA-core cost; then the TC windows with the highest peak cost go back to CUDA cores one by one
    (a hub window is the TC kernel's critical path; the CSR kernel cuts long rows), and the cheapest of those
    splits, of every window on the TC format, and of every window on CUDA cores is kept. Ties go to CUDA cores.
    None when no TC format applies."""
    prec = as_precision(precision)
    pw = windows.per_window()
    w = windows.weight
    ca, cp, cl = window_costs(cuda_format, pw, prec, N)
    copy = _copy_us(cuda_format, prec, windows, N)
    best = None
    for fmt in tc_formats:
        if not fmt.per_window_cost or fmt.estimate is None or prec.name not in fmt.block_width:
            continue
        ta, tp, tl = window_costs(fmt, pw, prec, N)
        gain = w * (ca - ta - copy)  # what a window saves on Tensor Cores
        order = np.flatnonzero(gain > 0)
        order = order[np.argsort(-tp[order], kind="stable")]  # the TC windows, heaviest peak first
        base = float(np.dot(w, ca)) - float(gain[order].sum())  # all of `order` on Tensor Cores
        moved = np.concatenate([[0.0], np.cumsum(gain[order])])  # k heaviest moved back: they lose their gain
        rest_peak = float(cp[gain <= 0].max()) if (gain <= 0).any() else 0.0
        cuda_peak = np.maximum.accumulate(np.concatenate([[rest_peak], cp[order]]))
        tc_peak = np.concatenate([tp[order], [0.0]])
        k = np.arange(order.size + 1)
        totals = (base + moved + tc_peak + cuda_peak + tl * (k < order.size)
                  + cl * ((k > 0) | (order.size < w.size)))
        all_tc = float(np.dot(w, ta)) + (float(tp.max()) if tp.size else 0.0) + tl
        all_cuda = float(np.dot(w, ca)) + (float(cp.max()) if cp.size else 0.0) + cl
        kb = int(np.argmin(totals))
        tc = np.zeros(w.size, dtype=bool)
        tc[order[kb:]] = True
        if all_tc < totals[kb]:
            tc[:] = True
        pred, scattered = _split_cost(windows, tc, (ta, tp, tl), (ca, cp, cl), copy)
        found = Split(fmt.name, cuda_format.name, prec.name, int(N), windows, tc, pred, all_tc, all_cuda, scattered)
        if best is None or found.predicted_us < best.predicted_us * (1 - 1e-12):  # ties: the earlier format
            best = found
    return best


def split_cost(windows: Windows, tc: np.ndarray, tc_format, cuda_format, precision, N: int) -> tuple[float, bool]:
    """(predicted us, scattered) of the hybrid that runs the windows ``tc`` (bool over ``windows.index``) on
    ``tc_format`` and the others on ``cuda_format``: each part's launch, additive terms and heaviest window, plus
    the copy of the TC rows when they are not one run of windows."""
    prec = as_precision(precision)
    pw = windows.per_window()
    return _split_cost(windows, tc, window_costs(tc_format, pw, prec, N), window_costs(cuda_format, pw, prec, N),
                       _copy_us(cuda_format, prec, windows, N))


def _split_cost(windows: Windows, tc, tc_costs: tuple, cuda_costs: tuple, copy: np.ndarray) -> tuple[float, bool]:
    """`split_cost` from both formats' `window_costs` and the copy's us per window (`split` has them already:
    computing them again per TC format was two thirds of its NumPy passes, each a GIL hand-off beside an `auto`
    plan's background builds)."""
    (ta, tp, tl), (ca, cp, cl) = tc_costs, cuda_costs
    w, tc = windows.weight, np.asarray(tc, dtype=bool)
    scattered = _scattered(windows, tc)
    if scattered:
        ta = ta + copy
    pred = float(np.dot(w, np.where(tc, ta, ca)))
    if tc.any():
        pred += float(tp[tc].max()) + tl
    if not tc.all():
        pred += float(cp[~tc].max()) + cl
    return pred, scattered


def _copy_us(cuda_format, prec: Precision, windows: Windows, N: int) -> float:
    """Microseconds per window of a scattered TC part's copy through the workspace (at the CUDA-core model's C
    rate)."""
    return cuda_format.estimate.constants(prec).get("c_mb", 0.0) * windows.rows * N * COPY_BYTES / 1e6


def _scattered(windows: Windows, tc: np.ndarray) -> bool:
    """Whether the TC windows are not one run of consecutive windows (a sample is taken as scattered unless all or
    none of it is TC)."""
    if tc.all() or not tc.any():
        return False
    if not windows.exact:
        return True
    runs = np.flatnonzero(np.diff(np.concatenate([[0], tc.astype(np.int8), [0]])) == 1)
    return runs.size > 1
