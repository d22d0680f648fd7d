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
    # Defaults = the fastest variant of the H100 sweeps (benchmarks/spmm.py --sweep, docs/kernels-notes.md, runs
    # 1-6): v6 dense fragments, 2 column slices per warp, unroll 2: 0.615x of v0's time (geomean, 16 cases).
    min_blocks_per_sm: int = 5  # window kernel's __launch_bounds__ minimum: caps registers at 102 (`python -m
    # kernels.compile_check`, sm_90, nvcc 13.0: window 96 registers, no spills)
    balanced_min_blocks_per_sm: int = 3  # the balanced kernel's (144 registers, no spills; at 4 sm_80 spills 24 B)
    # Load block b+1's B fragments (column ids from global) before block b's mma (v0 pipeline only). Off: measured
    # 5-10% SLOWER on H100 at N = 128 (docs/kernels-notes.md, version v1); kept as a switch for other GPUs.
    prefetch_b: bool = False
    # v2: A fragments straight into registers, no shared memory and no barriers; each warp issues the loads of
    # `unroll` TC blocks before their mma and loads the next group's metadata meanwhile. False: v0's shared-memory
    # A tiles (one barrier per TC block).
    a_regs: bool = True
    unroll: int = 2
    # Consecutive windows per thread block, one warp per (window, column slice); 1 = one window per block, as in v0
    # (2 and 4 measured no faster: run 2).
    windows_per_block: int = 1
    # 32-column slices per warp (1 or 2): with 2, a warp loads one block's columns and A fragment for 64 columns
    warp_slices: int = 2
    # v6: A read as dense fragments (every TC block's 128 values in mma fragment order, 512 B per block, built once
    # by kernels.launch.fragments, with column pairs: 1 + 1 + 2 x warp_slices loads per block and warp) instead of
    # v2's per-block bitmap + popcount gathers (10 loads): the kernel is bound by load instructions, not bytes.
    a_dense: bool = True
    # metcf_spmm_split: at most this many warps per thread block (column slices x ksplit); its __launch_bounds__
    # (x 32 threads, 1 block per SM) caps the registers at 65536 / 512 = 128 at 16 warps
    split_max_warps: int = 16
    # FP16 / BF16 kernels (kernels/formats/metcf/metcf_half.cuh, mma.m16n8k16 on 16 x 16 TC blocks): a warp covers 64 columns
    # as 8 register-remapped n8 tiles (one 16-byte B load per B row and lane), fixed by the remapping
    half_warp_cols: int = 64
    half_unroll: int = 2  # TC blocks whose loads a warp issues before their mma (as `unroll`)
    # the half window kernel's __launch_bounds__ minimum (x max_warps warps): 4 caps the registers at 128; nvcc 13.0
    # gives 120 (sm_80) / 116 (sm_90), no spills; at 5 (96) it spills 20 B, and so does unroll 1 at 6 (80)
    half_min_blocks_per_sm: int = 4

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
        if not 1 <= self.windows_per_block <= self.max_warps:
            raise ValueError(f"windows_per_block is {self.windows_per_block}, expected 1..max_warps")
        if self.windows_per_block > 1 and not self.a_regs:
            raise ValueError("windows_per_block > 1 needs a_regs=True (the shared-memory v0 syncs the whole block)")
        if not 1 <= self.balanced_min_blocks_per_sm * self.max_warps <= 64:
            raise ValueError(f"balanced_min_blocks_per_sm x max_warps = "
                             f"{self.balanced_min_blocks_per_sm * self.max_warps}, expected 1..64 warps per SM")
        if self.warp_slices not in (1, 2):
            raise ValueError(f"warp_slices is {self.warp_slices}, expected 1 or 2")
        if self.warp_slices > 1 and not self.a_regs:
            raise ValueError("warp_slices = 2 needs a_regs=True (v0 covers 32 columns per warp)")
        if self.a_dense and not self.a_regs:
            raise ValueError("a_dense needs a_regs=True (the register pipeline)")
        if not 1 <= self.unroll <= 8:
            raise ValueError(f"unroll is {self.unroll}, expected 1..8 TC blocks per group")
        if not 1 <= self.split_max_warps <= 32:
            raise ValueError(f"split_max_warps is {self.split_max_warps}, expected 1..32")
        if self.half_warp_cols != 64:
            raise ValueError(f"half_warp_cols is {self.half_warp_cols}, expected 64 (8 n8 tiles, one 16-byte B "
                             "vector per row and lane)")
        if not 1 <= self.half_unroll <= 4:
            raise ValueError(f"half_unroll is {self.half_unroll}, expected 1..4 TC blocks per group")
        if not 1 <= self.half_min_blocks_per_sm * self.max_warps <= 64:
            raise ValueError(f"half_min_blocks_per_sm x max_warps = {self.half_min_blocks_per_sm * self.max_warps}"
                             ", expected 1..64 warps per SM")
        if self.blocks_per_item < 1:
            raise ValueError(f"blocks_per_item is {self.blocks_per_item}, expected >= 1")

    @property
    def threads(self) -> int:
        """Threads of a full SpMM thread block."""
        return 32 * self.max_warps

    @property
    def warp_n(self) -> int:
        """Columns of B and C one warp covers."""
        return self.warp_cols * self.warp_slices

    @property
    def block_n(self) -> int:
        """Columns of C one full SpMM thread block covers."""
        return self.warp_n * self.max_warps

    def slices(self, N: int, windows: int = 1, *, warp_n: int | None = None) -> int:
        """Warps per window of an SpMM thread block at N columns: one per warp_n-column slice (default
        self.warp_n; the half kernels pass half_warp_cols), at most max_warps // windows (kernels/launch.py and
        kernels/formats/metcf/launch_half.py launch this shape; kernels/formats/metcf/selector.py models it)."""
        return max(1, min(self.max_warps // windows, -(-int(N) // (warp_n or self.warp_n))))

    def chunks(self, N: int, windows: int = 1, *, warp_n: int | None = None) -> int:
        """Column chunks (gridDim.y) of an SpMM launch at N columns: N / the columns one block's slices cover."""
        return -(-int(N) // ((warp_n or self.warp_n) * self.slices(N, windows, warp_n=warp_n)))

    def defines(self) -> tuple[str, ...]:
        """``-D`` options carrying every constant into the CUDA sources."""
        return (f"-DCFG_WINDOW_ROWS={self.window_rows}", f"-DCFG_BLOCK_COLS={self.block_cols}",
                f"-DCFG_WARP_COLS={self.warp_cols}", f"-DCFG_MAX_WARPS={self.max_warps}",
                f"-DCFG_TILE_STAGES={self.tile_stages}", f"-DCFG_BLOCKS_PER_ITEM={self.blocks_per_item}",
                f"-DCFG_COMBINE_THREADS={self.combine_threads}", f"-DCFG_PREFETCH_B={int(self.prefetch_b)}",
                f"-DCFG_MIN_BLOCKS_PER_SM={self.min_blocks_per_sm}", f"-DCFG_A_REGS={int(self.a_regs)}",
                f"-DCFG_UNROLL={self.unroll}",
                f"-DCFG_WINDOWS_PER_BLOCK={self.windows_per_block}",
                f"-DCFG_BALANCED_MIN_BLOCKS_PER_SM={self.balanced_min_blocks_per_sm}",
                f"-DCFG_WARP_SLICES={self.warp_slices}", f"-DCFG_A_DENSE={int(self.a_dense)}",
                f"-DCFG_SPLIT_MAX_WARPS={self.split_max_warps}", f"-DCFG_HALF_WARP_COLS={self.half_warp_cols}",
                f"-DCFG_HALF_UNROLL={self.half_unroll}",
                f"-DCFG_HALF_MIN_BLOCKS_PER_SM={self.half_min_blocks_per_sm}")


CONFIG = KernelConfig()
# v2 (bitmap A, 16 B per block instead of 512): what SpmmPlan falls back to when dense fragments do not fit.
# Residency 8 / 7 blocks (64 / 72 registers): at 9 / 8 the window and balanced kernels spill since the float4 fast
# path (session 4) compiles beside the checked one (`python -m kernels.compile_check` checks this config too)
BITMAP_CONFIG = KernelConfig(a_dense=False, warp_slices=1, unroll=1, min_blocks_per_sm=8, balanced_min_blocks_per_sm=7)
V0_CONFIG = KernelConfig(a_regs=False, warp_slices=1, unroll=1, a_dense=False, min_blocks_per_sm=8,
                         balanced_min_blocks_per_sm=8)  # the shared-memory version v0, as measured in run 4
