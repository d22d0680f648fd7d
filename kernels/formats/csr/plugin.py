"""The CUDA-core CSR path on the format seam: its `Format` record and its device operator.

The arrays live in ``container``, the row cut and launchers in ``launch``, the kernels in ``csr_spmm.cu`` beside
this module. `CsrDevice` runs A as CSR on CUDA cores, deterministically (each C element written by one warp, long
rows cut into pieces added in a fixed order), in every precision: the fallback where Tensor Core blocks stay nearly
empty (power-law graphs, tiny matrices), in place of cuSPARSE, whose CSR SpMM gives bitwise-different C from call
to call. A plan times it against a format's timed choice when that format lists "csr-rows" in its
``Format.fallbacks`` (ME-TCF does, as DTC-SpMM's selector does); ``--format csr`` or ``auto`` run it as a format.
Its SDDMM route (``sddmm.py``, ``csr_sddmm.cu``) is the record's ``sddmm``.
"""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from kernels import launch
from kernels.formats.contract import Choice, check_single_kernel
from kernels.formats.csr.container import (CSR, csr_concat, csr_from_arrays, csr_from_scipy, csr_spmm, csr_stats,
                                           to_scipy)
from kernels.formats.csr.launch import CSR_CONFIG, SOURCE, CsrConfig, CsrRows
from kernels.formats.csr.sddmm import CSR_SDDMM_CONFIG, SDDMM
from kernels.formats.csr.sddmm import SOURCE as SDDMM_SOURCE
from kernels.formats.csr.shard import CSR_SHARD
from kernels.formats.ranking import FIT_SOURCE, CostModel, work_terms
from kernels.formats.registry import Format
from kernels.precision import Precision
from storage.formats import BlockLayout


def convert(A, precision: Precision) -> CSR:
    """Canonical CSR (one row block) -> CSR with values in the precision's storage dtype."""
    return csr_from_scipy(A, to_storage=precision.to_storage)


