"""Public SpMM: `SpmmPlan(A)` converts, uploads, compiles and selects once; `plan.run(B)` per call;
`spmm(A, B)` wraps both. Without CuPy or a GPU the plan runs the float64 NumPy reference (kernel
"cpu-reference") and returns float32 like the GPU path.

Kernels: "metcf-window" (one thread block per 16-row window), "metcf-balanced" (strict balance + combine),
"metcf-split" (one thread block per window, its TC blocks shared by ksplit warps per column slice), "cusparse"
(kernels.cusparse baseline), chosen per N by kernels.selector (cost model + simulated schedule) or, with
autotune, by timing the candidates once on the first B of each N (device time, every ksplit of the split kernel). `plan.choice` holds the last decision
(kernel, reason, predicted and measured ms) and `plan.choices[N]` every one.
"""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from kernels.config import BITMAP_CONFIG, CONFIG, KernelConfig
from kernels.formats.metcf import METCF, csr_to_metcf, metcf_to_csr

AUTOTUNE_MARGIN = 1.5  # autotune="auto" also times the candidates when the model's best TC prediction and its
# cuSPARSE prediction are within this factor (small matrices, where fixed host and launch costs decide, and hubs)
AUTOTUNE_MIN_NNZ = 1 << 20  # autotune="auto": on from ~1M nonzeros, where one tuning pass (~10 runs of each
# candidate) costs less than a few hundred later calls that a 5-20% better choice saves
FRAGMENT_MEMORY_FRACTION = 0.5  # dense A fragments may take at most this share of the free device memory
AUTOTUNE_MIN_AR = 1.05  # autotune times the balanced kernel only when the simulated schedule is this imbalanced


def gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, no device
        return False


def _to_metcf_gpu(A):
    """GPU CSR -> ME-TCF (kernels.formats.metcf_gpu): a dict of the five device arrays with a ``shape``."""
    from kernels.formats.metcf_gpu import csr_to_metcf_gpu_from_scipy

    return csr_to_metcf_gpu_from_scipy(A)


def wants_autotune(autotune, nnz: int, pred: dict, balance_threshold: float | None = None) -> bool:
    """SpmmPlan's policy: autotune=True/False as given; "auto" times the candidates from AUTOTUNE_MIN_NNZ, or when
    the model is unsure: its best TC kernel and cuSPARSE predicted within AUTOTUNE_MARGIN of each other, or hub
    windows (AR above the calibrated balance threshold: the model is fitted on uniform matrices, and on email-Enron
    at N = 512 it picked the balanced kernel at 0.76x of cuSPARSE's time)."""
    if autotune != "auto":
        return bool(autotune)
    tc = min(pred["plain_ms"], pred["balanced_ms"], pred.get("split_ms", float("inf")))
    cus = pred["cusparse_ms"]
    hubs = balance_threshold is not None and pred["approximation_ratio"] > balance_threshold
    return nnz >= AUTOTUNE_MIN_NNZ or hubs or max(tc, cus) < AUTOTUNE_MARGIN * min(tc, cus)


