"""The compilation and launch plumbing every format's launcher shares: ``cuda_source`` (a .cu with its local
headers inlined), ``module`` / ``function`` (NVRTC through cupy.RawModule, compiled once per (device, arch,
options, source) and cached), ``Bound`` (launches packed once, one ``cuLaunchKernel`` each), and the CUDA-event
timers (``median_ms``, ``issued_ms``, ``graph_ms``). CuPy is imported lazily; CuPy passes ``-arch`` for the
current device itself, and the cache key holds it so two devices of different arch each get their own module.

A source is the path of a ``.cu`` (each format keeps its own in ``kernels/formats/<name>/``); its ``#include
"x.cuh"`` lines resolve against the including file's folder, then ``kernels/cuda`` (what every format shares:
``tc_ops.cuh``), as ``nvcc -I kernels/cuda`` does.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np

from configs.threads import pool
from kernels.operands import FLAG_VEC

CUDA_DIR = Path(__file__).resolve().parent / "cuda"
MAX_GRID_Y = 65535
OPTIONS = ("-std=c++17",)  # every .cu's compile options before its config's -D ones (kernels.compile_check too)
_SLOT_OFFSETS = np.arange(32, dtype=np.uint64) * np.uint64(8)  # byte offsets of 64-bit argument slots


def cuda_source(path: Path, _seen: set | None = None) -> str:
    """The .cu text at ``path`` with its local ``#include "x.cuh"`` lines inlined, each header once (they are all
    ``#pragma once``; tc_ops.cuh is included by several): CuPy's on-disk kernel cache keys on the source string and
    options only, so an edited header must change the string."""
    path = Path(path).resolve()
    seen = set() if _seen is None else _seen
    seen.add(path)
    text = path.read_text()

    def inline(m):
        header = include_path(m.group(1), path.parent)
        return "" if header in seen else cuda_source(header, seen)

    return re.sub(r'#include "([\w./]+)"', inline, text)


def include_path(name: str, folder: Path) -> Path:
    """Where ``#include "name"`` in a file of ``folder`` resolves: that folder first, then kernels/cuda."""
    for base in (folder, CUDA_DIR):
        if (base / name).is_file():
            return (base / name).resolve()
    raise FileNotFoundError(f'#include "{name}" in {folder}: not there nor in {CUDA_DIR}')


@functools.lru_cache(maxsize=None)
def _compiled(device_id: int, arch: str, options: tuple[str, ...], source: Path):
    import cupy

    with cupy.cuda.Device(device_id):
        mod = cupy.RawModule(code=cuda_source(source), options=options, backend="nvrtc")
        mod.compile()
    return mod


def module(config, source: Path):
    """The compiled RawModule of ``source`` (a .cu path; ``config`` any object with ``defines()``) for the current
    device (sm_80 or newer)."""
    import cupy

    dev = cupy.cuda.Device()
    arch = str(dev.compute_capability)
    if int(arch) < 80:
        raise RuntimeError(f"the TF32 mma.m16n8k8 kernels need sm_80 or newer, found sm_{arch}")
    return _compiled(int(dev.id), arch, (*OPTIONS, *config.defines()), source)


_FUNCTIONS: dict = {}


def function(name: str, config, source: Path):
    """A kernel of the module, cached per (device, config object, name, source): the launch path then costs one
    dict lookup (module() queries the device's arch, and hashing a config walks its fields), which matters for
    small matrices, where host overhead is most of a call."""
    import cupy

    key = (cupy.cuda.runtime.getDevice(), id(config), name, source)
    hit = _FUNCTIONS.get(key)
    if hit is not None and hit[0] is config:
        return hit[1]
    fn = module(config, source).get_function(name)
    _FUNCTIONS[key] = (config, fn)  # holding config keeps its id from being reused by another object
    return fn


