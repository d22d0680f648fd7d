"""BCSR (SMaT, SC'24) on the format seam: its `Format` record and its device operator `BcsrDevice`.

The arrays and CPU conversion live in ``kernels.formats.bcsr.container``, the GPU conversion in ``kernels.formats.bcsr.gpu``;
the kernels in ``kernels/formats/bcsr/bcsr_spmm.cu`` with launchers in ``kernels.formats.bcsr.launch``. Stored as one Parquet row
per block: ``indices`` (its block column) and ``values`` (its h x w values, row-major) over ``value_offset`` (block
b's values are ``values[hw*b : hw*(b+1)]``).
"""
from __future__ import annotations

import time

import numpy as np

from kernels.formats.bcsr import launch as launch_bcsr
from kernels.formats.bcsr.container import (BCSR, BLOCK_ROWS, bcsr_concat, bcsr_from_arrays, bcsr_spmm, bcsr_stats, bcsr_to_csr,
                                 csr_to_bcsr)
from kernels.formats.bcsr.gpu import csr_to_bcsr_gpu_from_scipy
from kernels.formats.contract import Choice, PerCall
from kernels.formats.ranking import FIT_SOURCE, CostModel, work_terms
from kernels.formats.registry import Format
from kernels.formats.bcsr.shard import BCSR_SHARD
from kernels.precision import Precision
from storage.formats import BlockLayout

# A-priori choice (no timing): split a block row's blocks over ksplit warps when the grid would leave SMs idle
# (fewer thread blocks than SPLIT_FILL_SMS x the SM count) or when the longest block row is SPLIT_SKEW x the mean.
SPLIT_FILL_SMS, SPLIT_SKEW = 2, 4.0


def convert(A, precision: Precision) -> BCSR:
    """Canonical CSR (one row block) -> BCSR with the precision's block width and storage dtype."""
    return csr_to_bcsr(A, width=precision.block_width, to_storage=precision.to_storage)


def reference_spmm(X: BCSR, B, precision: Precision | None = None):
    """float64 C = A @ B from the blocks (bfloat16 bits widened exactly)."""
    return bcsr_spmm(X, B)