class SpmmPlan:
    def __init__(self, A, *, device="auto", dtype=np.float32, balance="auto", autotune="auto",
                 config: KernelConfig = CONFIG, calibration=None):
        if np.dtype(dtype) != np.float32:
            raise ValueError(f"dtype {np.dtype(dtype)} is not supported; the TF32 kernels take float32")
        if balance not in ("auto", True, False):
            raise ValueError(f"balance is {balance!r}, expected 'auto', True or False")
        if device not in ("auto", "gpu", "cpu"):
            raise ValueError(f"device is {device!r}, expected 'auto', 'gpu' or 'cpu'")
        if not isinstance(A, METCF) and not sp.issparse(A):
            raise TypeError(f"A must be a METCF or a SciPy sparse matrix, got {type(A).__name__}")
        self.config, self.balance = config, balance
        self.shape = tuple(int(s) for s in A.shape)
        self._csr = None if isinstance(A, METCF) else sp.csr_array(A)
        self._metcf = A if isinstance(A, METCF) else None
        self.nnz = A.nnz
        use_gpu = device == "gpu" or (device == "auto" and gpu_available())
        if device == "gpu" and not gpu_available():
            raise RuntimeError("device='gpu' but CuPy or a CUDA device is not available")
        self.device = "gpu" if use_gpu else "cpu"
        self.choices: dict[int, dict] = {}
        self.timings: dict = {}
        if not use_gpu:
            self._metcf = self._metcf if self._metcf is not None else csr_to_metcf(self._csr)
            self.choice = {"kernel": "cpu-reference", "reason": "no CuPy/CUDA device (or device='cpu'): "
                           "kernels.reference.metcf_spmm in float64, returned as float32", "predicted_ms": None}
            return
        self._init_gpu(A, autotune, calibration)

    # ----- GPU setup -----
    def _init_gpu(self, A, autotune, calibration):
        import cupy

        from kernels import launch, selector

        t0 = time.perf_counter()
        if isinstance(A, METCF):
            dm, how = launch.upload(A), "host METCF upload"
        else:
            a = _to_metcf_gpu(self._csr)
            dm = launch.from_device_arrays(a.shape, a["row_window_offset"], a["tc_offset"], a["tc_local_id"],
                                           a["sparse_a_to_b"], a["data"])
            how = "kernels.formats.metcf_gpu"
        if self.config.a_dense:  # 512 B of fragments per TC block: fall back to the bitmap kernels when they
            free = cupy.cuda.runtime.memGetInfo()[0]  # would take more than half the free device memory
            if dm.n_blocks * 512 > FRAGMENT_MEMORY_FRACTION * free:
                self.timings["a_layout_fallback"] = (f"dense fragments need {dm.n_blocks * 512 / 2**30:.1f} GiB, "
                                                     f"more than half of the {free / 2**30:.1f} GiB free: bitmap "
                                                     "kernels (KernelConfig a_dense=False)")
                self.config = BITMAP_CONFIG
        launch.module(self.config)  # compile now, not in the first run
        if self.config.a_regs:
            launch.a_arrays(dm, self.config)  # the register pipeline's bitmaps or dense fragments, built once
        cupy.cuda.Device().synchronize()  # synchronize!
        self.timings["convert_upload_s"] = time.perf_counter() - t0  # includes the first compile (cached after)
        self.timings["conversion"] = how
        self._dm = dm
        self._device_model = selector.device_model(self.config)
        self._cal = calibration or selector.Calibration.load(self._device_model.name)
        self.autotune = autotune if autotune == "auto" else bool(autotune)
        self._cusparse = None
        self._workspace = None
        self.choice = self._decide(128, None)  # a-priori choice for N = 128; re-decided per N in run()

    def _cusparse_op(self):
        if self._cusparse is None:
            from kernels.cusparse import CusparseSpmm

            csr = self._csr if self._csr is not None else metcf_to_csr(self._metcf)
            self._cusparse = CusparseSpmm(csr)
        return self._cusparse

    def _decide(self, N: int, B) -> dict:
        from kernels import selector

        pred = selector.predict(self._dm.row_window_offset_host, self.nnz, self.shape, N, self._device_model,
                                self._cal, self.config)
        choice = selector.choose(pred, self._cal, balance=self.balance)
        choice.update({"N": N, "prediction": pred, "calibration": self._cal.source,
                       "device": self._device_model.name, "conversion": self.timings.get("conversion"),
                       "a_layout": "dense fragments" if self.config.a_dense else "bitmap",
                       **({"a_layout_fallback": self.timings["a_layout_fallback"]}
                          if "a_layout_fallback" in self.timings else {})})
        if B is not None and wants_autotune(self.autotune, self.nnz, pred, self._cal.balance_threshold):
            cands = {"auto": ["metcf-window", "metcf-balanced", "cusparse"], True: ["metcf-balanced", "cusparse"],
                     False: ["metcf-window", "cusparse"]}[self.balance]
            if self.balance == "auto" and pred["approximation_ratio"] < AUTOTUNE_MIN_AR:
                cands.remove("metcf-balanced")  # nothing to balance; saves its 16 x N per split window workspace
            measured = {k: self._time(k, B, repeats=10, warmup=3) for k in cands}
            if self.balance == "auto" and pred.get("split_ksplit"):  # every ksplit the block size allows
                from kernels.launch import ksplits

                by_k = {k: self._time("metcf-split", B, repeats=10, warmup=3, ksplit=k)
                        for k in ksplits(N, self.config)}
                choice["ksplit"] = min(by_k, key=by_k.get)
                choice["split_ms_by_ksplit"] = by_k
                measured["metcf-split"] = by_k[choice["ksplit"]]
            best = min(measured, key=measured.get)
            choice.update({"kernel": best, "measured_ms": measured, "predicted_kernel": choice["kernel"],
                           "reason": f"autotune: fastest measured of {measured}; model said {choice['kernel']} "
                                     f"({choice['reason']})"})
        return choice

    def _launch(self, kernel: str, B, out, accumulate: bool = False, ksplit: int | None = None):
        from kernels import launch

        if kernel == "metcf-window":
            return launch.spmm_window(self._dm, B, out, self.config, accumulate=accumulate)
        if kernel == "metcf-split":
            N = int(B.shape[1])
            ch = self.choices.get(N, {})  # autotuned ksplit, else the model's, else the largest
            k = ksplit or ch.get("ksplit") or ch.get("prediction", {}).get("split_ksplit") or \
                launch.max_ksplit(N, self.config)
            return launch.spmm_split(self._dm, B, out, self.config, ksplit=k, accumulate=accumulate)
        if kernel == "metcf-balanced":
            need = launch.workspace_elems(self._dm, B.shape[1], self.config)
            if self._workspace is None or self._workspace.size < need:
                import cupy

                self._workspace = cupy.empty(max(need, 1), dtype=cupy.float32)
            return launch.spmm_balanced(self._dm, B, out, self._workspace, self.config, accumulate=accumulate)
        if kernel == "cusparse":
            op = self._cusparse_op()
            if B.shape[1] not in op.best:
                op.tune(B)  # into a scratch C: out may hold what accumulate adds to
            return op.run(B, out, accumulate=accumulate)
        raise ValueError(f"unknown kernel {kernel!r}")

    def _time(self, kernel: str, B, *, repeats: int, warmup: int, ksplit: int | None = None) -> float:
        """Device milliseconds of one launch (kernels.launch.graph_ms: a captured graph, no host overhead)."""
        import cupy

        from kernels.launch import graph_ms

        out = cupy.empty((self.shape[0], B.shape[1]), dtype=cupy.float32)
        if kernel == "cusparse":
            self._launch(kernel, B, out)  # tunes cuSPARSE for this N (allocates: outside the capture)
        return graph_ms(lambda: self._launch(kernel, B, out, ksplit=ksplit), repeats=repeats, warmup=warmup)

    # ----- public -----
    def run(self, B, out=None, *, kernel: str | None = None, accumulate: bool = False):
        """C = A @ B. NumPy B -> NumPy C; CuPy B -> CuPy C (on the GPU path). `kernel` overrides the choice.
        ``accumulate``: out += A @ B (out required; on the GPU without an extra pass over C), for a product
        split over A's columns, e.g. a resident shard's own and halo columns."""
        if accumulate and out is None:
            raise ValueError("accumulate=True adds A @ B to out: pass out")
        if self.device == "cpu":
            from kernels.reference import metcf_spmm

            C = metcf_spmm(self._metcf, np.asarray(B)).astype(np.float32)
            if out is not None:
                if accumulate:
                    out += C.reshape(out.shape)
                else:
                    out[...] = C
                return out
            return C
        import cupy

        on_host = not isinstance(B, cupy.ndarray)
        Bd = cupy.ascontiguousarray(cupy.asarray(B, dtype=cupy.float32))
        vector = Bd.ndim == 1
        if vector:
            Bd = Bd.reshape(-1, 1)
        if Bd.ndim != 2 or Bd.shape[0] != self.shape[1]:
            raise ValueError(f"B has shape {tuple(B.shape)}, expected ({self.shape[1]}, N) or ({self.shape[1]},)")
        N = int(Bd.shape[1])
        if kernel is None:
            if N not in self.choices:
                self.choices[N] = self._decide(N, Bd)
            self.choice = self.choices[N]
            kernel = self.choice["kernel"]
        dev_out = None
        if out is not None and not on_host:
            dev_out = out.reshape(self.shape[0], N) if vector else out
        C = self._launch(kernel, Bd, dev_out, accumulate and dev_out is not None)
        if vector:
            C = C.reshape(-1)
        if on_host:
            host = cupy.asnumpy(C)  # synchronize!
            if out is not None:
                if accumulate:
                    out += host.reshape(out.shape)
                else:
                    out[...] = host
                return out
            return host
        return C

    def capture(self, B, out):
        """A CUDA graph of ``out = A @ B`` with the kernel chosen for B's N (decided, and autotuned, first): for
        iterative callers (a GNN layer, a solver) that refill the same B and read the same out, replaying it
        skips the host launch path. B and out: C-contiguous cupy float32 arrays that must outlive the graph.
        Returns a callable ``replay(stream=None)`` (on the current stream by default)."""
        import cupy

        if self.device == "cpu":
            raise RuntimeError("capture needs the GPU path (this plan runs the CPU reference)")
        if not isinstance(B, cupy.ndarray) or not isinstance(out, cupy.ndarray):
            raise TypeError("capture takes cupy arrays B and out (the graph holds their addresses)")
        self.run(B, out)  # decides for this N, builds workspaces and cuSPARSE buffers outside the capture
        kernel = self.choices[int(B.shape[1])]["kernel"]
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            try:
                self._launch(kernel, B, out)
            finally:
                graph = stream.end_capture()

        def replay(on=None):
            graph.launch(on if on is not None else cupy.cuda.get_current_stream())
            return out

        replay.kernel = kernel
        return replay

    def benchmark(self, B, repeats: int = 20, warmup: int = 5, *, kernel: str | None = None) -> dict:
        """Median ms over `repeats` timed runs (CUDA events) after `warmup`; NumPy timer on the CPU path."""
        if self.device == "cpu":
            for _ in range(warmup):
                self.run(B)
            ts = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                self.run(B)
                ts.append((time.perf_counter() - t0) * 1e3)
            return {"kernel": "cpu-reference", "median_ms": float(np.median(ts)), "repeats": repeats}
        import cupy

        Bd = cupy.ascontiguousarray(cupy.asarray(B, dtype=cupy.float32))
        N = int(Bd.shape[1])
        self.run(Bd)  # decides (and autotunes) for this N
        k = kernel or self.choices[N]["kernel"]
        ms = self._time(k, Bd, repeats=repeats, warmup=warmup)
        return {"kernel": k, "median_ms": ms, "repeats": repeats, "N": N,
                "gflops": 2.0 * self.nnz * N / (ms * 1e-3) / 1e9}


def spmm(A, B, **kw):
    """C = A @ B through a one-shot SpmmPlan (kw as SpmmPlan's)."""
    return SpmmPlan(A, **kw).run(B)