def free_device_bytes(xp=None) -> int | None:
    """Bytes the next allocation on the current device can take: free device memory plus CuPy's pool's cached
    free blocks; None (no limit) for ``xp`` NumPy (a CPU twin)."""
    if xp is np:
        return None
    if xp is None:
        import cupy as xp
    return int(xp.cuda.runtime.memGetInfo()[0]) + int(xp.get_default_memory_pool().free_bytes())


def in_background(name: str, fn, *args):
    """``fn(*args)`` on the one-thread pool ``name`` (configs.threads.pool), on the caller's current CUDA device:
    its Future. A plan builds there what overlaps its structure statistics, which count on threads without the
    GIL, and its fallback's arrays (kernels.spmm)."""
    try:
        import cupy

        device = cupy.cuda.Device(cupy.cuda.runtime.getDevice())
    except Exception:  # no CuPy or no driver: no device to carry over (a plan on a pretend GPU, in the CPU tests)
        device = None

    def on_device():
        if device is None:
            return fn(*args)
        with device:
            return fn(*args)

    return pool(name, 1).submit(on_device)


class Bound:
    """Kernel launches with their arguments packed once, for repeated calls on the same buffers: each launch is
    one ``cuLaunchKernel`` through CuPy's driver binding with a prebuilt parameter array, so a call costs the
    driver's launch and nothing else (CuPy's RawKernel call packs every argument anew, ~6-8 us for 13 arguments
    on the H200 against ~4 us for the bare launch: docs/kernels-notes.md, "Session 6"). Built by ``bind_*``
    after the same checks as the launchers; ``set_io`` re-points B and out (and re-derives the float4 flag from
    their alignment) without re-checking: same shapes and dtypes only. ``__call__(stream_ptr)`` launches on that
    stream (capturable into a CUDA graph). Holds B, out and every array it points to, so none is freed under it."""

    __slots__ = ("B", "out", "_launches", "_io", "_vec_n", "_keep")

    def __init__(self, B, out, vec_n: int):
        self.B, self.out, self._launches, self._io, self._vec_n, self._keep = B, out, [], [], vec_n, []

    def add(self, fn, grid, block, args, shared_mem: int = 0, *, b_at=None, out_at=None, flags_at=None):
        """Pack one launch of RawKernel ``fn``; ``*_at``: the indices of B, out and flags in ``args``."""
        vals = np.array([_arg_bits(a) for a in args], dtype=np.uint64)
        params = slot_addresses(vals)
        grid, block = tuple(grid) + (1,) * (3 - len(grid)), tuple(block) + (1,) * (3 - len(block))
        self._launches.append((fn.kernel.ptr, *grid, *block, int(shared_mem), int(params.ctypes.data)))
        self._io.append((vals, b_at, out_at, flags_at))
        self._keep.append((args, vals, params))  # the parameter arrays and the device arrays they point to

    def set_io(self, B, out) -> None:
        """Point every launch at new B and out of the same shape and dtype (the caller checked that)."""
        vec = int(B.shape[1]) % self._vec_n == 0 and B.data.ptr % 16 == 0 and out.data.ptr % 16 == 0
        for vals, b_at, out_at, flags_at in self._io:
            if b_at is not None:
                vals[b_at] = B.data.ptr
            if out_at is not None:
                vals[out_at] = out.data.ptr
            if flags_at is not None:
                vals[flags_at] = (int(vals[flags_at]) & ~FLAG_VEC) | (FLAG_VEC if vec else 0)
        self.B, self.out = B, out

    def __call__(self, stream_ptr: int):
        for f, gx, gy, gz, bx, by, bz, smem, params in self._launches:
            _launch_kernel(f, gx, gy, gz, bx, by, bz, smem, stream_ptr, params, 0)
        return self.out


def slot_addresses(vals: np.ndarray) -> np.ndarray:
    """The parameter array cuLaunchKernel reads: the address of each 64-bit slot of ``vals`` (uint64, kept alive by
    the caller until the launch returns; the driver copies the arguments at the launch)."""
    n = len(vals)
    offsets = _SLOT_OFFSETS[:n] if n <= len(_SLOT_OFFSETS) else np.arange(n, dtype=np.uint64) * np.uint64(8)
    return offsets + np.uint64(vals.ctypes.data)


