"""Thin launchers for kernels/formats/tiledcsr/tiledcsr_spmm.cu (Tiled-CSR, ICCD'23): check (dtype, contiguity, shape, 64-bit
limits), allocate, launch with grid/block as named locals. Compiled through kernels.launch's NVRTC machinery
(``launch.function(name, TILED_CONFIG, SOURCE)``), CuPy imported lazily.

Device arrays (`upload`): ``group_ptr`` and ``tile_ptr`` int64; ``tile_cols`` int32 [max(n_tiles, 1), w];
``tile_indptr`` (uint8 for TF32, uint16 for 16-bit, as stored), ``tile_indices`` uint8 and ``data`` (float32
rounded to TF32, float16, or uint16 bfloat16 bits) as raw bytes, each followed by PAD_BYTES zero bytes so that no
buffer is empty (nnz = 0); the kernel reads nothing past an array's end.
Row pieces (`pieces`, once per matrix at `upload`): each row group's tiles cut into pieces of at most
``piece_tiles`` (`auto_piece_tiles`: from the mean tiles per group, a function of the matrix only), one block slot
each; a piece that is its whole group writes C, the pieces of a split group (a power-law hub) write float32
partial 16 x N tiles into a workspace (per N, allocated on the first call at that N and kept on the TiledArrays),
summed in piece order by the fixup kernel: one writer per C element, bitwise repeatable.
Grid (`launch_grid`): (column chunks per band, piece slots, bands); `grid_bands` decides the paper's 3D tiling.
Two kernels per precision (`launches`): the vec kernel on the column chunks whose every warp lies inside N (16-byte
B loads and C stores, FLAG_VEC), the edge kernel (element loads, checked stores) on the rest: at most the last
chunk, launched second with its chunk offset; when FLAG_VEC is off, the edge kernel takes every chunk.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kernels import launch
from kernels.formats.tiledcsr.container import indptr_dtype
from kernels.operands import FLAG_VEC, check_b_out
from kernels.precision import PRECISIONS, precision as as_precision
from storage.indexing import INT32_MAX, cut_ranges

SOURCE = Path(__file__).resolve().parent / "tiledcsr_spmm.cu"
KERNELS = {"float32": "tiledcsr_spmm_tf32", "float16": "tiledcsr_spmm_f16", "bfloat16": "tiledcsr_spmm_bf16"}
FIXUP = {"float32": "tiledcsr_fixup_f32", "float16": "tiledcsr_fixup_f16", "bfloat16": "tiledcsr_fixup_bf16"}
FIXUP_THREADS = 256  # columns per fixup block (one thread per column, the 16 rows in a loop)
EDGE = "_edge"  # suffix of the checked kernels
MAX_GRID_Y, MAX_GRID_Z = 65535, 65535
PAD_BYTES = 16
ROWS = 16  # rows per group (kernels.formats.tiledcsr.HEIGHT)
L2_SHARE = 0.5  # a band of B may take this share of L2: the rest holds A's tiles and C's lines
# auto_piece_tiles: P = PIECE_MEAN_FACTOR x the mean tiles of a non-empty group, rounded up to PIECE_ALIGN (the
# default chunk: no partial chunk inside a piece), at least PIECE_MIN_TILES. With one block per 16-row group, a
# group holding a hub row walks hundreds of tiles serially while most blocks finish at once (email-Enron N=128:
# 2.94x slower than cuSPARSE on an H200, R-MAT / SBM graphs 0.45x); uniform matrices (DNN-style) split nothing.
# A priori values, to be measured.
PIECE_MEAN_FACTOR, PIECE_ALIGN, PIECE_MIN_TILES = 2.0, 16, 32


@dataclass(frozen=True)
class TiledConfig:
    """Compile-time constants of tiledcsr_spmm.cu (it static_asserts them). A priori values, to be measured on the
    GPU."""

    warp_cols: int = 64  # columns per warp: 8 n8 tiles (the register remapping of kernels/cuda/half_acc.cuh)
    max_warps: int = 8  # warps per thread block (64-column slices sharing each decoded A tile)
    chunk_tiles: int = 16  # tiles per chunk: one barrier and one block-wide scatter per chunk (3 x 512 B x chunk
    # of shared memory: 24 KB at 16). 16 rather than 8, measured on an H200 (FP16, graph replay, Tiled-CSR ms /
    # cuSPARSE ms): email-Enron N=512 0.97 vs 1.14, bcsstk13 N=512 0.37 vs 0.43, two DLMC cases 0.25 vs 0.26 and
    # 0.34 vs 0.35, N=128 about equal; 4 was worse than 8
    unroll: int = 2  # tiles whose B loads a warp issues before their mma (as KernelConfig.half_unroll)
    min_blocks_per_sm: int = 2  # __launch_bounds__ minimum: caps the registers at 128; nvcc 13.0 gives the vec
    # kernels 125-128 and the edge kernels 108-126, no spills (python -m kernels.compile_check)

    def __post_init__(self) -> None:
        if self.warp_cols != 64:
            raise ValueError(f"warp_cols is {self.warp_cols}, expected 64 (fixed by the register remapping)")
        if not 1 <= self.max_warps <= 8:
            raise ValueError(f"max_warps is {self.max_warps}, expected 1..8")
        if not 2 <= self.chunk_tiles <= 16:
            raise ValueError(f"chunk_tiles is {self.chunk_tiles}, expected 2..16")
        if not 1 <= self.unroll <= 4:
            raise ValueError(f"unroll is {self.unroll}, expected 1..4")
        if not 1 <= self.min_blocks_per_sm * self.max_warps <= 64:
            raise ValueError(f"min_blocks_per_sm x max_warps = {self.min_blocks_per_sm * self.max_warps}, "
                             "expected 1..64 warps per SM")

    def defines(self) -> tuple[str, ...]:
        return (f"-DTCSR_MAX_WARPS={self.max_warps}", f"-DTCSR_CHUNK={self.chunk_tiles}",
                f"-DTCSR_UNROLL={self.unroll}", f"-DTCSR_MIN_BLOCKS_PER_SM={self.min_blocks_per_sm}")


TILED_CONFIG = TiledConfig()


def module(config: TiledConfig = TILED_CONFIG):
    return launch.module(config, SOURCE)


@dataclass(frozen=True)
class Pieces:
    """The row groups cut into pieces of consecutive tiles (`pieces`); S pieces, R split groups."""

    piece_ptr: np.ndarray  # int64 [S + 1]: piece s owns tiles piece_ptr[s]:piece_ptr[s+1] (a refinement of group_ptr)
    piece_dst: np.ndarray  # int32 [S]: >= 0: the row group, the piece is all of it and writes C; < 0: ~slot, the
    # workspace tile (rows 16 slot .. 16 slot + 15) of a piece of a split group
    fix_group: np.ndarray  # int32 [R]: the split groups, ascending
    fix_ptr: np.ndarray  # int32 [R + 1]: split group f's slots fix_ptr[f]:fix_ptr[f+1], in piece (= tile) order

    @property
    def n_pieces(self) -> int:
        return int(self.piece_dst.shape[0])

    @property
    def n_slots(self) -> int:
        return int(self.fix_ptr[-1])


def auto_piece_tiles(group_ptr) -> int:
    """The piece length P of a matrix (see PIECE_MEAN_FACTOR): a function of group_ptr only, so every launch
    configuration of one TiledArrays shares the split (and its summation order)."""
    lens = np.diff(np.asarray(group_ptr, dtype=np.int64))
    lens = lens[lens > 0]
    mean = float(lens.mean()) if lens.size else 0.0
    return max(PIECE_MIN_TILES, PIECE_ALIGN * -(-int(np.ceil(PIECE_MEAN_FACTOR * mean)) // PIECE_ALIGN))


def pieces(group_ptr, piece_tiles: int) -> Pieces:
    """Cut each row group into pieces of piece_tiles tiles, the last one the rest (>= 1 piece per group, an empty
    group one empty piece, so every row of C is written). NumPy, once per matrix."""
    piece_ptr, group, slot, fix_group, fix_ptr = cut_ranges(group_ptr, piece_tiles, "row group", "piece_tiles")
    return Pieces(piece_ptr, np.where(slot >= 0, ~slot, group).astype(np.int32), fix_group, fix_ptr)


@dataclass
class TiledArrays:
    shape: tuple[int, int]
    precision: str
    width: int
    group_ptr: object  # cupy int64 [n_groups + 1]
    tile_ptr: object  # cupy int64 [n_tiles + 1]
    tile_cols: object  # cupy int32 [max(n_tiles, 1), width]
    tile_indptr: object  # cupy uint8 bytes: [n_tiles, 17] uint8 / uint16 + PAD_BYTES
    tile_indices: object  # cupy uint8 [nnz + PAD_BYTES]
    data: object  # cupy uint8 bytes: [nnz] values + PAD_BYTES
    group_ptr_host: np.ndarray  # int64
    pieces: Pieces  # host
    piece_ptr: object  # cupy int64 [n_pieces + 1]
    piece_dst: object  # cupy int32 [n_pieces]
    fix_group: object  # cupy int32 [max(R, 1)]
    fix_ptr: object  # cupy int32 [R + 1]
    workspace: dict = field(default_factory=dict)  # N -> cupy float32 [max(16 n_slots N, 1)], made once per N

    @property
    def n_groups(self) -> int:
        return int(self.group_ptr_host.shape[0]) - 1

    @property
    def n_tiles(self) -> int:
        return int(self.group_ptr_host[-1])

    @property
    def n_pieces(self) -> int:
        return self.pieces.n_pieces


def _padded_bytes(a):
    """cupy uint8 copy of a host array's bytes followed by PAD_BYTES zeros."""
    import cupy

    raw = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
    out = cupy.zeros(raw.size + PAD_BYTES, dtype=cupy.uint8)
    out[:raw.size] = cupy.asarray(raw)
    return out


