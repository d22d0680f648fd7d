"""Thin launchers for kernels/formats/bcsr/bcsr_spmm.cu (SMaT's BCSR Tensor Core SpMM): check (dtype, contiguity, shape,
64-bit limits), allocate, launch with grid/block as named locals. Compiled through kernels.launch's NVRTC machinery
(``launch.function(name, BCSR_CONFIG, SOURCE)``), CuPy imported lazily.

Device arrays (`upload` from a host BCSR, `upload_arrays` from device ones, e.g. the GPU conversion's):
``indptr`` int64 [n_block_rows + 1], ``indices`` int32 [max(n_blocks, 1)], ``data`` [max(n_blocks, 1), 16, w]:
float32 rounded to TF32 (``kernels.launch.tf32_round``), float16, or uint16 bfloat16 bits. B [K, N] and C [M, N]
row-major in the precision's dtype (C float32 or the 16-bit type).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kernels import launch
from kernels.launch import tf32_round
from kernels.precision import precision as as_precision
from storage.indexing import INT32_MAX
from kernels.operands import check_b_out

SOURCE = Path(__file__).resolve().parent / "bcsr_spmm.cu"
MAX_GRID_X, MAX_GRID_Y = 2**31 - 1, 65535
KERNELS = {"float32": "bcsr_spmm_tf32", "float16": "bcsr_spmm_f16", "bfloat16": "bcsr_spmm_bf16"}


@dataclass(frozen=True)
class BcsrConfig:
    """Compile-time constants of bcsr_spmm.cu (it static_asserts them)."""

    warp_cols: int = 64  # columns per warp: 8 n8 tiles, the shared-memory B slice's width (fixed by its layout)
    max_warps: int = 8  # warps per thread block (column slices x ksplit): 8 x 5,632 B of stages = 44 KB
    min_blocks_per_sm: int = 2  # __launch_bounds__ minimum: nvcc 13.0 gives 78-87 registers, no spills
    smem_per_warp: int = 2 * (512 + 2304)  # two stages of A block + B slice (WARP_SMEM in the .cu)

    def defines(self) -> tuple[str, ...]:
        return (f"-DBCSR_WARP_COLS={self.warp_cols}", f"-DBCSR_MAX_WARPS={self.max_warps}",
                f"-DBCSR_MIN_BLOCKS_PER_SM={self.min_blocks_per_sm}")


BCSR_CONFIG = BcsrConfig()


def module(config: BcsrConfig = BCSR_CONFIG):
    return launch.module(config, SOURCE)


@dataclass
class BcsrArrays:
    shape: tuple[int, int]
    precision: str
    width: int
    indptr: object  # cupy int64 [n_block_rows + 1]
    indices: object  # cupy int32 [max(n_blocks, 1)]
    data: object  # cupy [max(n_blocks, 1), 16, width]
    indptr_host: np.ndarray  # int64

    @property
    def n_block_rows(self) -> int:
        return int(self.indptr_host.shape[0]) - 1

    @property
    def n_blocks(self) -> int:
        return int(self.indptr_host[-1])


def upload(X, precision: str) -> BcsrArrays:
    """A host BCSR (kernels.formats.bcsr.container) in ``precision``'s storage dtype -> BcsrArrays on the current device."""
    import cupy

    indptr_host = np.asarray(X.indptr, dtype=np.int64)
    return upload_arrays(X.shape, precision, cupy.asarray(indptr_host), cupy.asarray(X.indices),
                         cupy.asarray(X.data), indptr_host=indptr_host)


