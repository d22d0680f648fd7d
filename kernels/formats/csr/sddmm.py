"""The CUDA-core CSR SDDMM (csr_sddmm.cu beside this file): ``out[p] = s[p] * (A[row_p] . B[col_p])`` at every
stored nonzero p of S, in S's CSR order, one dot product per nonzero by a team of lanes, reading A and B in the
precision's storage type as they are (float32 rounded to TF32 in the kernel; float16; bfloat16 bits). A route of
`kernels.sddmm.SddmmPlan` beside the CVSE Tensor Core kernel and cuSPARSE: where S's 8-row vectors are mostly
padding (power-law and community graphs) the Tensor Core kernel's work grows with that padding, and cuSPARSE reads
float32 copies of 16-bit inputs.

`CsrSddmm(indptr, indices, shape, precision, values=None)` uploads the nonzeros' rows and columns (and S's values
unless all are one) once; ``run(A, B, out=None)`` checks the operands and launches (``team_size`` lanes per
nonzero, from Kd). Deterministic: one writer per output, sums in a fixed order. CuPy is imported lazily.
`SDDMM` is this route on the format seam (``kernels.formats.contract.SddmmOperator``, the csr `Format`'s
``sddmm``): S as it is, the float64 twin ``kernels.reference.csr_sddmm``, `CsrSddmm` on the device.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kernels import launch
from kernels.precision import precision as as_precision
from kernels.reference import csr_sddmm
from storage.indexing import INT32_MAX, segment_ids

SOURCE = Path(__file__).resolve().parent / "csr_sddmm.cu"
# kernels.sddmm.SddmmPlan offers this route (`SDDMM.gpu_ready`, timed beside the others per Kd) since
# tests/kernels/formats/csr/test_gpu_csr_sddmm.py passed on a GPU (203 tests, H100, 2026-11-27); False withdraws it
GPU_READY = True
GPU_NOT_READY_WHY = "the CUDA-core SDDMM kernel has not passed its GPU tests yet (test_gpu_csr_sddmm.py)"
SUFFIX = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
FLAG_VEC, FLAG_SCALE = 1, 2


@dataclass(frozen=True)
class CsrSddmmConfig:
    """Compile-time constants of csr_sddmm.cu."""

    warps: int = 4  # warps per thread block
    steps: int = 4  # nonzeros per team per warp chunk: a warp takes steps x (32 / team size) consecutive nonzeros

    def defines(self) -> tuple[str, ...]:
        return (f"-DCSR_SDDMM_WARPS={self.warps}", f"-DCSR_SDDMM_STEPS={self.steps}")


CSR_SDDMM_CONFIG = CsrSddmmConfig()


def piece_elems(precision: str) -> int:
    """Features per 16-byte piece a lane reads: 4 floats or 8 16-bit values."""
    return 4 if as_precision(precision).name == "float32" else 8


def team_size(Kd: int, precision: str) -> int:
    """Lanes per nonzero: one piece each across a row of Kd features, a power of two from 1 to 32 (longer rows:
    each lane takes several pieces)."""
    pieces = max(1, -(-int(Kd) // piece_elems(precision)))
    return min(32, 1 << (pieces - 1).bit_length())


def grid(nnz: int, team: int, config: CsrSddmmConfig = CSR_SDDMM_CONFIG) -> tuple[tuple[int], tuple[int]]:
    """(grid, block): a warp per chunk of ``steps x 32 / team`` consecutive nonzeros, ``warps`` warps per block."""
    chunks = -(-int(nnz) // (config.steps * (32 // team)))
    return (max(1, -(-chunks // config.warps)),), (32 * config.warps,)


class CsrSddmm:
    """S's pattern (canonical CSR arrays) on the current device for the CUDA-core SDDMM in ``precision``.
    ``values``: S's values (float32 [nnz]) multiplied into the result, or None for a pattern of ones."""

    def __init__(self, indptr, indices, shape, precision, values=None, config: CsrSddmmConfig = CSR_SDDMM_CONFIG):
        import cupy

        self.precision, self.config = as_precision(precision), config
        self.shape = (int(shape[0]), int(shape[1]))
        if max(self.shape) > INT32_MAX:
            raise ValueError(f"S has shape {self.shape}; the CSR SDDMM kernel takes int32 row and column ids")
        indptr = np.asarray(indptr, dtype=np.int64)
        if indptr.shape != (self.shape[0] + 1,):
            raise ValueError(f"indptr has {indptr.shape[0]} entries, expected n_rows + 1 = {self.shape[0] + 1}")
        self.nnz = int(indptr[-1]) if indptr.size else 0
        if np.shape(indices)[0] < self.nnz:
            raise ValueError(f"indices has {np.shape(indices)[0]} entries, expected nnz = {self.nnz}")
        rows = segment_ids(indptr, np.int32)
        self.rows = cupy.asarray(rows) if self.nnz else cupy.zeros(1, cupy.int32)
        self.indices = cupy.asarray(np.asarray(indices[:self.nnz], dtype=np.int32)) if self.nnz \
            else cupy.zeros(1, cupy.int32)
        self.scaled = values is not None
        if self.scaled:
            values = np.asarray(values, dtype=np.float32)
            if values.shape[0] < self.nnz:
                raise ValueError(f"values has {values.shape[0]} entries, expected nnz = {self.nnz}")
        self.values = cupy.asarray(values[:self.nnz]) if self.scaled and self.nnz else cupy.ones(1, cupy.float32)
        self._per = piece_elems(self.precision.name)
        launch.module(config, SOURCE)  # compile now, not in the first run

    def _check(self, X, name: str, rows: int):
        import cupy

        want = self.precision.storage_dtype
        if not isinstance(X, cupy.ndarray) or X.ndim != 2 or not X.flags.c_contiguous or X.dtype != want:
            raise TypeError(f"kernels.formats.csr.sddmm: {name} must be a C-contiguous 2-D cupy {np.dtype(want)} "
                            f"array ({self.precision.name}), got {type(X).__name__} {getattr(X, 'dtype', None)}")
        if X.shape[0] != rows:
            raise ValueError(f"kernels.formats.csr.sddmm: {name} has {X.shape[0]} rows, expected {rows}")

    def run(self, A, B, out=None):
        """out (float32 [nnz], new unless given) = (A @ B^T) (.) S in S's CSR order."""
        out, ln = self._launch(A, B, out)
        return launch._run(out, ln)

    def bind(self, A, B, out) -> launch.Bound:
        """`run` on these A, B and out, checked and packed once (kernels.launch.Bound: ``bound(stream_ptr)``
        launches and returns out, ``set_io(A, new_out)`` re-points out)."""
        return launch._bind(A, *self._launch(A, B, out), vec_n=1)

    def _launch(self, A, B, out):
        """(out, the launch tuple of kernels.launch._run / _bind, out at argument 5, or None when there is nothing
        to compute), after the checks; out made when None, zero-filled here when Kd = 0."""
        import cupy

        self._check(A, "A", self.shape[0])
        self._check(B, "B", self.shape[1])
        Kd = int(A.shape[1])
        if int(B.shape[1]) != Kd:
            raise ValueError(f"kernels.formats.csr.sddmm: A has {Kd} columns and B {B.shape[1]}; they must match")
        if out is None:
            out = cupy.empty(self.nnz, dtype=cupy.float32)
        elif out.dtype != np.float32 or out.shape != (self.nnz,) or not out.flags.c_contiguous:
            raise ValueError(f"kernels.formats.csr.sddmm: out must be contiguous float32 ({self.nnz},), got "
                             f"{out.dtype} {out.shape}")
        if self.nnz == 0:
            return out, None
        if Kd == 0:
            out.fill(0)
            return out, None
        team = team_size(Kd, self.precision.name)
        flags = (FLAG_SCALE if self.scaled else 0) | (
            FLAG_VEC if Kd % self._per == 0 and A.data.ptr % 16 == 0 and B.data.ptr % 16 == 0 else 0)
        fn = launch.function(f"csr_sddmm_{SUFFIX[self.precision.name]}_t{team}", self.config, SOURCE)
        g, block = grid(self.nnz, team, self.config)
        return out, (fn, g, block, (self.rows, self.indices, self.values, A, B, out, np.int64(self.nnz),
                                    np.int64(Kd), np.int32(flags)), 0, None, 5, None)


class CsrSddmmOperator:
    """The CUDA-core CSR route of `kernels.sddmm.SddmmPlan` (``kernels.formats.contract.SddmmOperator``): it runs
    on S's CSR as it is, so a plan of any format may take it, once `GPU_READY` (read per plan)."""

    route, on_csr = "csr", True
    description = "the CSR SDDMM kernel (CUDA cores, kernels.formats.csr.sddmm)"

    @property
    def gpu_ready(self) -> bool:
        return GPU_READY

    @property
    def gpu_not_ready_why(self) -> str:
        return GPU_NOT_READY_WHY

    def prepare(self, S, precision, *, vector: int | None = None):
        """S itself (canonical CSR, values rounded to the precision); no report."""
        return S, None

    def twin(self, S, A, B) -> np.ndarray:
        return csr_sddmm(S, A, B)

    def upload(self, S, precision, *, scale: np.ndarray | None) -> CsrSddmm:
        """``scale``: `kernels.reference.sddmm_scale` of S, as the plan computed it once (None: x S skipped for unit
        values, attention patterns, the benchmark's)."""
        return CsrSddmm(S.indptr, S.indices, S.shape, precision.name, values=scale)


SDDMM = CsrSddmmOperator()
