"""ME-TCF (DTC-SpMM) on the format seam: its `Format` record and its device operator.

The arrays and converters live in ``container`` (CPU) and ``gpu`` (GPU) beside this module; the TF32 kernels in
``metcf_spmm.cu`` with launchers in ``launch``, the FP16/BF16 kernels in the same source (``metcf_half.cuh``) with
launchers in ``launch_half``. `MetcfDevice` is what `SpmmPlan` holds: it converts and uploads once, decides the
kernel per N (TF32: the calibrated cost model of ``selector``, autotuned where the model is unsure; FP16/BF16: no
calibrated model yet, so the candidates are always timed unless autotune=False) and launches it.
"""
from __future__ import annotations

import time

from kernels.formats.metcf import launch as metcf_launch
from kernels.formats.metcf import launch_half, selector
from kernels.formats.metcf.config import BITMAP_CONFIG, CONFIG, V0_CONFIG, KernelConfig
from kernels.formats.metcf.container import METCF, csr_to_metcf, metcf_concat, metcf_from_arrays, metcf_stats, metcf_to_csr
from kernels.formats.blocks import host_nan_bits
from kernels.formats.contract import Choice
from kernels.formats.metcf.gpu import csr_to_metcf_gpu_from_scipy, metcf_to_csr_gpu
from kernels.formats.metcf.reference import metcf_spmm
from kernels.formats.ranking import FIT_SOURCE, CostModel, work_terms
from kernels.formats.registry import Format
from kernels.formats.metcf.shard import METCF_SHARD
from kernels.precision import Precision
from storage.formats import BlockLayout

AUTOTUNE_MARGIN = 1.5  # autotune="auto" also times the candidates when the model's best TC prediction and its
# cuSPARSE prediction are within this factor (small matrices, where fixed host and launch costs decide, and hubs)
AUTOTUNE_MIN_NNZ = 1 << 20  # autotune="auto": on from ~1M nonzeros, where one tuning pass (~10 runs of each
# candidate) costs less than a few hundred later calls that a 5-20% better choice saves
FRAGMENT_MEMORY_FRACTION = 0.5  # dense A fragments may take at most this share of the free device memory
AUTOTUNE_MIN_AR = 1.05  # autotune times the balanced kernel only when the simulated schedule is this imbalanced
# FP16/BF16 plans convert A on the device (`convert_on_gpu`): the host path (`convert`, then `upload_half`) took
# 0.15-0.19 s at 1M nonzeros where TF32's GPU conversion takes 0.016 s (H100, plan-time-*-2026-11-27.json);
# test_gpu_half.py holds the two to the same bits (passed on an H100, 2026-11-27). False: the host path
HALF_GPU_CONVERSION = True


def convert(A, precision: Precision) -> METCF:
    """Canonical CSR -> ME-TCF with the precision's block width; values in the precision's storage dtype."""
    M = csr_to_metcf(A, width=precision.block_width)
    return METCF(M.shape, M.row_window_offset, M.tc_offset, M.tc_local_id, M.sparse_a_to_b,
                 precision.to_storage(M.data))


def convert_on_gpu(A, precision: Precision) -> METCF:
    """`convert` on the device (kernels.formats.metcf.gpu at the precision's block width): a METCF of CuPy arrays,
    values in the precision's storage dtype with NaN's 16-bit bits as the host's (blocks.host_nan_bits), meant to
    give `upload_half` the same arrays as `convert` does (tests/kernels/formats/metcf/test_gpu_half.py checks it)."""
    a = csr_to_metcf_gpu_from_scipy(A, width=precision.block_width)
    values = host_nan_bits(precision.to_storage)(a["data"])
    return METCF(a.shape, a["row_window_offset"], a["tc_offset"], a["tc_local_id"], a["sparse_a_to_b"], values)


def reference_spmm(M: METCF, B, precision: Precision | None = None):
    """float64 C = A @ B from the arrays (kernels.formats.metcf.reference.metcf_spmm); half values are widened exactly first."""
    if precision is not None and precision.name == "bfloat16":
        M = METCF(M.shape, M.row_window_offset, M.tc_offset, M.tc_local_id, M.sparse_a_to_b,
                  precision.to_float32(M.data))
    return metcf_spmm(M, B)