def launch_slots(fn, grid: tuple, block: tuple, stream_ptr: int, vals: np.ndarray, shared_mem: int = 0) -> None:
    """One launch of RawKernel ``fn`` on ``stream_ptr`` with its arguments already as 64-bit slots (`_arg_bits`,
    `float_bits`): what a caller issuing a kernel per call on raw addresses uses (kernels.edge)."""
    params = slot_addresses(vals)  # held until the launch returns
    _launch_kernel(fn.kernel.ptr, *grid, *block, int(shared_mem), stream_ptr, int(params.ctypes.data), 0)


def float_bits(x: float) -> int:
    """A float kernel argument as cuLaunchKernel reads its slot: the float32 bits in the low 4 bytes."""
    return int(np.float32(x).view(np.uint32))


def _launch_kernel(*args):
    from cupy.cuda import driver

    global _launch_kernel
    _launch_kernel = driver.launchKernel  # bound once: the call then costs the Cython wrapper only
    return _launch_kernel(*args)


def _arg_bits(a) -> int:
    """A kernel argument as the 64-bit slot cuLaunchKernel reads: a device pointer, or an integer scalar
    (int32 in the low 4 bytes, little-endian, which is what the kernel reads for an int parameter)."""
    if isinstance(a, (np.integer, int)):
        return int(a) & 0xFFFF_FFFF_FFFF_FFFF
    return int(a.data.ptr)

def tf32_round(x):
    """float32 cupy array rounded to TF32 (10 mantissa bits, to nearest, ties away: what cvt.rna.tf32.f32 does),
    low 13 bits cleared; infinities and NaN unchanged."""
    import cupy

    bits = x.view(cupy.uint32)
    return cupy.where(cupy.isfinite(x), (bits + cupy.uint32(0x1000)) & cupy.uint32(0xFFFFE000), bits).view(
        cupy.float32)



def _run(out, *launches):
    """Launch (fn, grid, block, args, shared_mem, ...) tuples through CuPy's RawKernel call."""
    for ln in launches:
        if ln is not None:
            fn, grid, block, args, smem = ln[:5]
            fn(grid, block, args, shared_mem=smem)
    return out


def _bind(B, out, *launches, vec_n: int = 4) -> Bound:
    """A Bound of the given launches; vec_n: the N divisor of the float4 path (4 for TF32, 8 for 16-bit)."""
    bound = Bound(B, out, vec_n)
    for ln in launches:
        if ln is not None:
            fn, grid, block, args, smem, b_at, out_at, flags_at = ln
            bound.add(fn, grid, block, args, smem, b_at=b_at, out_at=out_at, flags_at=flags_at)
    return bound

# Device timing with CUDA events. A timing replays (graph_ms) or issues (issued_ms) a batch of back-to-back calls
# worth about TARGET_MS; an autotune timing (SpmmPlan's candidates, the hybrid's Tensor Core part) spends less:
# TUNE_REPEATS batches of ~TUNE_TARGET_MS after TUNE_WARMUP calls. At 10 x 0.5 ms the timings took 0.04-0.08 s of
# a 1M-nonzero `auto` plan's 0.15-0.19 s; at 5 x 0.2 ms they take half of that, and 18 plans (R-MAT, SBM, mesh;
# float32, float16; three plans each) picked the kernel the full budget picks, within 1 % of its time (H200,
# docs/kernels-notes.md "Session 26"). At 5 x 0.1 ms a 1M plan took 0.81x the time of 5 x 0.2 ms (best of three
# alternating rounds, six plans) and chose the same kernels, within 0.3 % of their times ("Session 43").
# A call of at least TUNE_TARGET_MS is its own estimate after one warm-up call (its event-timed time is steady to
# ~1 %, and 3 warm-up + 3 estimate calls of a 1 ms kernel were 6 ms of a 10M-nonzero plan's ~25 ms per candidate),
# and a candidate whose estimate passes GIVE_UP x the best timed so far is not timed further (`time_bound`).
TARGET_MS = 0.5
TUNE_REPEATS, TUNE_WARMUP, TUNE_TARGET_MS = 5, 3, 0.1
GIVE_UP = 1.5


