"""Public SpMM: `SpmmPlan(A, dtype=..., format=...)` converts, uploads, compiles and selects once; `plan.run(B)`
per call; `spmm(A, B)` wraps both. Without CuPy or a GPU the plan runs the format's float64 NumPy twin on the
precision-rounded inputs for half precisions (kernel "cpu-reference") and the multithreaded float32 CSR product of
kernels.cpu_spmm for float32 (kernel "cpu-csr"), and returns the precision's dtype like the GPU path.

Formats come from the registry (``kernels.formats``): ``format="metcf"`` or any registered name, or ``"auto"``
(every format that supports the precision; the fastest measured wins). Precisions (``kernels.precision``):
float32 (TF32 Tensor Cores, m16n8k8), float16 and bfloat16 (m16n8k16, FP32 accumulation; bfloat16 values travel
as uint16 bit patterns: NumPy and CuPy have no bfloat16 dtype). Kernels: the format's own (ME-TCF: "metcf-window",
"metcf-balanced", "metcf-split") plus "cusparse" (kernels.cusparse, CSR in the same precision), chosen per N by
the format's device operator (cost model and/or timing the candidates once on the first B of each N).
`plan.choice` holds the last decision (format, kernel, reason, predicted and measured ms), `plan.choices[N]` every one.
"""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from configs.names import DEFAULT_FORMAT
from kernels.formats.registry import candidates as format_candidates
from kernels.precision import API_FIX, check_range
from kernels.precision import precision as as_precision

def gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, no device
        return False