def wants_autotune(autotune, nnz: int, pred: dict, balance_threshold: float | None = None) -> bool:
    """TF32 policy: autotune=True/False as given; "auto" times the candidates from AUTOTUNE_MIN_NNZ, or when the
    model is unsure: its best TC kernel and cuSPARSE predicted within AUTOTUNE_MARGIN of each other, or hub
    windows (AR above the calibrated balance threshold: the model is fitted on uniform matrices, and on email-Enron
    at N = 512 it picked the balanced kernel at 0.76x of cuSPARSE's time)."""
    if autotune != "auto":
        return bool(autotune)
    tc = min(pred["plain_ms"], pred["balanced_ms"], pred.get("split_ms", float("inf")))
    cus = pred["cusparse_ms"]
    hubs = balance_threshold is not None and pred["approximation_ratio"] > balance_threshold
    return nnz >= AUTOTUNE_MIN_NNZ or hubs or max(tc, cus) < AUTOTUNE_MARGIN * min(tc, cus)


HALF_KERNELS = ("metcf-window", "metcf-split")  # FP16 / BF16 (launch_half)


class MetcfDevice:
    """ME-TCF of one matrix on the current device at one precision: conversion, upload, per-matrix kernel arrays
    (dense A fragments, column pairs) built once; `decide` and `launch` per call."""

    format_name, kernels, out_dtype = "metcf", ("metcf-window", "metcf-balanced", "metcf-split"), None  # the device-operator contract

    def __init__(self, A, precision: Precision, config: KernelConfig | None = None, calibration=None, *,
                 balance="auto", autotune="auto", allow_cusparse: bool = False):
        import cupy

        self.precision, self.config, self.balance = precision, CONFIG if config is None else config, balance
        self.allow_cusparse = allow_cusparse  # False: only this format's kernels (deterministic), never cuSPARSE
        self.autotune = autotune if autotune == "auto" else bool(autotune)
        self.timings: dict = {}
        self.nnz, self.shape = int(A.nnz), tuple(int(s) for s in A.shape)
        if precision.half:
            self.kernels = HALF_KERNELS  # this instance's: the half kernels have no balanced variant
        t0 = time.perf_counter()
        if precision.half:
            if isinstance(A, METCF):
                M, how = A, "host ME-TCF (16 x 16 blocks) upload"
            elif HALF_GPU_CONVERSION:
                M, how = convert_on_gpu(A, precision), "kernels.formats.metcf.gpu (16 x 16 blocks)"
            else:
                M, how = convert(A, precision), "host ME-TCF (16 x 16 blocks) upload"
            if M.width != precision.block_width:
                raise ValueError(f"ME-TCF with {M.width}-wide blocks given for {precision.name}, which needs "
                                 f"{precision.block_width}-wide blocks (csr_to_metcf(A, width=16))")
            self._dm = launch_half.upload_half(M, precision.name)
        else:
            self._dm, how = self._upload_tf32(A)
        cupy.cuda.Device().synchronize()  # synchronize!
        self.timings["convert_upload_s"] = time.perf_counter() - t0  # includes the first compile (cached after)
        self.timings["conversion"] = how
        self.row_window_offset_host = self._dm.row_window_offset_host
        self._device_model = selector.device_model(self.config)
        self._cal = calibration or selector.Calibration.load(self._device_model.name)
        self._workspace = None

    def _upload_tf32(self, A):
        import cupy

        if isinstance(A, METCF):
            if A.width != 8:
                raise ValueError(f"ME-TCF with {A.width}-wide blocks given for float32 (TF32), which needs 8")
            dm, how = metcf_launch.upload(A), "host METCF upload"
        else:
            a = csr_to_metcf_gpu_from_scipy(A)
            dm = metcf_launch.from_device_arrays(a.shape, a["row_window_offset"], a["tc_offset"], a["tc_local_id"],
                                           a["sparse_a_to_b"], a["data"])
            how = "kernels.formats.metcf.gpu"
        if self.config.a_dense:  # 512 B of fragments per TC block: fall back to the bitmap kernels when they
            free = cupy.cuda.runtime.memGetInfo()[0]  # would take more than half the free device memory
            if dm.n_blocks * 512 > FRAGMENT_MEMORY_FRACTION * free:
                self.timings["a_layout_fallback"] = (f"dense fragments need {dm.n_blocks * 512 / 2**30:.1f} GiB, "
                                                     f"more than half of the {free / 2**30:.1f} GiB free: bitmap "
                                                     "kernels (KernelConfig a_dense=False)")
                self.config = BITMAP_CONFIG
        metcf_launch.module(self.config)  # compile now, not in the first run
        if self.config.a_regs:
            metcf_launch.a_arrays(dm, self.config)  # the register pipeline's bitmaps or dense fragments, built once
        return dm, how

    # ----- choice -----
    def decide(self, N: int, B, time_fn) -> Choice:
        """This format's choice for N columns (a kernel of its own or "cusparse"): kernel, reason, prediction and
        (when timed) measured ms. ``time_fn(kernel, **params)`` times one candidate (device ms);
        ``B`` None means no timing (the a-priori choice)."""
        if self.precision.half:
            return self._decide_half(N, B, time_fn)

        pred = selector.predict(self.row_window_offset_host, self.nnz, self.shape, N, self._device_model,
                                self._cal, self.config)
        choice = Choice.of(selector.choose(pred, self._cal, balance=self.balance, allow_cusparse=self.allow_cusparse))
        choice.update({"N": N, "prediction": pred, "calibration": self._cal.source,
                       "device": self._device_model.name, "conversion": self.timings.get("conversion"),
                       "a_layout": "dense fragments" if self.config.a_dense else "bitmap",
                       **({"a_layout_fallback": self.timings["a_layout_fallback"]}
                          if "a_layout_fallback" in self.timings else {})})
        if B is None or not wants_autotune(self.autotune, self.nnz, pred, self._cal.balance_threshold):
            return choice
        cands = {"auto": ["metcf-window", "metcf-balanced", "cusparse"], True: ["metcf-balanced", "cusparse"],
                 False: ["metcf-window", "cusparse"]}[self.balance]
        if self.balance == "auto" and pred["approximation_ratio"] < AUTOTUNE_MIN_AR:
            cands.remove("metcf-balanced")  # nothing to balance; saves its 16 x N per split window workspace
        if not self.allow_cusparse:
            cands.remove("cusparse")
        measured = {k: time_fn(k) for k in cands}
        if self.balance == "auto" and pred.get("split_ksplit"):  # every ksplit the block size allows
            self._time_splits(choice, measured, metcf_launch.ksplits(N, self.config), time_fn)
        return _autotuned(choice, measured)

    def _decide_half(self, N: int, B, time_fn) -> Choice:
        choice = Choice(kernel="metcf-window", N=N, reason=f"{self.precision.name}: no calibrated cost model for "
                        "the m16n8k16 kernels yet; the window kernel unless the candidates are timed",
                        extra={"device": self._device_model.name, "conversion": self.timings.get("conversion")})
        if B is None or self.autotune is False:
            return choice
        measured = {k: time_fn(k) for k in ("metcf-window", "cusparse")[:2 if self.allow_cusparse else 1]}
        self._time_splits(choice, measured, launch_half.ksplits_half(N, self.config), time_fn)
        return _autotuned(choice, measured)

    @staticmethod
    def _time_splits(choice: Choice, measured: dict, ks, time_fn) -> None:
        if not ks:
            return
        by_k = {k: time_fn("metcf-split", ksplit=k) for k in ks}
        choice["ksplit"] = min(by_k, key=by_k.get)
        choice["split_ms_by_ksplit"] = by_k
        measured["metcf-split"] = by_k[choice["ksplit"]]

    # ----- launch -----
    def launch(self, kernel: str, B, out, *, accumulate: bool = False, ksplit: int | None = None, choice=None):
        """out (=, or += with accumulate) A @ B with one of this format's kernels; ``choice`` supplies the
        autotuned ksplit of the split kernel."""
        return self._launcher(kernel, B, out, accumulate, ksplit, choice, bound=False)

    def bind(self, kernel: str, B, out, *, accumulate: bool = False, ksplit: int | None = None, choice=None):
        """The same launch checked and packed once (kernels.launch.Bound: ``bound(stream_ptr)`` launches it,
        ``bound.set_io(B, out)`` re-points it): SpmmPlan's per-call path for repeated calls."""
        return self._launcher(kernel, B, out, accumulate, ksplit, choice, bound=True)

    def _launcher(self, kernel, B, out, accumulate, ksplit, choice, bound: bool):
        if self.precision.half:
            return self._launch_half(kernel, B, out, accumulate, ksplit, choice or {}, bound)

        if kernel == "metcf-window":
            fn = metcf_launch.bind_window if bound else metcf_launch.spmm_window
            return fn(self._dm, B, out, self.config, accumulate=accumulate)
        if kernel == "metcf-split":
            N = int(B.shape[1])
            ch = choice or {}  # autotuned ksplit, else the model's, else the largest
            k = ksplit or ch.get("ksplit") or (ch.get("prediction") or {}).get("split_ksplit") or \
                metcf_launch.max_ksplit(N, self.config)
            fn = metcf_launch.bind_split if bound else metcf_launch.spmm_split
            return fn(self._dm, B, out, self.config, ksplit=k, accumulate=accumulate)
        if kernel == "metcf-balanced":
            need = metcf_launch.workspace_elems(self._dm, B.shape[1], self.config)
            if self._workspace is None or self._workspace.size < need:
                import cupy

                self._workspace = cupy.empty(max(need, 1), dtype=cupy.float32)  # bindings keep the old one alive
            fn = metcf_launch.bind_balanced if bound else metcf_launch.spmm_balanced
            return fn(self._dm, B, out, self._workspace, self.config, accumulate=accumulate)
        raise ValueError(f"unknown ME-TCF kernel {kernel!r} (metcf-window, metcf-split, metcf-balanced)")

    def _launch_half(self, kernel, B, out, accumulate, ksplit, choice, bound: bool = False):
        if kernel == "metcf-window":
            fn = launch_half.bind_window_half if bound else launch_half.spmm_window_half
            return fn(self._dm, B, out, accumulate=accumulate)
        if kernel == "metcf-split":
            k = ksplit or choice.get("ksplit") or (launch_half.ksplits_half(int(B.shape[1]), self.config) or [2])[-1]
            fn = launch_half.bind_split_half if bound else launch_half.spmm_split_half
            return fn(self._dm, B, out, ksplit=k, accumulate=accumulate)
        raise ValueError(f"unknown {self.precision.name} ME-TCF kernel {kernel!r} ({', '.join(HALF_KERNELS)})")


