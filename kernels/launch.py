"""Thin launchers for kernels/cuda/metcf_spmm.cu: check (dtype, contiguity, shape, 64-bit limits), allocate,
launch with grid/block as named locals. CuPy is imported lazily; the module compiles once per (device, arch,
options) through NVRTC (cupy.RawModule). CuPy passes ``-arch`` for the current device itself; the cache key
holds it so two devices of different arch each get their own module.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kernels.config import CONFIG, KernelConfig
from kernels.formats.metcf import METCF, balanced_items
from kernels.indexing import INT32_MAX
from kernels.operands import FLAG_VEC, check_b_out

CUDA_DIR = Path(__file__).resolve().parent / "cuda"
SOURCE = "metcf_spmm.cu"
MAX_GRID_Y = 65535


def cuda_source(name: str = SOURCE, _seen: set | None = None) -> str:
    """The .cu text with its local ``#include "x.cuh"`` lines inlined, each header once (they are all ``#pragma
    once``; tc_ops.cuh is included by several): CuPy's on-disk kernel cache keys on the source string and options
    only, so an edited header must change the string."""
    seen = set() if _seen is None else _seen
    seen.add(name)
    text = (CUDA_DIR / name).read_text()
    return re.sub(r'#include "([\w.]+)"',
                  lambda m: "" if m.group(1) in seen else cuda_source(m.group(1), seen), text)


@functools.lru_cache(maxsize=None)
def _compiled(device_id: int, arch: str, options: tuple[str, ...], source: str = SOURCE):
    import cupy

    with cupy.cuda.Device(device_id):
        mod = cupy.RawModule(code=cuda_source(source), options=options, backend="nvrtc")
        mod.compile()
    return mod


def module(config: KernelConfig = CONFIG, source: str = SOURCE):
    """The compiled RawModule of ``source`` (a kernels/cuda file; ``config`` any object with ``defines()``) for the
    current device (sm_80 or newer)."""
    import cupy

    dev = cupy.cuda.Device()
    arch = str(dev.compute_capability)
    if int(arch) < 80:
        raise RuntimeError(f"the TF32 mma.m16n8k8 kernels need sm_80 or newer, found sm_{arch}")
    return _compiled(int(dev.id), arch, ("-std=c++17", *config.defines()), source)


_FUNCTIONS: dict = {}


def function(name: str, config: KernelConfig = CONFIG, source: str = SOURCE):
    """A kernel of the module, cached per (device, config object, name): the launch path then costs one dict
    lookup (module() queries the device's arch, and hashing a KernelConfig walks its fields), which matters for
    small matrices, where host overhead is most of a call."""
    import cupy

    key = (cupy.cuda.runtime.getDevice(), id(config), name, source)
    hit = _FUNCTIONS.get(key)
    if hit is not None and hit[0] is config:
        return hit[1]
    fn = module(config, source).get_function(name)
    _FUNCTIONS[key] = (config, fn)  # holding config keeps its id from being reused by another object
    return fn


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
        params = np.array([vals.ctypes.data + 8 * i for i in range(len(args))], dtype=np.uint64)
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


@dataclass
class KernelArrays:
    """ME-TCF arrays on the device in the dtypes the kernels take (int64 offsets, int32 column ids)."""

    shape: tuple[int, int]
    row_window_offset: object  # cupy int64 [n_windows + 1]
    tc_offset: object  # cupy int64 [n_blocks + 1]
    tc_local_id: object  # cupy uint8 [nnz]
    sparse_a_to_b: object  # cupy int32 [n_blocks * 8]
    data: object  # cupy float32 [nnz]
    row_window_offset_host: np.ndarray  # int64 copy, for the selector and the balance metadata
    _balance: dict | None = field(default=None, repr=False)
    _bitmap: object = field(default=None, repr=False)  # cupy uint32 [n_blocks, 4], built by `bitmap`
    _frag: object = field(default=None, repr=False)  # cupy float32 [n_blocks, 32, 4], built by `fragments`
    _pairs: object = field(default=None, repr=False)  # cupy int32 [n_blocks, 4, 2], built by `col_pairs`

    @property
    def n_windows(self) -> int:
        return int(self.row_window_offset_host.shape[0]) - 1

    @property
    def n_blocks(self) -> int:
        return int(self.row_window_offset_host[-1])

    @property
    def nnz(self) -> int:
        return int(self.data.shape[0])


def upload(M: METCF) -> KernelArrays:
    """Copy a host METCF to the current device, casting to the kernel dtypes."""
    import cupy

    return from_device_arrays(M.shape, *(cupy.asarray(a) for a in (M.row_window_offset, M.tc_offset, M.tc_local_id,
                                                                     M.sparse_a_to_b, M.data)))


def from_device_arrays(shape, row_window_offset, tc_offset, tc_local_id, sparse_a_to_b, data) -> KernelArrays:
    """Wrap ME-TCF arrays already on the device (e.g. from kernels.formats.metcf_gpu), casting dtypes."""
    import cupy

    n_rows, n_cols = (int(s) for s in shape)
    if n_cols > INT32_MAX:
        raise ValueError(f"A has {n_cols} columns; the kernels take int32 column ids (<= {INT32_MAX}), and B "
                         f"would need {n_cols} rows")
    n_windows = -(-n_rows // 16)
    if row_window_offset.shape[0] != n_windows + 1:
        raise ValueError(f"row_window_offset has {row_window_offset.shape[0]} entries, expected "
                         f"ceil(M / 16) + 1 = {n_windows + 1}")
    rwo = cupy.ascontiguousarray(row_window_offset, dtype=cupy.int64)
    rwo_host = cupy.asnumpy(rwo)  # synchronize!
    return KernelArrays(
        shape=(n_rows, n_cols), row_window_offset=rwo,
        tc_offset=cupy.ascontiguousarray(tc_offset, dtype=cupy.int64),
        tc_local_id=cupy.ascontiguousarray(tc_local_id, dtype=cupy.uint8),
        sparse_a_to_b=cupy.ascontiguousarray(sparse_a_to_b, dtype=cupy.int32).reshape(-1),
        data=cupy.ascontiguousarray(data, dtype=cupy.float32), row_window_offset_host=rwo_host)


def bitmap(dm: KernelArrays, config: KernelConfig = CONFIG):
    """The per-block occupancy bitmaps the register pipeline reads (uint32 [max(n_blocks, 1), 4], bit p of a
    block set when it holds local id p), built once on the device by metcf_bitmap. Raises ValueError when some
    block's local ids are not strictly increasing (not canonical ME-TCF: popcount addressing would be wrong)."""
    if dm._bitmap is not None:
        return dm._bitmap
    import cupy

    n_blocks = dm.n_blocks
    words = cupy.zeros((max(n_blocks, 1), 4), dtype=cupy.uint32)
    bad = cupy.zeros(1, dtype=cupy.int32)
    if n_blocks:
        threads = 256
        grid = (min(-(-n_blocks // threads), 1 << 20),)
        function("metcf_bitmap", config)(
            grid, (threads,), (dm.tc_offset, dm.tc_local_id, words, bad, np.int64(n_blocks)))
        if int(bad[0]):  # synchronize!
            raise ValueError("ME-TCF is not canonical: some TC block's tc_local_id values are not strictly "
                             "increasing (build it with kernels.formats.metcf.csr_to_metcf or metcf_gpu)")
    dm._bitmap = words
    return words


def tf32_round(x):
    """float32 cupy array rounded to TF32 (10 mantissa bits, to nearest, ties away: what cvt.rna.tf32.f32 does),
    low 13 bits cleared; infinities and NaN unchanged."""
    import cupy

    bits = x.view(cupy.uint32)
    return cupy.where(cupy.isfinite(x), (bits + cupy.uint32(0x1000)) & cupy.uint32(0xFFFFE000), bits).view(
        cupy.float32)


def fragments(dm: KernelArrays):
    """Every TC block's 128 values in mma fragment order (KernelConfig.a_dense): float32 [max(n_blocks, 1), 32, 4]
    with [b][lane][k] = A[r][c] of block b, lane = (r % 8) * 4 + c % 4, k = r // 8 + 2 * (c // 4) (the m16n8k8
    A fragment: a0 = (g, q), a1 = (g + 8, q), a2 = (g, q + 4), a3 = (g + 8, q + 4)); zeros where A has none.
    Values are stored rounded to TF32 (tf32_round), so the kernels feed them to the mma without converting."""
    if dm._frag is not None:
        return dm._frag
    import cupy

    frag = cupy.zeros((max(dm.n_blocks, 1), 32, 4), dtype=cupy.float32)
    if dm.nnz:
        block = cupy.searchsorted(dm.tc_offset, cupy.arange(dm.nnz, dtype=cupy.int64), side="right") - 1
        lid = dm.tc_local_id.astype(cupy.int64)
        r, c = lid >> 3, lid & 7
        flat = block * 128 + ((r & 7) * 4 + (c & 3)) * 4 + (r >> 3) + 2 * (c >> 2)
        frag.reshape(-1)[flat] = tf32_round(dm.data)
    dm._frag = frag
    return frag


def col_pairs(dm: KernelArrays):
    """sparse_a_to_b as pairs [n_blocks, 4, 2] int32: [b][q] = (a_to_b[b][q], a_to_b[b][q + 4]), the two B rows
    a lane with q = lane % 4 multiplies (one 8-byte load; the dense-fragment kernels read these). Padding (-1, the
    unused columns of a window's last block) is replaced by the block's first column: its A entries there are
    zeros, so the kernel loads without a padding test and a non-finite B value reaches only the window that
    already references its row (the contract of a dense 16 x 8 tile). Raises ValueError for a block without
    columns (not ME-TCF as the converters build it)."""
    if dm._pairs is None:
        import cupy

        cols = dm.sparse_a_to_b.reshape(-1, 8)
        if cols.shape[0] and bool((cols[:, 0] < 0).any()):  # synchronize!
            raise ValueError("ME-TCF has a TC block whose first column is padding (-1): every block must hold "
                             "at least one column (build it with kernels.formats.metcf.csr_to_metcf or metcf_gpu)")
        cols = cupy.where(cols < 0, cols[:, :1], cols)
        dm._pairs = cupy.ascontiguousarray(cols.reshape(-1, 2, 4).transpose(0, 2, 1))
        if dm._pairs.size == 0:
            dm._pairs = cupy.full((1, 4, 2), -1, dtype=cupy.int32)
    return dm._pairs


def a_arrays(dm: KernelArrays, config: KernelConfig):
    """(bitmap, frag) kernel arguments, built once per matrix: with a_dense (col_pairs, fragments), else (bitmap,
    bitmap): the kernel never reads the second one then (no stand-in allocation per call)."""
    if config.a_dense:
        return col_pairs(dm), fragments(dm)
    a = bitmap(dm, config)
    return a, a


def balance_metadata(dm: KernelArrays, config: KernelConfig = CONFIG) -> dict:
    """Strict-balance work items (kernels.formats.metcf.balanced_items) and the workspace slot layout.

    Window w's blocks [rwo[w], rwo[w+1]) touch items first = rwo[w] // BPI .. last = (rwo[w+1] - 1) // BPI.
    A window touching >= 2 items is split: it gets (last - first + 1) workspace slots from part_ptr[w].
    Windows touching != 1 item (split or empty) are finished by metcf_combine.
    """
    if dm._balance is not None:
        return dm._balance
    import cupy

    bpi = config.blocks_per_item
    rwo = dm.row_window_offset_host
    item_window, item_begin = balanced_items(rwo, bpi)
    if not np.array_equal(item_begin, np.arange(item_window.shape[0], dtype=np.int64) * bpi):
        raise AssertionError("balanced_items no longer returns items at multiples of blocks_per_item; "
                             "metcf_spmm_balanced recomputes item starts as item * BPI")
    nonempty = rwo[1:] > rwo[:-1]
    count = np.where(nonempty, (rwo[1:] - 1) // bpi - rwo[:-1] // bpi + 1, 0)
    part_ptr = np.zeros(dm.n_windows + 1, dtype=np.int64)
    np.cumsum(np.where(count >= 2, count, 0), out=part_ptr[1:])
    combine = np.flatnonzero(count != 1).astype(np.int64)
    dm._balance = {"item_window": cupy.asarray(item_window.astype(np.int64)), "part_ptr": cupy.asarray(part_ptr),
                   "combine_windows": cupy.asarray(combine), "n_items": int(item_window.shape[0]),
                   "n_slots": int(part_ptr[-1]), "n_combine": int(combine.shape[0])}
    return dm._balance


def _check_b_out(dm: KernelArrays, B, out, accumulate: bool = False):
    """(out, N, flags) by kernels.operands' one B / out contract: TF32, float32 C, float4 path at N % 4 == 0."""
    return check_b_out(dm.shape, "float32", B, out, None, accumulate, vec_elems=4)


def _spmm_block(N: int, config: KernelConfig, windows: int = 1) -> tuple[int, int]:
    """(threads per block, column chunks) for `windows` windows per block: each window gets
    min(ceil(N / warp_n), max_warps // windows) warps of warp_n columns; a chunk is the columns they cover."""
    slices = config.slices(N, windows)
    threads = 32 * windows * slices
    chunks = config.chunks(N, windows)
    if chunks > MAX_GRID_Y:
        raise ValueError(f"N = {N} needs {chunks} column chunks, more than gridDim.y = {MAX_GRID_Y}")
    return threads, chunks


def _window_launch(dm: KernelArrays, B, out, config: KernelConfig, accumulate: bool):
    """(out, launch or None): the checked arguments of one metcf_spmm_window launch."""
    out, N, flags = _check_b_out(dm, B, out, accumulate)
    if dm.n_windows == 0:
        return out, None
    wpb = config.windows_per_block
    threads, chunks = _spmm_block(N, config, wpb)
    grid, block = (-(-dm.n_windows // wpb), chunks), (threads,)
    args = (dm.row_window_offset, dm.tc_offset, dm.tc_local_id, *a_arrays(dm, config), dm.data, dm.sparse_a_to_b, B,
            out, np.int64(dm.shape[0]), np.int64(N), np.int32(flags))
    return out, (function("metcf_spmm_window", config), grid, block, args, 0, 7, 8, 11)


def spmm_window(dm: KernelArrays, B, out=None, config: KernelConfig = CONFIG, *, accumulate: bool = False):
    """C = A @ B, one thread block per (windows_per_block windows, column chunk). Writes every element of out
    (``accumulate``: out += A @ B, each element read and written once)."""
    out, ln = _window_launch(dm, B, out, config, accumulate)
    return _run(out, ln)


def bind_window(dm: KernelArrays, B, out, config: KernelConfig = CONFIG, *, accumulate: bool = False) -> Bound:
    """spmm_window's launch, checked and packed once (Bound)."""
    return _bind(B, *_window_launch(dm, B, out, config, accumulate))


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


def split_shape(N: int, ksplit: int, config: KernelConfig = CONFIG) -> tuple[int, int, int]:
    """(threads per block, column chunks, dynamic shared bytes) of metcf_spmm_split: the window kernel's column
    slices (at most max_warps), each with ksplit warps; the reduction tree keeps ksplit / 2 accumulators per slice."""
    if ksplit < 1 or ksplit & (ksplit - 1):
        raise ValueError(f"ksplit is {ksplit}, expected a power of two >= 1")
    slices = config.slices(N)
    if slices * ksplit > config.split_max_warps:
        raise ValueError(f"ksplit {ksplit} x {slices} column slices = {slices * ksplit} warps, more than "
                         f"KernelConfig.split_max_warps = {config.split_max_warps}")
    chunks = config.chunks(N)
    if chunks > MAX_GRID_Y:
        raise ValueError(f"N = {N} needs {chunks} column chunks, more than gridDim.y = {MAX_GRID_Y}")
    smem = (ksplit // 2) * slices * 32 * config.warp_slices * 16 * 4
    return 32 * slices * ksplit, chunks, smem


def ksplits(N: int, config: KernelConfig = CONFIG) -> list[int]:
    """Every ksplit >= 2 metcf_spmm_split takes at N columns: powers of two while column slices x ksplit fits
    split_max_warps (the candidates autotune times and the selector models)."""
    slices, out = config.slices(N), []
    while slices * 2 ** (len(out) + 1) <= config.split_max_warps:
        out.append(2 ** (len(out) + 1))
    return out


def max_ksplit(N: int, config: KernelConfig = CONFIG) -> int:
    """The largest power-of-two ksplit metcf_spmm_split takes at N columns (1 when no split fits)."""
    return (ksplits(N, config) or [1])[-1]


def _split_launch(dm: KernelArrays, B, out, config: KernelConfig, ksplit: int, accumulate: bool):
    if not config.a_regs:
        raise ValueError("metcf_spmm_split needs KernelConfig.a_regs (the v0 pipeline syncs the whole block)")
    out, N, flags = _check_b_out(dm, B, out, accumulate)
    threads, chunks, smem = split_shape(N, ksplit, config)
    if dm.n_windows == 0:
        return out, None
    args = (dm.row_window_offset, dm.tc_offset, dm.tc_local_id, *a_arrays(dm, config), dm.data, dm.sparse_a_to_b, B,
            out, np.int64(dm.shape[0]), np.int64(N), np.int32(flags), np.int32(ksplit))
    return out, (function("metcf_spmm_split", config), (dm.n_windows, chunks), (threads,), args, smem, 7, 8, 11)


def spmm_split(dm: KernelArrays, B, out=None, config: KernelConfig = CONFIG, *, ksplit: int,
               accumulate: bool = False):
    """C = A @ B, one thread block per (window, column chunk) with `ksplit` warps sharing each column slice's TC
    blocks (metcf_spmm_split: a fixed reduction tree, deterministic). Needs the register pipeline (a_regs)."""
    return _run(*_split_launch(dm, B, out, config, ksplit, accumulate))


def bind_split(dm: KernelArrays, B, out, config: KernelConfig = CONFIG, *, ksplit: int,
               accumulate: bool = False) -> Bound:
    """spmm_split's launch, checked and packed once (Bound)."""
    return _bind(B, *_split_launch(dm, B, out, config, ksplit, accumulate))


def workspace_elems(dm: KernelArrays, N: int, config: KernelConfig = CONFIG) -> int:
    """float32 elements of the strict-balance workspace for N columns (16 x N per split-window slot)."""
    return balance_metadata(dm, config)["n_slots"] * config.window_rows * int(N)


def _balanced_launches(dm: KernelArrays, B, out, workspace, config: KernelConfig, accumulate: bool):
    import cupy

    out, N, flags = _check_b_out(dm, B, out, accumulate)
    if dm.n_windows == 0:
        return out, None, None
    meta = balance_metadata(dm, config)
    ws_elems = workspace_elems(dm, N, config)
    if workspace is None or workspace.size < ws_elems or workspace.dtype != cupy.float32:
        workspace = cupy.empty(max(ws_elems, 1), dtype=cupy.float32)
    threads, chunks = _spmm_block(N, config)
    items = combine = None
    if meta["n_items"]:
        args = (dm.row_window_offset, dm.tc_offset, dm.tc_local_id, *a_arrays(dm, config), dm.data, dm.sparse_a_to_b,
                meta["item_window"], meta["part_ptr"], B, out, workspace, np.int64(dm.shape[0]), np.int64(N),
                np.int64(dm.n_blocks), np.int32(flags))
        items = (function("metcf_spmm_balanced", config), (meta["n_items"], chunks), (threads,), args, 0, 9, 10, 15)
    if meta["n_combine"]:
        cthreads = config.combine_threads
        grid, block = (meta["n_combine"], min(MAX_GRID_Y, -(-config.window_rows * N // cthreads))), (cthreads,)
        args = (meta["combine_windows"], meta["part_ptr"], workspace, out, np.int64(dm.shape[0]), np.int64(N),
                np.int32(flags))
        combine = (function("metcf_combine", config), grid, block, args, 0, None, 3, 6)
    return out, items, combine


def spmm_balanced(dm: KernelArrays, B, out=None, workspace=None, config: KernelConfig = CONFIG, *,
                  accumulate: bool = False):
    """C = A @ B with strict balance (BPI TC blocks per thread block) and a deterministic combine pass
    (``accumulate``: out += A @ B)."""
    return _run(*_balanced_launches(dm, B, out, workspace, config, accumulate))


def bind_balanced(dm: KernelArrays, B, out, workspace=None, config: KernelConfig = CONFIG, *,
                  accumulate: bool = False) -> Bound:
    """spmm_balanced's two launches, checked and packed once (Bound)."""
    return _bind(B, *_balanced_launches(dm, B, out, workspace, config, accumulate))


# Device timing with CUDA events: warm-up, then the median of `repeats` single-call timings.
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


def issued_ms(fn, *, calls: int | None = None, repeats: int = 5, warmup: int = 5, target_ms: float = 0.5) -> float:
    """Milliseconds per call as a caller issues them: CUDA events around a Python loop of ``calls`` back-to-back
    fn() on the current stream, divided by ``calls``; the median of ``repeats`` loops. Where the host issues
    faster than the GPU runs, this is the GPU's time per call; where slower, the host's cost per call. What
    ``SpmmPlan`` autotunes with and what the benchmark reports as "as issued" (graph_ms is the GPU's alone).
    ``calls`` default: enough for ~target_ms per loop (3 to 200), from a single-call estimate."""
    import cupy

    for _ in range(warmup):
        fn()
    if calls is None:
        calls = int(min(200, max(3, round(target_ms / max(median_ms(fn, repeats=3, warmup=0), 1e-3)))))
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


def graph_ms(fn, *, repeats: int = 20, warmup: int = 3, target_ms: float = 0.5, max_calls: int = 200) -> float:
    """Median milliseconds of one fn() as the GPU runs it, without host launch overhead: fn is captured `calls`
    times back to back into a CUDA graph on a private stream (calls = enough for ~target_ms per replay, from a
    single-call estimate), and each of `repeats` replays is bracketed by its own pair of events; returns the
    median of replay ms / calls. fn must launch only on the current stream and must not allocate (pass its
    outputs in); cuSPARSE through kernels.cusparse follows the current stream."""
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        one = median_ms(fn, repeats=3, warmup=warmup)
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
    return float(np.median(times))


def copy_bandwidth_gbs(n_bytes: int = 1 << 30, repeats: int = 10) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written (METHOD.md)."""
    import cupy

    src = cupy.ones(n_bytes // 4, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    ms = median_ms(lambda: cupy.copyto(dst, src), repeats=repeats, warmup=2)
    del src, dst
    return 2 * n_bytes / (ms * 1e-3) / 1e9
