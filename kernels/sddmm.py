"""Public SDDMM, next to `kernels.spmm.SpmmPlan`: ``out = (A @ B^T) (.) S`` sampled at a sparse S (M x K), with
A [M, Kd] and B [K, Kd] dense. `SddmmPlan(S, dtype=..., format=...)` converts and uploads once; `plan.run(A, B)` per
call returns the M x K result's values in S's canonical CSR order (float32, [nnz]); `sddmm(S, A, B)` wraps both
and returns a SciPy CSR with S's pattern (what GAT-style attention logits need).

Precision contract (README "Precision"): A, B and S's values are rounded to the precision (TF32 for float32,
float16, bfloat16), products are exact in fp32 and summed in fp32; out is float32.

Formats and routes come from the registry (``kernels.formats.sddmm_formats``): a format that computes SDDMM gives
its `Format` record an SDDMM operator (``Format.sddmm``, the ``kernels.formats.contract.SddmmOperator`` Protocol),
and no code here names one. ``format=`` is one of those formats (by default the one whose route runs on S's CSR
as it is, ``on_csr``; today ``"csr"``, S as it is, and ``"cvse"``, S compressed into V x 1 vectors by SSpMM's
Sparse Vector Compression, or ``vector=V``): the plan prepares S in it once, and its float64 twin is the CPU
path. Each operator is one route (``"cvse"``: the Tensor Core kernel, kernels/formats/cvse/sddmm.py; ``"csr"``:
the CUDA-core kernel, one dot product per nonzero, kernels/formats/csr/sddmm.py, a candidate once its
``GPU_READY``); cuSPARSE SDDMM is one more route, not a format
(``"cusparse"``, `CusparseRoute`: float32 on the precision-rounded inputs, then x S when S's values are not all
one), as cuSPARSE is one more operator of `SpmmPlan`.

Kernels (routes): on a GPU a plan builds each route it may take (its format's route, the routes that run on S's CSR
as it is, ``on_csr``, then cuSPARSE; a route only while its format and its operator are ``gpu_ready``), and the
first ``run`` with a new Kd times them as issued and keeps the fastest for that Kd (``plan.choices``,
``plan.timings``; cuSPARSE only when clearly faster than our fastest, ``CUSPARSE_MARGIN``). Why no single rule:
the CVSE kernel computes V = 8 rows per vector, so its work is the vectors' padding; on power-law and community
graphs of 1-2M nonzeros (8-row vector density 0.13) at Kd = 64 cuSPARSE's per-nonzero kernel took 0.54 ms against
0.96 (R-MAT scale 17, H100), while at Kd = 256, and on small or meshed graphs at the same density, the CVSE kernel
won by 1.3-4x (benchmarks/results/sddmm-*-2026-11-27.json): the crossing depends on size, locality and Kd, which a
measurement settles. ``kernel=`` a route name fixes it (refused in one line where its format or its kernel is not
GPU-ready, or where it needs the plan's format to be its own). Each route gives the same bits on every call.
Without CuPy or a GPU (or ``device="cpu"``) the plan runs the format's float64 NumPy twin on the rounded inputs
("cpu-reference").
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from configs.errors import InputError
from kernels import launch, spmm
from kernels.baselines import CusparseOperator
from kernels.calls import MAX_BOUND_CALLS, Call, retire
from kernels.cusparse_sddmm import CusparseSddmm
from kernels.formats import sddmm_formats
from kernels.precision import precision as as_precision
from kernels.reference import csr_sddmm  # the float64 twin on CSR, re-exported (kernels.sddmm.csr_sddmm)
from kernels.reference import sddmm_scale

__all__ = ["CUSPARSE", "CUSPARSE_MARGIN", "CusparseRoute", "SddmmPlan", "csr_sddmm", "route_names", "sddmm"]
CUSPARSE = "cusparse"
# "auto" takes the cuSPARSE route only when it times below this fraction of our fastest kernel's: where both are
# host-bound (~0.05 ms as issued) the timings are noise, and one such timing put R-MAT scale 13 at Kd = 64 on
# cuSPARSE at 0.088 ms where the CVSE kernel runs in 0.048 (H100, 2026-11-27)
CUSPARSE_MARGIN = 0.9
# format= by default: the registered format whose SDDMM runs on S's CSR as it is (today "csr")
_DEFAULT_FORMAT = next(f.name for f in sddmm_formats() if f.sddmm.on_csr)


class CusparseRoute:
    """cuSPARSE SDDMM, a route of every GPU plan (not a format: kernels.cusparse_sddmm on S's CSR arrays), with the
    run(A, B, out) of a format's ``SddmmDevice``: cuSPARSE reads float32, so the precision's values (TF32-rounded,
    or the 16-bit values widened) in float32 copies, then x S where S's values are not all one (``scale``:
    `sddmm_scale` of S, which the plan computes once for every route on S's CSR)."""

    route = CUSPARSE
    format_name = CusparseOperator.format_name  # the arrays it runs on (a choice's "format"): cuSPARSE's, as in SpMM
    description = "cuSPARSE SDDMM (float32 on precision-rounded inputs)"

    def __init__(self, S: sp.csr_array, precision, scale: np.ndarray | None):
        import cupy

        self._op = CusparseSddmm(S.indptr, S.indices, tuple(S.shape))
        # scale None: x S skipped for unit values (attention patterns, the benchmark's)
        self._s = None if scale is None else cupy.asarray(scale)
        self._rnd = launch.tf32_round if precision.name == "float32" else precision.to_float32
        self._contiguous = cupy.ascontiguousarray

    def run(self, A, B, out=None):
        vals = self._op.run(self._contiguous(self._rnd(A)), self._contiguous(self._rnd(B)), out)
        if self._s is not None:
            vals *= self._s
        return vals


def route_names(formats=None) -> dict[str, str]:
    """Route -> what runs, in the registry's order then cuSPARSE: every name ``kernel=`` takes besides "auto"."""
    formats = sddmm_formats() if formats is None else formats
    names = {}
    for f in formats:
        if f.sddmm.route in names or f.sddmm.route == CUSPARSE:
            raise ValueError(f"SDDMM route {f.sddmm.route!r} of format {f.name!r} is taken by another route")
        names[f.sddmm.route] = f.sddmm.description
    names[CUSPARSE] = CusparseRoute.description
    return names


def _refusal(f, fmt, formats) -> str | None:
    """Why ``kernel=`` format ``f``'s route cannot run on a GPU plan of format ``fmt`` (None: it can, and "auto"
    takes it)."""
    op = f.sddmm
    if not f.gpu_ready:
        return f"kernel {op.route}: no GPU path yet, {f.gpu_not_ready_why}; use kernel='cusparse' or device='cpu'"
    if not op.on_csr and f.name != fmt.name:
        return f"kernel {op.route} needs format={f.name!r}"
    if not op.gpu_ready:
        others = [repr(g.sddmm.route) for g in formats if g.name != f.name]
        return f"kernel {op.route}: {op.gpu_not_ready_why}; use kernel=" + " or ".join([repr(CUSPARSE), *others])
    return None


def _canonical(S) -> sp.csr_array:
    if not sp.issparse(S):
        raise TypeError(f"S must be a SciPy sparse matrix, got {type(S).__name__}")
    S = sp.csr_array(S, dtype=np.float32)
    if not S.has_canonical_format:
        S = S.copy()
        S.sum_duplicates()
    return S


class SddmmPlan:
    def __init__(self, S, *, dtype="float32", format: str = _DEFAULT_FORMAT, vector: int | None = None,
                 device: str = "auto", kernel: str = "auto"):
        self.precision = p = as_precision(dtype)
        formats = sddmm_formats()  # the registered formats with an SDDMM operator: each one route
        fmt = next((f for f in formats if f.name == format), None)
        if fmt is None:
            raise InputError(f"SDDMM format {format!r} is not supported; choose one of "
                             f"{', '.join(sorted(f.name for f in formats))}")
        if device not in ("auto", "gpu", "cpu"):
            raise ValueError(f"device is {device!r}, expected 'auto', 'gpu' or 'cpu'")
        names = route_names(formats)
        if kernel not in ("auto", *names):
            raise ValueError(f"kernel is {kernel!r}, expected 'auto', {', '.join(map(repr, names))}")
        S = _canonical(S)
        self.shape, self.nnz, self.format = tuple(int(s) for s in S.shape), int(S.nnz), format
        # S's values as the precision holds them (TF32 for float32), the contract of the module docstring
        self._S = sp.csr_array((p.rounded(S.data).astype(np.float32), S.indices, S.indptr), shape=S.shape)
        # S in the plan's format, once (CVSE: compressed, self.svc the report), and its float64 twin (the CPU path)
        self._host, self.svc = fmt.sddmm.prepare(self._S, p, vector=vector)
        self._twin = fmt.sddmm.twin
        use_gpu = device == "gpu" or (device == "auto" and spmm.gpu_available())
        if device == "gpu" and not spmm.gpu_available():
            raise RuntimeError("device='gpu' but CuPy or a CUDA device is not available")
        self.device = "gpu" if use_gpu else "cpu"
        self._calls: dict = {}  # GPU: (A, B and out pointer, shape, strides, dtype) -> SddmmCall
        if not use_gpu:
            self.choice = {"kernel": "cpu-reference", "format": format, "precision": p.name,
                           "reason": f"no CuPy/CUDA device (or device='cpu'): the {format} NumPy twin in float64 on "
                                     f"{p.name}-rounded inputs"}
            return
        self._by_route = by_route = {f.sddmm.route: f for f in formats}
        if kernel == "auto":  # every route this plan can run, timed per Kd: its format's first, cuSPARSE last
            routes = [f.sddmm.route for f in (fmt, *(f for f in formats if f.name != format))
                      if _refusal(f, fmt, formats) is None]
            routes.append(CUSPARSE)
        else:
            why = None if kernel == CUSPARSE else _refusal(by_route[kernel], fmt, formats)
            if why:
                raise InputError(why)
            routes = [kernel]
        self.routes = tuple(routes)
        self.kernel = kernel if len(routes) > 1 else routes[0]  # "auto" (timed per Kd: self.choices) or the route
        self._dev: dict = {}  # route -> its device form (run(A, B, out))
        on_csr = {r for r in routes if r == CUSPARSE or by_route[r].sddmm.on_csr}  # the routes on S's CSR as it is
        scale = sddmm_scale(self._S) if on_csr else None  # S's values scanned once for all of them
        for route in routes:
            if route == CUSPARSE:
                self._dev[route] = CusparseRoute(self._S, p, scale)
                continue
            f = by_route[route]
            host = self._host if f.name == format else f.sddmm.prepare(self._S, p)[0]  # vector=: the plan's format's
            kw = {"scale": scale} if route in on_csr else {}  # an on_csr upload takes S's scale (the contract)
            self._dev[route] = f.sddmm.upload(host, p, **kw)
        self.choices: dict[int, str] = {}  # Kd -> the route run() takes (then self._dev[route].run)
        self.timings: dict[int, dict] = {}  # Kd -> {route: ms as issued} where "auto" timed them
        first = routes[0]
        self.choice = self._record(first, names[first] + (f" until a run times {', '.join(routes)} for its Kd"
                                                          if len(routes) > 1 else ""))

    def _record(self, route: str, reason: str) -> dict:
        fmt = CusparseRoute.format_name if route == CUSPARSE else self._by_route[route].name  # whose arrays it runs
        return {"kernel": route, "format": fmt, "precision": self.precision.name, "reason": reason}

    def _route(self, Ad, Bd, dev_out):
        """The device form of the route for Ad's Kd (its ``run`` and, where it has one, ``bind``): the plan's one
        route, or (auto) every route timed as issued on these operands on the first call with this Kd: the faster
        of our kernels, cuSPARSE only when clearly faster than it."""
        Kd = int(Ad.shape[1])
        route = self.choices.get(Kd)
        if route is not None:
            return self._dev[route]
        if len(self.routes) == 1:
            route = self.routes[0]
        else:
            ms = {r: launch.issued_ms(lambda d=self._dev[r]: d.run(Ad, Bd, dev_out), repeats=5, warmup=3)
                  for r in self.routes}
            ours = {r: t for r, t in ms.items() if r != CUSPARSE}
            best = min(ours, key=ours.get)
            route = CUSPARSE if ms[CUSPARSE] < CUSPARSE_MARGIN * ours[best] else best
            self.timings[Kd] = ms
            self.choice = self._record(route, f"Kd={Kd}: ms as issued {ms}; cuSPARSE kept only below "
                                              f"{CUSPARSE_MARGIN} x our fastest kernel's")
        self.choices[Kd] = route
        return self._dev[route]

    def _check(self, A, B):
        M, K = self.shape
        if A.ndim != 2 or B.ndim != 2 or A.shape[0] != M or B.shape[0] != K or A.shape[1] != B.shape[1]:
            raise ValueError(f"A is {A.shape} and B {B.shape}; expected ({M}, Kd) and ({K}, Kd) for S of shape "
                             f"{self.shape}")

    def run(self, A, B, out=None):
        """The values of (A @ B^T) (.) S in S's CSR order, float32 [nnz]: NumPy on the CPU path; on the GPU,
        CuPy for CuPy inputs and NumPy for NumPy inputs. A and B in any float dtype, or in the plan's storage
        dtype (float16; bfloat16 as uint16 bits, as `SpmmPlan` takes B): then the format's kernels read them as
        they are, with no pass over them (they round float32 to TF32 themselves). ``out``: a contiguous float32
        [nnz] array of the inputs' kind (CuPy on the GPU) written and returned instead of a new one.

        Per GPU call on CuPy A and B already in the storage dtype and C-contiguous: the first call on these
        buffers checks them and binds the kept route's launches (`SddmmCall`); later calls cost one dict lookup
        and the bound launches, with ``out`` from the 3rd call on one replayed CUDA graph (kernels.calls.Call),
        without it a new float32 [nnz] each call (the CVSE route: one kernel writing S's CSR order through its
        scatter map). Other operands (NumPy, another dtype, strided) take the checked path every call."""
        try:  # the per-call path: these buffers were checked and their launch bound before
            key = (A.data.ptr, A.shape, A.strides, A.dtype, B.data.ptr, B.shape, B.strides, B.dtype,
                   None if out is None else (out.data.ptr, out.shape, out.strides, out.dtype))
        except AttributeError:  # NumPy operands (a memoryview has no ptr), or the CPU path
            key = None
        else:
            call = self._calls.get(key)
            if call is not None:
                return call(out)
        p = self.precision
        self._check(A, B)
        if self.device == "cpu":
            Ar, Br = p.rounded(_float32(A, p)), p.rounded(_float32(B, p))
            vals = self._twin(self._host, Ar, Br)
            if out is None:
                return vals.astype(np.float32)
            self._check_out(out, np.ndarray)
            out[...] = vals
            return out
        import cupy

        host = not isinstance(A, cupy.ndarray)
        dev_out = None
        if out is not None and not host:
            self._check_out(out, cupy.ndarray)
            dev_out = out
        Ad, Bd = _device_operand(A, p), _device_operand(B, p)
        device = self._route(Ad, Bd, dev_out)
        if key is not None and Ad is A and Bd is B and hasattr(device, "bind") and self.nnz and Ad.shape[1]:
            call = self._bind(key, device, Ad, Bd, dev_out)
            return call(out)
        vals = device.run(Ad, Bd, dev_out)
        if host and out is not None:
            self._check_out(out, np.ndarray)
            out[...] = cupy.asnumpy(vals)
            return out
        return _out(vals, host)

    def _bind(self, key, device, A, B, out) -> "SddmmCall":
        """A `SddmmCall` of ``device``'s bound launch on these buffers, kept under ``key`` (the oldest of
        MAX_BOUND_CALLS goes)."""
        import cupy

        bound = device.bind(A, B, out if out is not None else cupy.empty(self.nnz, dtype=cupy.float32))
        call = SddmmCall(bound, None if out is None else Call(bound, out, self.choice, True), self.nnz, A)
        if len(self._calls) >= MAX_BOUND_CALLS:
            retire(self._calls.pop(next(iter(self._calls))))
        self._calls[key] = call
        return call

    def _check_out(self, out, kind) -> None:
        if not isinstance(out, kind) or out.dtype != np.float32 or out.shape != (self.nnz,) \
                or not out.flags.c_contiguous:
            lib = "numpy" if kind is np.ndarray else "cupy"
            raise ValueError(f"out must be a C-contiguous float32 {lib} array of shape "
                             f"({self.nnz},) like the inputs, got {type(out).__name__} {getattr(out, 'dtype', None)} "
                             f"{getattr(out, 'shape', None)}")


class SddmmCall:
    """One bound call of `SddmmPlan.run` on fixed A and B: with the caller's ``out`` (fixed too) a
    kernels.calls.Call (the bound launches, a replayed CUDA graph from the 3rd call); without, a new float32 [nnz]
    each call that the bound launches are re-pointed at (no graph: the output moves every call)."""

    __slots__ = ("bound", "fixed", "nnz", "A")

    def __init__(self, bound, fixed, nnz: int, A):
        self.bound, self.fixed, self.nnz, self.A = bound, fixed, nnz, A

    def __call__(self, out=None):
        if self.fixed is not None:
            return self.fixed()
        import cupy

        out = cupy.empty(self.nnz, dtype=cupy.float32)
        self.bound.set_io(self.A, out)
        return self.bound(cupy.cuda.get_current_stream().ptr)


def _float32(X, p) -> np.ndarray:
    """Host float32 values of an operand: storage-dtype input (bfloat16: uint16 bits) widened exactly."""
    X = np.asarray(X)
    return p.to_float32(X) if X.dtype == p.storage_dtype else X.astype(np.float32, copy=False)


def _device_operand(X, p):
    """A or B on the device, C-contiguous, in the precision's storage dtype: taken as it is when it already is
    (no pass over it), else converted once."""
    import cupy

    X = cupy.asarray(X)
    return cupy.ascontiguousarray(X if X.dtype == p.storage_dtype else p.to_storage(X))


def _out(out, host: bool):
    import cupy

    return cupy.asnumpy(out) if host else out


def sddmm(S, A, B, **kw) -> sp.csr_array:
    """(A @ B^T) (.) S as a SciPy CSR with S's (canonical) pattern, float32 values; ``kw`` as `SddmmPlan`."""
    plan = SddmmPlan(S, **kw)
    out = plan.run(A, B)
    if not isinstance(out, np.ndarray):
        out = out.get()
    return sp.csr_array((out, plan._S.indices, plan._S.indptr), shape=plan.shape)