def _autotuned(choice: Choice, measured: dict) -> Choice:
    best = min(measured, key=measured.get)
    choice.update({"kernel": best, "measured_ms": measured, "predicted_kernel": choice["kernel"],
                   "reason": f"autotune: fastest measured of {measured}; model said {choice['kernel']} "
                             f"({choice['reason']})"})
    return choice


def cost_terms(stats, prec: Precision, N: int) -> dict:
    """What ME-TCF's kernels move (kernels.formats.ranking): per condensed 16 x w TC block its dense A fragment and
    w column ids, w gathered B rows; the heaviest window's blocks are one thread block's critical path."""
    w = prec.block_width
    blocks = stats.tc_blocks[w]
    return work_terms(stats, prec, N, a_bytes=blocks * (16 * w * prec.itemsize + 4 * w), b_rows=blocks * w,
                      hub_rows=stats.tc_blocks_max[w] * w)


def _layout():
    return BlockLayout(rows_per_group=16, group_offset="row_window_offset", item_offset="tc_offset",
                       fixed={"sparse_a_to_b": 8}, ragged=("tc_local_id", "data"))


FORMAT = Format(
    name="metcf", summary="ME-TCF (DTC-SpMM, ASPLOS'24): CSR condensed into 16 x k Tensor Core blocks per row window",
    block_width={"float32": 8, "float16": 16, "bfloat16": 16}, convert=convert, concat=metcf_concat,
    layout=_layout(), from_arrays=metcf_from_arrays, reference_spmm=reference_spmm,
    stats=lambda M, csr_nbytes=None: metcf_stats(M, A_csr_nbytes=csr_nbytes),
    device="kernels.formats.metcf.plugin:MetcfDevice", to_csr=metcf_to_csr, to_csr_device=metcf_to_csr_gpu,
    shard=METCF_SHARD, fallbacks=("csr-rows",),
    # the config SpmmPlan runs, its fallback when dense fragments do not fit (bitmap A) and the shared-memory v0
    cuda_sources=(metcf_launch.SOURCE,), cuda_builds=tuple((label, cfg.defines()) for label, cfg in (
        ("default", CONFIG), ("bitmap", BITMAP_CONFIG), ("v0", V0_CONFIG))),
    per_window_cost=True,
    estimate=CostModel(cost_terms, {"launch": 1.581, "b_mb": 0.1043, "c_mb": 1.434, "hub_mb": 30.55,
                                    "hub_all_mb": 7.093}, source=FIT_SOURCE,
                       per_precision={"float32": {"launch": 3.155, "b_mb": 0.1308, "c_mb": 0.6634, "hub_mb": 9.125,
                                                  "hub_all_mb": 3.94}}))
