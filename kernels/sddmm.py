"""Public SDDMM, next to `kernels.spmm.SpmmPlan`: ``out = (A @ B^T) (.) S`` sampled at a sparse S (M x K), with
A [M, Kd] and B [K, Kd] dense. `SddmmPlan(S, dtype=..., format=...)` converts and uploads once; `plan.run(A, B)` per
call returns the M x K result's values in S's canonical CSR order (float32, [nnz]); `sddmm(S, A, B)` wraps both
and returns a SciPy CSR with S's pattern (what GAT-style attention logits need).

Precision contract (README "Precision"): A, B and S's values are rounded to the precision (TF32 for float32,
float16, bfloat16), products are exact in fp32 and summed in fp32; out is float32. Formats: ``"csr"`` and
``"cvse"`` (S compressed into V x 1 vectors by SSpMM's Sparse Vector Compression, or ``vector=V``).

Kernels (routes): on a GPU a plan builds each route it may take, and the first ``run`` with a new Kd times them
as issued and keeps the fastest for that Kd (``plan.choices``, ``plan.timings``; cuSPARSE only when clearly faster
than our fastest, ``CUSPARSE_MARGIN``): ``"cvse"`` (format cvse: the Tensor Core kernel,
kernels/formats/cvse/cvse_sddmm.cu), ``"csr"`` (the CUDA-core kernel, one dot product per nonzero,
kernels/formats/csr/sddmm.py; a candidate once ``GPU_READY`` there) and ``"cusparse"`` (kernels.cusparse_sddmm:
cuSPARSE SDDMM in float32 on the precision-rounded inputs, then x S when S's values are not all one). Why no
single rule: the CVSE kernel computes V = 8 rows per vector, so its work is the vectors' padding; on power-law and
community graphs of 1-2M nonzeros (8-row vector density 0.13) at Kd = 64 cuSPARSE's per-nonzero kernel took
0.54 ms against 0.96 (R-MAT scale 17, H100), while at Kd = 256, and on small or meshed graphs at the same density,
the CVSE kernel won by 1.3-4x (benchmarks/results/sddmm-*-2026-11-27.json): the crossing depends on size, locality
and Kd, which a measurement settles. ``kernel=`` a route name fixes it (cvse is refused where the format is not
``gpu_ready``, csr while its kernel is not); format ``"csr"`` runs cuSPARSE (and the CSR kernel once ready). Each
route gives the same bits on every call.
Without CuPy or a GPU (or ``device="cpu"``) the plan runs the format's float64 NumPy twin on the rounded inputs
("cpu-reference").
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from configs.errors import InputError
from kernels import spmm
from kernels.cusparse_sddmm import CusparseSddmm
from kernels.formats import get
from kernels.formats.csr import sddmm as csr_sddmm_gpu
from kernels.formats.cvse import launch as launch_cvse
from kernels.formats.cvse.container import cvse_sddmm
from kernels.formats.cvse.svc import compress
from kernels.launch import tf32_round
from kernels.precision import precision as as_precision

FORMATS = ("csr", "cvse")
ROUTE_NAMES = {"cvse": "the CVSE SDDMM kernel (Tensor Cores)",
               "csr": "the CSR SDDMM kernel (CUDA cores, kernels.formats.csr.sddmm)",
               "cusparse": "cuSPARSE SDDMM (float32 on precision-rounded inputs)"}
# "auto" takes the cuSPARSE route only when it times below this fraction of our fastest kernel's: where both are
# host-bound (~0.05 ms as issued) the timings are noise, and one such timing put R-MAT scale 13 at Kd = 64 on
# cuSPARSE at 0.088 ms where the CVSE kernel runs in 0.048 (H100, 2026-11-27)
CUSPARSE_MARGIN = 0.9


def _canonical(S) -> sp.csr_array:
    if not sp.issparse(S):
        raise TypeError(f"S must be a SciPy sparse matrix, got {type(S).__name__}")
    S = sp.csr_array(S, dtype=np.float32)
    if not S.has_canonical_format:
        S = S.copy()
        S.sum_duplicates()
    return S


def csr_sddmm(S: sp.csr_array, A, B) -> np.ndarray:
    """float64 twin on CSR: out[k] = S.data[k] * (A[row_k] . B[col_k]) in S's CSR order."""
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    rows = np.repeat(np.arange(S.shape[0], dtype=np.int64), np.diff(S.indptr.astype(np.int64)))
    cols = S.indices.astype(np.int64)
    out = np.empty(S.nnz)
    step = max(1, (1 << 22) // max(A.shape[1], 1))
    for k0 in range(0, S.nnz, step):  # chunks of nonzeros: temporaries stay ~32 MB
        k1 = min(S.nnz, k0 + step)
        out[k0:k1] = np.einsum("ij,ij->i", A[rows[k0:k1]], B[cols[k0:k1]])
    return out * np.asarray(S.data, dtype=np.float64)


class SddmmPlan:
    def __init__(self, S, *, dtype="float32", format: str = "csr", vector: int | None = None, device: str = "auto",
                 kernel: str = "auto"):
        self.precision = p = as_precision(dtype)
        if format not in FORMATS:
            raise InputError(f"SDDMM format {format!r} is not supported; choose one of {', '.join(FORMATS)}")
        if device not in ("auto", "gpu", "cpu"):
            raise ValueError(f"device is {device!r}, expected 'auto', 'gpu' or 'cpu'")
        if kernel not in ("auto", *ROUTE_NAMES):
            raise ValueError(f"kernel is {kernel!r}, expected 'auto', {', '.join(map(repr, ROUTE_NAMES))}")
        S = _canonical(S)
        self.shape, self.nnz, self.format = tuple(int(s) for s in S.shape), int(S.nnz), format
        # S's values as the precision holds them (TF32 for float32), the contract of the module docstring
        self._S = sp.csr_array((p.rounded(S.data).astype(np.float32), S.indices, S.indptr), shape=S.shape)
        self._cvse, self.svc = None, None
        if format == "cvse":
            self._cvse, self.svc = compress(self._S, p, vector=vector)
            self._gather = _gather_positions(self._cvse, self._S)
        use_gpu = device == "gpu" or (device == "auto" and spmm.gpu_available())
        if device == "gpu" and not spmm.gpu_available():
            raise RuntimeError("device='gpu' but CuPy or a CUDA device is not available")
        self.device = "gpu" if use_gpu else "cpu"
        if not use_gpu:
            self.choice = {"kernel": "cpu-reference", "format": format, "precision": p.name,
                           "reason": f"no CuPy/CUDA device (or device='cpu'): the {format} NumPy twin in float64 on "
                                     f"{p.name}-rounded inputs"}
            return
        fmt = get("cvse")
        if kernel == "cvse" and not fmt.gpu_ready:
            raise InputError(f"kernel cvse: no GPU path yet, {fmt.gpu_not_ready_why}; use kernel='cusparse' or "
                             "device='cpu'")
        if kernel == "cvse" and format != "cvse":
            raise InputError("kernel cvse needs format='cvse'")
        if kernel == "csr" and not csr_sddmm_gpu.GPU_READY:
            raise InputError(f"kernel csr: {csr_sddmm_gpu.GPU_NOT_READY_WHY}; use kernel='cusparse' or 'cvse'")
        if kernel == "auto":  # every route this plan can run, timed per Kd
            routes = (["cvse"] if format == "cvse" and fmt.gpu_ready else []) + \
                (["csr"] if csr_sddmm_gpu.GPU_READY else []) + ["cusparse"]
        else:
            routes = [kernel]
        self.routes = tuple(routes)
        self.kernel = kernel if len(routes) > 1 else routes[0]  # "auto" (timed per Kd: self.choices) or the route
        import cupy

        unit = bool(np.all(self._S.data == 1))  # x S skipped for unit values (attention patterns, the benchmark's)
        self._vec_out = None  # the CVSE kernel's vector-order output, made on the first call
        if "cvse" in routes:
            self._dm = launch_cvse.upload(self._cvse, p.name)
            self._gather_dev = cupy.asarray(self._gather)
        if "csr" in routes:
            self._csr = csr_sddmm_gpu.CsrSddmm(self._S.indptr, self._S.indices, self.shape, p.name,
                                               values=None if unit else self._S.data)
        if "cusparse" in routes:
            self._op = CusparseSddmm(self._S.indptr, self._S.indices, self.shape)
            self._s_dev = None if unit else cupy.asarray(self._S.data)
        self.choices: dict[int, str] = {}  # Kd -> the route run() takes
        self.timings: dict[int, dict] = {}  # Kd -> {route: ms as issued} where "auto" timed them
        first = routes[0]
        self.choice = self._record(first, ROUTE_NAMES[first] + (f" until a run times {', '.join(routes)} for its Kd"
                                                                 if len(routes) > 1 else ""))

    def _record(self, route: str, reason: str) -> dict:
        return {"kernel": route, "format": self.format if route == "cvse" else "csr",
                "precision": self.precision.name, "reason": reason}

    def _route(self, Ad, Bd, dev_out) -> str:
        """The route for Ad's Kd: the plan's one route, or (auto) every route timed as issued on these operands on
        the first call with this Kd: the faster of our kernels, cuSPARSE only when clearly faster than it."""
        Kd = int(Ad.shape[1])
        route = self.choices.get(Kd)
        if route is not None:
            return route
        if len(self.routes) == 1:
            route = self.choices[Kd] = self.routes[0]
            return route
        from kernels.launch import issued_ms

        ms = {r: issued_ms(lambda r=r: self._launch(r, Ad, Bd, dev_out), repeats=5, warmup=3) for r in self.routes}
        ours = {r: t for r, t in ms.items() if r != "cusparse"}
        best = min(ours, key=ours.get)
        route = "cusparse" if ms["cusparse"] < CUSPARSE_MARGIN * ours[best] else best
        self.choices[Kd], self.timings[Kd] = route, ms
        self.choice = self._record(route, f"Kd={Kd}: ms as issued {ms}; cuSPARSE kept only below "
                                          f"{CUSPARSE_MARGIN} x our fastest kernel's")
        return route

    def _launch(self, route: str, Ad, Bd, dev_out):
        import cupy

        if route == "cvse":
            if self._vec_out is None:
                self._vec_out = cupy.empty((self._dm.n_vectors, self._dm.vector), dtype=cupy.float32)
            vec = launch_cvse.sddmm(self._dm, Ad, Bd, out=self._vec_out)
            return cupy.take(vec.reshape(-1), self._gather_dev, out=dev_out)
        if route == "csr":  # reads Ad and Bd as they are (TF32 rounding in the kernel)
            return self._csr.run(Ad, Bd, dev_out)
        # cuSPARSE SDDMM reads float32: the precision's values (TF32-rounded, or the 16-bit values widened)
        p = self.precision
        rnd = tf32_round if p.name == "float32" else p.to_float32
        vals = self._op.run(cupy.ascontiguousarray(rnd(Ad)), cupy.ascontiguousarray(rnd(Bd)), dev_out)
        if self._s_dev is not None:
            vals *= self._s_dev
        return vals

    def _check(self, A, B):
        M, K = self.shape
        if A.ndim != 2 or B.ndim != 2 or A.shape[0] != M or B.shape[0] != K or A.shape[1] != B.shape[1]:
            raise ValueError(f"A is {A.shape} and B {B.shape}; expected ({M}, Kd) and ({K}, Kd) for S of shape "
                             f"{self.shape}")

    def run(self, A, B, out=None):
        """The values of (A @ B^T) (.) S in S's CSR order, float32 [nnz]: NumPy on the CPU path; on the GPU,
        CuPy for CuPy inputs and NumPy for NumPy inputs. A and B in any float dtype, or in the plan's storage
        dtype (float16; bfloat16 as uint16 bits, as `SpmmPlan` takes B): then the CVSE kernel reads them as they
        are, with no pass over them (it rounds float32 to TF32 itself, at its mma). ``out``: a contiguous float32
        [nnz] array of the inputs' kind (CuPy on the GPU) written and returned instead of a new one.

        Per GPU call of the CVSE kernel: the kernel into the plan's vector-order buffer (made once, reused: calls
        of one plan are ordered on one stream) and one gather into CSR order, nothing allocated when ``out`` is
        given."""
        p = self.precision
        self._check(A, B)
        if self.device == "cpu":
            Ar, Br = p.rounded(_float32(A, p)), p.rounded(_float32(B, p))
            if self._cvse is None:
                vals = csr_sddmm(self._S, Ar, Br)
            else:
                vals = cvse_sddmm(self._cvse, Ar, Br).reshape(-1)[self._gather]
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
        vals = self._launch(self._route(Ad, Bd, dev_out), Ad, Bd, dev_out)
        if host and out is not None:
            self._check_out(out, np.ndarray)
            out[...] = cupy.asnumpy(vals)
            return out
        return _out(vals, host)

    def _check_out(self, out, kind) -> None:
        if not isinstance(out, kind) or out.dtype != np.float32 or out.shape != (self.nnz,) \
                or not out.flags.c_contiguous:
            lib = "numpy" if kind is np.ndarray else "cupy"
            raise ValueError(f"out must be a C-contiguous float32 {lib} array of shape "
                             f"({self.nnz},) like the inputs, got {type(out).__name__} {getattr(out, 'dtype', None)} "
                             f"{getattr(out, 'shape', None)}")


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


def _gather_positions(X, S: sp.csr_array) -> np.ndarray:
    """[nnz] int64: for CSR nonzero k of S, the flat position b * V + v of its value in the CVSE (forward map)."""
    V = X.vector
    rows = np.repeat(np.arange(S.shape[0], dtype=np.int64), np.diff(S.indptr.astype(np.int64)))
    cols = S.indices.astype(np.int64)
    vr = X.vec_row_of()
    key_vec = vr * int(S.shape[1]) + X.indices.astype(np.int64)  # sorted: vector rows ascending, columns ascending
    b = np.searchsorted(key_vec, (rows // V) * int(S.shape[1]) + cols)
    return b * V + rows % V


def sddmm(S, A, B, **kw) -> sp.csr_array:
    """(A @ B^T) (.) S as a SciPy CSR with S's (canonical) pattern, float32 values; ``kw`` as `SddmmPlan`."""
    plan = SddmmPlan(S, **kw)
    out = plan.run(A, B)
    if not isinstance(out, np.ndarray):
        out = out.get()
    return sp.csr_array((out, plan._S.indices, plan._S.indptr), shape=plan.shape)
