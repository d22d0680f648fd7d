"""Fast CPU SpMM: C = A @ B for a CSR A and a dense float32 B, multithreaded over row blocks.

    C[i, :] = sum_{p in indptr[i]:indptr[i+1]} data[p] * B[indices[p], :]      (float32, FP32 accumulation)

Row i is computed by one thread, accumulating its nonzeros in index order (multiply, then add, in float32) into
column tiles held in vector registers (``kernels.cpu_simd``; 128, 64, 32, 16 columns, down to 4 for N < 16), so C
is the same bitwise for every thread count and every tile width (no reduction across threads). Rows are cut into
blocks of about equal nonzeros (``blocks_per_thread`` per thread, so a hub row does not leave the other threads
idle) and handed out by a thread pool; the numba kernel releases the GIL. Threads: ``threads`` argument, else
``TCSPMM_CPU_THREADS``, else the CPUs this process may run on (``os.sched_getaffinity``, else ``os.cpu_count``).
No numba threading layer is used: a plain thread pool works from any calling thread, also from the concurrent
subflows of the catalog job.

This is SpmmPlan's CPU product for float32 (``kernels.spmm``); the float64 ME-TCF reference
(``kernels.reference``) stays the check and the half-precision emulation. ``benchmarks/cpu_spmm.py`` measures it
against SciPy's single-threaded CSR product.
"""
from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp

from configs.threads import pool as threads_pool, threads_from_env, usable_cpus
from kernels.cpu_simd import vaxpy, vstore, vzero


# Below this many multiply-adds (nnz * N) one thread does the product: a pool round trip costs ~50 us, a 64K-FMA
# product about as much (measured on the 2-core CI host: 0.1 ms single-threaded for 15K nnz at N = 32).
MIN_PARALLEL_FMAS = 1 << 18
# B rows of 64 or 128 bytes (N = 16, 32) span one cache line more than they need when B's base is not 64-byte
# aligned (NumPy's large arrays start 16 bytes into a page), i.e. +100% / +50% lines per gathered row. Copying B
# into an aligned buffer (kept for the next call) pays off there, one thread: shuffled mesh3d-2M N = 32 26.0 ->
# 22.8 ms copy included, sbm-2M 6.9 -> 4.8 ms, rmat-8M 106 -> 94 ms, N = 16 84 -> 60 ms; not at N = 64 or 128
# (+25% / +12% lines: a loss or a wash with the copy) nor N = 8 (AMD EPYC, 2026-11-25).
ALIGN_N = (16, 32)
ALIGN_BYTES = 64

def default_threads() -> int:
    """``TCSPMM_CPU_THREADS`` if set, else the CPUs this process may use."""
    return threads_from_env("TCSPMM_CPU_THREADS", usable_cpus())


@numba.njit(cache=True, nogil=True)
def _tile(indptr, indices, data, B, C, r0, r1, c_begin, c_end, width):  # pragma: no cover - compiled
    # C[i, c:c+width] = sum_p data[p] * B[indices[p], c:c+width] for c in c_begin, c_begin + width, ... < c_end,
    # with the tile in registers across the row's nonzeros (kernels.cpu_simd; width: a compile-time constant)
    for i in range(r0, r1):
        p0, p1 = indptr[i], indptr[i + 1]
        for c in range(c_begin, c_end, width):
            s = vzero(width)
            for p in range(p0, p1):
                s = vaxpy(s, data[p], B, indices[p], c)
            vstore(C, i, c, s)


@numba.njit(cache=True, nogil=True)
def _narrow(indptr, indices, data, B, C, r0, r1):  # pragma: no cover - compiled
    # N < 4 (below the narrowest tile), plain loops: for i: C[i] = sum_p data[p] * B[indices[p]]
    n = B.shape[1]
    acc = np.empty(n, dtype=np.float32)
    for i in range(r0, r1):
        acc[:] = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            a = data[p]
            j = indices[p]
            for k in range(n):
                acc[k] += a * B[j, k]
        for k in range(n):
            C[i, k] = acc[k]


@numba.njit(cache=True, nogil=True)
def _rows(indptr, indices, data, B, C, r0, r1):  # pragma: no cover - compiled
    # Rows r0:r1 of C = A @ B in column tiles of 128, 64, 32, 16 (8, 4 when N < 16), one pass over the rows per
    # tile width. A remainder narrower than the tile is done by one more tile ending at column n, overlapping
    # the last one (its columns get the same bits again); only N < 4 needs the plain loop. Registers instead of
    # the acc[k] row buffer: mesh3d-2M (shuffled) N = 32 one thread 48 -> 27 ms, N = 128 93 -> 46 ms; sbm-2M
    # 8.6 -> 6.2, 87 -> 43 ms; rmat-8M N = 32 191 -> 111 ms (AMD EPYC, 2026-11-25).
    n = B.shape[1]
    c = n // 128 * 128
    if c:
        _tile(indptr, indices, data, B, C, r0, r1, 0, c, 128)
    if n - c >= 64:
        _tile(indptr, indices, data, B, C, r0, r1, c, c + 64, 64)
        c += 64
    if n - c >= 32:
        _tile(indptr, indices, data, B, C, r0, r1, c, c + 32, 32)
        c += 32
    if n - c >= 16:
        _tile(indptr, indices, data, B, C, r0, r1, c, c + 16, 16)
        c += 16
    if c < n and n >= 16:
        _tile(indptr, indices, data, B, C, r0, r1, n - 16, n, 16)
        return
    if n - c >= 8:
        _tile(indptr, indices, data, B, C, r0, r1, c, c + 8, 8)
        c += 8
    if n - c >= 4:
        _tile(indptr, indices, data, B, C, r0, r1, c, c + 4, 4)
        c += 4
    if n < 4:
        _narrow(indptr, indices, data, B, C, r0, r1)
    elif c < n:
        _tile(indptr, indices, data, B, C, r0, r1, n - 4, n, 4)


