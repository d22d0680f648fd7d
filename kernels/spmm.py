"""Public SpMM: `SpmmPlan(A, dtype=..., format=...)` converts, uploads, compiles and selects once; `plan.run(B)`
per call; `spmm(A, B)` wraps both. Without CuPy or a GPU the plan takes the CPU path (kernels.cpu_path).

Formats come from the registry (``kernels.formats``): ``format=`` any registered name, ``"hybrid"``
(``kernels.hybrid``: dense 16-row windows on a Tensor Core format, the other rows on the CUDA-core CSR kernel, split
by the cost model) or ``"auto"``, the default (``configs.names.DEFAULT_FORMAT``): the formats that support the
precision, and the hybrid, ranked by their cost estimates from A's structure statistics
(``kernels.formats.ranking``); the first ``auto_candidates`` (default 2, one of them always
``configs.names.BASE_FORMAT``) are built and timed, and the fastest measured wins (the base format's build and its
fallbacks' start on background threads beside the statistics where the device has room for the builds at once,
`CONCURRENT_BUILD_BYTES_PER_NNZ`; every build ends before anything is timed); on the CPU path "auto" runs the
base format's NumPy twin. Precisions (``kernels.precision``): float32 (TF32 Tensor
Cores, m16n8k8), float16 and bfloat16 (m16n8k16, FP32 accumulation; bfloat16 values travel as uint16 bit
patterns: NumPy and CuPy have no bfloat16 dtype).

The plan holds device operators under one contract (``kernels.formats.contract``): each candidate format's, plus
the baselines of kernels.baselines (cuSPARSE, a candidate of a plan that need not be deterministic; the CUDA-core
CSR kernel, timed against the choice of a format whose record lists it in ``fallbacks``). It names no kernel: a
kernel's operator is the one that lists it. Each format's operator decides per N (cost model and/or timing the
candidates once on the first B of each N); `plan.choice` holds the last decision (a `Choice`: format, kernel,
reason, predicted and measured ms), `plan.choices[N]` every one. Repeated calls on the same buffers go through the
call cache (kernels.calls: a bound launch, then a replayed CUDA graph).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from configs.errors import InputError
from configs.names import BASE_FORMAT, DEFAULT_FORMAT
from kernels import launch
from kernels.baselines import BASELINES
from kernels.calls import (AUTO_GRAPH_AFTER, MAX_BOUND_CALLS, Call, bind,  # noqa: F401 (AUTO_GRAPH_AFTER:
                           capture, retire)  # re-exported)
from kernels.choice import decide
from kernels.cpu_path import CpuPath, into_host
from kernels.formats.contract import Choice
from kernels.formats.ranking import AUTO_CANDIDATES, check_candidates
from kernels.formats.ranking import select as select_formats
from kernels.formats.registry import REGISTRY
from kernels.hybrid import plan_candidates as format_candidates
from kernels.hybrid import plan_record
from kernels.precision import API_FIX, check_range
from kernels.precision import precision as as_precision


# device memory per nonzero of A that an `auto` plan's concurrent builds may take at once (ME-TCF's GPU conversion
# ~60 bytes of temporaries a nonzero, CVSE's or the hybrid's beside it, the CSR fallback's upload ~16): with less
# free, its builds run one after another, as before session 40, and peak at the largest one's
CONCURRENT_BUILD_BYTES_PER_NNZ = 256


def gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, no device
        return False


class SpmmPlan:
    ranking = None  # format="auto" on a GPU: the ranking's record (kernels.formats.ranking.select), else None
    _choice = None  # the last decision; None until a run, or a read of `choice`, makes one

    def __init__(self, A, *, device="auto", dtype=np.float32, format=DEFAULT_FORMAT, balance="auto", autotune="auto",
                 config=None, calibration=None, out_dtype=None, deterministic: bool = True,
                 graphs: bool = True, allow_overflow: bool = False, auto_candidates: int = AUTO_CANDIDATES):
        """``A``: a SciPy sparse matrix (any format) or an already converted object of a registered format (its
        ``format_name`` names it; block width matching the precision). ``out_dtype``: C's dtype, default the
        precision's (float32 for TF32); half plans may ask for float32 C. ``format``: a registered name or "auto".
        ``config``: the format's kernel configuration (None: its default). ``deterministic`` (default): two runs on
        the same B give bitwise-equal C, so only our kernels (no atomics, fixed reduction orders) are chosen;
        False also lets the choice fall to cuSPARSE, whose CSR SpMM is not bitwise repeatable. ``graphs``
        (default): from the AUTO_GRAPH_AFTER-th ``run`` on the same cupy B and out, replay a CUDA graph of the call
        instead of launching it (``plan.graphs = False`` opts out; the lean launch stays). ``allow_overflow``:
        float16 refuses a SciPy A with values beyond its range (|a| > 65504, or more than 1% of them below its
        smallest subnormal) with InputError, as the CLI does, unless this is True; ``range`` holds the counts
        (``kernels.precision.check_range``). ``auto_candidates``: with format="auto" on a GPU, how many formats
        are built and timed, the first by cost estimate (``kernels.formats.ranking.select``; a format that another
        one times as its fallback takes no place); all of them when it is at least their count. ``plan.ranking``
        (also each choice's "format_ranking") holds the estimates, what was built and the statistics' time."""
        self.precision = as_precision(dtype)
        check_candidates(auto_candidates)
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
        self.deterministic, self._graphs = bool(deterministic), bool(graphs)
        self._calls: dict = {}  # (B and out pointer, shape, strides, dtype; accumulate; kernel) -> kernels.calls.Call
        self._csr, self._given = (None if given else sp.csr_array(A)), A
        use_gpu = device == "gpu" or (device == "auto" and gpu_available())
        if device == "gpu" and not gpu_available():
            raise RuntimeError("device='gpu' but CuPy or a CUDA device is not available")
        self.device = "gpu" if use_gpu else "cpu"
        self.choices: dict[int, Choice] = {}
        self.timings: dict = {}
        if not use_gpu:  # "auto" there: the base format's twin (nothing is timed on the CPU path)
            fmt = next((f for f in self.formats if f.name == BASE_FORMAT), self.formats[0])
            self._cpu = CpuPath(fmt, self.precision, self.out_dtype, self._csr, A if given else None)
            self._choice = self._cpu.choice
            return
        self.formats = gpu_ready(self.formats, given or format)
        self.autotune = autotune if autotune == "auto" else bool(autotune)
        self._op_kw = {"balance": balance, "autotune": autotune, "allow_cusparse": not self.deterministic}

        def build(f):
            return f.device_class()(A if given else self._csr, self.precision, config, calibration, **self._op_kw)

        self._by_kernel: dict = {}
        # builds at once (their temporaries on the device together) only with room for them, else one by one
        concurrent = launch.free_device_bytes() >= CONCURRENT_BUILD_BYTES_PER_NNZ * self.nnz
        early, prepared = {}, {}  # format name -> Future of its operator; kernel -> Future of its `prepare`
        try:
            if not given and format == "auto":  # build only the formats the cost estimates rank first
                anchor = next((f for f in self.formats if f.name == BASE_FORMAT), None)
                if anchor is not None and 2 <= auto_candidates < len(self.formats) and concurrent:
                    # kept whatever the ranking says: it and its fallbacks built beside the statistics, which
                    # count without the GIL
                    early[anchor.name] = launch.in_background("plan-build", build, anchor)
                    self._prepare(anchor.fallbacks, prepared)
                self.formats, self.ranking = select_formats(self._csr, self.formats, self.precision.name,
                                                            auto_candidates, anchor=BASE_FORMAT)
                self.timings["format_ranking_s"] = self.ranking.get("ranking_s", 0.0)
            # fallback kernels of the formats' records, unless a candidate format runs them already ("auto");
            # timed against a timed choice, so their operators' builds (`prepare`) start now, beside the formats'
            self._fallbacks = sorted({k for f in self.formats for k in f.fallbacks}
                                     - {k for f in self.formats for k in f.device_class().kernels})
            if concurrent:
                self._prepare(self._fallbacks, prepared)
            built = {f.name: build(f) for f in self.formats if f.name not in early}  # while the early ones go on
            self._ops = {f.name: built[f.name] if f.name in built else early.pop(f.name).result()
                         for f in self.formats}
        finally:  # none of this plan's builds left running, so none beside a timing (a prepared one's error: on
            # its first use)
            for future in (*early.values(), *filter(None, prepared.values())):
                future.exception()
        for name, ops in self._ops.items():
            self.timings.update(ops.timings if len(self._ops) == 1 else {f"{name}:{k}": v
                                                                        for k, v in ops.timings.items()})
        baselines = [cls(self._csr_of, self.precision) for cls in BASELINES]
        self._by_kernel.update({k: op for op in (*self._ops.values(), *baselines) for k in op.kernels})

    def _prepare(self, kernels, prepared: dict) -> None:
        """``kernels``' operators' ``prepare`` (the contract's optional build on a background thread) started once
        each, their Futures into ``prepared``; not when autotune is off (nothing is timed against a choice then): an
        operator without it (or then, or where the device has no room for concurrent builds) is built on first
        use."""
        if self.autotune is False:
            return
        for kernel in kernels:
            if kernel in prepared:
                continue
            owner = _owner(kernel)
            if owner is not None and hasattr(owner.device_class(), "prepare"):
                prepared[kernel] = self._op(kernel, owner).prepare()

    @property
    def choice(self) -> Choice:
        """The last decision; before the first run, the a-priori choice for N = 128 (each format's cost model,
        nothing timed), made on first read: a plan that runs first never makes it (on a 1M-nonzero `auto` plan it
        took 0.01 s of the build, two ME-TCF schedule simulations, on the H200)."""
        if self._choice is None:
            self._choice = decide(self, 128, None)
        return self._choice

    @property
    def kernels(self) -> tuple[str, ...]:
        """Every kernel this plan can run (``run(kernel=...)``): its formats' and baselines', and the fallbacks
        its formats' records list."""
        return tuple(sorted({*self._by_kernel, *self._fallbacks})) if self.device == "gpu" else ()

    @property
    def config(self):
        """The kernel configuration of the (first) format's device operator (it may fall back, e.g. to bitmap A)."""
        return next(iter(self._ops.values())).config

    def _csr_of(self):
        """A as SciPy CSR (the baselines' input): as given, or the inverse conversion of a converted object, on the
        GPU where its format has one (kept: the candidates and fallbacks built later take the same)."""
        if self._csr is None:
            record = plan_record(self._given.format_name)
            self._csr = (getattr(record, "to_csr_device", None) or record.to_csr)(self._given)
        return self._csr

    def _op(self, kernel: str, owner=None):
        """The device operator that runs ``kernel``: this plan's, else the registered format's whose operator lists
        it (a fallback, or ``run(kernel=...)``; ``owner``: that format where the caller looked it up), built on
        first use on A's CSR."""
        op = self._by_kernel.get(kernel)
        if op is None:
            owner = owner or _owner(kernel)
            if owner is None:
                raise ValueError(f"kernel {kernel!r} belongs to none of this plan's operators nor a registered "
                                 f"format's; known here: {', '.join(sorted(self._by_kernel))}")
            op = owner.device_class()(self._csr_of(), self.precision, None, None, **self._op_kw)
            self._by_kernel.update({k: op for k in op.kernels})
        return op

    def _launch(self, kernel: str, B, out, accumulate: bool = False, ksplit: int | None = None, *, choice=None):
        return self._issue("launch", kernel, B, out, accumulate, ksplit, choice)

    def _bind(self, kernel: str, B, out, accumulate: bool, *, ksplit: int | None = None, choice=None):
        """``kernel``'s launch on these B and out, checked and packed once: ``bound(stream_ptr)`` issues it,
        ``bound.out`` is C (the operator's ``bind``)."""
        return self._issue("bind", kernel, B, out, accumulate, ksplit, choice)

    def _issue(self, how: str, kernel: str, B, out, accumulate: bool, ksplit, choice):
        """The operator's ``launch`` or ``bind`` of ``kernel``; out None: C in the plan's out_dtype (the
        launchers' own default is float32), or the operator's; choice None: the one for B's N."""
        out = self._out(int(B.shape[1]), kernel) if out is None else out
        choice = choice if choice is not None else self.choices.get(int(B.shape[1]), {})
        return getattr(self._op(kernel), how)(kernel, B, out, accumulate=accumulate, ksplit=ksplit, choice=choice)

    def _out(self, N: int, kernel: str):
        import cupy

        dtype = self._op(kernel).out_dtype
        return cupy.empty((self.shape[0], N), dtype=self.out_dtype if dtype is None else dtype)

    def _time(self, kernel: str, B, *, repeats: int = launch.TUNE_REPEATS, warmup: int = launch.TUNE_WARMUP,
              target_ms: float = launch.TUNE_TARGET_MS, ksplit: int | None = None, choice=None,
              how: str | None = None, best_ms: float | None = None) -> float:
        """Milliseconds per call of one candidate through its bound launch (the path ``run`` takes;
        `kernels.launch.time_bound`), on the autotune budget unless given another; ``best_ms``: the best candidate
        timed so far (a far slower one is not timed further)."""
        bound = self._bind(kernel, B, self._out(int(B.shape[1]), kernel), False, ksplit=ksplit, choice=choice)
        how = how or ("graph" if self._graphs else "issued")
        timed = getattr(self._op(kernel), "timed_ms", None)  # measured the same way already (the contract)
        if timed is not None and how == "graph" and (repeats, warmup, target_ms) == \
                (launch.TUNE_REPEATS, launch.TUNE_WARMUP, launch.TUNE_TARGET_MS):
            ms = timed(kernel, int(B.shape[1]), bound.out.dtype)
            if ms is not None:
                return ms
        return launch.time_bound(bound, how, repeats, warmup, target_ms, best_ms)

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
                    self._choice = call.choice
                    return call()
        if accumulate and out is None:
            raise ValueError("accumulate=True adds A @ B to out: pass out")
        if self.device == "cpu":
            return self._cpu.run(B, out, accumulate)
        import cupy

        on_host = not isinstance(B, cupy.ndarray)
        Bd = self._device_b(B)
        vector = Bd.ndim == 1
        if vector:
            Bd = Bd.reshape(-1, 1)
        if Bd.ndim != 2 or Bd.shape[0] != self.shape[1]:
            raise ValueError(f"B has shape {tuple(B.shape)}, expected ({self.shape[1]}, N) or ({self.shape[1]},)")
        N = int(Bd.shape[1])
        kernel = kernel or self._kernel_for(N, Bd)
        dev_out = None
        if out is not None and not on_host:
            dev_out = out.reshape(self.shape[0], N) if vector else out
        op_dtype = self._op(kernel).out_dtype
        if op_dtype is not None and op_dtype != self.out_dtype:  # an operator writing its own type (cuSPARSE: B's)
            C = self._launch(kernel, Bd, None).astype(self.out_dtype)  # (not bound: a cast per call)
            if dev_out is not None:
                C = cupy.add(dev_out, C, out=dev_out) if accumulate else cupy.copyto(dev_out, C) or dev_out
        elif key is not None and Bd.data.ptr == B.data.ptr and Bd.dtype == B.dtype:  # B needed no conversion
            call = Call(self._bind(kernel, Bd, dev_out, accumulate), out, self.choice, self._graphs)
            if len(self._calls) >= MAX_BOUND_CALLS:  # the oldest goes (it holds its B and out alive)
                retire(self._calls.pop(next(iter(self._calls))))
            self._calls[key] = call
            return call()
        else:
            C = self._launch(kernel, Bd, dev_out, accumulate and dev_out is not None)
        if vector:
            C = C.reshape(-1)
        if on_host:
            return into_host(cupy.asnumpy(C), out, accumulate)  # synchronize!
        return C

    def _kernel_for(self, N: int, B) -> str:
        """The kernel chosen for N, decided (and autotuned on B) on the first call with that N; it becomes
        ``plan.choice``."""
        if N not in self.choices:
            self.choices[N] = decide(self, N, B)
        self._choice = self.choices[N]
        return self._choice["kernel"]

    def bind(self, B, out, *, kernel: str | None = None, accumulate: bool = False):
        """out (=, or += with ``accumulate``) A @ B as a call the caller keeps: ``call()`` launches it on the current
        stream and returns out; ``call.set_io(B2, out2)`` re-points it at other buffers of the same shapes and
        dtypes without checking or binding again (kernels.calls). The kernel is the one chosen for B's N (decided,
        and autotuned on B, here when N is new: B must hold data ready on the current stream), or ``kernel``. GPU:
        B a C-contiguous cupy array in the precision's storage dtype, out C-contiguous in ``out_dtype`` (the
        operator checks both once, here); CPU path: NumPy arrays, a `kernels.cpu_path.CpuCall`."""
        return bind(self, B, out, kernel, accumulate)

    @property
    def graphs(self) -> bool:
        """Automatic CUDA-graph replay of repeated ``run`` calls on the same buffers (default True)."""
        return self._graphs

    @graphs.setter
    def graphs(self, on: bool) -> None:
        self._graphs = bool(on)
        self.release()

    def release(self) -> None:
        """Drop the bound calls (and the B and out arrays, graphs and cuSPARSE descriptors they hold; inside a
        stream capture they are freed after it: kernels.calls.retire)."""
        if self._calls and self.device == "gpu":
            retire(list(self._calls.values()))
        self._calls.clear()

    def capture(self, B, out):
        """A CUDA graph of ``out = A @ B`` with the kernel chosen for B's N (decided, and autotuned, first): for
        iterative callers (a GNN layer, a solver) that refill the same B and read the same out, replaying it
        skips the host launch path. B and out: C-contiguous cupy arrays in the plan's dtypes that must outlive
        the graph. Returns a callable ``replay(stream=None)`` (on the current stream by default)."""
        return capture(self, B, out)

    def benchmark(self, B, repeats: int = 20, warmup: int = 5, *, kernel: str | None = None) -> dict:
        """Median ms over `repeats` timed runs (CUDA graph replay on the GPU) after `warmup`; host timer on the
        CPU path."""
        if self.device == "cpu":
            return self._cpu.benchmark(B, repeats, warmup)
        Bd = self._device_b(B)
        N = int(Bd.shape[1])
        self.run(Bd)  # decides (and autotunes) for this N
        k = kernel or self.choices[N]["kernel"]
        ms = self._time(k, Bd, repeats=repeats, warmup=warmup, target_ms=launch.TARGET_MS, how="graph")
        return {"kernel": k, "median_ms": ms, "repeats": repeats, "N": N,
                "gflops": 2.0 * self.nnz * N / (ms * 1e-3) / 1e9}


def _owner(kernel: str):
    """The registered format whose device operator lists ``kernel``, or None."""
    return next((f for f in REGISTRY.values() if kernel in f.device_class().kernels), None)


def gpu_ready(formats: list, asked: str) -> list:
    """Formats whose GPU kernels have not passed their GPU tests: out of "auto", refused by name."""
    unready = [f for f in formats if not f.gpu_ready]
    if unready and asked != "auto":
        raise InputError(f"format {unready[0].name}: no GPU path yet, {unready[0].gpu_not_ready_why}; run it "
                         "with device='cpu' (--devices cpu) or choose another format")
    return [f for f in formats if f.gpu_ready]


def spmm(A, B, **kw):
    """C = A @ B through a one-shot SpmmPlan (kw as SpmmPlan's)."""
    return SpmmPlan(A, **kw).run(B)