def upload(X, precision: str, piece_tiles: int | None = None) -> TiledArrays:
    """A host TiledCSR (kernels.formats.tiledcsr.container) in ``precision``'s storage dtype -> TiledArrays on the device,
    with its row pieces (``piece_tiles`` None: `auto_piece_tiles`)."""
    import cupy

    p = as_precision(precision)
    n_rows, n_cols = (int(s) for s in X.shape)
    if X.width != p.block_width or X.data.dtype != p.storage_dtype or X.tile_indptr.dtype != indptr_dtype(X.width):
        raise ValueError(f"Tiled-CSR with {X.width}-wide {X.data.dtype} tiles given for {p.name}, which needs "
                         f"{p.block_width}-wide {p.storage_dtype} tiles (kernels.formats.get('tiledcsr').convert)")
    if n_cols > INT32_MAX:
        raise ValueError(f"A has {n_cols} columns; the kernels take int32 column ids (<= {INT32_MAX})")
    X.validate()
    nt = X.n_tiles
    if nt and int(np.asarray(X.tile_cols[:, 0]).min()) < 0:
        raise ValueError("a tile's first column slot is padding (-1); the kernel substitutes it for padding slots")
    data = X.data
    if p.name == "float32":
        data = PRECISIONS["float32"].rounded(data).astype(np.float32)  # TF32 bits, as kernels.launch.tf32_round
    cols = np.asarray(X.tile_cols, dtype=np.int32) if nt else np.zeros((1, X.width), np.int32)
    gp = np.asarray(X.group_ptr, dtype=np.int64)
    pc = pieces(gp, auto_piece_tiles(gp) if piece_tiles is None else int(piece_tiles))
    up = cupy.asarray
    return TiledArrays((n_rows, n_cols), p.name, X.width, up(gp), up(np.asarray(X.tile_ptr, dtype=np.int64)),
                       up(cols), _padded_bytes(X.tile_indptr), _padded_bytes(X.tile_indices), _padded_bytes(data), gp,
                       pc, up(pc.piece_ptr), up(pc.piece_dst),
                       up(pc.fix_group) if pc.fix_group.size else cupy.zeros(1, cupy.int32), up(pc.fix_ptr))


