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
(`kernels.precision`); the constants were measured in FP16 (TF32 and BF16 use them as they are).

How well (benchmarks/results/rank-check-nvidia-h200-2026-11-27.json; 180 rows of the run the constants were
fitted on, formats-nvidia-h200-2026-11-25-c.json: 45 orders of 21 matrices x N = 128..1024): the measured best is
ranked first in 61 %, among the first two in 93 %; the predicted first ran at most 1.38x (geomean 1.03x) the
best; what a plan builds and times (ranked at N = 128) held the best in 97 %. Fitted leaving each matrix out:
51 %, 87 %, and 97 % for the plan. The two earlier runs (older CVSE and Tiled-CSR kernels) agree less (top 2:
87 % and 90 %). Refit when a format's kernels change (CVSE's tiled kernel postdates that run).

`rank(formats, stats, precision, N)` orders formats by estimate (a format without one after those with one, in
registry order); `select(A, formats, precision, k)` computes the statistics once and keeps the first k (`pick`:
a format whose kernels another kept format times as its fallbacks takes no slot).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from kernels.formats.structure import Structure, structure
from kernels.precision import Precision
from kernels.precision import precision as as_precision

TERMS = ("launch", "a_mb", "b_mb", "c_mb", "hub_mb", "hub_all_mb")
HUB_COLUMNS = 64  # B columns of one thread block's chunk (every format's kernels cut N in chunks of 32-128)
RANK_N = 128  # the N a plan ranks at: it is built before it sees a B (its a-priori choice is for N = 128 too)
AUTO_CANDIDATES = 2  # formats a plan of format="auto" builds and times
# where the formats' constants come from (each CostModel's ``source``)
FIT_SOURCE = ("python benchmarks/rank_check.py --fit --results benchmarks/results/formats-nvidia-h200-2026-11-25-c.json"
              " (FP16, H200; censored rows: a fallback that lost)")


@dataclass(frozen=True)
class CostModel:
    """A format's cost estimate: ``model(stats, precision_name, N)`` -> predicted microseconds (module docstring).
    ``terms(stats, precision, N)`` -> {term: amount}; ``us``: microseconds per unit of each term (absent: 0);
    ``source``: where the constants were fitted."""

    terms: Callable[[Structure, Precision, int], dict]
    us: dict
    source: str = ""

    def __post_init__(self):
        unknown = set(self.us) - set(TERMS)
        if unknown:
            raise ValueError(f"cost terms {sorted(unknown)} are not among {', '.join(TERMS)}")

    def __call__(self, stats: Structure, precision, N: int) -> float:
        amounts = self.terms(stats, as_precision(precision), int(N))
        return sum(self.us.get(term, 0.0) * amount for term, amount in amounts.items())


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


def pick(ranked: list, k: int) -> tuple[list, list]:
    """(formats to build, formats timed through a built one's fallbacks) from formats in rank order: the shortest
    prefix holding ``k`` formats not covered by another's ``fallbacks`` (a format is covered when every kernel of
    its operator is a fallback of a format kept: ME-TCF times the CUDA-core CSR kernel anyway, so CSR takes no
    slot beside it)."""
    prefix: list = []
    for f in ranked:
        prefix.append(f)
        if len(_uncovered(prefix)) >= k:
            break
    built = _uncovered(prefix)
    return built, [f for f in prefix if f not in built]


def _uncovered(formats: list) -> list:
    fallbacks = {kernel for f in formats for kernel in f.fallbacks}
    return [f for f in formats if not set(f.device_class().kernels) <= fallbacks]


def check_candidates(k) -> int:
    """``auto_candidates`` as given, or ValueError in one line."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"auto_candidates is {k!r}, expected a positive number of formats to build and time")
    return int(k)


def select(A, formats: list, precision, k: int = AUTO_CANDIDATES, *, N: int = RANK_N) -> tuple[list, dict]:
    """(the formats to build, in rank order: `pick` of the ranking; the ranking's record for reports). With ``k``
    >= the candidates every format is kept, in the given order, and no statistics are computed."""
    k = check_candidates(k)
    if k >= len(formats):
        return list(formats), {"k": k, "built": [f.name for f in formats], "ranked": False,
                               "reason": f"auto_candidates={k} >= the {len(formats)} candidates: all built"}
    t0 = time.perf_counter()
    stats = structure(A)
    ranked = rank(formats, stats, precision, N)
    built, covered = pick([f for f, _ in ranked], k)
    return built, {"k": k, "N": N, "ranked": True, "built": [f.name for f in built],
                   "timed_as_fallback": [f.name for f in covered],
                   "estimate_us": {f.name: (round(us, 3) if us is not None else None) for f, us in ranked},
                   "statistics_s": stats.seconds, "ranking_s": time.perf_counter() - t0,
                   "structure": stats.summary()}