def row_blocks(indptr: np.ndarray, n_blocks: int) -> np.ndarray:
    """Row boundaries (length <= n_blocks + 1, first 0, last n_rows) cutting rows into blocks of about equal nnz
    (plus one per row, so empty rows count too)."""
    n_rows = len(indptr) - 1
    if n_rows == 0:
        return np.zeros(1, dtype=np.int64)
    work = indptr.astype(np.int64) + np.arange(n_rows + 1, dtype=np.int64)
    targets = np.linspace(0, work[-1], n_blocks + 1)
    return np.unique(np.searchsorted(work, targets, side="left").clip(0, n_rows))


class CpuCsr:
    """A prepared A (CSR, float32 values, sorted contiguous arrays) for repeated ``run(B)`` calls. For N = 16 and
    32 it keeps one buffer the size of B between calls (B's 64-byte-aligned copy, ALIGN_N)."""

    def __init__(self, A, *, threads: int | None = None, blocks_per_thread: int = 8):
        if not sp.issparse(A):
            raise TypeError(f"A must be a SciPy sparse matrix, got {type(A).__name__}")
        csr = sp.csr_array(A)
        self.shape = tuple(int(s) for s in csr.shape)
        self.nnz = int(csr.nnz)
        self.indptr = np.ascontiguousarray(csr.indptr)
        self.indices = np.ascontiguousarray(csr.indices)
        if np.iscomplexobj(csr.data):
            raise TypeError("A has complex values; the CPU SpMM is real float32")
        self.data = np.ascontiguousarray(csr.data, dtype=np.float32)
        self.threads = default_threads() if threads is None else int(threads)
        if self.threads < 1:
            raise ValueError(f"threads is {threads}, expected >= 1")
        self.bounds = row_blocks(self.indptr, self.threads * blocks_per_thread if self.threads > 1 else 1)
        self._spare: list[np.ndarray] = []  # an aligned buffer for B (ALIGN_N), reused by the next call

    def _aligned(self, B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """B copied into a 64-byte-aligned buffer: the spare one when it is free and big enough (concurrent calls
        each take their own), else a new one; (the copy, its uint8 buffer to give back)."""
        try:
            raw = self._spare.pop()  # atomic: a concurrent run gets IndexError and a buffer of its own
        except IndexError:
            raw = None
        if raw is None or raw.size < B.nbytes + ALIGN_BYTES:
            raw = np.empty(B.nbytes + ALIGN_BYTES, dtype=np.uint8)
        off = -raw.ctypes.data % ALIGN_BYTES
        Ba = raw[off:off + B.nbytes].view(np.float32).reshape(B.shape)
        np.copyto(Ba, B)
        return Ba, raw

    def run(self, B, out: np.ndarray | None = None) -> np.ndarray:
        """C = A @ B in float32 (B converted to C-contiguous float32 when it is not). ``out``: a C-contiguous
        float32 array of shape (n_rows, N) to write into. A 1-D B gives a 1-D C."""
        B = np.asarray(B)
        vector = B.ndim == 1
        B2 = B.reshape(-1, 1) if vector else B
        if B2.ndim != 2 or B2.shape[0] != self.shape[1]:
            raise ValueError(f"B has shape {B.shape}, expected ({self.shape[1]}, N) or ({self.shape[1]},)")
        B2 = np.ascontiguousarray(B2, dtype=np.float32)
        shape = (self.shape[0], B2.shape[1])
        if out is None:
            C = np.empty(shape, dtype=np.float32)
        else:
            C = out.reshape(shape) if vector else out
            if C.shape != shape or C.dtype != np.float32 or not C.flags.c_contiguous:
                raise ValueError(f"out is {C.dtype} {C.shape} (contiguous: {C.flags.c_contiguous}), "
                                 f"expected C-contiguous float32 {shape}")
        raw = None
        if shape[1] in ALIGN_N and B2.ctypes.data % ALIGN_BYTES and self.nnz >= 2 * self.shape[1]:
            B2, raw = self._aligned(B2)  # worth a copy where each row of B is gathered twice or more on average
        spans = list(zip(self.bounds[:-1].tolist(), self.bounds[1:].tolist()))
        if self.threads == 1 or len(spans) <= 1 or self.nnz * shape[1] < MIN_PARALLEL_FMAS:
            _rows(self.indptr, self.indices, self.data, B2, C, 0, self.shape[0])
        else:
            pool = threads_pool("cpu-spmm", self.threads)
            for f in [pool.submit(_rows, self.indptr, self.indices, self.data, B2, C, r0, r1) for r0, r1 in spans]:
                f.result()
        if raw is not None and not self._spare:
            self._spare.append(raw)
        return C.reshape(-1) if vector else C


def cpu_spmm(A, B, *, threads: int | None = None, out=None) -> np.ndarray:
    """One product C = A @ B (float32); for repeated products keep a ``CpuCsr(A)``."""
    return CpuCsr(A, threads=threads).run(B, out)