class BcsrDevice:
    """BCSR of one matrix on the current device at one precision: a SciPy matrix converted on the device
    (``timings["conversion"]`` "GPU BCSR"), a converted `BCSR` uploaded ("host BCSR upload"), once; `decide`
    picks bcsr-window or bcsr-split (and its ksplit) per N, `launch` runs it."""

    format_name, kernels, out_dtype = "bcsr", ("bcsr-window", "bcsr-split"), None  # the device-operator contract

    def __init__(self, A, precision: Precision, config=None, calibration=None, *, balance="auto",
                 autotune="auto", allow_cusparse: bool = False):
        import cupy

        self.precision, self.balance = precision, balance
        self.config = launch_bcsr.BCSR_CONFIG
        self.autotune = autotune if autotune == "auto" else bool(autotune)
        self.allow_cusparse = allow_cusparse
        self.timings: dict = {}
        t0 = time.perf_counter()
        if isinstance(A, BCSR):  # converted already (the SpMM stage reads it from the store): upload it
            if A.width != precision.block_width:
                raise ValueError(f"BCSR with {A.width}-wide blocks given for {precision.name}, which needs "
                                 f"{precision.block_width}-wide blocks")
            self._dm, how = launch_bcsr.upload(A, precision.name), "host BCSR upload"
        else:  # a SciPy matrix: upload its CSR and convert on the device (kernels.formats.bcsr.gpu)
            X = csr_to_bcsr_gpu_from_scipy(A, precision)
            self._dm = launch_bcsr.upload_arrays(X.shape, precision.name, X.indptr, X.indices, X.data)
            how = "GPU BCSR"
            del X
        launch_bcsr.module()  # compile now, not in the first run
        cupy.cuda.Device().synchronize()  # synchronize!
        self.timings["convert_upload_s"] = time.perf_counter() - t0
        self.timings["conversion"] = how
        per = np.diff(self._dm.indptr_host)
        self.blocks_per_row = {"mean": float(per.mean()) if per.size else 0.0, "max": int(per.max()) if per.size
                               else 0}
        self.row_window_offset_host = self._dm.indptr_host  # what SpmmPlan's callers read (blocks per 16 rows)
        self.sm_count = cupy.cuda.Device().attributes["MultiProcessorCount"]

    def decide(self, N: int, B, time_fn) -> Choice:
        ks = launch_bcsr.ksplits(N)
        slices, chunks = launch_bcsr.grid_shape(N, 1)
        grid = self._dm.n_block_rows * chunks
        bpr = self.blocks_per_row
        skewed = bpr["mean"] > 0 and bpr["max"] > SPLIT_SKEW * bpr["mean"]
        small = grid < SPLIT_FILL_SMS * self.sm_count
        choice = Choice(kernel="bcsr-window", N=N,
                        extra={"conversion": self.timings.get("conversion"), "blocks_per_row": bpr})
        if ks and self.balance is not False and (small or skewed or self.balance is True):
            choice.update(kernel="bcsr-split", ksplit=ks[-1] if small else ks[0],
                          reason=f"{'skewed blocks per row (max ' + str(bpr['max']) + ' vs mean ' if skewed else ''}"
                                 f"{format(bpr['mean'], '.3g') + ')' if skewed else ''}"
                                 f"{'; ' if skewed and small else ''}"
                                 f"{f'{grid} thread blocks for {self.sm_count} SMs' if small else ''}: split")
        else:
            choice["reason"] = "one warp per 16 x 64 tile of C over its block row"
        if B is None or self.autotune is False:
            return choice
        measured = {"bcsr-window": time_fn("bcsr-window")}
        by_k = {k: time_fn("bcsr-split", ksplit=k) for k in ks}
        if by_k:
            best_k = min(by_k, key=by_k.get)
            measured["bcsr-split"] = by_k[best_k]
            choice["split_ms_by_ksplit"] = by_k
            choice["ksplit"] = best_k
        if self.allow_cusparse:
            measured["cusparse"] = time_fn("cusparse")
        best = min(measured, key=measured.get)
        choice.update({"kernel": best, "measured_ms": measured, "predicted_kernel": choice["kernel"],
                       "reason": f"autotune: fastest measured of {measured}; a priori {choice['kernel']} "
                                 f"({choice['reason']})"})
        return choice

    def bind(self, kernel: str, B, out, **kw):
        """The launch per call (kernels.formats.contract.PerCall): this operator has no packed form."""
        return PerCall(self, kernel, B, out, **kw)

    def launch(self, kernel: str, B, out, *, accumulate: bool = False, ksplit: int | None = None, choice=None):
        if kernel == "bcsr-window":
            return launch_bcsr.spmm(self._dm, B, out, accumulate=accumulate)
        if kernel == "bcsr-split":
            ks = launch_bcsr.ksplits(int(B.shape[1]))
            k = ksplit or (choice or {}).get("ksplit") or (ks[-1] if ks else 1)
            return launch_bcsr.spmm(self._dm, B, out, ksplit=k, accumulate=accumulate)
        raise ValueError(f"unknown BCSR kernel {kernel!r} (bcsr-window, bcsr-split)")


def cost_terms(stats, prec: Precision, N: int) -> dict:
    """What BCSR's kernels move (kernels.formats.ranking): per aligned 16 x w block its dense values and block
    column, w contiguous B rows; the heaviest block row's blocks are one warp's critical path."""
    w = prec.block_width
    blocks = stats.bcsr_blocks[w]
    return work_terms(stats, prec, N, a_bytes=blocks * (BLOCK_ROWS * w * prec.itemsize + 4), b_rows=blocks * w,
                      hub_rows=stats.bcsr_blocks_max[w] * w)


def _layout():
    return BlockLayout(rows_per_group=BLOCK_ROWS, group_offset="indptr", item_offset="value_offset",
                       fixed={"indices": 0}, ragged=("values",))


FORMAT = Format(
    name="bcsr", summary="BCSR (SMaT, SC'24): dense 16 x k blocks on a fixed grid, no column compaction",
    block_width={"float32": 8, "float16": 16, "bfloat16": 16}, convert=convert, concat=bcsr_concat,
    layout=_layout(), from_arrays=bcsr_from_arrays, reference_spmm=reference_spmm,
    stats=lambda X, csr_nbytes=None: bcsr_stats(X, csr_nbytes), device="kernels.formats.bcsr.plugin:BcsrDevice",
    to_csr=bcsr_to_csr, shard=BCSR_SHARD, cuda_sources=(launch_bcsr.SOURCE,),
    cuda_builds=(("default", launch_bcsr.BCSR_CONFIG.defines()),),
    per_window_cost=True,
    estimate=CostModel(cost_terms, {"launch": 3.271, "b_mb": 0.1246, "c_mb": 1.067, "hub_mb": 10.13,
                                    "hub_all_mb": 1.458}, source=FIT_SOURCE,
                       per_precision={"float32": {"launch": 3.377, "b_mb": 0.138, "c_mb": 0.5425, "hub_mb": 15.28,
                                                  "hub_all_mb": 1.333}}))
