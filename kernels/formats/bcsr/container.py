"""BCSR (SMaT, SC'24, section IV-B): A on a fixed grid of h x w blocks, every block holding a nonzero stored dense.

Public API: `BCSR`, `csr_to_bcsr`, `bcsr_concat`, `bcsr_to_csr`, `bcsr_from_arrays`, `bcsr_spmm` (the NumPy twin),
`bcsr_stats`, `block_width` / `BLOCK_ROWS`. No column compaction inside a block row (that is ME-TCF's): a block's
columns are w consecutive columns starting at a multiple of w, so B's rows for a block are one contiguous range and
the kernels load them without an index per column. Everything is vectorised NumPy; conversion works in chunks of
block rows (about ``DEFAULT_CHUNK_NNZ`` nonzeros each), so its temporaries stay at ~50 bytes per nonzero of a chunk.
The format's registration and device operator live in ``kernels.formats.bcsr.plugin``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from kernels.formats.blocks import canonical_csr, check_pieces, stack_offsets
from kernels.precision import from_bf16_bits
from storage.indexing import index_dtype, segment_ids

BLOCK_ROWS = 16  # h: the m16 of mma.m16n8k8 (TF32) and mma.m16n8k16 (FP16/BF16)
WIDTHS = {"float32": 8, "float16": 16, "bfloat16": 16}  # w: the k of the precision's mma
DEFAULT_CHUNK_NNZ = 1 << 22


def block_width(values_dtype) -> int:
    """w from the values' storage dtype: float32 -> 8 (TF32), float16 / uint16 (bfloat16 bits) -> 16; float64
    (a NumPy twin's exact values) -> 16."""
    return 8 if np.dtype(values_dtype) == np.float32 else 16


@dataclass(frozen=True)
class BCSR:
    """An M x K sparse matrix A as dense h x w blocks on a fixed grid (h = 16; w = 8 for TF32, 16 for FP16/BF16).

    n_block_rows = ceil(M / h), n_block_cols = ceil(K / w), n_blocks = blocks holding >= 1 stored entry of A.

    - ``indptr`` [n_block_rows + 1], ``index_dtype(n_blocks)``: non-decreasing from 0 to n_blocks; block row i
      (rows h*i .. h*i+h-1) owns blocks ``indptr[i]:indptr[i+1]``.
    - ``indices`` [n_blocks], ``index_dtype(n_block_cols)``: block column j of each block (columns w*j .. w*j+w-1);
      strictly increasing within a block row.
    - ``data`` [n_blocks, h, w]: the block's values, row-major, in the precision's storage dtype (float32,
      float16, or uint16 bfloat16 bits); zeros where A has no entry, and at rows >= M / columns >= K of the
      last (partial) block row / block column.

    Canonical form: blocks of a block row in ascending block column; a block exists iff A stores an entry in it
    (an explicit zero of A makes a block, but its value cannot be told from padding: the inverse map drops zeros).
    Forward map (row, col) -> (block row, block, r, c): i = row // h, r = row % h, j = col // w, c = col % w,
    block = the b in indptr[i]:indptr[i+1] with indices[b] = j. Inverse: row = h * i + r, col = w * indices[b] + c
    for every nonzero data[b, r, c], with i the block row owning b.
    """

    shape: tuple[int, int]
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray

    format_name = "bcsr"  # kernels.spmm.SpmmPlan takes a converted object of a registered format by this name

    @property
    def block_shape(self) -> tuple[int, int]:
        return (BLOCK_ROWS, int(self.data.shape[2]) if self.data.ndim == 3 else -1)

    @property
    def width(self) -> int:
        return self.block_shape[1]

    @property
    def n_block_rows(self) -> int:
        return -(-int(self.shape[0]) // BLOCK_ROWS)

    @property
    def n_blocks(self) -> int:
        return int(self.indices.shape[0])

    @property
    def nnz(self) -> int:
        """Nonzero values held in the blocks (explicit zeros of A are not kept apart from padding)."""
        return int(np.count_nonzero(self.data))

    @property
    def nbytes(self) -> int:
        return int(self.indptr.nbytes + self.indices.nbytes + self.data.nbytes)

    # the store's layout (``bcsr_plugin``): one Parquet row per block, its h * w values as a list column
    @property
    def values(self) -> np.ndarray:
        return self.data.reshape(-1)

    @property
    def value_offset(self) -> np.ndarray:
        hw = BLOCK_ROWS * max(self.width, 1)
        return np.arange(self.n_blocks + 1, dtype=np.int64).astype(index_dtype(self.n_blocks * hw)) * hw

    def block_row_of(self) -> np.ndarray:
        """[n_blocks] int64: the block row owning each block."""
        return segment_ids(self.indptr)

    def validate(self, full: bool = False) -> None:
        """Raise ValueError naming the broken invariant, observed vs expected. O(1) unless ``full`` (O(n_blocks *
        h * w))."""
        n_rows, n_cols = (int(s) for s in self.shape)
        if n_rows < 0 or n_cols < 0:
            raise ValueError(f"shape {self.shape} has a negative dimension")
        nbr, nb = self.n_block_rows, self.n_blocks
        if self.indptr.ndim != 1 or self.indptr.shape[0] != nbr + 1:
            raise ValueError(f"indptr has shape {self.indptr.shape}, expected (ceil(M / {BLOCK_ROWS}) + 1,) = "
                             f"({nbr + 1},)")
        if self.indices.ndim != 1:
            raise ValueError(f"indices has {self.indices.ndim} dimensions, expected 1")
        w = self.width
        if self.data.ndim != 3 or self.data.shape[0] != nb or self.data.shape[1] != BLOCK_ROWS or w not in (8, 16):
            raise ValueError(f"data has shape {self.data.shape}, expected (n_blocks, {BLOCK_ROWS}, 8 or 16) with "
                             f"n_blocks = len(indices) = {nb}")
        nbc = -(-n_cols // w)
        for name, arr, size in (("indptr", self.indptr, nb), ("indices", self.indices, nbc)):
            if arr.dtype != index_dtype(size):
                raise ValueError(f"{name} has dtype {arr.dtype}, expected {np.dtype(index_dtype(size))} for "
                                 f"size {size}")
        if int(self.indptr[0]) != 0 or int(self.indptr[-1]) != nb:
            raise ValueError(f"indptr runs {int(self.indptr[0])}..{int(self.indptr[-1])}, expected 0..n_blocks = "
                             f"0..{nb}")
        if not full:
            return
        per_row = np.diff(self.indptr.astype(np.int64))
        if np.any(per_row < 0):
            i = int(np.flatnonzero(per_row < 0)[0])
            raise ValueError(f"indptr decreases at block row {i}: {int(self.indptr[i])} -> {int(self.indptr[i + 1])}")
        idx = self.indices.astype(np.int64)
        if nb and (int(idx.min()) < 0 or int(idx.max()) >= nbc):
            raise ValueError(f"indices holds block column {int(idx.min() if idx.min() < 0 else idx.max())}, "
                             f"expected 0..ceil(K / {w}) - 1 = 0..{nbc - 1}")
        brow = self.block_row_of()
        same = brow[1:] == brow[:-1]
        if np.any(same & (idx[1:] <= idx[:-1])):
            b = int(np.flatnonzero(same & (idx[1:] <= idx[:-1]))[0]) + 1
            raise ValueError(f"indices not strictly increasing in block row {int(brow[b])} at block {b}: "
                             f"{int(idx[b - 1])} then {int(idx[b])}")
        nz = self.data.reshape(nb, BLOCK_ROWS, w).view(_uint(self.data.dtype)) != 0  # bit test: -0.0 counts
        rows_ok = BLOCK_ROWS * brow[:, None] + np.arange(BLOCK_ROWS) < n_rows  # [nb, h]
        cols_ok = w * idx[:, None] + np.arange(w) < n_cols  # [nb, w]
        outside = nz & ~(rows_ok[:, :, None] & cols_ok[:, None, :])
        if np.any(outside):
            b, r, c = (int(x[0]) for x in np.nonzero(outside))
            raise ValueError(f"block {b} holds a value at ({r}, {c}) = A[{BLOCK_ROWS * int(brow[b]) + r}, "
                             f"{w * int(idx[b]) + c}], outside the {n_rows} x {n_cols} matrix (padding must be 0)")


def _uint(dtype) -> np.dtype:
    return np.dtype(f"u{np.dtype(dtype).itemsize}")


def csr_to_bcsr(A, *, width: int = 16, to_storage=None, chunk_nnz: int = DEFAULT_CHUNK_NNZ) -> BCSR:
    """Canonical CSR -> BCSR with 16 x ``width`` blocks. ``to_storage`` maps float32 values to the stored dtype
    (``Precision.to_storage``); default: kept as float32. Rows run in chunks of whole block rows."""
    if width not in (8, 16):
        raise ValueError(f"width is {width}, expected 8 (TF32 m16n8k8) or 16 (FP16/BF16 m16n8k16)")
    A = canonical_csr(A, "csr_to_bcsr")
    n_rows, n_cols = (int(s) for s in A.shape)
    to_storage = to_storage or (lambda x: np.asarray(x, dtype=np.float32))
    nbr, nbc = -(-n_rows // BLOCK_ROWS), -(-n_cols // width)
    indptr64 = A.indptr.astype(np.int64)
    brow_ptr = indptr64[np.minimum(np.arange(nbr + 1, dtype=np.int64) * BLOCK_ROWS, n_rows)]
    counts = np.zeros(nbr, dtype=np.int64)
    pieces_idx, pieces_data = [], []
    i0 = 0
    while i0 < nbr:  # chunks of whole block rows, ~chunk_nnz nonzeros each (at least one block row)
        i1 = max(i0 + 1, min(nbr, int(np.searchsorted(brow_ptr, brow_ptr[i0] + chunk_nnz, side="right")) - 1))
        lo, hi = int(brow_ptr[i0]), int(brow_ptr[i1])
        r0, r1 = i0 * BLOCK_ROWS, min(i1 * BLOCK_ROWS, n_rows)
        rows = segment_ids(indptr64[r0:r1 + 1], start=r0)
        cols = A.indices[lo:hi].astype(np.int64)
        brow, bcol = rows // BLOCK_ROWS - i0, cols // width
        if (i1 - i0) * nbc < 2**62:  # one int64 key sorts faster than two; lexsort where it would overflow
            order = np.argsort(brow * nbc + bcol, kind="stable")
        else:
            order = np.lexsort((bcol, brow))
        sb, sc = brow[order], bcol[order]
        first = np.ones(order.size, dtype=bool)
        np.not_equal(sb[1:], sb[:-1], out=first[1:])
        first[1:] |= sc[1:] != sc[:-1]
        block_of = np.empty(order.size, dtype=np.int64)
        block_of[order] = np.cumsum(first) - 1
        data = np.zeros((int(first.sum()), BLOCK_ROWS, width), dtype=np.float32)
        data[block_of, rows % BLOCK_ROWS, cols % width] = A.data[lo:hi]
        counts[i0:i1] = np.bincount(sb[first], minlength=i1 - i0)
        pieces_idx.append(sc[first])
        pieces_data.append(to_storage(data))
        i0 = i1
    n_blocks = int(counts.sum())
    indptr = np.zeros(nbr + 1, dtype=index_dtype(n_blocks))
    np.cumsum(counts, out=indptr[1:])
    indices = (np.concatenate(pieces_idx) if pieces_idx else np.empty(0, np.int64)).astype(index_dtype(nbc))
    empty = to_storage(np.zeros((0, BLOCK_ROWS, width), dtype=np.float32))
    data = np.concatenate(pieces_data) if pieces_data else empty
    return BCSR((n_rows, n_cols), indptr, indices, data)


def bcsr_concat(pieces: list[BCSR]) -> BCSR:
    """BCSR of the row-stacked matrix of ``pieces`` (consecutive row blocks of one matrix, converted apart):
    equal, array by array, to `csr_to_bcsr` of the stacked CSR. All pieces but the last need a multiple of 16 rows."""
    check_pieces(pieces, "bcsr_concat", BLOCK_ROWS,
                 lambda P: f"{int(P.shape[1])} columns, {P.width}-wide blocks, {P.data.dtype}")
    n_cols, width = int(pieces[0].shape[1]), pieces[0].width
    indptr = stack_offsets([P.indptr for P in pieces])
    n_blocks = int(indptr[-1])
    return BCSR((sum(int(P.shape[0]) for P in pieces), n_cols), indptr.astype(index_dtype(n_blocks)),
                np.concatenate([P.indices.astype(np.int64) for P in pieces]).astype(index_dtype(-(-n_cols // width))),
                np.concatenate([P.data for P in pieces]))


def bcsr_from_arrays(arrays: dict) -> BCSR:
    """A BCSR from ``store.read_format`` output (indptr, indices, the flat ``values`` with ``value_offset``, shape);
    index arrays recast to ``index_dtype`` of their own sizes (a shard's offsets restart at 0)."""
    indptr, values = np.asarray(arrays["indptr"]), np.asarray(arrays["values"])
    n_blocks = int(indptr[-1]) if len(indptr) else 0
    width = values.size // (BLOCK_ROWS * n_blocks) if n_blocks else block_width(values.dtype)
    vofs = np.asarray(arrays.get("value_offset", np.arange(n_blocks + 1) * BLOCK_ROWS * width))
    if values.size != BLOCK_ROWS * width * n_blocks or np.any(np.diff(vofs) != BLOCK_ROWS * width):
        raise ValueError(f"values hold {values.size} entries for {n_blocks} blocks, expected {BLOCK_ROWS} x "
                         f"{width} per block")
    shape = tuple(int(s) for s in arrays["shape"])
    return BCSR(shape, indptr.astype(index_dtype(n_blocks), copy=False),
                np.asarray(arrays["indices"]).astype(index_dtype(-(-shape[1] // width)), copy=False),
                values.reshape(n_blocks, BLOCK_ROWS, width))


def values_float64(data: np.ndarray) -> np.ndarray:
    """Block values widened exactly to float64 (uint16 is bfloat16 bits)."""
    if data.dtype == np.uint16:
        return from_bf16_bits(data).astype(np.float64)
    return data.astype(np.float64)


def bcsr_to_csr(X: BCSR) -> sp.csr_array:
    """The inverse map: canonical CSR of the nonzero block values (float64 for bfloat16 bits, else data's dtype)."""
    vals = values_float64(X.data) if X.data.dtype == np.uint16 else X.data
    b, r, c = np.nonzero(vals)
    brow = X.block_row_of()
    rows = BLOCK_ROWS * brow[b] + r
    cols = X.width * X.indices.astype(np.int64)[b] + c
    n_rows, n_cols = X.shape
    order = np.lexsort((cols, rows))
    idx = index_dtype(max(n_rows, n_cols), order.size)
    counts = np.bincount(rows, minlength=n_rows) if n_rows else np.zeros(0, np.int64)
    indptr = np.zeros(n_rows + 1, dtype=idx)
    np.cumsum(counts, out=indptr[1:])
    return sp.csr_array((vals[b, r, c][order], cols[order].astype(idx), indptr), shape=(n_rows, n_cols))


def bcsr_spmm(X: BCSR, B, *, chunk_elems: int = 1 << 24) -> np.ndarray:
    """float64 C = A @ B from the blocks (the NumPy twin of the kernels): per block row, the sum over its blocks
    of data[b] @ B[w * indices[b] : w * indices[b] + w] (B zero-padded to the block grid)."""
    B = np.asarray(B, dtype=np.float64)
    vector = B.ndim == 1
    B2 = B.reshape(-1, 1) if vector else B
    n_rows, n_cols = X.shape
    if B2.shape[0] != n_cols:
        raise ValueError(f"B has {B2.shape[0]} rows, expected A's column count {n_cols}")
    N, w, nbr = B2.shape[1], X.width, X.n_block_rows
    Bp = np.zeros((-(-n_cols // w) * w, N))
    Bp[:n_cols] = B2
    Bp = Bp.reshape(-1, w, N)
    C = np.zeros((nbr, BLOCK_ROWS, N))
    indptr = X.indptr.astype(np.int64)
    step = max(1, chunk_elems // max(BLOCK_ROWS * w * N, 1))  # blocks per chunk
    i0 = 0
    while i0 < nbr:  # chunks of whole block rows, about `step` blocks each
        i1 = max(i0 + 1, int(np.searchsorted(indptr, indptr[i0] + step, side="right")) - 1)
        i1 = min(i1, nbr)
        b0, b1 = int(indptr[i0]), int(indptr[i1])
        if b1 > b0:
            vals = values_float64(X.data[b0:b1])
            prod = np.einsum("bhw,bwn->bhn", vals, Bp[X.indices[b0:b1].astype(np.int64)])
            per = np.diff(indptr[i0:i1 + 1])
            nonempty = np.flatnonzero(per)
            C[i0 + nonempty] = np.add.reduceat(prod, (indptr[i0:i1] - b0)[nonempty], axis=0)
        i0 = i1
    C = C.reshape(-1, N)[:n_rows]
    return C.reshape(-1) if vector else C


def bcsr_stats(X: BCSR, csr_nbytes: int | None = None) -> dict:
    """Blocks, fill (nonzeros / stored block values), blocks per block row min/mean/max/cv, bytes vs CSR."""
    nnz, nb = X.nnz, X.n_blocks
    if csr_nbytes is None:
        idx = np.dtype(index_dtype(max(X.shape), nnz)).itemsize
        csr_nbytes = (int(X.shape[0]) + 1) * idx + nnz * (idx + X.data.dtype.itemsize)
    per = np.diff(X.indptr.astype(np.int64))
    mean = float(per.mean()) if per.size else 0.0
    return {"shape": tuple(int(s) for s in X.shape), "nnz": nnz, "block_shape": list(X.block_shape),
            "n_block_rows": X.n_block_rows, "n_blocks": nb,
            "fill": nnz / (nb * BLOCK_ROWS * X.width) if nb else 0.0, "mean_nnz_tc": nnz / nb if nb else 0.0,
            "blocks_per_row_min": int(per.min()) if per.size else 0, "blocks_per_row_mean": mean,
            "blocks_per_row_max": int(per.max()) if per.size else 0,
            "blocks_per_row_cv": float(per.std() / mean) if mean > 0 else 0.0,
            "bcsr_bytes": X.nbytes, "csr_bytes": int(csr_nbytes),
            "bcsr_over_csr": X.nbytes / csr_nbytes if csr_nbytes else float("nan")}
