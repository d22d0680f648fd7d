"""Thin launchers for ME-TCF's TF32 kernels (metcf_spmm.cu beside this file): check (dtype, contiguity, shape,
64-bit limits), allocate, launch with grid/block as named locals. Compiled through kernels.launch's NVRTC
plumbing (``function(name, config)``); CuPy is imported lazily.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kernels import launch
from kernels.formats.metcf.config import CONFIG, KernelConfig
from kernels.formats.metcf.container import METCF, balanced_items
from storage.indexing import INT32_MAX
from kernels.launch import MAX_GRID_Y, Bound, _bind, _run, tf32_round
from kernels.operands import check_b_out
from kernels.transfer import to_device

SOURCE = Path(__file__).resolve().parent / "metcf_spmm.cu"


def module(config: KernelConfig = CONFIG):
    """The compiled RawModule of metcf_spmm.cu with ``config``'s -D options, for the current device."""
    return launch.module(config, SOURCE)


def function(name: str, config: KernelConfig = CONFIG):
    """A kernel of metcf_spmm.cu (kernels.launch.function, cached per device, config and name)."""
    return launch.function(name, config, SOURCE)


class WindowCounts:
    """``n_windows`` and ``n_blocks`` of device arrays that keep ``row_window_offset_host`` (the TF32 kernels'
    `KernelArrays` and the 16-bit kernels' ``HalfArrays``)."""

    row_window_offset_host: np.ndarray

    @property
    def n_windows(self) -> int:
        return int(self.row_window_offset_host.shape[0]) - 1

    @property
    def n_blocks(self) -> int:
        return int(self.row_window_offset_host[-1])


@dataclass
class KernelArrays(WindowCounts):
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
    def nnz(self) -> int:
        return int(self.data.shape[0])


def upload(M: METCF) -> KernelArrays:
    """Copy a host METCF to the current device, casting to the kernel dtypes."""
    return from_device_arrays(M.shape, *(to_device(a) for a in (M.row_window_offset, M.tc_offset, M.tc_local_id,
                                                                  M.sparse_a_to_b, M.data)))


def from_device_arrays(shape, row_window_offset, tc_offset, tc_local_id, sparse_a_to_b, data) -> KernelArrays:
    """Wrap ME-TCF arrays already on the device (e.g. from kernels.formats.metcf.gpu), casting dtypes."""
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