def upload_arrays(shape, precision: str, indptr, indices, data, *, indptr_host=None) -> BcsrArrays:
    """BCSR arrays already on the device (``kernels.formats.bcsr.gpu.csr_to_bcsr_gpu``, or `upload`'s) ->
    BcsrArrays: checks (block shape and dtype for the precision, the kernels' size limits, array lengths, indptr's
    ends), casts (indices int32, indptr int64), one zero block for an empty matrix, TF32 rounding for float32.
    ``indptr_host``: indptr as host int64 when the caller has it; else copied from the device (one sync)."""
    import cupy

    p = as_precision(precision)
    n_rows, n_cols = (int(s) for s in shape)
    width = int(data.shape[2]) if data.ndim == 3 else -1
    if width != p.block_width or data.shape[1] != 16 or data.dtype != p.storage_dtype:
        raise ValueError(f"BCSR with {width}-wide {data.dtype} blocks (data {tuple(data.shape)}) given for {p.name}, "
                         f"which needs {p.block_width}-wide {p.storage_dtype} blocks "
                         "(kernels.formats.get('bcsr').convert)")
    if n_cols > INT32_MAX or n_rows > 16 * MAX_GRID_X:
        raise ValueError(f"A is {n_rows} x {n_cols}; the kernels take at most {INT32_MAX} columns and "
                         f"{16 * MAX_GRID_X} rows")
    n_block_rows, n_blocks = -(-n_rows // 16), int(data.shape[0])
    if indptr.shape != (n_block_rows + 1,) or indices.shape != (n_blocks,):
        raise ValueError(f"indptr has shape {tuple(indptr.shape)} and indices {tuple(indices.shape)}, expected "
                         f"(ceil(M / 16) + 1,) = ({n_block_rows + 1},) and (n_blocks,) = ({n_blocks},)")
    if indptr_host is None:
        indptr_host = cupy.asnumpy(indptr).astype(np.int64)  # synchronize!
    if int(indptr_host[0]) != 0 or int(indptr_host[-1]) != n_blocks:
        raise ValueError(f"indptr runs {int(indptr_host[0])}..{int(indptr_host[-1])}, expected 0..n_blocks = "
                         f"0..{n_blocks}")
    if n_blocks == 0:
        data, indices = cupy.zeros((1, 16, width), dtype=data.dtype), cupy.zeros(1, dtype=cupy.int32)
    if p.name == "float32":
        data = tf32_round(data)
    return BcsrArrays((n_rows, n_cols), p.name, width, indptr.astype(cupy.int64, copy=False),
                      cupy.ascontiguousarray(indices, dtype=cupy.int32), cupy.ascontiguousarray(data), indptr_host)


def grid_shape(N: int, ksplit: int = 1, config: BcsrConfig = BCSR_CONFIG) -> tuple[int, int]:
    """(64-column slices per thread block, column chunks = gridDim.y) at N columns and ksplit warps per slice."""
    tiles = -(-N // config.warp_cols)
    slices = max(1, min(tiles, config.max_warps // ksplit))
    chunks = -(-tiles // slices)
    if chunks > MAX_GRID_Y:
        raise ValueError(f"N = {N} needs {chunks} column chunks, more than gridDim.y = {MAX_GRID_Y}")
    return slices, chunks


def ksplits(N: int, config: BcsrConfig = BCSR_CONFIG) -> list[int]:
    """Every ksplit >= 2 the kernel takes: powers of two up to max_warps (slices shrink to make room)."""
    return [k for k in (2, 4, 8) if k <= config.max_warps]


def spmm(dm: BcsrArrays, B, out=None, config: BcsrConfig = BCSR_CONFIG, *, ksplit: int = 1, out_dtype=None,
         accumulate: bool = False):
    """C = A @ B (``accumulate``: out += A @ B, added in fp32 and rounded once); one warp per block row x 64
    columns x 1/ksplit of the block row's blocks (ksplit a power of two <= max_warps). Writes every element."""
    out, N, flags = check_b_out(dm.shape, dm.precision, B, out, out_dtype, accumulate,
                                vec_elems=4 if dm.precision == "float32" else 8)  # one 16-byte cp.async chunk
    if ksplit < 1 or ksplit & (ksplit - 1) or ksplit > config.max_warps:
        raise ValueError(f"ksplit is {ksplit}, expected a power of two <= BcsrConfig.max_warps = {config.max_warps}")
    if dm.n_block_rows == 0:
        return out
    slices, chunks = grid_shape(N, ksplit, config)
    warps = slices * ksplit
    grid, block = (dm.n_block_rows, chunks), (32 * warps,)
    smem = warps * config.smem_per_warp
    launch.function(KERNELS[dm.precision], config, SOURCE)(
        grid, block, (dm.indptr, dm.indices, dm.data, B, out, np.int64(dm.shape[0]), np.int64(dm.shape[1]),
                      np.int64(N), np.int32(flags), np.int32(ksplit)), shared_mem=smem)
    return out
