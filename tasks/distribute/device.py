"""What a worker runs on its device: move a shard there, build its SpMM plan, time the kernel.

Shared by the one-shot tasks and the resident actors. Runs inside Dask workers: imports neither Prefect nor Dask.
Under dask-cuda each worker sees one GPU (``CUDA_VISIBLE_DEVICES`` set per worker), so "the GPU" is device 0.
"""
from __future__ import annotations

import os
import socket
import threading
import time

import numpy as np

from configs.names import BASE_FORMAT
from kernels import transfer
from kernels.spmm import SpmmPlan, gpu_available  # noqa: F401  (gpu_available re-exported: dev.gpu_available())


def worker_device(device: str = "auto") -> bool:
    """Whether this task or actor runs on the GPU (``device``: "auto", "gpu"/"cuda" or "cpu"); on the GPU it first
    makes CuPy's allocator safe under Python's garbage collector (`use_gc_safe_allocator`)."""
    on_gpu = gpu_available() if device == "auto" else device in ("cuda", "gpu")
    if on_gpu:
        use_gc_safe_allocator()
    return on_gpu


# CuPy's memory pool drawing its blocks from RMM, once `use_gc_safe_allocator` set it: (pool, RMM's allocator).
_RMM_BACKED_POOL: tuple | None = None
_POOL_LOCK = threading.Lock()


def use_gc_safe_allocator() -> None:
    """Where CuPy allocates each array straight from RMM (dask-cuda's ``rmm_allocator_external_lib_list=["cupy"]``,
    ``dask cuda worker --set-rmm-allocator-for-libs cupy``), put CuPy's own memory pool between them: the pool takes
    its blocks from RMM, arrays return theirs to the pool.

    Why: RMM's ``DeviceBuffer.__dealloc__`` releases the GIL while it frees (rmm 26). A buffer freed by the cyclic
    garbage collector then lets the worker's other threads (event loop, actor thread, profiler) run in the middle of
    a collection, which CPython does not survive (python/cpython#112564): on 2 H100s the multi-GPU tests' workers
    died with "Segmentation fault ... Garbage-collecting" in random threads, and only with the RMM allocator. Behind
    CuPy's pool an array's memory goes back to the pool (no GIL released); RMM buffers are freed only by
    `release_device_memory`, outside any collection. Idempotent; does nothing under any other allocator."""
    global _RMM_BACKED_POOL
    import cupy
    with _POOL_LOCK:  # a task thread and the actor thread may start at once; one pool, set once
        current = cupy.cuda.get_allocator()
        if _RMM_BACKED_POOL is not None and current == _RMM_BACKED_POOL[0].malloc:
            return
        if not str(getattr(current, "__module__", "")).startswith("rmm"):
            return
        pool = cupy.cuda.MemoryPool(current)
        cupy.cuda.set_allocator(pool.malloc)
        _RMM_BACKED_POOL = (pool, current)


def device_name(on_gpu: bool) -> str:
    if on_gpu:
        import cupy
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    return f"cpu:{socket.gethostname()}"


class Timer:
    """Wall time of a region in ms: CUDA events on the current stream on GPU, perf_counter on CPU."""

    def __init__(self, on_gpu: bool):
        self.on_gpu = on_gpu
        self.ms = 0.0

    def __enter__(self):
        if self.on_gpu:
            import cupy
            self._start, self._stop = cupy.cuda.Event(), cupy.cuda.Event()
            self._start.record()
        else:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.on_gpu:
            import cupy
            self._stop.record()
            self._stop.synchronize()  # synchronize!
            self.ms = float(cupy.cuda.get_elapsed_time(self._start, self._stop))
        else:
            self.ms = (time.perf_counter() - self._t0) * 1e3
        return False


class _EmptyPlan:
    """A shard without TC blocks (empty rows, or no rows at all): C is zeros, no kernel launch."""

    choice = {"kernel": "empty", "reason": "shard has no TC blocks", "predicted_ms": 0.0}

    def __init__(self, n_rows: int, on_gpu: bool):
        self.n_rows, self.on_gpu = int(n_rows), on_gpu

    def run(self, B, out=None, accumulate: bool = False):
        xp = np
        if self.on_gpu:
            import cupy as xp
        if out is not None:  # C (+)= 0
            if not accumulate:
                out[...] = 0
            return out
        return xp.zeros((self.n_rows, B.shape[1]), dtype=np.float32)


def oneshot_spmm_kw(spmm_kw: dict | None) -> dict:
    """A one-shot shard's SpmmPlan options: its product runs once, so no autotune unless ``spmm_kw`` asks for it.
    Timing the candidates cannot pay back in one call: R-MAT 21M on an H100 (.ab/firstrun.py, 2026-11-28), the
    first run took 0.80 s with the default autotune (csr-rows then, 3.3 ms a call) and 0.07 s without (the
    model's metcf-split, 5.1 ms a call)."""
    return {"autotune": False, **(spmm_kw or {})}