def median_ms(fn, *, repeats: int = 20, warmup: int = 5) -> float:
    """Median milliseconds of fn() on the current stream, each call bracketed by its own pair of events (host
    launch overhead included: what one call from Python costs; graph_ms measures the GPU work alone)."""
    import cupy

    for _ in range(warmup):
        fn()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(repeats):
        start.record()  # on the current stream
        fn()
        stop.record()
        stop.synchronize()  # synchronize!
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def single_ms(fn, *, warmup: int = 3, long_ms: float = float("inf")) -> float:
    """One call's milliseconds, to size a timing batch: the median of 3 event-timed calls after ``warmup`` calls; a
    call of at least ``long_ms`` after the first is taken alone (the first call was its warm-up)."""
    import cupy

    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for i in range(warmup + 3):
        start.record()
        fn()
        stop.record()
        stop.synchronize()  # synchronize!
        ms = cupy.cuda.get_elapsed_time(start, stop)
        if i >= 1 and ms >= long_ms:
            return ms
        if i >= warmup:
            times.append(ms)
    return float(np.median(times))


def issued_ms(fn, *, calls: int | None = None, repeats: int = 5, warmup: int = 5, target_ms: float = TARGET_MS,
              long_ms: float = float("inf"), give_up_ms: float | None = None) -> float:
    """Milliseconds per call as a caller issues them: CUDA events around a Python loop of ``calls`` back-to-back
    fn() on the current stream, divided by ``calls``; the median of ``repeats`` loops. Where the host issues
    faster than the GPU runs, this is the GPU's time per call; where slower, the host's cost per call. What
    ``SpmmPlan`` autotunes with and what the benchmark reports as "as issued" (graph_ms is the GPU's alone).
    ``calls`` default: enough for ~target_ms per loop (3 to 200), from a single-call estimate (`single_ms` with
    ``long_ms``; ``give_up_ms`` as in `graph_ms`)."""
    import cupy

    if calls is None:
        one = single_ms(fn, warmup=warmup, long_ms=long_ms)
        if give_up_ms is not None and one > give_up_ms:
            return one
        calls = int(min(200, max(3, round(target_ms / max(one, 1e-3)))))
    else:
        for _ in range(warmup):
            fn()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(repeats):
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()  # synchronize!
        times.append(cupy.cuda.get_elapsed_time(start, stop) / calls)
    return float(np.median(times))


def graph_ms(fn, *, repeats: int = 20, warmup: int = 3, target_ms: float = TARGET_MS, max_calls: int = 200,
             long_ms: float = float("inf"), give_up_ms: float | None = None, hint_ms: float | None = None) -> float:
    """Median milliseconds of one fn() as the GPU runs it, without host launch overhead: fn is captured `calls`
    times back to back into a CUDA graph on a private stream (calls = enough for ~target_ms per replay, from a
    single-call estimate, `single_ms` with ``long_ms``), and each of `repeats` replays is bracketed by its own pair
    of events; returns the median of replay ms / calls. With ``give_up_ms``, an estimate above it is returned as it
    is (a candidate that cannot win an autotune). fn must launch only on the current stream and must not allocate
    (pass its outputs in); cuSPARSE through kernels.cusparse follows the current stream.

    The private stream is ordered after the caller's current stream's earlier work, and the caller's stream after
    the timing: a non-blocking stream does not wait for the legacy default stream (nor any other) by itself, so
    a plan's first autotune (or cuSPARSE's `tune`) right after an upload could run its kernels on arrays whose
    copies had not landed (tests/kernels/test_gpu_launch.py shows the race; the likely cause of the
    cudaErrorIllegalAddress in host_overhead.py's cuSPARSE tune after 11-12 matrices, H100 and H200, not seen in
    two full runs since).

    ``hint_ms``: a per-call estimate from elsewhere (an autotune's best candidate so far) that sizes the graph
    instead of `single_ms`'s synchronised calls; the graph's first launch is the warm-up and its first timed replay
    the estimate that ``give_up_ms`` is compared with."""
    import cupy

    caller = cupy.cuda.get_current_stream()
    stream = cupy.cuda.Stream(non_blocking=True)
    stream.wait_event(caller.record())
    with stream:
        one = single_ms(fn, warmup=warmup, long_ms=long_ms) if hint_ms is None else hint_ms
        if hint_ms is None and give_up_ms is not None and one > give_up_ms:
            caller.wait_event(stream.record())
            return one
        calls = int(min(max_calls, max(1, round(target_ms / max(one, 1e-3)))))
        stream.begin_capture()
        try:
            for _ in range(calls):
                fn()
        finally:
            graph = stream.end_capture()
        graph.launch(stream)  # upload and warm
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        times = []
        for _ in range(repeats):
            start.record(stream)
            graph.launch(stream)
            stop.record(stream)
            stop.synchronize()  # synchronize!
            times.append(cupy.cuda.get_elapsed_time(start, stop) / calls)
            if hint_ms is not None and give_up_ms is not None and times[0] > give_up_ms:
                break  # a candidate that cannot win: its first replay is its estimate
    caller.wait_event(stream.record())
    return float(np.median(times))