class SpmmPlan:
    def __init__(self, A, *, device="auto", dtype=np.float32, format=DEFAULT_FORMAT, balance="auto", autotune="auto",
                 config=None, calibration=None, out_dtype=None, deterministic: bool = True,
                 graphs: bool = True, allow_overflow: bool = False):
        """``A``: a SciPy sparse matrix (any format) or an already converted format object (a METCF whose block
        width matches the precision). ``out_dtype``: C's dtype, default the precision's (float32 for TF32);
        half plans may ask for float32 C. ``format``: a registered name or "auto". ``deterministic`` (default):
        two runs on the same B give bitwise-equal C, so only our kernels (no atomics, fixed reduction orders) are
        chosen; False also lets the choice fall to cuSPARSE, whose CSR SpMM is not bitwise repeatable.
        ``graphs`` (default): from the AUTO_GRAPH_AFTER-th ``run`` on the same cupy B and out, replay a CUDA graph
        of the call instead of launching it (``plan.graphs = False`` opts out; the lean launch stays).
        ``allow_overflow``: float16 refuses a SciPy A with values beyond its range (|a| > 65504, or more than 1% of
        them below its smallest subnormal) with InputError, as the CLI does, unless this is True; ``range`` holds
        the counts (``kernels.precision.check_range``)."""
        self.precision = as_precision(dtype)
        if balance not in ("auto", True, False):
            raise ValueError(f"balance is {balance!r}, expected 'auto', True or False")
        if device not in ("auto", "gpu", "cpu"):
            raise ValueError(f"device is {device!r}, expected 'auto', 'gpu' or 'cpu'")
        given = getattr(A, "format_name", None)  # a converted object of a registered format
        if given is None and not sp.issparse(A):
            raise TypeError(f"A must be a SciPy sparse matrix or a registered format's converted object (one with a "
                            f"format_name), got {type(A).__name__}")
        self.range = {} if given else check_range(sp.csr_array(A).data, self.precision, f"A ({self.precision.name})",
                                                  allow_overflow=allow_overflow, fix=API_FIX)
        self.out_dtype = np.dtype(out_dtype) if out_dtype is not None else self.precision.storage_dtype
        if self.out_dtype not in (self.precision.storage_dtype, np.dtype(np.float32)):
            raise ValueError(f"out_dtype {self.out_dtype} is not supported for {self.precision.name}: "
                             f"{self.precision.storage_dtype} or float32")
        self.formats = format_candidates(given or format, self.precision.name)
        self.balance, self.shape, self.nnz = balance, tuple(int(s) for s in A.shape), int(A.nnz)
        self.deterministic = bool(deterministic)
        self._graphs = bool(graphs)
        self._calls: dict = {}  # (B and out pointer, shape, strides, dtype; accumulate; kernel) -> _Call
        self._csr = None if given else sp.csr_array(A)
        self._given = A
        use_gpu = device == "gpu" or (device == "auto" and gpu_available())
        if device == "gpu" and not gpu_available():
            raise RuntimeError("device='gpu' but CuPy or a CUDA device is not available")
        self.device = "gpu" if use_gpu else "cpu"
        if use_gpu:  # formats whose GPU kernels have not passed their GPU tests: out of "auto", refused by name
            unready = [f for f in self.formats if not f.gpu_ready]
            if unready and (given or format) != "auto":
                from configs.errors import InputError

                raise InputError(f"format {unready[0].name}: no GPU path yet, {unready[0].gpu_not_ready_why}; run it "
                                 "with device='cpu' (--devices cpu) or choose another format")
            self.formats = [f for f in self.formats if f.gpu_ready]
        self.choices: dict[int, dict] = {}
        self.timings: dict = {}
        if not use_gpu:
            fmt = self.formats[0]
            self._host = A if given else fmt.convert(self._csr, self.precision)
            self._reference = fmt.reference_spmm
            if self.precision.half:
                self.choice = {"kernel": "cpu-reference", "format": fmt.name, "precision": self.precision.name,
                               "reason": f"no CuPy/CUDA device (or device='cpu'): the {fmt.name} NumPy twin in "
                                         f"float64 on {self.precision.name}-rounded inputs", "predicted_ms": None}
            else:
                self.choice = {"kernel": "cpu-csr", "format": fmt.name, "precision": "float32", "predicted_ms": None,
                               "reason": "no CuPy/CUDA device (or device='cpu'): kernels.cpu_spmm, the multithreaded "
                                         "float32 CSR product"}
            return
        self.autotune = autotune if autotune == "auto" else bool(autotune)
        self._ops = {f.name: f.device_class()(A if given else self._csr, self.precision, config,
                                               calibration, balance=balance, autotune=autotune,
                                               allow_cusparse=not self.deterministic)
                     for f in self.formats}
        for name, ops in self._ops.items():
            self.timings.update(ops.timings if len(self._ops) == 1 else {f"{name}:{k}": v
                                                                        for k, v in ops.timings.items()})
        self._cusparse = self._csr_rows = None
        self._csr_fallback = (given or format) in ("auto", "metcf")
        self.choice = self._decide(128, None)  # a-priori choice for N = 128; re-decided per N in run()

    @property
    def config(self):
        """The kernel configuration of the (first) format's device operator (it may fall back, e.g. to bitmap A)."""
        return next(iter(self._ops.values())).config

    def _cusparse_op(self):
        if self._cusparse is None:
            from kernels.cusparse import CusparseSpmm

            csr = self._csr if self._csr is not None else _format_to_csr(self._given)
            if self.precision.name == "bfloat16" and csr.dtype == np.uint16:
                csr = sp.csr_array((self.precision.to_float32(csr.data), csr.indices, csr.indptr), shape=csr.shape)
            self._cusparse = CusparseSpmm(csr, dtype=self.precision.name)
        return self._cusparse

    def _csr_rows_op(self):
        """The deterministic CUDA-core CSR kernel on A as given (kernels.csr_rows), built on first use."""
        if self._csr_rows is None:
            from kernels.csr_rows import CsrRows

            csr = self._csr if self._csr is not None else _format_to_csr(self._given)
            self._csr_rows = CsrRows(csr, self.precision)
        return self._csr_rows

    def _decide(self, N: int, B) -> dict:
        """Each format's choice for N (its own cost model / timings, cuSPARSE among its candidates); with several
        formats and a B, the fastest measured of their choices. When the choice was timed (autotune) and the plan's
        format is ME-TCF (DTC-SpMM's selector: TC kernels or CUDA-core CSR) or "auto", the deterministic CUDA-core
        CSR kernel ("csr-rows") is timed too and taken where it is faster: the fallback where Tensor Core blocks
        stay nearly empty, as cuSPARSE is for a plan that need not be deterministic. An explicitly named other
        format keeps its own kernels."""
        choice = self._decide_formats(N, B)
        timed = choice.get("measured_ms") or choice.get("formats_measured_ms")
        if B is None or not self._csr_fallback or not timed:
            return choice
        best_ms = (choice.get("measured_ms") or {}).get(choice["kernel"])
        if best_ms is None:
            best_ms = min(choice["formats_measured_ms"].values())
        csr_ms = self._time("csr-rows", B)
        choice = {**choice, "csr_rows_ms": csr_ms}
        if csr_ms < best_ms:
            choice.update(kernel="csr-rows", format="csr", reason=f"csr-rows (CUDA cores, deterministic) "
                          f"{csr_ms:.4f} ms beats {best_ms:.4f} ms of the Tensor Core choice; {choice['reason']}")
        return choice

    def _decide_formats(self, N: int, B) -> dict:
        per_format = {}
        for name, ops in self._ops.items():
            ch = ops.decide(N, B, lambda kernel, _o=ops, **kw: self._time(kernel, B, ops=_o, **kw))
            per_format[name] = {**ch, "format": name if ch["kernel"] != "cusparse" else "csr",
                                "precision": self.precision.name}
        if len(per_format) == 1 or B is None:
            return next(iter(per_format.values()))
        # a format that autotuned has timed its choice already (the same way, through _time): no second timing
        measured = {name: (ch.get("measured_ms") or {}).get(ch["kernel"])
                    or self._time(ch["kernel"], B, ops=self._ops[name], choice=ch) for name, ch in per_format.items()}
        best = min(measured, key=measured.get)
        return {**per_format[best], "formats_measured_ms": measured,
                "reason": f"fastest measured format of {measured}: {best}; {per_format[best]['reason']}"}

    def _ops_for(self, kernel: str, choice: dict | None):
        """The device operator of the format a kernel belongs to: kernels are named "<format>-<variant>"."""
        fmt = kernel.split("-", 1)[0]  # a kernel named for another format than the choice's (run(kernel=))
        if fmt not in self._ops:
            fmt = (choice or {}).get("format")
        if fmt not in self._ops:
            raise ValueError(f"kernel {kernel!r} belongs to none of this plan's formats {sorted(self._ops)}")
        return self._ops[fmt]

    def _launch(self, kernel: str, B, out, accumulate: bool = False, ksplit: int | None = None, *, ops=None,
                choice=None):
        if kernel == "cusparse":
            op = self._cusparse_op()
            if B.shape[1] not in op.best:
                op.tune(B)  # into a scratch C: out may hold what accumulate adds to
            return op.run(B, out, accumulate=accumulate)
        if out is None:  # C in the plan's out_dtype (the launchers' own default is float32)
            out = self._out(int(B.shape[1]), kernel)
        if kernel == "csr-rows":
            return self._csr_rows_op().run(B, out, accumulate=accumulate)
        choice = choice if choice is not None else self.choices.get(int(B.shape[1]), {})
        ops = ops or self._ops_for(kernel, choice)
        return ops.launch(kernel, B, out, accumulate=accumulate, ksplit=ksplit, choice=choice)

    def _out(self, N: int, kernel: str):
        import cupy

        dtype = self.precision.storage_dtype if kernel == "cusparse" else self.out_dtype
        return cupy.empty((self.shape[0], N), dtype=dtype)

    def _time(self, kernel: str, B, *, repeats: int = 10, warmup: int = 3, ksplit: int | None = None, ops=None,
              choice=None, how: str | None = None) -> float:
        """Milliseconds per call of one candidate through its bound launch (the path ``run`` takes). "issued": a
        candidate is charged its host cost where that exceeds its GPU time (kernels.launch.issued_ms, a Python
        loop of calls between CUDA events); "graph": the GPU's time alone (kernels.launch.graph_ms, a captured
        graph of back-to-back calls). Autotune (how=None) times candidates the way ``run`` issues them from the
        third call on: with ``graphs`` (default) a replayed graph, whose host cost is one graph launch whatever
        the kernel, so "graph"; without, "issued". Why: a host-bound launcher (the formats without ``bind``) made
        the tiled CVSE kernel (28 us on the GPU) measure its ~55 us host cost, and autotune kept the per-vector one
        (40 us) (H200, V = 8, 80 %, N = 256: docs/kernels-notes.md, "Session 12")."""
        import cupy

        from kernels.launch import graph_ms, issued_ms

        how = how or ("graph" if self._graphs else "issued")
        bound = self._bind(kernel, B, self._out(int(B.shape[1]), kernel), False, ksplit=ksplit, ops=ops,
                           choice=choice)
        if how == "graph":
            return graph_ms(lambda: bound(cupy.cuda.get_current_stream().ptr), repeats=repeats, warmup=warmup)
        stream_ptr = cupy.cuda.get_current_stream().ptr
        return issued_ms(lambda: bound(stream_ptr), repeats=max(3, repeats // 2), warmup=warmup)

    def _bind(self, kernel: str, B, out, accumulate: bool, *, ksplit: int | None = None, ops=None, choice=None):
        """``kernel``'s launch on these B and out, checked and packed once: ``bound(stream_ptr)`` issues it,
        ``bound.out`` is C (kernels.launch.Bound, kernels.cusparse.CusparseBound, or a plain launch for a format
        whose device operator has no ``bind``)."""
        if kernel == "cusparse":
            return self._cusparse_op().bind(B, out, accumulate=accumulate)
        if kernel == "csr-rows":
            return self._csr_rows_op().bind(B, out if out is not None else self._out(int(B.shape[1]), kernel),
                                            accumulate=accumulate)
        choice = choice if choice is not None else self.choices.get(int(B.shape[1]), {})
        ops = ops or self._ops_for(kernel, choice)
        if hasattr(ops, "bind"):
            return ops.bind(kernel, B, out, accumulate=accumulate, ksplit=ksplit, choice=choice)
        return _Unbound(ops, kernel, B, out, accumulate, ksplit, choice)

    def _device_b(self, B):
        """B on the device in the precision's storage dtype, C-contiguous (converted when it is not already)."""
        import cupy

        prec = self.precision
        B = cupy.asarray(B)  # host or device; a storage-dtype B (bfloat16: uint16 bits) is taken as it is
        if B.dtype == prec.storage_dtype:
            return cupy.ascontiguousarray(B)
        return cupy.ascontiguousarray(prec.to_storage(B))

    # ----- public -----
    def run(self, B, out=None, *, kernel: str | None = None, accumulate: bool = False):
        """C = A @ B. NumPy B -> NumPy C; CuPy B -> CuPy C (on the GPU path). B in any float dtype (converted to
        the precision when it is not already in it); C in ``out_dtype`` (bfloat16: uint16 bits). `kernel`
        overrides the choice. ``accumulate``: out += A @ B (out required; on the GPU without an extra pass over
        C), for a product split over A's columns, e.g. a resident shard's own and halo columns."""
        key = None
        if out is not None:  # the per-call path: these buffers were checked and their launch bound before
            try:
                key = (B.data.ptr, B.shape, B.strides, B.dtype, out.data.ptr, out.shape, out.strides, out.dtype,
                       accumulate, kernel)
            except AttributeError:  # NumPy B or out (a memoryview has no ptr), or the CPU path
                key = None
            else:
                call = self._calls.get(key)
                if call is not None:
                    self.choice = call.choice
                    return call()
        if accumulate and out is None:
            raise ValueError("accumulate=True adds A @ B to out: pass out")
        if self.device == "cpu":
            return self._run_cpu(B, out, accumulate)
        import cupy

        on_host = not isinstance(B, cupy.ndarray)
        Bd = self._device_b(B)
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
        if kernel == "cusparse" and self.out_dtype != self.precision.storage_dtype:  # cuSPARSE writes B's type
            C = self._launch(kernel, Bd, None).astype(self.out_dtype)  # (not bound: a cast per call)
            if dev_out is not None:
                C = cupy.add(dev_out, C, out=dev_out) if accumulate else cupy.copyto(dev_out, C) or dev_out
        elif key is not None and Bd.data.ptr == B.data.ptr and Bd.dtype == B.dtype:  # B needed no conversion
            call = _Call(self._bind(kernel, Bd, dev_out, accumulate), out, self.choice, self._graphs)
            if len(self._calls) >= MAX_BOUND_CALLS:  # the oldest goes (it holds its B and out alive)
                self._calls.pop(next(iter(self._calls)))
            self._calls[key] = call
            return call()
        else:
            C = self._launch(kernel, Bd, dev_out, accumulate and dev_out is not None)
        if vector:
            C = C.reshape(-1)
        if on_host:
            return _into_host(cupy.asnumpy(C), out, accumulate)  # synchronize!
        return C

    def _run_cpu(self, B, out, accumulate: bool):
        prec = self.precision
        Bh = np.asarray(B)
        if not prec.half:  # float32: the multithreaded float32 CSR product (kernels.cpu_spmm; no TF32 emulation)
            if getattr(self, "_cpu", None) is None:  # built on the first CPU run: A's CSR once, float32 values
                from kernels.cpu_spmm import CpuCsr

                self._cpu = CpuCsr(self._csr if self._csr is not None else _format_to_csr(self._host))
            if out is not None and not accumulate and isinstance(out, np.ndarray) and \
                    out.dtype == np.float32 and out.flags.c_contiguous:
                return self._cpu.run(Bh, out)
            return _into_host(self._cpu.run(Bh), out, accumulate)
        # half: the float64 reference on what the kernels read, B rounded to the precision (exact when stored so)
        B64 = prec.to_float32(Bh).astype(np.float64) if Bh.dtype == prec.storage_dtype else prec.rounded(Bh)
        C = self._reference(self._host, B64, prec)
        C = C.astype(np.float32)
        if self.out_dtype != np.dtype(np.float32):
            C = prec.to_storage(C)
        return _into_host(C, out, accumulate)

    @property
    def graphs(self) -> bool:
        """Automatic CUDA-graph replay of repeated ``run`` calls on the same buffers (default True)."""
        return self._graphs

    @graphs.setter
    def graphs(self, on: bool) -> None:
        self._graphs = bool(on)
        self._calls.clear()

    def release(self) -> None:
        """Drop the bound calls (and the B and out arrays, graphs and cuSPARSE descriptors they hold)."""
        self._calls.clear()

    def capture(self, B, out):
        """A CUDA graph of ``out = A @ B`` with the kernel chosen for B's N (decided, and autotuned, first): for
        iterative callers (a GNN layer, a solver) that refill the same B and read the same out, replaying it
        skips the host launch path. B and out: C-contiguous cupy arrays in the plan's dtypes that must outlive
        the graph. Returns a callable ``replay(stream=None)`` (on the current stream by default)."""
        import cupy

        if self.device == "cpu":
            raise RuntimeError("capture needs the GPU path (this plan runs the CPU reference)")
        if not isinstance(B, cupy.ndarray) or not isinstance(out, cupy.ndarray):
            raise TypeError("capture takes cupy arrays B and out (the graph holds their addresses)")
        if B.dtype != self.precision.storage_dtype or out.dtype != self.out_dtype:
            raise TypeError(f"capture takes B in {self.precision.storage_dtype} and out in {self.out_dtype} "
                            f"(got {B.dtype}, {out.dtype}): a conversion inside the graph would read a copy")
        self.run(B, out)  # decides for this N, builds workspaces and cuSPARSE buffers outside the capture
        kernel = self.choices[int(B.shape[1])]["kernel"]
        if kernel == "cusparse" and out.dtype != self.precision.storage_dtype:
            raise TypeError("capture of the cuSPARSE path needs out in the precision's dtype")
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
        """Median ms over `repeats` timed runs (CUDA graph replay on the GPU) after `warmup`; host timer on the
        CPU path."""
        if self.device == "cpu":
            for _ in range(warmup):
                self.run(B)
            ts = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                self.run(B)
                ts.append((time.perf_counter() - t0) * 1e3)
            return {"kernel": self.choice["kernel"], "median_ms": float(np.median(ts)), "repeats": repeats}
        Bd = self._device_b(B)
        N = int(Bd.shape[1])
        self.run(Bd)  # decides (and autotunes) for this N
        k = kernel or self.choices[N]["kernel"]
        ms = self._time(k, Bd, repeats=repeats, warmup=warmup, how="graph")
        return {"kernel": k, "median_ms": ms, "repeats": repeats, "N": N,
                "gflops": 2.0 * self.nnz * N / (ms * 1e-3) / 1e9}


def _format_to_csr(obj):
    """CSR of a converted object of a registered format (its ``Format.to_csr``)."""
    from kernels.formats.registry import get

    return get(obj.format_name).to_csr(obj)


AUTO_GRAPH_AFTER = 3  # run replays a captured graph from the 3rd call on the same buffers: one capture (~20-50 us)
# pays back after a few calls (a replay costs ~2 us of host time against ~4 us for the bare launch on the H200),
# while a one-off call on fresh buffers never captures
MAX_BOUND_CALLS = 8  # bound (B, out) pairs a plan keeps (each holds its B and out alive): a GNN layer's forward and
# backward buffers, a solver's few vectors


class _Call:
    """One bound call of ``run`` on fixed buffers: the lean launch, then (``graphs``) a CUDA graph of it replayed
    on the caller's current stream. Inside a caller's own stream capture it launches (a graph launch is not
    permitted there: cudaErrorStreamCaptureUnsupported, seen on the H200), so the caller's graph records the
    kernels themselves."""

    __slots__ = ("bound", "ret", "choice", "graphs", "calls", "graph")

    def __init__(self, bound, ret, choice, graphs: bool):
        self.bound, self.ret, self.choice, self.graphs, self.calls, self.graph = bound, ret, choice, graphs, 0, None

    def __call__(self):
        stream = _current_stream()
        if self.graph is not None:
            if stream.is_capturing():
                self.bound(stream.ptr)
            else:
                self.graph.launch(stream)
            return self.ret
        self.calls += 1
        if self.graphs and self.calls >= AUTO_GRAPH_AFTER and not stream.is_capturing():
            self.graph = self._capture()
            if self.graph is not None:
                self.graph.launch(stream)
                return self.ret
        self.bound(stream.ptr)
        return self.ret

    def _capture(self):
        """The bound launch captured on a private stream; None (and no more tries) if it cannot be captured."""
        import cupy

        side = cupy.cuda.Stream(non_blocking=True)
        try:
            with side:  # current too: a format without bind launches on the current stream (_Unbound)
                side.begin_capture()
                try:
                    self.bound(side.ptr)
                finally:
                    graph = side.end_capture()
            return graph
        except Exception:  # a launch that allocates or synchronizes: keep launching it directly
            self.graphs = False
            return None


class _Unbound:
    """A format without ``bind`` (its device operator has only ``launch``): the same interface, launching per call
    on the current stream, which is the stream it is given (_Call passes the current one and makes its capture
    stream current)."""

    def __init__(self, ops, kernel, B, out, accumulate, ksplit, choice):
        self.ops, self.kernel, self.B, self.out = ops, kernel, B, out
        self.kw = {"accumulate": accumulate, "ksplit": ksplit, "choice": choice}

    def set_io(self, B, out) -> None:
        self.B, self.out = B, out

    def __call__(self, stream_ptr: int):
        return self.ops.launch(self.kernel, self.B, self.out, **self.kw)


def _current_stream():
    import cupy

    global _current_stream
    _current_stream = cupy.cuda.get_current_stream  # bound once
    return _current_stream()


def _into_host(C: np.ndarray, out, accumulate: bool):
    if out is None:
        return C
    if accumulate:
        out += C.reshape(out.shape)
    else:
        out[...] = C.reshape(out.shape)
    return out


def spmm(A, B, **kw):
    """C = A @ B through a one-shot SpmmPlan (kw as SpmmPlan's)."""
    return SpmmPlan(A, **kw).run(B)
