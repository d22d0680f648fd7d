"""Thin launchers for the FP16 / BF16 ME-TCF kernels (kernels/formats/metcf/metcf_half.cuh; extern "C" entries
``metcf_half_{window,split}_{f16,bf16}`` in metcf_spmm.cu, compiled with the TF32 kernels as one module by
kernels.launch.function). Check (dtype, contiguity, shape, 64-bit limits), allocate, launch.

16-bit values on the device: float16 arrays for "float16"; for "bfloat16" uint16 arrays holding the bfloat16 bit
patterns (CuPy has no bfloat16 dtype; a dtype named "bfloat16", should CuPy gain one, is accepted too).
`to_bf16_bits` / `from_bf16_bits` convert (round to nearest even; NaN stays NaN); both take NumPy or CuPy arrays.

Device-side A arrays (built once per matrix by `half_layout`, on the device by `upload_half`, NumPy twin for tests):
- ``frag`` uint16 [max(n_blocks, 1), 32, 8]: block b's 256 values in m16n8k16 A-fragment order, [b][lane][h] =
  A[r][c] with lane = (r % 8) * 4 + (c % 8) // 2, h = 2 * (r // 8 + 2 * (c // 8)) + c % 2 (registers a0 = (g,
  2q..2q+1), a1 = (g+8, ..), a2 = (g, 2q+8..2q+9), a3 = (g+8, ..)); zeros where A has none. 512 bytes per block.
- ``cols`` int32 [max(n_blocks, 1), 4, 4]: [b][q] = sparse_a_to_b[b][(2q, 2q+1, 2q+8, 2q+9)], padding (-1)
  replaced by the block's first column (A is zero there: the kernel loads without a padding test, as
  kernels.launch.col_pairs).
- ``walk`` int32 [n_windows] or None: the window each thread block takes (`window_walk`: most TC blocks first).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from kernels import launch
from kernels.formats.metcf import launch as metcf_launch
from kernels.formats.metcf.config import CONFIG, KernelConfig
from storage.indexing import INT32_MAX, longest_first
from kernels.operands import check_b_out
from kernels.precision import _xp, from_bf16_bits, to_bf16_bits  # noqa: F401 (the last two: this module's API)

PRECISIONS = ("float16", "bfloat16")
# `window_walk`: windows of >= WALK_HEAVY x the mean TC block count go first, most first, the rest in A's order
# (1e-9: every window with a block, by count; empty ones last). Swept on the H200 (FP16, after auto_reorder, graph
# replay, window kernel's time against each block on its own window, N = 128 / 256; docs/kernels-notes.md "Session
# 42"): every window mesh3d-40 0.72 / 0.86x, mesh2d-300 0.90 / 0.98x, sbm-50k 0.88 / 0.94x, sbm-100k 0.96 / 1.05x;
# at 1.25 0.80 / 0.88, 0.91 / 0.97, 0.99 / 1.00, 1.01 / 1.01; at 2 0.85 / 0.92, 0.96 / 1.00, 1.00 / 1.00, 1.00 /
# 1.00. The split kernel (k2) on every window: 0.88 / 0.97, 0.99 / 1.02, 0.96 / 1.01, 1.03 / 1.08 (SBM's community
# order is B-row locality the walk gives up). C is the same bit for bit in any walk.
WALK_HEAVY = 1e-9
# ... and only where B (K x N 16-bit values) fills at most WALK_L2_SHARE of the L2 cache (`walks`): A's order keeps the
# windows that run at once on neighbouring rows, whose B rows a reordering made shared, and that locality is what
# keeps B in L2 when B does not fit. H200 (50 MiB of L2), the window kernel walked against A's order: sbm-100k N = 256
# (B 51 MB) 1.05x slower (split 1.08x), N = 128 (26 MB) 0.96x; mesh2d-300 N = 256 (46 MB) 0.98x; TF32's kernels
# (4-byte B), walked in a trial: sbm-100k N = 128 (51 MB) 1.08x, mesh3d-40 N = 256 (66 MB) 1.01x, N = 128 (33 MB)
# 0.87x (docs/kernels-notes.md "Session 42").
WALK_L2_SHARE = 0.75
WIDTH = 16  # the k of mma.m16n8k16: columns of a TC block
# [q] -> the 4 condensed columns (k rows of the mma B fragment) lane q multiplies: 2q, 2q+1, 2q+8, 2q+9
QUAD = np.array([[2 * q, 2 * q + 1, 2 * q + 8, 2 * q + 9] for q in range(4)])
MAX_GRID_X = 2 ** 31 - 1


def to_bits16(x, precision: str):
    """Values -> the kernels' 16-bit storage: float16 (round to nearest even) or bfloat16 bits (uint16)."""
    xp = _xp(x)
    if precision == "float16":
        return xp.asarray(x).astype(xp.float16)
    if precision == "bfloat16":
        return to_bf16_bits(xp.asarray(x).astype(xp.float32))
    raise ValueError(f"precision is {precision!r}, expected one of {PRECISIONS}")


