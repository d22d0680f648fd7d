"""`SpmmPlan`'s path without CuPy or a GPU (or with device='cpu'): float32 runs the multithreaded float32 CSR product
of kernels.cpu_spmm (kernel "cpu-csr", no TF32 emulation); float16 and bfloat16 run the format's float64 NumPy twin
on the precision-rounded inputs (kernel "cpu-reference"). Both return the precision's dtype, like the GPU path."""
from __future__ import annotations

import time

import numpy as np

from kernels.formats.contract import Choice


class CpuPath:
    """A converted to ``fmt`` on the host (or ``given``, already converted) with the choice it reports. The
    conversion happens where a product needs it (the half twin; float32 without A's CSR), not at construction: a
    float32 run with the CSR at hand never reads the format (0.7 s of ME-TCF conversion at 10M nonzeros that the
    CLI's CPU runs paid for nothing, 2-core host, 2026-11-29)."""

    def __init__(self, fmt, precision, out_dtype, csr, given=None):
        self.precision, self.out_dtype, self._csr_given = precision, np.dtype(out_dtype), csr
        self._converted = given
        self._fmt = fmt
        self.csr = None  # kernels.cpu_spmm.CpuCsr, built on the first float32 run: A's CSR once, float32 values
        why = "no CuPy/CUDA device (or device='cpu')"
        if precision.half:
            self.choice = Choice(kernel="cpu-reference", format=fmt.name, precision=precision.name,
                                 reason=f"{why}: the {fmt.name} NumPy twin in float64 on {precision.name}-rounded "
                                        "inputs")
        else:
            self.choice = Choice(kernel="cpu-csr", format=fmt.name, precision="float32",
                                 reason=f"{why}: kernels.cpu_spmm, the multithreaded float32 CSR product")

    @property
    def _host(self):
        """A in ``fmt`` (converted on first use)."""
        if self._converted is None:
            self._converted = self._fmt.convert(self._csr_given, self.precision)
        return self._converted

    def run(self, B, out, accumulate: bool):
        prec = self.precision
        Bh = np.asarray(B)
        if not prec.half:
            if self.csr is None:
                from kernels.cpu_spmm import CpuCsr  # lazy: numba, ~0.25 s to import, only for a float32 CPU run

                self.csr = CpuCsr(self._csr_given if self._csr_given is not None else self._fmt.to_csr(self._host))
            if out is not None and not accumulate and isinstance(out, np.ndarray) and \
                    out.dtype == np.float32 and out.flags.c_contiguous:
                return self.csr.run(Bh, out)
            return into_host(self.csr.run(Bh), out, accumulate)
        # half: the float64 reference on what the kernels read, B rounded to the precision (exact when stored so)
        B64 = prec.to_float32(Bh).astype(np.float64) if Bh.dtype == prec.storage_dtype else prec.rounded(Bh)
        C = self._fmt.reference_spmm(self._host, B64, prec).astype(np.float32)
        if self.out_dtype != np.dtype(np.float32):
            C = prec.to_storage(C)
        return into_host(C, out, accumulate)

    def bind(self, B, out, accumulate: bool, shape: tuple) -> "CpuCall":
        """``SpmmPlan.bind`` on this path: NumPy B [K, N] and out [M, N] of A's ``shape``, checked once."""
        if not isinstance(B, np.ndarray) or not isinstance(out, np.ndarray):
            raise TypeError(f"bind on the CPU path takes NumPy B and out, got {type(B).__name__} and "
                            f"{type(out).__name__}")
        if B.ndim != 2 or B.shape[0] != shape[1] or out.shape != (shape[0], B.shape[1]):
            raise ValueError(f"B is {B.shape} and out {out.shape}; expected ({shape[1]}, N) and ({shape[0]}, N)")
        return CpuCall(self, B, out, accumulate)

    def benchmark(self, B, repeats: int, warmup: int) -> dict:
        """Median host ms of ``repeats`` runs after ``warmup``."""
        for _ in range(warmup):
            self.run(B, None, False)
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            self.run(B, None, False)
            ts.append((time.perf_counter() - t0) * 1e3)
        return {"kernel": self.choice["kernel"], "median_ms": float(np.median(ts)), "repeats": repeats}


class CpuCall:
    """``SpmmPlan.bind``'s call on the CPU path, with the GPU `kernels.calls.Call`'s interface: ``call()`` writes
    A @ B into out (NumPy arrays; float32 straight into a C-contiguous out) and returns it, ``set_io(B, out)``
    re-points it. Lets a caller of the bound form (gnn.products) run, and be tested, without a GPU."""

    __slots__ = ("path", "B", "out", "accumulate", "ret", "rebinds")

    def __init__(self, path: CpuPath, B, out, accumulate: bool):
        self.path, self.B, self.out, self.accumulate, self.ret, self.rebinds = path, B, out, accumulate, out, 0

    @property
    def choice(self):
        return self.path.choice

    @property
    def kernel(self) -> str:
        return self.path.choice["kernel"]

    def set_io(self, B, out) -> None:
        if B is not self.B or out is not self.out:
            self.B, self.out, self.ret, self.rebinds = B, out, out, self.rebinds + 1

    def __call__(self, stream=None):  # stream: the GPU call's argument, nothing on the CPU
        return self.path.run(self.B, self.out, self.accumulate)


def into_host(C: np.ndarray, out, accumulate: bool):
    """C written into (or, with accumulate, added to) a host ``out``, or C itself without one."""
    if out is None:
        return C
    if accumulate:
        out += C.reshape(out.shape)
    else:
        out[...] = C.reshape(out.shape)
    return out
