"""Host <-> device copies of large arrays through pinned staging buffers.

A copy from pageable NumPy memory goes through the driver's own small staging: measured at 1.5-1.8 GB/s on the
H100 hosts (a one-shot shard's 537 MB of B took 303 ms). Here the array moves in ``CHUNK``-byte pieces through
``BUFFERS`` page-locked buffers that the process allocates once: ``THREADS`` threads copy a piece into a free buffer
(NumPy's copy releases the GIL) while the copy engine moves the previous ones, each buffer reused only after its
event says its DMA finished. Arrays below ``MIN_BYTES`` take CuPy's plain copy (the staging's setup is not worth it).
Bytes are copied, never converted: the result is bitwise the input. Copies run on the current stream.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

MIN_BYTES = 32 << 20  # smaller arrays: cupy.asarray / .get()
CHUNK = 16 << 20  # bytes per staged piece
BUFFERS = 4  # pinned buffers of CHUNK bytes (64 MiB pinned per process)
THREADS = 4  # host threads per piece's memcpy

_lock = threading.Lock()
_staging = None


class _Staging:
    """The process's pinned buffers, their events and the copy threads (built on first use)."""

    def __init__(self):
        import cupy

        self.mem = [cupy.cuda.alloc_pinned_memory(CHUNK) for _ in range(BUFFERS)]
        self.host = [np.frombuffer(m, dtype=np.uint8, count=CHUNK) for m in self.mem]
        self.events = [None] * BUFFERS
        self.pool = ThreadPoolExecutor(THREADS, thread_name_prefix="tcspmm-stage")

    def wait(self, b: int) -> None:
        if self.events[b] is not None:
            self.events[b].synchronize()
            self.events[b] = None

    def record(self, b: int, stream) -> None:
        import cupy

        ev = cupy.cuda.Event(block=False, disable_timing=True)
        ev.record(stream)
        self.events[b] = ev

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        """dst[:] = src (uint8 views of equal length), in THREADS slices at once."""
        n = src.shape[0]
        step = -(-n // THREADS)
        jobs = [self.pool.submit(np.copyto, dst[i:i + step], src[i:i + step]) for i in range(0, n, step)]
        for j in jobs:
            j.result()


def _get() -> _Staging:
    global _staging
    if _staging is None:
        _staging = _Staging()
    return _staging


def _bytes(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(np.uint8)


def to_device(x: np.ndarray):
    """``cupy`` copy of host array ``x`` (made C-contiguous), bitwise equal, on the current device and stream; a
    device array (anything with ``__cuda_array_interface__``) goes to ``cupy.asarray`` as it is."""
    import cupy

    if hasattr(x, "__cuda_array_interface__"):
        return cupy.asarray(x)
    x = np.ascontiguousarray(x)
    if x.nbytes < MIN_BYTES:
        return cupy.asarray(x)
    out = cupy.empty(x.shape, dtype=x.dtype)
    src, dst = _bytes(x), out.data.ptr
    stream = cupy.cuda.get_current_stream()
    with _lock:
        st = _get()
        for k, off in enumerate(range(0, src.shape[0], CHUNK)):
            b, m = k % BUFFERS, min(CHUNK, src.shape[0] - off)
            st.wait(b)
            st.copy(st.host[b][:m], src[off:off + m])
            cupy.cuda.runtime.memcpyAsync(dst + off, st.host[b].ctypes.data, m,
                                          cupy.cuda.runtime.memcpyHostToDevice, stream.ptr)
            st.record(b, stream)
    return out


def to_host(x) -> np.ndarray:
    """NumPy copy of device array ``x`` (CuPy; NumPy passes through), bitwise equal; waits for the current
    stream's earlier work."""
    import cupy

    if not isinstance(x, cupy.ndarray):
        return np.asarray(x)
    x = cupy.ascontiguousarray(x)
    if x.nbytes < MIN_BYTES:
        return x.get()
    out = np.empty(x.shape, dtype=x.dtype)
    dst, src = _bytes(out), x.data.ptr
    stream = cupy.cuda.get_current_stream()
    pieces = [(off, min(CHUNK, dst.shape[0] - off)) for off in range(0, dst.shape[0], CHUNK)]
    with _lock:
        st = _get()

        def issue(k):
            off, m = pieces[k]
            b = k % BUFFERS
            st.wait(b)  # nothing pending on it: its piece was copied out before this issue
            cupy.cuda.runtime.memcpyAsync(st.host[b].ctypes.data, src + off, m,
                                          cupy.cuda.runtime.memcpyDeviceToHost, stream.ptr)
            st.record(b, stream)

        for k in range(min(BUFFERS, len(pieces))):
            issue(k)
        for k, (off, m) in enumerate(pieces):
            b = k % BUFFERS
            st.wait(b)
            st.copy(dst[off:off + m], st.host[b][:m])
            if k + BUFFERS < len(pieces):
                issue(k + BUFFERS)
    return out