class CsrDevice:
    """A as CSR on the current device at one precision, uploaded on first use or by `prepare` (a plan starts that
    for its fallback when it is made, and then holds A's CSR on the device even where its choice is never timed
    against it: ~8 bytes a nonzero, below 1M nonzeros for float32, where ME-TCF's model may decide alone): one
    kernel, "csr-rows"; cuSPARSE among the candidates when the plan need not be deterministic. With 16-bit B and
    N % 8 == 0 its first launch or bind for an N times the kernel's mappings for that N and keeps the fastest
    (`CsrRows.tune`: two, four where N % 16 == 0 from 256; autotune=False: "wide", untimed)."""

    format_name, kernels, out_dtype = "csr", ("csr-rows",), None  # the device-operator contract
    summary = "CUDA cores, deterministic"

    def __init__(self, A, precision: Precision, config=None, calibration=None, *, balance="auto",
                 autotune="auto", allow_cusparse: bool = False):
        self.precision, self._A, self._rows, self._pending = precision, A, None, None
        self.config = config if isinstance(config, CsrConfig) else CSR_CONFIG
        self.autotune = autotune if autotune == "auto" else bool(autotune)
        self.allow_cusparse = allow_cusparse
        self.timings: dict = {}

    def prepare(self):
        """A's device arrays (`CsrRows`: the host layout, the upload, the kernels) built on a background thread on
        the current device, for the first use to take (the contract's optional ``prepare``): a plan timing this
        kernel as a fallback builds its formats meanwhile and waits for this (the Future returned) before it times
        anything (on a 1M-nonzero plan, H200: 7-16 ms beside the ranking, where its upload alone took ~3 ms of the
        decision before: docs/kernels-notes.md, "Session 40"). C is the same either way; an error is raised on
        first use."""
        if self._rows is None and self._pending is None:
            self._pending = launch.in_background("csr-prepare", self._build)
        return self._pending

    def _build(self) -> tuple:
        import cupy

        t0 = time.perf_counter()
        rows = CsrRows(self._A if sp.issparse(self._A) else to_scipy(self._A), self.precision, self.config)
        cupy.cuda.get_current_stream().synchronize()  # synchronize! (its copies landed when the Future is done)
        return rows, time.perf_counter() - t0

    def _get(self):
        if self._rows is None:
            pending, self._pending = self._pending, None
            self._rows, seconds = pending.result() if pending is not None else self._build()
            self.timings.update(convert_upload_s=seconds, conversion="host CSR upload" + (
                " (built in the background)" if pending is not None else ""))
        return self._rows

    def decide(self, N: int, B, time_fn) -> Choice:
        choice = Choice(kernel="csr-rows", N=N, reason="one warp per row piece on CUDA cores, fixed summation order")
        if B is None or self.autotune is False:
            return choice
        self._tune(B)
        choice.update(self._rows.mapping_fields(N, "csr_"))
        if not self.allow_cusparse:
            return choice
        measured = {k: time_fn(k) for k in ("csr-rows", "cusparse")}
        best = min(measured, key=measured.get)
        choice.update(kernel=best, measured_ms=measured, predicted_kernel="csr-rows",
                      reason=f"autotune: fastest measured of {measured}")
        return choice

    def mapping(self, N: int) -> str | None:
        """The row kernel's mapping for N (`CsrRows.mapping`), None before A is uploaded."""
        return None if self._rows is None else self._rows.mapping(N)

    def _tune(self, B, out_dtype=None) -> dict | None:
        """The row kernel's mapping for B's N timed once (`CsrRows.tune`, into a C of ``out_dtype``: the first
        launch's), unless autotune is off; its ms or None."""
        return self._get().tune(B, out_dtype) if self.autotune is not False else None

    def timed_ms(self, kernel: str, N: int, out_dtype) -> float | None:
        """The kept mapping's ms from `tune` where it timed N into a C of ``out_dtype`` (the contract's optional
        ``timed_ms``): a plan whose ME-TCF choice is timed against this kernel reuses it instead of timing the same
        bound launch again (2-3 ms of a 1M-nonzero plan's decision, H200)."""
        rows = self._rows
        if kernel != "csr-rows" or rows is None or rows.tuned_out.get(N) != np.dtype(out_dtype):
            return None
        ms = rows.mapping_ms.get(N)
        return ms[rows.mapping(N)] if ms and rows.mapping(N) in ms else None

    def launch(self, kernel: str, B, out, *, accumulate: bool = False, ksplit: int | None = None, choice=None):
        self._check(kernel, ksplit)
        rows = self._get()
        self._tune(B, getattr(out, "dtype", None))
        return rows.run(B, out, accumulate=accumulate)

    def bind(self, kernel: str, B, out, *, accumulate: bool = False, ksplit: int | None = None, choice=None):
        self._check(kernel, ksplit)
        rows = self._get()
        self._tune(B, getattr(out, "dtype", None))
        return rows.bind(B, out, accumulate=accumulate)

    @staticmethod
    def _check(kernel: str, ksplit) -> None:
        check_single_kernel(kernel, "csr-rows", ksplit, "the CSR kernel has no split-K")


def cost_terms(stats, prec: Precision, N: int) -> dict:
    """What the CSR kernel moves (kernels.formats.ranking): per nonzero its value and column, one gathered B row
    (FMAs on CUDA cores); long rows are cut into pieces, so the longest row is the critical path only when it is
    longer than a piece."""
    return work_terms(stats, prec, N, a_bytes=stats.nnz * (prec.itemsize + 4) + 8 * (stats.shape[0] + 1),
                      b_rows=stats.nnz, hub_rows=stats.row_nnz_max)


# the store's layout: a stored row per Parquet row, grouped by 16-row window, its column ids and values as lists
LAYOUT = BlockLayout(rows_per_group=16, group_offset="window_ptr", item_offset="indptr", fixed={"row_in_window": 0},
                     ragged=("indices", "data"))
FORMAT = Format(
    name="csr", summary="CSR on CUDA cores: the matrix as given, one warp per row piece, deterministic",
    block_width={"float32": 1, "float16": 1, "bfloat16": 1}, convert=convert, concat=csr_concat,
    layout=LAYOUT, from_arrays=csr_from_arrays, reference_spmm=csr_spmm, stats=csr_stats,
    device="kernels.formats.csr.plugin:CsrDevice", to_csr=to_scipy, shard=CSR_SHARD,
    cuda_sources=(SOURCE, SDDMM_SOURCE), cuda_builds=(("default", CSR_CONFIG.defines() + CSR_SDDMM_CONFIG.defines()),),
    per_window_cost=True, sddmm=SDDMM,
    estimate=CostModel(cost_terms, {"launch": 4.419, "b_mb": 0.08808, "c_mb": 1.044, "hub_mb": 0.004473},
                       source=FIT_SOURCE,
                       per_precision={"float32": {"launch": 4.672, "a_mb": 0.08292, "b_mb": 0.06259, "c_mb": 0.7656,
                                                  "hub_mb": 2.146}}))