def grid_shape(N: int, config: TiledConfig = TILED_CONFIG) -> tuple[int, int]:
    """(64-column slices = warps per thread block, column chunks) at N columns."""
    tiles = -(-N // config.warp_cols)
    slices = max(1, min(tiles, config.max_warps))
    return slices, -(-tiles // slices)


def grid_bands(n_groups: int, K: int, N: int, itemsize: int, sm_count: int, l2_bytes: int,
               config: TiledConfig = TILED_CONFIG) -> int:
    """Column bands of the 3D grid (the paper's section IV-B): 1 (a 2D grid) when the launch fits in one wave of
    resident blocks or all of B fits in L2_SHARE of L2; else enough bands that one band of B (K x band columns)
    fits there, so the blocks resident together reuse it across row groups."""
    slices, chunks = grid_shape(N, config)
    if chunks == 1 or n_groups * chunks <= sm_count * config.min_blocks_per_sm or \
            K * N * itemsize <= L2_SHARE * l2_bytes:
        return 1
    chunk_cols = slices * config.warp_cols
    per_band = max(1, int(L2_SHARE * l2_bytes // (max(K, 1) * itemsize * chunk_cols)))  # chunks per band
    return min(chunks, -(-chunks // per_band))


def launch_grid(n_pieces: int, N: int, bands: int, config: TiledConfig = TILED_CONFIG, *, chunks: int | None = None,
                row_slots: int | None = None) -> tuple[tuple, tuple]:
    """(grid, block): grid = (chunks per band, piece slots, bands), block = 32 x slices threads. ``chunks``: the
    column chunks this launch covers (default all of N's); ``row_slots``: gridDim.y (default one per piece up to
    65535; fewer make each block walk several pieces as one stream of chunks)."""
    slices, all_chunks = grid_shape(N, config)
    chunks = all_chunks if chunks is None else int(chunks)
    bands = max(1, min(int(bands), chunks))
    if bands > MAX_GRID_Z:
        raise ValueError(f"{bands} column bands exceed gridDim.z = {MAX_GRID_Z}")
    slots = min(n_pieces, MAX_GRID_Y) if row_slots is None else int(row_slots)
    if not 1 <= slots <= MAX_GRID_Y:
        raise ValueError(f"row_slots is {row_slots}, expected 1..{MAX_GRID_Y}")
    return (-(-chunks // bands), max(1, min(n_pieces, slots)), bands), (32 * slices,)


def launches(n_pieces: int, N: int, vec: bool, bands: int, config: TiledConfig = TILED_CONFIG, *,
             row_slots: int | None = None) -> list[tuple[bool, int, tuple, tuple]]:
    """[(edge, chunk0, grid, block)]: the vec kernel on the chunks whose warps all lie inside N (every chunk but a
    partial last one, when ``vec``: FLAG_VEC), the edge kernel on the rest, from column chunk ``chunk0``."""
    slices, chunks = grid_shape(N, config)
    full = N // (slices * config.warp_cols) if vec else 0
    out = []
    if full:
        out.append((False, 0, *launch_grid(n_pieces, N, bands, config, chunks=full, row_slots=row_slots)))
    if full < chunks:
        out.append((True, full, *launch_grid(n_pieces, N, 1, config, chunks=chunks - full, row_slots=row_slots)))
    return out


def fixup_grid(n_fix: int, N: int) -> tuple[tuple, tuple]:
    """(grid, block) of the fixup kernel: (column blocks of FIXUP_THREADS, split-group slots), FIXUP_THREADS."""
    return (-(-N // FIXUP_THREADS), max(1, min(n_fix, MAX_GRID_Y))), (FIXUP_THREADS,)


def spmm(dm: TiledArrays, B, out=None, config: TiledConfig = TILED_CONFIG, *, bands: int | None = None,
         out_dtype=None, accumulate: bool = False, sm_count: int | None = None, l2_bytes: int | None = None,
         row_slots: int | None = None):
    """C = A @ B (``accumulate``: out += A @ B, added in fp32 and rounded once). ``bands`` None: `grid_bands` for
    this device; ``row_slots``: see `launch_grid` (slots over pieces). Writes every element of C (zeros for rows
    without tiles). The first call at an N with split groups allocates that N's workspace; later calls nothing."""
    out, N, flags = check_b_out(dm.shape, dm.precision, B, out, out_dtype, accumulate,
                                vec_elems=4 if dm.precision == "float32" else 8)  # one 16-byte load or store
    if dm.n_groups == 0:
        return out
    if bands is None:
        import cupy

        attrs = cupy.cuda.Device().attributes
        bands = grid_bands(dm.n_pieces, dm.shape[1], N, B.dtype.itemsize, sm_count or attrs["MultiProcessorCount"],
                           l2_bytes or attrs.get("L2CacheSize", 50 << 20), config)
    n_fix = int(dm.pieces.fix_group.shape[0])
    W = dm.workspace.get(N)
    if W is None:  # once per N (before any graph capture of this call): the steady state allocates nothing
        import cupy

        W = dm.workspace[N] = cupy.empty(max(ROWS * dm.pieces.n_slots * N, 1), dtype=cupy.float32)
    for edge, chunk0, grid, block in launches(dm.n_pieces, N, bool(flags & FLAG_VEC), bands, config,
                                              row_slots=row_slots):
        launch.function(KERNELS[dm.precision] + (EDGE if edge else ""), config, SOURCE)(
            grid, block, (dm.piece_ptr, dm.piece_dst, dm.tile_ptr, dm.tile_cols, dm.tile_indptr, dm.tile_indices,
                          dm.data, B, out, W, np.int64(dm.n_pieces), np.int64(dm.shape[0]), np.int64(N),
                          np.int64(chunk0), np.int32(flags)))
    if n_fix:
        grid, block = fixup_grid(n_fix, N)
        launch.function(FIXUP[dm.precision], config, SOURCE)(
            grid, block, (W, dm.fix_group, dm.fix_ptr, out, np.int64(n_fix), np.int64(dm.shape[0]), np.int64(N),
                          np.int32(flags)))
    return out