def make_spmm_plan(S, on_gpu: bool, dtype="float32", spmm_kw: dict | None = None):
    """``kernels.spmm.SpmmPlan(S, device=..., dtype=..., out_dtype=float32, **spmm_kw)`` on this worker's device
    (its own kernel selector). C is float32 for every precision: the overlap's second kernel accumulates into it,
    and a half C would round each partial sum (bfloat16 C, as uint16 bits, could not be added on the host at all)."""
    if S.n_blocks == 0:
        return _EmptyPlan(S.shape[0], on_gpu)
    return SpmmPlan(S, device="gpu" if on_gpu else "cpu", dtype=dtype, out_dtype=np.float32, **(spmm_kw or {}))


def warm_worker(formats=(BASE_FORMAT,), dtypes=("float32",), device: str = "auto", n_cols: int = 256) -> dict:
    """Load what a worker's first shard would: for each format and precision a plan on a small seeded matrix
    (conversion, upload, the kernels' modules from CuPy's cache, cuSPARSE's handle) and one run of every kernel
    its operators own, plus the staging buffers of `kernels.transfer`. A fresh worker paid this inside its first
    shard's plan: about 230 ms on the H100 x4 (a 5.2M-nnz shard planned in 255 ms there, 28 ms in a warm process).
    Returns ``{"ms": time taken, "failed": {"format/dtype/kernel": error}}`` (a kernel that refuses the small
    matrix is left cold; its first real shard loads it). Off the GPU: nothing to load, ms 0."""
    if not worker_device(device):
        return {"ms": 0.0, "failed": {}}
    import cupy
    import scipy.sparse as sp

    t0, failed = time.perf_counter(), {}
    rng = np.random.default_rng(0)
    A = sp.random_array((512, 512), density=0.05, format="csr", dtype=np.float32, rng=rng)
    transfer.to_host(transfer.to_device(np.zeros(1 << 23, np.float32)))  # 32 MiB: staged, pinned buffers made
    for fmt in formats:
        for dtype in dtypes:
            try:
                plan = SpmmPlan(A, device="gpu", dtype=dtype, format=fmt, out_dtype=np.float32, autotune=False)
            except (ValueError, TypeError):  # a format without this precision: nothing of it to load
                continue
            B = cupy.asarray(plan.precision.to_storage(rng.standard_normal((512, n_cols), dtype=np.float32)))
            for kernel in plan.kernels:
                try:
                    plan.run(B, kernel=kernel)
                except (ValueError, TypeError, RuntimeError) as err:
                    failed[f"{fmt}/{dtype}/{kernel}"] = f"{type(err).__name__}: {err}"
    cupy.cuda.Device().synchronize()
    return {"ms": (time.perf_counter() - t0) * 1e3, "failed": failed}


def to_storage(x, prec):
    """float32 rows (NumPy or CuPy) -> the precision's storage dtype on the same device (bfloat16: uint16 bits)."""
    if prec.name == "bfloat16":
        from kernels.precision import to_bf16_bits
        return to_bf16_bits(x)
    return x.astype(prec.storage_dtype, copy=False)


# Row gather / scatter of whole rows in 16-byte words: the packs of the halo exchange and the row split's C -> B
# stores move 0.2-0.3 GB per iteration at 2 GPUs (N = 256), and CuPy's take / fancy assignment move 4 bytes per
# thread with an index division each. One block row (threadIdx.y) per matrix row; plain copies, so bitwise.
_ROWS16_SRC = r"""
extern "C" __global__ void gather_rows16(const uint4* __restrict__ src, const long long* __restrict__ idx,
                                         uint4* __restrict__ out, long long n_rows, int words) {
    long long r = (long long)blockIdx.x * blockDim.y + threadIdx.y;
    if (r >= n_rows) return;
    const uint4* s = src + idx[r] * words;
    uint4* o = out + r * words;
    for (int w = threadIdx.x; w < words; w += blockDim.x) o[w] = s[w];
}
extern "C" __global__ void scatter_rows16(const uint4* __restrict__ src, const long long* __restrict__ idx,
                                          uint4* __restrict__ out, long long n_rows, int words) {
    long long r = (long long)blockIdx.x * blockDim.y + threadIdx.y;
    if (r >= n_rows) return;
    const uint4* s = src + r * words;
    uint4* o = out + idx[r] * words;
    for (int w = threadIdx.x; w < words; w += blockDim.x) o[w] = s[w];
}
"""
_ROWS16: dict = {}


def _rows16_ok(a, b, idx) -> bool:
    """Both 2-D, C-ordered, one dtype and row width, rows of whole 16-byte words at 16-byte aligned addresses,
    int64 indices on the device."""
    row_bytes = a.shape[1] * a.dtype.itemsize if a.ndim == 2 else 0
    return (a.ndim == b.ndim == 2 and a.dtype == b.dtype and a.shape[1] == b.shape[1] and row_bytes % 16 == 0
            and a.flags.c_contiguous and b.flags.c_contiguous and a.data.ptr % 16 == 0 and b.data.ptr % 16 == 0
            and idx.dtype == np.int64 and idx.ndim == 1 and hasattr(idx, "__cuda_array_interface__"))


