"""CSR as a registered format: A's rows that hold nonzeros, in SciPy's canonical order (columns sorted, no
duplicates), values in the precision's storage dtype, for the deterministic CUDA-core kernel of this folder
(csr_spmm.cu, which takes A's plain CSR: `to_scipy`). Plain NumPy/SciPy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from kernels.formats.blocks import WINDOW, canonical_csr, check_pieces, stack_offsets
from kernels.precision import from_bf16_bits
from storage.indexing import index_dtype, segment_ids


@dataclass(frozen=True)
class CSR:
    """An M x K sparse matrix A as its non-empty rows, grouped by 16-row window (a stored row is a tile).

    - ``window_ptr`` [ceil(M / 16) + 1] int64: window w owns stored rows ``window_ptr[w]:window_ptr[w + 1]``.
    - ``row_in_window`` uint8 [n_stored]: r, the stored row's position in its window (0..15), increasing within a
      window; the row is ``16 w + r``.
    - ``indptr`` [n_stored + 1], ``index_dtype(nnz)``: stored row t owns nonzeros ``indptr[t]:indptr[t + 1]``
      (at least one).
    - ``indices`` [nnz], ``index_dtype(K)``: the column of each nonzero, ascending within a row.
    - ``data`` [nnz]: A's values in the precision's storage dtype (float32, float16, or uint16 bfloat16 bits).

    Canonical form: SciPy's canonical CSR of A without its empty rows. Forward map (row, col) -> window
    w = row // 16, r = row % 16, tile t = the one in ``window_ptr[w]:window_ptr[w + 1]`` with ``row_in_window[t] =
    r``, p = the one in ``indptr[t]:indptr[t + 1]`` with ``indices[p] = col``; inverse: row = 16 w + row_in_window[t]
    for the window w owning t, col = indices[p].
    """

    shape: tuple[int, int]
    window_ptr: np.ndarray
    row_in_window: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray

    format_name = "csr"  # its registered name: SpmmPlan and the shards take a converted object by it

    @property
    def n_windows(self) -> int:
        return -(-int(self.shape[0]) // WINDOW)

    @property
    def n_blocks(self) -> int:  # the tiles a shard counts: stored rows
        return int(self.row_in_window.shape[0])

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in (self.window_ptr, self.row_in_window, self.indptr, self.indices, self.data)))

    def rows(self) -> np.ndarray:
        """The row of each stored row, int64 [n_stored]."""
        window = segment_ids(self.window_ptr)
        return WINDOW * window + self.row_in_window.astype(np.int64)

    def validate(self, full: bool = False) -> None:
        """O(1) shape checks; ``full``: O(nnz) order and range checks. ValueError naming the observed value."""
        n = self.n_blocks
        if self.window_ptr.shape != (self.n_windows + 1,) or int(self.window_ptr[-1]) != n:
            raise ValueError(f"window_ptr has {self.window_ptr.shape[0]} entries ending at {int(self.window_ptr[-1])}, "
                             f"expected ceil(M / 16) + 1 = {self.n_windows + 1} ending at n_stored = {n}")
        if self.indptr.shape != (n + 1,) or int(self.indptr[-1]) != self.nnz or self.data.shape != (self.nnz,):
            raise ValueError(f"indptr has {self.indptr.shape[0]} entries ending at {int(self.indptr[-1])}, expected "
                             f"n_stored + 1 = {n + 1} ending at nnz = {self.nnz} (data: {self.data.shape[0]})")
        if full:
            rows, K = self.rows(), int(self.shape[1])
            if n and (np.any(np.diff(rows) <= 0) or rows[-1] >= int(self.shape[0]) or np.any(np.diff(self.indptr) < 1)):
                raise ValueError("stored rows must be increasing, inside A and non-empty")
            if self.nnz and (int(self.indices.min()) < 0 or int(self.indices.max()) >= K):
                raise ValueError(f"a column lies outside 0 .. {K - 1}")


def from_scipy_parts(A) -> CSR:
    """The CSR of a canonical SciPy CSR ``A`` (values as they are)."""
    n_rows = int(A.shape[0])
    counts = np.diff(np.asarray(A.indptr, dtype=np.int64))
    rows = np.flatnonzero(counts)
    indptr = np.zeros(rows.shape[0] + 1, dtype=index_dtype(int(A.nnz)))
    np.cumsum(counts[rows], out=indptr[1:])
    window_ptr = np.searchsorted(rows, np.arange(-(-n_rows // WINDOW) + 1, dtype=np.int64) * WINDOW).astype(np.int64)
    return CSR((n_rows, int(A.shape[1])), window_ptr, (rows % WINDOW).astype(np.uint8), indptr, A.indices, A.data)


def csr_from_scipy(A, *, to_storage=None) -> CSR:
    """Canonical CSR of any SciPy sparse A; values through ``to_storage`` (the precision's), else float32."""
    A = canonical_csr(A, "the CSR format")
    data = to_storage(A.data) if to_storage is not None else A.data.astype(np.float32)
    return from_scipy_parts(sp.csr_array((data, A.indices, A.indptr), shape=A.shape))


def csr_concat(pieces: list[CSR]) -> CSR:
    """Row blocks (all but the last a whole number of windows) stacked: equal to converting the whole matrix."""
    check_pieces(pieces, "CSR concat", WINDOW, lambda X: (int(X.shape[1]), X.data.dtype))
    indptr = stack_offsets([X.indptr for X in pieces])
    return CSR((sum(int(X.shape[0]) for X in pieces), int(pieces[0].shape[1])),
               stack_offsets([X.window_ptr for X in pieces]), np.concatenate([X.row_in_window for X in pieces]),
               indptr.astype(index_dtype(int(indptr[-1]))), np.concatenate([X.indices for X in pieces]),
               np.concatenate([X.data for X in pieces]))


def csr_from_arrays(arrays: dict) -> CSR:
    """A CSR from ``store.read_format`` output (a window range: its offsets rebuilt from 0)."""
    return CSR(tuple(int(s) for s in arrays["shape"]), np.asarray(arrays["window_ptr"], dtype=np.int64),
               np.asarray(arrays["row_in_window"], dtype=np.uint8), np.asarray(arrays["indptr"]),
               np.asarray(arrays["indices"]), np.asarray(arrays["data"]))


def to_scipy(X: CSR) -> sp.csr_array:
    """The SciPy CSR of X (empty rows back), values as stored (bfloat16 stays uint16 bits)."""
    n_rows = int(X.shape[0])
    counts = np.zeros(n_rows, dtype=np.int64)
    counts[X.rows()] = np.diff(np.asarray(X.indptr, dtype=np.int64))
    indptr = np.zeros(n_rows + 1, dtype=index_dtype(X.nnz))
    np.cumsum(counts, out=indptr[1:])
    return sp.csr_array((X.data, X.indices, indptr), shape=(n_rows, int(X.shape[1])))


def csr_spmm(X: CSR, B, precision=None) -> np.ndarray:
    """float64 C = A @ B from the arrays; bfloat16 bits widened exactly."""
    A = to_scipy(X)
    if A.dtype == np.uint16:
        A = sp.csr_array((from_bf16_bits(A.data), A.indices, A.indptr), shape=A.shape)
    return np.asarray(A.astype(np.float64) @ np.asarray(B, dtype=np.float64))


def csr_stats(X: CSR, csr_nbytes: int | None = None) -> dict:
    """Stored (non-empty) rows, nonzeros per stored row (a warp's work before the row cut), bytes."""
    per = np.diff(np.asarray(X.indptr, dtype=np.int64))
    mean = float(per.mean()) if per.size else 0.0
    return {"shape": tuple(int(s) for s in X.shape), "nnz": X.nnz, "stored_rows": X.n_blocks,
            "row_nnz_mean": mean, "row_nnz_max": int(per.max()) if per.size else 0,
            "row_nnz_cv": float(per.std() / mean) if mean > 0 else 0.0, "csr_bytes": X.nbytes}