def half_layout(tc_offset, tc_local_id, sparse_a_to_b, values):
    """(frag, cols) of the module docstring from 16-wide ME-TCF arrays; values = A's 16-bit storage (float16 or
    uint16 bfloat16 bits) in tc_local_id order. NumPy in, NumPy out (the CPU tests' twin); CuPy in, CuPy out."""
    xp = _xp(values)
    tc_offset = xp.asarray(tc_offset).astype(xp.int64)
    n_blocks, nnz = int(tc_offset.shape[0]) - 1, int(values.shape[0])
    sab = xp.asarray(sparse_a_to_b).astype(xp.int32).reshape(n_blocks, WIDTH)
    frag = xp.zeros((max(n_blocks, 1), 32, 8), dtype=xp.uint16)
    if nnz:
        block = xp.searchsorted(tc_offset, xp.arange(nnz, dtype=xp.int64), side="right") - 1
        lid = xp.asarray(tc_local_id).astype(xp.int64)
        r, c = lid >> 4, lid & 15
        lane, h = (r & 7) * 4 + ((c & 7) >> 1), 2 * ((r >> 3) + 2 * (c >> 3)) + (c & 1)
        frag.reshape(-1)[block * 256 + lane * 8 + h] = xp.asarray(values).view(xp.uint16)
    if n_blocks and bool((sab[:, 0] < 0).any()):  # synchronize!
        raise ValueError("ME-TCF has a TC block whose first column is padding (-1): every block must hold at least "
                         "one column (build it with kernels.formats.metcf.csr_to_metcf(A, width=16))")
    full = xp.where(sab < 0, sab[:, :1], sab)
    cols = xp.ascontiguousarray(full[:, xp.asarray(QUAD)]) if n_blocks else xp.zeros((1, 4, 4), dtype=xp.int32)
    return frag, cols


@dataclass
class HalfArrays(metcf_launch.WindowCounts):
    """A 16-wide ME-TCF matrix on the device in the half kernels' layout (module docstring)."""

    shape: tuple[int, int]
    precision: str  # "float16" | "bfloat16"
    row_window_offset: object  # cupy int64 [n_windows + 1]
    frag: object  # cupy uint16 [max(n_blocks, 1), 32, 8]
    cols: object  # cupy int32 [max(n_blocks, 1), 4, 4]
    row_window_offset_host: np.ndarray  # int64
    walk: object = None  # cupy int32 [n_windows]: the window each thread block takes (`window_walk`), None: its own

    @property
    def suffix(self) -> str:
        return "f16" if self.precision == "float16" else "bf16"


def window_walk(row_window_offset, heavy: float = WALK_HEAVY) -> np.ndarray | None:
    """The order the kernels take row windows in (thread block x runs window walk[x]): by TC block count, most
    first, ties in A's order (a stable sort); None where that is A's own order. A window is one thread block's work
    (per column chunk) and a grid is a few waves of them: launched in A's order, the windows a reordering leaves
    longest (its leftover rows, at the end) started in the last wave and the SMs waited on them (mesh3d-40 after
    TCA, FP16, N = 128: 3.8 waves, windows of 3-27 blocks, SMs busy 72 % of the kernel's cycles, H200 ncu; walked,
    the window kernel took 0.72x the time). Longest first is the list-scheduling rule whose makespan is within 4/3
    of the best. ``heavy``: only windows of >= heavy x the mean count go first (the rest in A's order: WALK_HEAVY's
    sweep; <= 0: none). C is the same bit for bit in any order (each window is summed by its own thread block)."""
    walk = longest_first(row_window_offset, heavy)  # the CSR kernel's row walk's rule (storage.indexing)
    return None if walk is None else walk.astype(np.int32)


