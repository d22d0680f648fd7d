"""CVSE (VectorSparse SC'21 / SSpMM TPDS'25) on the format seam: its `Format` record and its device operator
`CvseDevice`.

The arrays and CPU conversion live in ``kernels.formats.cvse``, Sparse Vector Compression (the choice of V) in
``kernels.formats.cvse_svc``; the kernels in ``kernels/cuda/cvse_spmm.cu`` / ``cvse_sddmm.cu`` with launchers in
``kernels.launch_cvse``. Stored as one Parquet row per vector, grouped by 16-row window: ``indices`` (its column),
``vec_row`` (its vector row within the window, uint8) and ``values`` (its V values) over ``value_offset``.

V on the seam: ``convert(csr_block, precision)`` runs per row block (Dask), so it cannot look at the whole matrix:
it uses ``DEFAULT_VECTOR`` (the paper's V = 8 of its ablation and DNN runs). A device operator given the whole CSR
chooses V with Sparse Vector Compression; pass a converted CVSE to fix V.
"""
from __future__ import annotations

import time

import numpy as np

from kernels.formats.cvse import (CVSE, WINDOW_ROWS, csr_to_cvse, cvse_concat, cvse_from_arrays, cvse_spmm,
                                  cvse_stats, cvse_to_csr)
from kernels.formats.registry import Format
from kernels.precision import Precision

DEFAULT_VECTOR = 8


def convert(A, precision: Precision, *, vector: int = DEFAULT_VECTOR) -> CVSE:
    """Canonical CSR (one row block) -> CVSE with V = ``vector`` in the precision's storage dtype."""
    return csr_to_cvse(A, vector=vector, to_storage=precision.to_storage)


def reference_spmm(X: CVSE, B, precision: Precision | None = None):
    """float64 C = A @ B from the vectors (bfloat16 bits widened exactly)."""
    return cvse_spmm(X, B)


class CvseDevice:
    """CVSE of one matrix on the current device at one precision: converted on the host (Sparse Vector Compression
    chooses V from the whole matrix, or the given CVSE's V is kept), uploaded once; one kernel per (precision, V),
    deterministic (each C element has one writer). `decide` has nothing to tune but reports the layout."""

    def __init__(self, A, precision: Precision, config=None, calibration=None, *, balance="auto",
                 autotune="auto", allow_cusparse: bool = False):
        import cupy

        from kernels import launch_cvse as lc
        from kernels.formats.cvse_svc import compress

        self.precision, self.config = precision, lc.CVSE_CONFIG
        self.allow_cusparse = allow_cusparse
        self.timings: dict = {}
        t0 = time.perf_counter()
        if isinstance(A, CVSE):
            X, self.svc = A, {"vector": A.vector, "reason": "given CVSE"}
        else:
            X, self.svc = compress(A, precision)
        self._dm = lc.upload(X, precision.name)
        lc.module(lc.SPMM_SOURCE)  # compile now, not in the first run
        cupy.cuda.Device().synchronize()  # synchronize!
        self.timings["convert_upload_s"] = time.perf_counter() - t0
        self.timings["conversion"] = f"host CVSE upload (V = {X.vector}: {self.svc['reason']})"
        per = WINDOW_ROWS // X.vector  # vectors per 16 rows, what SpmmPlan's callers read
        self.row_window_offset_host = self._dm.vec_ptr_host[np.minimum(
            np.arange(-(-int(X.shape[0]) // WINDOW_ROWS) + 1) * per, self._dm.n_vec_rows)]

    def decide(self, N: int, B, time_fn) -> dict:
        choice = {"kernel": "cvse-vector", "N": N, "vector": self._dm.vector, "prediction": None,
                  "predicted_ms": None, "conversion": self.timings.get("conversion"),
                  "reason": f"SSpMM transpose mapping, V = {self._dm.vector} on the mma's n8, 64 columns per warp"}
        if B is None or not self.allow_cusparse:
            return choice
        measured = {"cvse-vector": time_fn("cvse-vector"), "cusparse": time_fn("cusparse")}
        best = min(measured, key=measured.get)
        choice.update(kernel=best, measured_ms=measured, reason=f"autotune: fastest measured of {measured}")
        return choice

    def launch(self, kernel: str, B, out, *, accumulate: bool = False, ksplit: int | None = None, choice=None):
        """``ksplit`` is SpmmPlan's common launch argument; CVSE has no split-K variant and ignores it."""
        from kernels import launch_cvse as lc

        if kernel != "cvse-vector":
            raise ValueError(f"unknown CVSE kernel {kernel!r} (cvse-vector)")
        return lc.spmm(self._dm, B, out, accumulate=accumulate)


def _layout():
    from storage.formats import BlockLayout

    return BlockLayout(rows_per_group=WINDOW_ROWS, group_offset="window_ptr", item_offset="value_offset",
                       fixed={"indices": 0, "vec_row": 0}, ragged=("values",))


FORMAT = Format(
    name="cvse", summary="CVSE (VectorSparse SC'21, SSpMM TPDS'25): V x 1 column vectors sharing one column index; "
                         "SSpMM's transpose-mapped mma kernels",
    block_width={"float32": 8, "float16": 16, "bfloat16": 16}, convert=convert, concat=cvse_concat,
    layout=_layout(), from_arrays=cvse_from_arrays, reference_spmm=reference_spmm,
    stats=lambda X, csr_nbytes=None: cvse_stats(X, csr_nbytes), device="kernels.formats.cvse_plugin:CvseDevice",
    to_csr=cvse_to_csr,
    # tests/kernels/test_gpu_cvse.py passed on an H200 (session 6): every V, precision and edge case
    gpu_ready=True)
