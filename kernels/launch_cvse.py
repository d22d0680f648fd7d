"""Thin launchers for kernels/cuda/cvse_spmm.cu and cvse_sddmm.cu (SSpMM's Transpose Mapping Scheme and Register
Shuffle Method on CVSE): check (dtype, contiguity, shape, 64-bit limits), allocate, launch with grid/block as named
locals. Compiled through kernels.launch's NVRTC machinery (``launch.function(name, CVSE_CONFIG, source)``), CuPy
imported lazily. Validated on a GPU by tests/kernels/test_gpu_cvse.py (H200).

Device arrays (`upload`): ``vec_ptr`` int64 [n_vec_rows + 1], ``indices`` int32 [max(n_vectors, 1)], ``data``
[max(n_vectors, 1), V]: float32 rounded to TF32 (``kernels.launch.tf32_round``), float16, or uint16 bfloat16 bits.
SpMM: B [K, N] and C [M, N] row-major in the precision's dtype (C float32 or the 16-bit type). SDDMM: A [M, Kd],
B [K, Kd] in the precision's dtype, out float32 [n_vectors, V].
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels.indexing import INT32_MAX
from kernels.operands import FLAG_VEC

SPMM_SOURCE, SDDMM_SOURCE = "cvse_spmm.cu", "cvse_sddmm.cu"
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

    def defines(self) -> tuple[str, ...]:
        return (f"-DCVSE_WARP_COLS={self.warp_cols}", f"-DCVSE_MAX_WARPS={self.max_warps}",
                f"-DCVSE_MIN_BLOCKS_PER_SM={self.min_blocks_per_sm}",
                f"-DCVSE_STEPS_PER_STAGE={self.steps_per_stage}", f"-DCVSE_STAGES={self.stages}",
                f"-DCVSE_SDDMM_GROUPS={self.sddmm_groups}", f"-DCVSE_SDDMM_LOADS={self.sddmm_loads}")

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
    from kernels import launch

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

    @property
    def n_vec_rows(self) -> int:
        return int(self.vec_ptr_host.shape[0]) - 1

    @property
    def n_vectors(self) -> int:
        return int(self.vec_ptr_host[-1])


def upload(X, precision: str) -> CvseArrays:
    """A host CVSE (kernels.formats.cvse) in ``precision``'s storage dtype -> CvseArrays on the current device."""
    import cupy

    from kernels.precision import precision as as_precision

    p = as_precision(precision)
    n_rows, n_cols = (int(s) for s in X.shape)
    if X.data.dtype != p.storage_dtype:
        raise ValueError(f"CVSE with {X.data.dtype} values given for {p.name}, which needs {p.storage_dtype} "
                         "(kernels.formats.get('cvse').convert)")
    if n_cols > INT32_MAX or -(-n_rows // X.vector) > MAX_GRID_X:
        raise ValueError(f"A is {n_rows} x {n_cols}; the kernels take at most {INT32_MAX} columns and "
                         f"{MAX_GRID_X} vector rows")
    vec_ptr_host = np.asarray(X.vec_ptr, dtype=np.int64)
    data = cupy.asarray(X.data) if X.n_vectors else cupy.zeros((1, X.vector), dtype=X.data.dtype)
    if p.name == "float32":
        from kernels.launch import tf32_round

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
    from kernels import launch
    from kernels.operands import check_b_out

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


def sddmm(dm: CvseArrays, A, B, out=None, config: CvseConfig = CVSE_CONFIG):
    """out[b, v] = S[b, v] * (A[V*i + v] . B[indices[b]]) on the device ([n_vectors, V] float32, new unless given)."""
    import cupy

    from kernels import launch
    from kernels.precision import precision as as_precision

    want = as_precision(dm.precision).storage_dtype
    n_rows, n_cols = dm.shape
    _check(A, "A", want, n_rows)
    Kd = int(A.shape[1])
    _check(B, "B", want, n_cols, Kd)
    shape = (dm.n_vectors, dm.vector)
    if out is None:
        out = cupy.empty(shape, dtype=cupy.float32)
    elif out.dtype != np.float32 or out.shape != shape or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous float32 of shape {shape}, got {out.dtype} {out.shape}")
    if dm.n_vectors == 0:
        return out
    if Kd == 0:
        out.fill(0)
        return out
    per = 4 if dm.precision == "float32" else 8  # elements of one 16-byte piece
    flags = FLAG_VEC if Kd % per == 0 and A.data.ptr % 16 == 0 and B.data.ptr % 16 == 0 else 0
    max_per_row = int(np.diff(dm.vec_ptr_host).max())
    grid, block = sddmm_grid(dm.n_vec_rows, max_per_row, config)
    launch.function(kernel_name("sddmm", dm.precision, dm.vector), config, SDDMM_SOURCE)(
        grid, block, (dm.vec_ptr, dm.indices, dm.data, A, B, out, np.int64(n_rows), np.int64(Kd), np.int32(flags)))
    return out
