"""The deterministic CUDA-core CSR SpMM (csr_spmm.cu beside this file): SpmmPlan's fallback where Tensor Core blocks
stay nearly empty (power-law graphs, tiny matrices), in place of cuSPARSE, whose CSR SpMM gives bitwise-different C
from call to call (so a deterministic plan never picks it). Works on the matrix as given, in every precision
(float32 values multiplied in fp32, not TF32; 16-bit values widened to fp32), C float32 or B's 16-bit type.

`segments` cuts each row into pieces of at most ``seg_len`` nonzeros (NumPy, once per plan): a short row is one
segment written straight to C; the pieces of a long row write float32 partial rows to a workspace, added in piece
order by a second kernel. `CsrRows` uploads A and the segments once; ``bind(B, out)`` packs the one or two launches
(kernels.launch.Bound: one cuLaunchKernel each per call), ``run`` launches unbound. CuPy is imported lazily.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kernels import launch
from kernels.precision import precision as as_precision
from storage.indexing import INT32_MAX, cut_ranges
from kernels.operands import check_b_out

SOURCE = Path(__file__).resolve().parent / "csr_spmm.cu"
SUFFIX = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
COLS = 128  # columns per warp (4 per lane)


@dataclass(frozen=True)
class CsrConfig:
    """Compile-time constants of csr_spmm.cu and the row cut."""

    warps: int = 2  # warps per thread block (one segment each)
    unroll: int = 4  # B loads in flight per warp before their FMAs
    seg_len: int = 128  # nonzeros per segment: longer rows are cut and their pieces summed by csr_fixup

    def defines(self) -> tuple[str, ...]:
        return (f"-DCSR_WARPS={self.warps}", f"-DCSR_UNROLL={self.unroll}")


CSR_CONFIG = CsrConfig()


@dataclass(frozen=True)
class Segments:
    seg_ptr: np.ndarray  # int64 [S + 1]
    seg_row: np.ndarray  # int32 [S]
    seg_slot: np.ndarray  # int32 [S]: -1 = C, else the workspace row
    fix_row: np.ndarray  # int32 [R]: the long rows
    fix_ptr: np.ndarray  # int32 [R + 1]: their workspace rows, in piece order

    @property
    def n_slots(self) -> int:
        return int(self.fix_ptr[-1])


def segments(indptr, seg_len: int = CSR_CONFIG.seg_len) -> Segments:
    """Cut rows into pieces of <= seg_len nonzeros (>= 1 piece per row, so every row of C is written)."""
    return Segments(*cut_ranges(indptr, seg_len, "row", "seg_len"))


def reference(A, B, seg: Segments) -> np.ndarray:
    """NumPy twin of the two kernels in float64 (piece sums added in piece order): what the tests compare to."""
    A = A.tocsr()
    C = np.zeros((A.shape[0], B.shape[1]))
    W = np.zeros((seg.n_slots, B.shape[1]))
    for s in range(seg.seg_row.shape[0]):
        lo, hi = seg.seg_ptr[s], seg.seg_ptr[s + 1]
        part = A.data[lo:hi].astype(np.float64) @ B[A.indices[lo:hi]].astype(np.float64)
        if seg.seg_slot[s] < 0:
            C[seg.seg_row[s]] = part
        else:
            W[seg.seg_slot[s]] = part
    for i, r in enumerate(seg.fix_row):
        C[r] = W[seg.fix_ptr[i]:seg.fix_ptr[i + 1]].sum(axis=0)
    return C


class CsrRows:
    """A (canonical CSR: SciPy) on the current device in ``precision``'s storage type, with its row pieces."""

    def __init__(self, A, precision, config: CsrConfig = CSR_CONFIG):
        import cupy

        self.precision, self.config = as_precision(precision), config
        self.shape = (int(A.shape[0]), int(A.shape[1]))
        if self.shape[1] > INT32_MAX:
            raise ValueError(f"A has {self.shape[1]} columns; the CSR kernel takes int32 column ids")
        seg = segments(A.indptr, config.seg_len)
        self.n_segs, self.n_long, self.n_slots = int(seg.seg_row.shape[0]), int(seg.fix_row.shape[0]), seg.n_slots
        p = self.precision
        values = A.data if A.data.dtype == p.storage_dtype else p.to_storage(np.asarray(A.data, dtype=np.float32))
        up = cupy.asarray
        self.indices = up(np.asarray(A.indices, dtype=np.int32)) if A.nnz else cupy.zeros(1, cupy.int32)
        self.data = up(values) if A.nnz else cupy.zeros(1, p.storage_dtype)
        self.seg_ptr, self.seg_row, self.seg_slot = up(seg.seg_ptr), up(seg.seg_row), up(seg.seg_slot)
        self.fix_row = up(seg.fix_row) if self.n_long else cupy.zeros(1, cupy.int32)
        self.fix_ptr = up(seg.fix_ptr)
        self._workspace: dict[int, object] = {}  # N -> float32 [n_slots, N]
        self._rows = launch.function(f"csr_rows_{SUFFIX[p.name]}", config, SOURCE)  # compiles now
        self._fixup = launch.function(f"csr_fixup_{SUFFIX[p.name]}", config, SOURCE)

    def _launches(self, B, out, accumulate: bool):
        import cupy

        if out is None:
            raise ValueError("out must be given: the CSR kernel writes into the caller's C")
        # 4 columns per lane: one 16-byte float or 8-byte 16-bit access
        out, N, flags = check_b_out(self.shape, self.precision.name, B, out, None, accumulate, vec_elems=4)
        W = self._workspace.get(N)
        if W is None:  # once per N, before any capture: the steady state allocates nothing
            W = self._workspace[N] = cupy.empty(max(self.n_slots * N, 1), dtype=cupy.float32)
        chunks = -(-N // COLS)
        block = (32 * self.config.warps,)
        rows = (self._rows, (-(-self.n_segs // self.config.warps), chunks), block,
                (self.seg_ptr, self.seg_row, self.seg_slot, self.indices, self.data, B, out, W,
                 np.int64(self.n_segs), np.int64(N), np.int32(flags)), 0, 5, 6, 10)
        fix = None
        if self.n_long:
            fix = (self._fixup, (-(-self.n_long // self.config.warps), chunks), block,
                   (self.fix_row, self.fix_ptr, W, out, np.int64(self.n_long), np.int64(N), np.int32(flags)), 0,
                   None, 3, 6)
        return rows, fix

    def run(self, B, out, *, accumulate: bool = False):
        if self.shape[0] == 0:
            return out
        return launch._run(out, *self._launches(B, out, accumulate))

    def bind(self, B, out, *, accumulate: bool = False):
        """The launches checked and packed once (kernels.launch.Bound)."""
        if self.shape[0] == 0:
            return launch._bind(B, out)
        return launch._bind(B, out, *self._launches(B, out, accumulate), vec_n=4)