def walks(K: int, N: int, l2_bytes: int) -> bool:
    """Whether the kernels take windows in `window_walk`'s order for B of K x N 16-bit values (WALK_L2_SHARE)."""
    return 2 * K * N <= WALK_L2_SHARE * l2_bytes


@functools.lru_cache(maxsize=None)
def l2_bytes(device_id: int) -> int:
    """The L2 cache size of CUDA device ``device_id``, in bytes (the device attribute; the properties' field where a
    CuPy build names it otherwise; 0, so no walk, where neither is there)."""
    import cupy

    try:
        return int(cupy.cuda.Device(device_id).attributes["L2CacheSize"])
    except KeyError:
        return int(cupy.cuda.runtime.getDeviceProperties(device_id).get("l2CacheSize", 0))


def _walk_arg(dh: HalfArrays, N: int):
    """The kernels' ``walk`` argument at N columns: the walk where it `walks`, else a null pointer (block x takes
    window x)."""
    if dh.walk is None:
        return np.uint64(0)
    import cupy

    return dh.walk if walks(dh.shape[1], N, l2_bytes(cupy.cuda.runtime.getDevice())) else np.uint64(0)


def upload_half(M, precision: str) -> HalfArrays:
    """A METCF with 16-wide blocks (csr_to_metcf(A, width=16); arrays NumPy or CuPy, data float32 / float64 /
    float16, or uint16 bfloat16 bits for "bfloat16") -> HalfArrays on the current device; A's values rounded to
    `precision` (nearest even), fragments and column ids built on the device once."""
    import cupy

    if precision not in PRECISIONS:
        raise ValueError(f"precision is {precision!r}, expected one of {PRECISIONS}")
    n_rows, n_cols = (int(s) for s in M.shape)
    width = int(M.sparse_a_to_b.shape[1]) if M.sparse_a_to_b.ndim == 2 else -1
    if width != WIDTH:
        raise ValueError(f"ME-TCF has {width}-wide TC blocks, expected 16 for mma.m16n8k16 (csr_to_metcf(A, width=16))")
    if n_cols > INT32_MAX:
        raise ValueError(f"A has {n_cols} columns; the kernels take int32 column ids (<= {INT32_MAX})")
    n_windows = -(-n_rows // 16)
    if n_windows > MAX_GRID_X:
        raise ValueError(f"A has {n_windows} row windows, more than gridDim.x = {MAX_GRID_X}")
    rwo_host = np.asarray(cupy.asnumpy(M.row_window_offset), dtype=np.int64)  # synchronize!
    if rwo_host.shape[0] != n_windows + 1:
        raise ValueError(f"row_window_offset has {rwo_host.shape[0]} entries, expected ceil(M / 16) + 1 = "
                         f"{n_windows + 1}")
    data = cupy.asarray(M.data)
    values = data if data.dtype == cupy.uint16 and precision == "bfloat16" else to_bits16(data, precision)
    frag, cols = half_layout(cupy.asarray(M.tc_offset), cupy.asarray(M.tc_local_id), cupy.asarray(M.sparse_a_to_b),
                             values)
    walk = window_walk(rwo_host)
    return HalfArrays(shape=(n_rows, n_cols), precision=precision, row_window_offset=cupy.asarray(rwo_host),
                      frag=frag, cols=cols, row_window_offset_host=rwo_host,
                      walk=None if walk is None else cupy.asarray(walk))


def _check_b_out(dh: HalfArrays, B, out, out_dtype, accumulate: bool):
    """(out, N, flags) by kernels.operands' one B / out contract: B [K, N] in the 16-bit type, out float32 or that
    type, 16-byte path at N % 8 == 0."""
    return check_b_out(dh.shape, dh.precision, B, out, out_dtype, accumulate, vec_elems=8)


def _shape(N: int, config: KernelConfig) -> tuple[int, int]:
    """(64-column slices per thread block, column chunks = gridDim.y) at N columns."""
    slices = config.slices(N, warp_n=config.half_warp_cols)
    chunks = config.chunks(N, warp_n=config.half_warp_cols)
    if chunks > launch.MAX_GRID_Y:
        raise ValueError(f"N = {N} needs {chunks} column chunks, more than gridDim.y = {launch.MAX_GRID_Y}")
    return slices, chunks


def _window_half_launch(dh: HalfArrays, B, out, config: KernelConfig, out_dtype, accumulate: bool):
    out, N, flags = _check_b_out(dh, B, out, out_dtype, accumulate)
    if dh.n_windows == 0:
        return out, None
    slices, chunks = _shape(N, config)
    grid, block = (dh.n_windows, chunks), (32 * slices,)
    args = (dh.row_window_offset, dh.frag, dh.cols, B, out, np.int64(dh.shape[0]), np.int64(N), np.int32(flags),
            _walk_arg(dh, N))
    return out, (metcf_launch.function(f"metcf_half_window_{dh.suffix}", config), grid, block, args, 0, 3, 4, 7)


def spmm_window_half(dh: HalfArrays, B, out=None, config: KernelConfig = CONFIG, *, out_dtype=None,
                     accumulate: bool = False):
    """C = A @ B (``accumulate``: out += A @ B, added in fp32, rounded once), one thread block per (window, column
    chunk), one warp per 64 columns. out: float32 (default) or B's 16-bit dtype (``out_dtype``). Writes every
    element of out."""
    return launch._run(*_window_half_launch(dh, B, out, config, out_dtype, accumulate))


def bind_window_half(dh: HalfArrays, B, out, config: KernelConfig = CONFIG, *, accumulate: bool = False):
    """spmm_window_half's launch, checked and packed once (kernels.launch.Bound)."""
    return launch._bind(B, *_window_half_launch(dh, B, out, config, None, accumulate), vec_n=8)


def ksplits_half(N: int, config: KernelConfig = CONFIG) -> list[int]:
    """Every ksplit >= 2 the half split kernel takes at N columns: powers of two while 64-column slices x ksplit
    fits split_max_warps."""
    slices = _shape(N, config)[0]
    return [k for k in (2, 4, 8, 16, 32) if slices * k <= config.split_max_warps]


def _split_half_launch(dh: HalfArrays, B, out, config: KernelConfig, ksplit: int, out_dtype, accumulate: bool):
    out, N, flags = _check_b_out(dh, B, out, out_dtype, accumulate)
    slices, chunks = _shape(N, config)
    if ksplit < 1 or ksplit & (ksplit - 1) or slices * ksplit > config.split_max_warps:
        raise ValueError(f"ksplit is {ksplit}, expected a power of two with {slices} slices x ksplit <= "
                         f"KernelConfig.split_max_warps = {config.split_max_warps} (ksplits_half(N) lists them)")
    if dh.n_windows == 0:
        return out, None
    smem = (ksplit // 2) * slices * 32 * 32 * 4  # (ksplit / 2) x slices slots of 32 lanes x 32 fp32 registers
    grid, block = (dh.n_windows, chunks), (32 * slices * ksplit,)
    args = (dh.row_window_offset, dh.frag, dh.cols, B, out, np.int64(dh.shape[0]), np.int64(N), np.int32(flags),
            np.int32(ksplit), _walk_arg(dh, N))
    return out, (metcf_launch.function(f"metcf_half_split_{dh.suffix}", config), grid, block, args, smem, 3, 4, 7)


def spmm_split_half(dh: HalfArrays, B, out=None, config: KernelConfig = CONFIG, *, ksplit: int, out_dtype=None,
                    accumulate: bool = False):
    """C = A @ B as spmm_window_half, with `ksplit` warps (a power of two) sharing each 64-column slice's TC blocks
    of a window, summed by a fixed shared-memory tree (deterministic; small matrices and hub windows)."""
    return launch._run(*_split_half_launch(dh, B, out, config, ksplit, out_dtype, accumulate))


def bind_split_half(dh: HalfArrays, B, out, config: KernelConfig = CONFIG, *, ksplit: int,
                    accumulate: bool = False):
    """spmm_split_half's launch, checked and packed once (kernels.launch.Bound)."""
    return launch._bind(B, *_split_half_launch(dh, B, out, config, ksplit, None, accumulate), vec_n=8)
