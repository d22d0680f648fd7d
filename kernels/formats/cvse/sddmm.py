"""CVSE's SDDMM route on the format seam (``kernels.formats.contract.SddmmOperator``, the cvse `Format`'s ``sddmm``):
S compressed into V x 1 vectors by SSpMM's Sparse Vector Compression (``svc.compress``, or the plan's ``vector=V``),
the float64 twin ``container.cvse_sddmm``, and on the device the Tensor Core kernel (cvse_sddmm.cu,
``launch.sddmm``) writing each value straight into S's CSR order through the vector slots' scatter map (the
inverse of `gather_positions`); where the positions pass int32, into the vectors' order, then one gather.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from kernels import gather as row_gather
from kernels.formats.cvse import launch as lc
from kernels.formats.cvse.container import CVSE, cvse_sddmm
from kernels.formats.cvse.svc import compress
from storage.indexing import segment_ids


def gather_positions(X: CVSE, S: sp.csr_array) -> np.ndarray:
    """[nnz] int64: for CSR nonzero k of S, the flat position b * V + v of its value in the CVSE (forward map)."""
    V = X.vector
    rows = segment_ids(S.indptr)
    cols = S.indices.astype(np.int64)
    vr = X.vec_row_of()
    key_vec = vr * int(S.shape[1]) + X.indices.astype(np.int64)  # sorted: vector rows ascending, columns ascending
    b = np.searchsorted(key_vec, (rows // V) * int(S.shape[1]) + cols)
    return b * V + rows % V


@dataclass(frozen=True)
class CvseSddmmHost:
    """S as CVSE and where each of S's nonzeros (CSR order) sits in the vectors' flat [n_vectors * V] order."""

    X: CVSE
    gather: np.ndarray  # int64 [nnz] (`gather_positions`)


class CvseSddmmDevice:
    """The host form on the current device. Per call one kernel writing each value straight into S's CSR order
    through the vector slots' scatter map (`launch.scatter_map`: 4 bytes a slot, made once); where S's positions do
    not fit int32, the kernel into a vector-order buffer (made here, then reused: calls of one plan are ordered on
    one stream) and one gather into CSR order. Nothing allocated when ``out`` is given.

    The scatter replaces a gather pass over every value (its int64 position, the value, the write: on V = 8-pruned
    4096^2 weights at 80 %, Kd = 64, the call took 0.053 ms on the GPU against the kernel's 0.020 ms, H200)."""

    def __init__(self, host: CvseSddmmHost, precision):
        import cupy

        self.dm = lc.upload(host.X, precision.name)
        self.nnz = int(host.gather.shape[0])
        dest = lc.scatter_map(host.gather, self.dm.n_vectors * self.dm.vector)
        self.dest = None if dest is None else cupy.asarray(dest)
        if self.dest is None:  # the vector order, then a gather
            self.gather = cupy.asarray(host.gather)
            self._take = cupy.take
            self._vec = cupy.empty((self.dm.n_vectors, self.dm.vector), dtype=cupy.float32)

    def run(self, A, B, out=None):
        if self.dest is not None:
            return lc.sddmm(self.dm, A, B, out, dest=self.dest, nnz=self.nnz)
        vec = lc.sddmm(self.dm, A, B, out=self._vec)
        return self._take(vec.reshape(-1), self.gather, out=out)

    def bind(self, A, B, out):
        """`run` on these A, B and out (float32 [nnz], C-contiguous), checked and packed once: the kernel's one
        ``cuLaunchKernel`` (kernels.launch.Bound); without the scatter map, the kernel and the gather (kernels.gather's
        bound row gather, one 4-byte word a row) as two."""
        if self.dest is not None:
            return lc.bind_sddmm(self.dm, A, B, out, dest=self.dest)
        kernel = lc.bind_sddmm(self.dm, A, B, self._vec)
        gather, _ = row_gather.bind_rows(self._vec.reshape(-1, 1), self.gather, out.reshape(-1, 1))
        return _Bound(kernel, gather, out)


class _Bound:
    """The CVSE route's bound call (the interface of kernels.launch.Bound that kernels.sddmm uses):
    ``bound(stream_ptr)`` launches the kernel and the gather and returns out; ``set_io(A, out)`` re-points the
    gather's output (same shape and dtype, 4-byte aligned)."""

    __slots__ = ("kernel", "gather", "out")

    def __init__(self, kernel, gather, out):
        self.kernel, self.gather, self.out = kernel, gather, out

    def set_io(self, A, out) -> None:
        self.gather.set_io(self.gather.B, out)
        self.out = out

    def __call__(self, stream_ptr: int):
        self.kernel(stream_ptr)
        self.gather(stream_ptr)
        return self.out


class CvseSddmmOperator:
    """The CVSE Tensor Core route of `kernels.sddmm.SddmmPlan`: only a plan of format cvse takes it (it runs on the
    plan's CVSE of S), gated by the format's ``gpu_ready`` alone."""

    route, on_csr = "cvse", False
    description = "the CVSE SDDMM kernel (Tensor Cores)"
    gpu_ready, gpu_not_ready_why = True, ""

    def prepare(self, S, precision, *, vector: int | None = None) -> tuple[CvseSddmmHost, dict]:
        """S compressed (V by Sparse Vector Compression, or ``vector``); the report is compress's."""
        X, svc = compress(S, precision, vector=vector)
        return CvseSddmmHost(X, gather_positions(X, S)), svc

    def twin(self, host: CvseSddmmHost, A, B) -> np.ndarray:
        return cvse_sddmm(host.X, A, B).reshape(-1)[host.gather]

    def upload(self, host: CvseSddmmHost, precision) -> CvseSddmmDevice:
        return CvseSddmmDevice(host, precision)


SDDMM = CvseSddmmOperator()
