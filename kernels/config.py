"""Compile-time constants of the CUDA kernels: the single source of truth.

`KernelConfig.defines()` turns them into ``-DCFG_*`` options for NVRTC (kernels/launch.py) and nvcc
(kernels/compile_check.py); every ``.cu``/``.cuh`` re-checks them with ``static_assert`` and fails to compile
without them. Change a value here, never in the CUDA sources.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelConfig:
    window_rows: int = 16  # rows per row window = the m16 of mma.m16n8k8 (fixed by the instruction)
    block_cols: int = 8  # condensed columns per TC block = the k8 of mma.m16n8k8 (fixed by the instruction)
    warp_cols: int = 32  # columns of B/C per warp: 4 n8 tiles, register-remapped so a thread loads one float4
    max_warps: int = 4  # warps per thread block; they split N (a block covers max_warps * 32 columns)
    tile_stages: int = 3  # shared-memory A-tile buffers; >= 3 lets the main loop use one barrier per TC block
    blocks_per_item: int = 32  # strict balance: TC blocks per thread block (DTC-SpMM section 4.5.1 uses 32)
    combine_threads: int = 256  # threads per block of the partial-sum combine kernel
    min_blocks_per_sm: int = 8  # __launch_bounds__ minimum: caps registers at 64 (`python -m kernels.compile_check`
    # on sm_90, nvcc 13.0: balanced 56, window 46, combine 32 registers, no spills; docs/kernels-notes.md)
    # Load block b+1's B fragments (column ids from global) before block b's mma. Off: measured 5-10% SLOWER on
    # H100 at N = 128 (mesh3d-160 natural 7.66 vs 7.19 ms, banded natural 0.656 vs 0.594, sbm-1M tca 2.86 vs
    # 2.60; docs/kernels-notes.md, version v1); kept as a switch for other GPUs.
    prefetch_b: bool = False

    def __post_init__(self) -> None:
        if (self.window_rows, self.block_cols, self.warp_cols) != (16, 8, 32):
            raise ValueError("window_rows/block_cols/warp_cols are fixed by mma.m16n8k8 and the float4 "
                             f"register remapping: expected (16, 8, 32), got "
                             f"({self.window_rows}, {self.block_cols}, {self.warp_cols})")
        if not 1 <= self.max_warps <= 32:
            raise ValueError(f"max_warps is {self.max_warps}, expected 1..32")
        if self.tile_stages < 3:
            raise ValueError(f"tile_stages is {self.tile_stages}, expected >= 3 (one-barrier pipeline)")
        if not 1 <= self.min_blocks_per_sm * self.max_warps <= 64:
            raise ValueError(f"min_blocks_per_sm x max_warps = {self.min_blocks_per_sm * self.max_warps}, "
                             "expected 1..64 warps per SM")
        if self.blocks_per_item < 1:
            raise ValueError(f"blocks_per_item is {self.blocks_per_item}, expected >= 1")

    @property
    def threads(self) -> int:
        """Threads of a full SpMM thread block."""
        return 32 * self.max_warps

    @property
    def block_n(self) -> int:
        """Columns of C one full SpMM thread block covers."""
        return self.warp_cols * self.max_warps

    def defines(self) -> tuple[str, ...]:
        """``-D`` options carrying every constant into the CUDA sources."""
        return (f"-DCFG_WINDOW_ROWS={self.window_rows}", f"-DCFG_BLOCK_COLS={self.block_cols}",
                f"-DCFG_WARP_COLS={self.warp_cols}", f"-DCFG_MAX_WARPS={self.max_warps}",
                f"-DCFG_TILE_STAGES={self.tile_stages}", f"-DCFG_BLOCKS_PER_ITEM={self.blocks_per_item}",
                f"-DCFG_COMBINE_THREADS={self.combine_threads}", f"-DCFG_PREFETCH_B={int(self.prefetch_b)}",
                f"-DCFG_MIN_BLOCKS_PER_SM={self.min_blocks_per_sm}")


CONFIG = KernelConfig()
