"""Thin launchers for kernels/formats/cvse/cvse_spmm.cu and cvse_sddmm.cu (SSpMM's Transpose Mapping Scheme and Register
Shuffle Method on CVSE): check (dtype, contiguity, shape, 64-bit limits), allocate, launch with grid/block as named
locals. Compiled through kernels.launch's NVRTC machinery (``launch.function(name, CVSE_CONFIG, source)``), CuPy
imported lazily. Validated on a GPU by tests/kernels/test_gpu_cvse.py (H200).

Device arrays (`upload`): ``vec_ptr`` int64 [n_vec_rows + 1], ``indices`` int32 [max(n_vectors, 1)], ``data``
[max(n_vectors, 1), V]: float32 rounded to TF32 (``kernels.launch.tf32_round``), float16, or uint16 bfloat16 bits.
SpMM: B [K, N] and C [M, N] row-major in the precision's dtype (C float32 or the 16-bit type). SDDMM: A [M, Kd],
B [K, Kd] in the precision's dtype, out float32 [n_vectors, V].
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kernels import launch
from kernels.formats.cvse.tiles import group_words, n_chunks, stage_groups, tile_layout
from kernels.launch import tf32_round
from kernels.operands import FLAG_VEC, check_b_out, vector_path
from kernels.precision import precision as as_precision
from storage.indexing import INT32_MAX

SPMM_SOURCE, SDDMM_SOURCE = (Path(__file__).resolve().parent / f for f in ("cvse_spmm.cu", "cvse_sddmm.cu"))
MAX_GRID_X, MAX_GRID_Y = 2**31 - 1, 65535
KIND = {"float32": "tf32", "float16": "f16", "bfloat16": "bf16"}
VECTORS_PER_STEP = {"float32": 8, "float16": 16, "bfloat16": 16}  # KS: the mma's k over vectors (SpMM)


@dataclass(frozen=True)
class CvseConfig:
    """Compile-time constants of cvse_common.cuh (it static_asserts them)."""

    warp_cols: int = 64  # columns of C per warp: 8 lane groups x 8 consecutive columns (the Register Shuffle layout)
    max_warps: int = 4  # warps per thread block: column slices (SpMM), 16-vector groups in flight (SDDMM)
    min_blocks_per_sm: int = 4  # __launch_bounds__ minimum (<= 128 registers at 4 warps): no spills with nvcc 13.0
    # SpMM pipeline (cvse_spmm.cu): mma k-steps per shared-memory stage (each step = 16 vectors f16/bf16, 8 tf32;
    # all of a stage's B loads are issued before its mmas: 2 -> 8 16-byte loads in flight per lane, 16 more
    # registers per step) and the cp.async ring of stages (STAGES - 1 stages of indices/values fetched ahead)
    steps_per_stage: int = 2
    stages: int = 3
    # SDDMM (cvse_sddmm.cu): 16-vector groups per warp tile, sharing each A piece (2 = the paper's TileN = 32:
    # A loads and TF32 roundings once per 32 vectors, not 16), and the 16-byte loads a lane issues per K step
    # before its mmas (U = sddmm_loads // (2 groups + n8 tiles) chunks: 4 at V <= 8, TF32 64 features per step,
    # where the one-chunk loop had 3 loads in flight). nvcc 13.0: 126-128 registers, no spills, sm_80 / sm_90;
    # 16 gives 3 chunks at ~112 registers, the same 4 blocks of 4 warps per SM.
    sddmm_groups: int = 2
    sddmm_loads: int = 20
    # Tiled SpMM (cvse_spmm.cu cvse_spmm_tiled_*, 16-bit): K rows of B per shared-memory chunk (the layout's bk,
    # kernels/formats/cvse/tiles.py) and the cp.async ring of chunks. H200, V = 8, M = K = 4096, ldmatrix kernel
    # (docs/kernels-notes.md, "Session 10"): bk 256 took 0.72-0.75x the time of bk 128 at N = 256 (fewer chunks,
    # each with a fixed cost, and fuller groups: 87 % of the slots live at 80 % sparsity, 78 % at bk 128); bk 512
    # another 0.89-0.92x at N = 256 but leaves no room for 128-column blocks (N = 1024: 90 vs 112 us); 2 stages
    # timed as 3 (+-3 %, cp.async and bulk copies alike) and leave room for bigger blocks.
    tile_bk: int = 256
    tile_stages: int = 2

    def defines(self) -> tuple[str, ...]:
        return (f"-DCVSE_WARP_COLS={self.warp_cols}", f"-DCVSE_MAX_WARPS={self.max_warps}",
                f"-DCVSE_MIN_BLOCKS_PER_SM={self.min_blocks_per_sm}",
                f"-DCVSE_STEPS_PER_STAGE={self.steps_per_stage}", f"-DCVSE_STAGES={self.stages}",
                f"-DCVSE_SDDMM_GROUPS={self.sddmm_groups}", f"-DCVSE_SDDMM_LOADS={self.sddmm_loads}",
                f"-DCVSE_TILE_BK={self.tile_bk}", f"-DCVSE_TILE_STAGES={self.tile_stages}")

    def vectors_per_tile(self) -> int:
        """Vectors of one vector row per SDDMM warp tile (16 per group)."""
        return 16 * self.sddmm_groups

    def vectors_per_stage(self, precision: str) -> int:
        """SV: vectors of one vector row per shared-memory stage of the SpMM kernel."""
        return VECTORS_PER_STEP[precision] * self.steps_per_stage


CVSE_CONFIG = CvseConfig()


def kernel_name(op: str, precision: str, V: int) -> str:
    return f"cvse_{op}_{KIND[precision]}_v{V}"


def module(source: str = SPMM_SOURCE, config: CvseConfig = CVSE_CONFIG):
    return launch.module(config, source)


@dataclass
class CvseArrays:
    shape: tuple[int, int]
    precision: str
    vector: int
    vec_ptr: object  # cupy int64 [n_vec_rows + 1]
    indices: object  # cupy int32 [max(n_vectors, 1)]
    data: object  # cupy [max(n_vectors, 1), V]
    vec_ptr_host: np.ndarray  # int64
    _max_per_row: int | None = field(default=None, repr=False)  # `max_vectors_per_row`, computed once

    @property
    def n_vec_rows(self) -> int:
        return int(self.vec_ptr_host.shape[0]) - 1

    @property
    def n_vectors(self) -> int:
        return int(self.vec_ptr_host[-1])

    @property
    def max_vectors_per_row(self) -> int:
        """The longest vector row's vector count (the SDDMM grid's height): a pass over the host offsets, once."""
        if self._max_per_row is None:
            self._max_per_row = int(np.diff(self.vec_ptr_host).max()) if self.n_vec_rows else 0
        return self._max_per_row


def check_columns(n_cols: int) -> None:
    """The CVSE kernels take int32 column indices."""
    if n_cols > INT32_MAX:
        raise ValueError(f"A has {n_cols} columns; the CVSE kernels take at most {INT32_MAX}")


def upload(X, precision: str) -> CvseArrays:
    """A CVSE (kernels.formats.cvse.container; host arrays, or device ones as kernels.formats.cvse.gpu builds
    them, taken as they are) in ``precision``'s storage dtype -> CvseArrays on the current device."""
    import cupy

    p = as_precision(precision)
    n_rows, n_cols = (int(s) for s in X.shape)
    if X.data.dtype != p.storage_dtype:
        raise ValueError(f"CVSE with {X.data.dtype} values given for {p.name}, which needs {p.storage_dtype} "
                         "(kernels.formats.get('cvse').convert)")
    check_columns(n_cols)
    if -(-n_rows // X.vector) > MAX_GRID_X:
        raise ValueError(f"A has {-(-n_rows // X.vector)} vector rows; the per-vector kernel takes at most "
                         f"{MAX_GRID_X}")
    vec_ptr_host = cupy.asnumpy(X.vec_ptr).astype(np.int64, copy=False)  # synchronize! (a device CVSE's)
    data = cupy.asarray(X.data) if X.n_vectors else cupy.zeros((1, X.vector), dtype=X.data.dtype)
    if p.name == "float32":
        data = tf32_round(data)
    indices = cupy.asarray(X.indices, dtype=cupy.int32) if X.n_vectors else cupy.zeros(1, dtype=cupy.int32)
    return CvseArrays((n_rows, n_cols), p.name, X.vector, cupy.asarray(vec_ptr_host), indices,
                      cupy.ascontiguousarray(data), vec_ptr_host)


def spmm_grid(n_vec_rows: int, N: int, config: CvseConfig = CVSE_CONFIG) -> tuple[tuple[int, int], tuple[int]]:
    """(grid, block) of the SpMM kernel: one block per vector row x a chunk of `warps` 64-column slices."""
    tiles = -(-N // config.warp_cols)
    warps = max(1, min(tiles, config.max_warps))
    chunks = -(-tiles // warps)
    if chunks > MAX_GRID_Y:
        raise ValueError(f"N = {N} needs {chunks} column chunks, more than gridDim.y = {MAX_GRID_Y}")
    return (n_vec_rows, chunks), (32 * warps,)


def sddmm_grid(n_vec_rows: int, max_vectors_per_row: int, config: CvseConfig = CVSE_CONFIG
               ) -> tuple[tuple[int, int], tuple[int]]:
    """(grid, block) of the SDDMM kernel: warps walk a vector row's tiles of `vectors_per_tile` vectors; gridDim.y
    spreads the longest row's tiles over blocks (capped at 65535: the warps then loop)."""
    tiles = max(1, -(-max_vectors_per_row // config.vectors_per_tile()))
    warps = max(1, min(tiles, config.max_warps))
    return (n_vec_rows, min(MAX_GRID_Y, -(-tiles // warps))), (32 * warps,)


def _check(X, name, dtype, rows, cols=None):
    import cupy

    if not isinstance(X, cupy.ndarray) or X.ndim != 2 or not X.flags.c_contiguous or X.dtype != dtype:
        raise TypeError(f"{name} must be a C-contiguous 2-D cupy {np.dtype(dtype)} array, got {type(X).__name__} "
                        f"{getattr(X, 'dtype', None)} ndim={getattr(X, 'ndim', None)}")
    if X.shape[0] != rows or (cols is not None and X.shape[1] != cols):
        raise ValueError(f"{name} has shape {X.shape}, expected ({rows}, {'N' if cols is None else cols})")


def spmm(dm: CvseArrays, B, out=None, config: CvseConfig = CVSE_CONFIG, *, out_dtype=None, accumulate: bool = False):
    """C = A @ B (``accumulate``: out += A @ B, added in fp32 and rounded once). Writes every element of C."""
    if dm.data.data.ptr % 16 or dm.indices.data.ptr % 4:  # cp.async copies vectors in up-to-16-byte pieces
        raise ValueError(f"CVSE device arrays must be 16-byte aligned (data at {dm.data.data.ptr:#x}): use upload()")
    # FLAG_VEC needs N % 8 == 0 in every precision here (8 columns per lane's 16-byte C store)
    out, N, flags = check_b_out(dm.shape, dm.precision, B, out, out_dtype, accumulate, vec_elems=8)
    n_rows = dm.shape[0]
    if dm.n_vec_rows == 0:
        return out
    grid, block = spmm_grid(dm.n_vec_rows, N, config)
    launch.function(kernel_name("spmm", dm.precision, dm.vector), config, SPMM_SOURCE)(
        grid, block, (dm.vec_ptr, dm.indices, dm.data, B, out, np.int64(n_rows), np.int64(N), np.int32(flags)))
    return out


# ---- the tiled kernel (B's chunk rows reused across a thread block's vector rows) ----
TILED_PRECISIONS = ("float16", "bfloat16")
TILED_WARPS = (4, 8, 16)  # warps per block: R = warps x rows_per_warp vector rows share one B tile
TILED_HALVES = (1, 2)  # 64-column halves per block (and per warp)


def tiled_kernel_name(precision: str, V: int, halves: int) -> str:
    return f"cvse_spmm_tiled_{KIND[precision]}_v{V}_c{halves}"


def rows_per_warp(V: int) -> int:
    return 1 if V == 16 else 2  # Tiled<V>::RW: 16 rows of C per warp at V = 8, 16


@dataclass
class CvseTiles:
    """The tiled kernel's arrays on the device (kernels/formats/cvse/tiles.py): group_ptr int32 [T n_vec_rows + 1]
    (chunk-major segments), tiles uint32 [max(n_groups, 1), group_words(V)], rows int32 [T bk] (the B row at each
    chunk position: cvse_tiles.chunk_order)."""

    group_ptr: object
    tiles: object
    rows: object
    group_ptr_host: np.ndarray
    n_vec_rows: int
    vector: int
    bk: int
    _gcap: dict
    _b_tiles: dict  # (N, halves, stream) -> the sm_90 kernel's chunk-major copy of B (a workspace per stream)

    @property
    def n_groups(self) -> int:
        return int(self.group_ptr_host[-1])

    def b_tiles(self, K: int, N: int, halves: int):
        """The workspace cvse_b_tiles_c{halves} writes B into: [T][ceil(N / 64 halves)][bk][8 halves] 16-byte pieces
        (as large as B padded to whole chunks and column tiles), allocated on the first call for (N, halves) on the
        current stream and reused by the next: calls on one stream run in order, calls on other streams get their
        own (kept with the tiles, one per stream they ran on), so concurrent calls never share one. A graph
        captured on a stream (SpmmPlan's replay) keeps that stream's workspace; kept, never freed under it."""
        import cupy

        key = (N, halves, cupy.cuda.get_current_stream().ptr)
        if key not in self._b_tiles:  # the per-call path is the lookup alone
            pieces = n_chunks(K, self.bk) * -(-N // (64 * halves)) * self.bk * 8 * halves
            self._b_tiles[key] = cupy.empty(pieces * 8, dtype=cupy.uint16)
        return self._b_tiles[key]

    def gcap(self, rows_per_block: int) -> int:
        """The most groups a block of ``rows_per_block`` vector rows stages per chunk (>= 1)."""
        if rows_per_block not in self._gcap:
            self._gcap[rows_per_block] = max(1, stage_groups(self.group_ptr_host, self.n_vec_rows, rows_per_block))
        return self._gcap[rows_per_block]


def tiles_worthwhile(X, config: CvseConfig = CVSE_CONFIG) -> bool:
    """Whether the tiled layout (cut at ``config.tile_bk``) is worth building: on average >= 4 vectors per (vector
    row, chunk) segment, so a 16-slot group is at least a quarter full and group_ptr (T x n_vec_rows) stays smaller
    than the vectors."""
    return X.n_vectors >= 4 * n_chunks(X.shape[1], config.tile_bk) * max(X.n_vec_rows, 1)


def upload_tiles(X, precision: str, config: CvseConfig = CVSE_CONFIG) -> CvseTiles:
    """A host CVSE (16-bit storage) -> the tiled kernel's layout on the current device."""
    import cupy

    if precision not in TILED_PRECISIONS:
        raise ValueError(f"the tiled CVSE kernel is 16-bit ({TILED_PRECISIONS}), got {precision}")
    check_columns(int(X.shape[1]))
    P, tiles, rows = tile_layout(X.vec_ptr, X.indices, X.data, int(X.shape[1]), config.tile_bk)  # < 2^31 (checked)
    return CvseTiles(cupy.asarray(P.astype(np.int32)), cupy.asarray(tiles), cupy.asarray(rows.astype(np.int32)), P,
                     X.n_vec_rows, X.vector, config.tile_bk, {}, {})


def tiled_smem(V: int, K: int, warps: int, halves: int, gcap: int, config: CvseConfig = CVSE_CONFIG) -> int:
    """Dynamic shared memory of one block, as the kernel lays it out: the chunk bounds (8 bytes per chunk), the
    stages' mbarriers (8 bytes each) and STAGES x (B tile of tile_bk + 8 rows, the last 8 zeros + group_ptr slice
    + gcap groups)."""
    R = warps * rows_per_warp(V)
    c16 = lambda x: -(-x // 16) * 16  # noqa: E731
    head = c16(8 * n_chunks(K, config.tile_bk)) + c16(8 * config.tile_stages)
    stage = (config.tile_bk + 8) * 128 * halves + c16((R + 1) * 4) + gcap * group_words(V) * 4
    return head + config.tile_stages * stage


def tiled_grid(n_vec_rows: int, N: int, V: int, warps: int, halves: int) -> tuple[tuple[int, int], tuple[int]]:
    blocks_y = -(-n_vec_rows // (warps * rows_per_warp(V)))
    if blocks_y > MAX_GRID_Y:
        raise ValueError(f"{n_vec_rows} vector rows need {blocks_y} row blocks of {warps} warps, more than "
                         f"gridDim.y = {MAX_GRID_Y}")
    return (-(-N // (64 * halves)), blocks_y), (32 * warps,)


_DEVICE: dict = {}


def device_limits() -> tuple[int, int, int]:
    """(opt-in shared memory per block, compute capability major, SM count) of the current device, queried once per
    device: the launch path reads them."""
    import cupy

    dev = cupy.cuda.runtime.getDevice()
    if dev not in _DEVICE:
        d = cupy.cuda.Device(dev)
        _DEVICE[dev] = (int(d.attributes["MaxSharedMemoryPerBlockOptin"]), int(d.compute_capability) // 10,
                        int(d.attributes["MultiProcessorCount"]))
    return _DEVICE[dev]


def tiled_configs(tl: CvseTiles, K: int, N: int, sm_count: int, smem_max: int,
                  config: CvseConfig = CVSE_CONFIG) -> list[dict]:
    """The (warps, halves) launch shapes that fit shared memory, best a priori first: the largest tile (fewest
    copies of B from L2) that still gives >= 3/4 of the SMs a block, more warps (vector rows) first among equal
    tiles (H200, M = K = 4096, ldmatrix kernel: 8w1h 0.75x the time of 4w2h at V = 8, N = 256, 80 %; 16w1h 0.97x
    8w2h at V = 4), then the rest by block count."""
    out = []
    for warps in TILED_WARPS:
        for halves in TILED_HALVES:
            smem = tiled_smem(tl.vector, K, warps, halves, tl.gcap(warps * rows_per_warp(tl.vector)), config)
            if smem > smem_max:
                continue
            (gx, gy), _ = tiled_grid(tl.n_vec_rows, N, tl.vector, warps, halves)
            out.append({"warps": warps, "halves": halves, "blocks": gx * gy, "smem": smem})
    enough = [c for c in out if c["blocks"] * 4 >= 3 * sm_count]
    rest = [c for c in out if c not in enough]
    return (sorted(enough, key=lambda c: (-c["warps"] * c["halves"], -c["warps"]))
            + sorted(rest, key=lambda c: -c["blocks"]))


def spmm_tiled(dm: CvseArrays, tl: CvseTiles, B, out=None, config: CvseConfig = CVSE_CONFIG, *, warps: int = 8,
               halves: int = 1, out_dtype=None, accumulate: bool = False):
    """C = A @ B by the tiled kernel (``accumulate``: out += A @ B). Needs B and out on the 16-byte path (N % 8 == 0,
    16-byte aligned): ValueError otherwise (the per-vector kernel `spmm` takes any B). On sm_90 it first writes B
    chunk-major into ``tl.b_tiles`` (a workspace as large as B, kept for the next call), which the kernel
    bulk-copies from."""
    if dm.precision not in TILED_PRECISIONS or tl.vector != dm.vector or tl.n_vec_rows != dm.n_vec_rows:
        raise ValueError(f"tiles of V = {tl.vector}, {tl.n_vec_rows} vector rows do not belong to this "
                         f"{dm.precision} CVSE (V = {dm.vector}, {dm.n_vec_rows} vector rows)")
    if tl.bk != config.tile_bk:
        raise ValueError(f"tiles cut at {tl.bk}-row K chunks, the kernel's config at {config.tile_bk}: upload_tiles "
                         "with the same CvseConfig")
    if warps not in TILED_WARPS or halves not in TILED_HALVES:
        raise ValueError(f"warps = {warps}, halves = {halves}: expected warps in {TILED_WARPS}, halves in "
                         f"{TILED_HALVES}")
    out, N, flags = check_b_out(dm.shape, dm.precision, B, out, out_dtype, accumulate, vec_elems=8)
    if not flags & FLAG_VEC:
        raise ValueError(f"the tiled CVSE kernel copies B in 16-byte pieces: N = {N} must be a multiple of 8 and B, "
                         "out 16-byte aligned")
    if dm.n_vec_rows == 0:
        return out
    gcap = tl.gcap(warps * rows_per_warp(tl.vector))
    smem = tiled_smem(tl.vector, int(dm.shape[1]), warps, halves, gcap, config)
    limit, major, sms = device_limits()
    if smem > limit:
        raise ValueError(f"the tiled kernel needs {smem} bytes of shared memory for {warps} warps x {halves} halves "
                         f"here, more than the device's {limit}: see tiled_configs")
    grid, block = tiled_grid(dm.n_vec_rows, N, tl.vector, warps, halves)
    fn = launch.function(tiled_kernel_name(dm.precision, dm.vector, halves), config, SPMM_SOURCE)
    if smem > 48 * 1024 and fn.max_dynamic_shared_size_bytes < smem:
        fn.max_dynamic_shared_size_bytes = limit
    K, b = np.int64(dm.shape[1]), B
    if major >= 9:  # the sm_90 kernel bulk-copies B's chunks from a chunk-major copy (cvse_spmm.cu)
        b = tl.b_tiles(int(K), N, halves)
        threads = 256
        launch.function(f"cvse_b_tiles_c{halves}", config, SPMM_SOURCE)(
            (min(-(-b.size // (8 * threads)), 16 * sms),), (threads,), (B, tl.rows, b, np.int64(N), K))
    fn(grid, block, (tl.group_ptr, tl.tiles, tl.rows, b, out, np.int64(dm.shape[0]), np.int64(N), K,
                     np.int64(dm.n_vec_rows), np.int32(gcap), np.int32(flags)), shared_mem=smem)
    return out


def sddmm(dm: CvseArrays, A, B, out=None, config: CvseConfig = CVSE_CONFIG, *, dest=None, nnz: int | None = None):
    """out[b, v] = S[b, v] * (A[V*i + v] . B[indices[b]]) on the device ([n_vectors, V] float32, new unless given).
    ``dest`` (`scatter_map`: int32 [n_vectors * V] on the device, each vector slot's position in S's CSR order, -1
    at a padding zero): the kernel writes each value there instead, out float32 [nnz] in S's CSR order (``nnz``:
    S's, needed when out is not given)."""
    out, ln = _sddmm_launch(dm, A, B, out, config, dest, nnz)
    return launch._run(out, ln)


def bind_sddmm(dm: CvseArrays, A, B, out, config: CvseConfig = CVSE_CONFIG, *, dest=None) -> launch.Bound:
    """`sddmm` on these A, B and out (given), checked and packed once (kernels.launch.Bound: ``bound(stream_ptr)``
    launches it and returns out; ``set_io(A, new_out)`` re-points out)."""
    return launch._bind(A, *_sddmm_launch(dm, A, B, out, config, dest), vec_n=1)


def scatter_map(gather: np.ndarray, slots: int) -> np.ndarray | None:
    """int32 [slots]: for each vector slot the CSR position whose value it holds (the inverse of the CSR order's
    ``gather`` positions, kernels.formats.cvse.sddmm.gather_positions), -1 for a padding zero; None where the
    positions do not fit int32 (then the vector order and a gather pass)."""
    gather = np.asarray(gather, dtype=np.int64)
    if gather.size > INT32_MAX or slots > INT32_MAX:
        return None
    dest = np.full(max(int(slots), 1), -1, dtype=np.int32)
    dest[gather] = np.arange(gather.size, dtype=np.int32)
    return dest


def _sddmm_launch(dm: CvseArrays, A, B, out, config: CvseConfig, dest=None, nnz: int | None = None):
    """(out, the launch tuple of kernels.launch._run / _bind, out at argument 5, or None when there is nothing to
    compute), after the checks; out made when None, zero-filled here when Kd = 0."""
    import cupy

    want = as_precision(dm.precision).storage_dtype
    n_rows, n_cols = dm.shape
    _check(A, "A", want, n_rows)
    Kd = int(A.shape[1])
    _check(B, "B", want, n_cols, Kd)
    slots = dm.n_vectors * dm.vector
    if dest is not None and (dest.dtype != cupy.int32 or dest.shape != (max(slots, 1),) or dest.data.ptr % 8):
        raise ValueError(f"dest must be int32 [{slots}] on the device, 8-byte aligned (scatter_map), got {dest.dtype} "
                         f"{dest.shape}")
    if dest is not None and nnz is None:
        if out is None or out.ndim != 1:
            raise ValueError("sddmm with dest writes S's CSR order: give out (float32 [nnz]) or nnz")
        nnz = int(out.shape[0])
    shape = (int(nnz),) if dest is not None else (dm.n_vectors, dm.vector)
    if out is None:
        out = cupy.empty(shape, dtype=cupy.float32)
    elif out.dtype != np.float32 or out.shape != shape or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous float32 of shape {shape}, got {out.dtype} {out.shape}")
    if dm.n_vectors == 0 or out.size == 0:
        return out, None
    if Kd == 0:
        out.fill(0)
        return out, None
    per = 4 if dm.precision == "float32" else 8  # elements of one 16-byte piece
    flags = FLAG_VEC if vector_path(Kd, per, A, B) else 0
    grid, block = sddmm_grid(dm.n_vec_rows, dm.max_vectors_per_row, config)
    name = kernel_name("sddmm", dm.precision, dm.vector) + ("" if dest is None else "_s")  # "_s": through dest
    args = (dm.vec_ptr, dm.indices, dm.data, A, B, out, np.int64(n_rows), np.int64(Kd), np.int32(flags))
    return out, (launch.function(name, config, SDDMM_SOURCE), grid, block,
                 args if dest is None else (*args, dest), 0, None, 5, None)