def time_bound(bound, how: str = "graph", repeats: int = TUNE_REPEATS, warmup: int = TUNE_WARMUP,
               target_ms: float = TUNE_TARGET_MS, best_ms: float | None = None) -> float:
    """Milliseconds per call of ``bound(stream_ptr)``, an autotune timing unless given another budget (a call of
    ``target_ms`` or more is estimated from one call after one warm-up; ``best_ms``, the best candidate timed so far:
    one whose estimate of at least ``target_ms`` passes GIVE_UP x it returns that estimate). "issued": a
    candidate is charged its host cost where that exceeds its GPU time (`issued_ms`); "graph": the GPU's time alone
    (`graph_ms`, a captured graph of back-to-back calls). SpmmPlan's autotune times candidates the way ``run``
    issues them from the third call on: with ``graphs`` (default) a replayed graph, whose host cost is one graph
    launch whatever the kernel, so "graph"; without, "issued". Why: a host-bound launcher (an operator without a
    packed ``bind``) made the tiled CVSE kernel (28 us on the GPU) measure its ~55 us host cost, and autotune kept
    the per-vector one (40 us) (H200, V = 8, 80 %, N = 256: docs/kernels-notes.md, "Session 12")."""
    import cupy

    if how == "graph":  # graph_ms / issued_ms looked up per call: tests/kernels/test_gpu_host_path.py counts them
        return graph_ms(lambda: bound(cupy.cuda.get_current_stream().ptr), repeats=repeats, warmup=warmup,
                        target_ms=target_ms, long_ms=target_ms, give_up_ms=_give_up(best_ms, target_ms),
                        hint_ms=best_ms)
    stream_ptr = cupy.cuda.get_current_stream().ptr
    return issued_ms(lambda: bound(stream_ptr), repeats=max(3, repeats // 2), warmup=warmup, target_ms=target_ms,
                     long_ms=target_ms, give_up_ms=_give_up(best_ms, target_ms))


def _give_up(best_ms: float | None, target_ms: float) -> float | None:
    """The estimate above which a candidate is not timed further: GIVE_UP x the best so far, and never below
    ``target_ms`` (a short call's one-call estimate carries its launch's host cost)."""
    return None if best_ms is None else max(GIVE_UP * best_ms, target_ms)


def copy_bandwidth_gbs(n_bytes: int = 1 << 30, repeats: int = 10) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written (METHOD.md)."""
    import cupy

    src = cupy.ones(n_bytes // 4, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    ms = median_ms(lambda: cupy.copyto(dst, src), repeats=repeats, warmup=2)
    del src, dst
    return 2 * n_bytes / (ms * 1e-3) / 1e9