def _rows16(name: str, src, idx, out) -> None:
    import cupy
    fn = _ROWS16.get(name)
    if fn is None:
        fn = _ROWS16[name] = cupy.RawKernel(_ROWS16_SRC, name)
    n, words = int(idx.shape[0]), src.shape[1] * src.dtype.itemsize // 16
    if n == 0:
        return
    if CHECK_ROWS:
        _check_rows(name, src, idx, out)
    bx = min(words, 256)
    by = max(1, 256 // bx)
    fn(((n + by - 1) // by,), (bx, by), (src, idx, out, np.int64(n), np.int32(words)))


# TCSPMM_CHECK_ROWS=1: every 16-byte row gather / scatter checks its indices and row counts on the host first (one
# device sync each): an out-of-range index becomes a Python error naming the call instead of an illegal address
# that surfaces at the stream's next sync, in whatever runs then.
CHECK_ROWS = os.environ.get("TCSPMM_CHECK_ROWS", "") not in ("", "0")


def _check_rows(name: str, src, idx, out) -> None:
    n = int(idx.shape[0])
    indexed, counted = (src, out) if name.startswith("gather") else (out, src)
    lo, hi = (int(idx.min()), int(idx.max()))
    if counted.shape[0] < n or lo < 0 or hi >= indexed.shape[0]:
        raise IndexError(f"{name}: {n} indices in [{lo}, {hi}] for {indexed.shape[0]} indexed rows and "
                         f"{counted.shape[0]} counted rows")


def high_priority_stream():
    """A blocking CuPy stream at the device's highest priority (a plain one where CuPy's Stream takes none).
    CUDA clamps a priority beyond the device's range to the range's end (``cudaStreamCreateWithPriority``), and
    CuPy has no call for the range itself (``deviceGetStreamPriorityRange`` is not in CuPy 14): ask for more than
    any device offers."""
    import cupy
    try:
        return cupy.cuda.Stream(priority=-(1 << 20))
    except TypeError:
        return cupy.cuda.Stream()


def gather_rows(src, idx, out) -> None:
    """``out[j] = src[idx[j]]`` (rows; CuPy, on the current stream; NumPy arrays on the CPU path)."""
    if isinstance(src, np.ndarray):
        np.take(src, idx, axis=0, out=out)
    elif _rows16_ok(src, out, idx):
        _rows16("gather_rows16", src, idx, out)
    else:
        import cupy
        cupy.take(src, idx, axis=0, out=out)


def scatter_rows(src, idx, out) -> None:
    """``out[idx[j]] = src[j]`` (rows; distinct ``idx``; CuPy on the current stream, or NumPy)."""
    if not isinstance(src, np.ndarray) and _rows16_ok(src, out, idx):
        _rows16("scatter_rows16", src, idx, out)
    else:
        out[idx] = src


def to_device(x: np.ndarray, on_gpu: bool):
    """``x`` on this worker's GPU (large arrays through pinned staging: ``kernels.transfer``), or ``x``."""
    return transfer.to_device(x) if on_gpu else x


def to_host(x) -> np.ndarray:
    return transfer.to_host(x) if hasattr(x, "get") else np.asarray(x)


def time_kernel(plan, B, on_gpu: bool, repeats: int):
    """``repeats`` >= 1: one first run (its C is returned: the product, with any kernel selection or autotune it
    triggers) then ``repeats`` timed runs; ``repeats`` <= 0: one timed run only (the resident iterations, already
    warm). Returns (C, median ms, the first run's wall ms up to its completion)."""
    if repeats <= 0:
        with Timer(on_gpu) as t:
            C = plan.run(B)
        return C, t.ms, t.ms
    t0 = time.perf_counter()
    C = plan.run(B)
    if on_gpu:
        import cupy
        cupy.cuda.get_current_stream().synchronize()
    first_ms = (time.perf_counter() - t0) * 1e3
    times = []
    for _ in range(int(repeats)):
        with Timer(on_gpu) as t:
            plan.run(B)
        times.append(t.ms)
    return C, float(np.median(times)), first_ms


def release_device_memory(on_gpu: bool) -> None:
    """Return CuPy's cached blocks to the driver, or to RMM's pool under `use_gc_safe_allocator` (other processes
    share the GPU, e.g. the benchmark driver)."""
    if on_gpu:
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()
        if _RMM_BACKED_POOL is not None:
            _RMM_BACKED_POOL[0].free_all_blocks()


def cupy_allocator_name() -> str:
    """CuPy's current allocator by module and name: RMM's (``rmm.allocators.cupy.rmm_cupy_allocator``) where
    dask-cuda set it from ``rmm_allocator_external_lib_list``, "cupy MemoryPool over" it once
    `use_gc_safe_allocator` ran, else CuPy's memory pool's ``malloc``."""
    import cupy

    def name(alloc) -> str:
        return f"{getattr(alloc, '__module__', '')}.{getattr(alloc, '__qualname__', type(alloc).__name__)}"
    alloc = cupy.cuda.get_allocator()
    if _RMM_BACKED_POOL is not None and alloc == _RMM_BACKED_POOL[0].malloc:
        return f"cupy MemoryPool over {name(_RMM_BACKED_POOL[1])}"
    return name(alloc)
