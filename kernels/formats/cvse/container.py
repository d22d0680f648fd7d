"""CVSE (VectorSparse, SC'21 section 3; SSpMM, TPDS'25 section V): column-vector sparse encoding. Rows are taken V at
a time (a "vector row"); V rows that store an entry in the same column share that column index as one V x 1 vector
holding all V values (zeros where a row has none).

Public API: `CVSE`, `csr_to_cvse`, `cvse_concat`, `cvse_from_arrays`, `cvse_to_csr`, `cvse_spmm` (the NumPy twin of
the SpMM kernels), `cvse_sddmm` (the NumPy twin of the SDDMM kernels), `cvse_stats`, `VECTORS`. SSpMM's Sparse
Vector Compression (choosing V for an unstructured matrix) is ``kernels.formats.cvse.svc``; the registration and
device operator ``kernels.formats.cvse.plugin``. Vectorised NumPy (no loop over rows or vectors), but for the
conversion's merge of each vector row's rows (`csr_to_cvse`), a numba kernel.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from kernels.formats.blocks import canonical_csr, check_pieces, stack_offsets
from kernels.precision import from_bf16_bits
from storage.indexing import index_dtype, segment_ids

VECTORS = (2, 4, 8, 16)  # V: divides the 16-row windows the store and the Dask row blocks use
WINDOW_ROWS = 16


@dataclass(frozen=True)
class CVSE:
    """An M x K sparse matrix A as V x 1 column vectors, V in {2, 4, 8, 16}.

    n_vec_rows = ceil(M / V) (vector row i = rows V*i .. V*i + V - 1), n_vectors = vectors holding >= 1 stored entry.

    - ``vec_ptr`` [n_vec_rows + 1], ``index_dtype(n_vectors)``: non-decreasing from 0 to n_vectors; vector row i owns
      vectors ``vec_ptr[i]:vec_ptr[i+1]`` (the papers' vecPtr).
    - ``indices`` [n_vectors], ``index_dtype(K)``: the column of each vector (colInd); strictly increasing within a
      vector row.
    - ``data`` [n_vectors, V]: ``data[b, v]`` = A[V*i + v, indices[b]], in the precision's storage dtype (float32,
      float16, or uint16 bfloat16 bits); zeros where A has no entry and at rows >= M of the last vector row.

    Canonical form: a vector row's vectors in ascending column; a vector exists iff one of its V rows stores an
    entry in that column (an explicit zero of A makes a vector, but cannot be told from padding: the inverse drops
    zeros). Forward map (row, col) -> (vector row, vector, v): i = row // V, v = row % V, vector = the b in
    vec_ptr[i]:vec_ptr[i+1] with indices[b] = col. Inverse: row = V*i + v, col = indices[b] for every nonzero
    data[b, v], with i the vector row owning b.
    """

    shape: tuple[int, int]
    vec_ptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray

    format_name = "cvse"  # kernels.spmm.SpmmPlan takes a converted object of a registered format by this name

    @property
    def vector(self) -> int:
        return int(self.data.shape[1]) if self.data.ndim == 2 else -1

    @property
    def n_vec_rows(self) -> int:
        return -(-int(self.shape[0]) // max(self.vector, 1))

    @property
    def n_vectors(self) -> int:
        return int(self.indices.shape[0])

    @property
    def n_blocks(self) -> int:
        """Vectors, under the name the shard code counts a format's tiles by (`kernels.formats.shard`)."""
        return self.n_vectors

    @property
    def nnz(self) -> int:
        """Nonzero values held in the vectors (explicit zeros of A are not kept apart from padding)."""
        return int(np.count_nonzero(self.data.view(_uint(self.data.dtype))))

    @property
    def nbytes(self) -> int:
        return int(self.vec_ptr.nbytes + self.indices.nbytes + self.data.nbytes)

    # the store's layout (cvse_plugin): one Parquet row per vector, grouped by 16-row window; `vec_row` is the
    # vector's row within its window (0 .. 16 / V - 1), `values` its V values as a list over `value_offset`
    @property
    def window_ptr(self) -> np.ndarray:
        per = WINDOW_ROWS // self.vector
        n_windows = -(-int(self.shape[0]) // WINDOW_ROWS)
        return self.vec_ptr[np.minimum(np.arange(n_windows + 1, dtype=np.int64) * per, self.n_vec_rows)]

    @property
    def vec_row(self) -> np.ndarray:
        return (self.vec_row_of() % (WINDOW_ROWS // self.vector)).astype(np.uint8)

    @property
    def values(self) -> np.ndarray:
        return self.data.reshape(-1)

    @property
    def value_offset(self) -> np.ndarray:
        V = max(self.vector, 1)
        return np.arange(self.n_vectors + 1, dtype=np.int64).astype(index_dtype(self.n_vectors * V)) * V

    def vec_row_of(self) -> np.ndarray:
        """[n_vectors] int64: the vector row owning each vector."""
        return segment_ids(self.vec_ptr)

    def validate(self, full: bool = False) -> None:
        """Raise ValueError naming the broken invariant, observed vs expected. O(1) unless ``full`` (O(n_vectors V))."""
        n_rows, n_cols = (int(s) for s in self.shape)
        if n_rows < 0 or n_cols < 0:
            raise ValueError(f"shape {self.shape} has a negative dimension")
        V = self.vector
        if self.data.ndim != 2 or V not in VECTORS or self.data.shape[0] != self.n_vectors:
            raise ValueError(f"data has shape {self.data.shape}, expected (n_vectors, V) with n_vectors = "
                             f"len(indices) = {self.n_vectors} and V in {VECTORS}")
        nvr, nv = self.n_vec_rows, self.n_vectors
        if self.vec_ptr.ndim != 1 or self.vec_ptr.shape[0] != nvr + 1:
            raise ValueError(f"vec_ptr has shape {self.vec_ptr.shape}, expected (ceil(M / V) + 1,) = ({nvr + 1},)")
        for name, arr, size in (("vec_ptr", self.vec_ptr, nv), ("indices", self.indices, n_cols)):
            if arr.dtype != index_dtype(size):
                raise ValueError(f"{name} has dtype {arr.dtype}, expected {np.dtype(index_dtype(size))} for size {size}")
        if int(self.vec_ptr[0]) != 0 or int(self.vec_ptr[-1]) != nv:
            raise ValueError(f"vec_ptr runs {int(self.vec_ptr[0])}..{int(self.vec_ptr[-1])}, expected 0..n_vectors = "
                             f"0..{nv}")
        if not full:
            return
        per = np.diff(self.vec_ptr.astype(np.int64))
        if np.any(per < 0):
            i = int(np.flatnonzero(per < 0)[0])
            raise ValueError(f"vec_ptr decreases at vector row {i}: {int(self.vec_ptr[i])} -> "
                             f"{int(self.vec_ptr[i + 1])}")
        idx = self.indices.astype(np.int64)
        if nv and (int(idx.min()) < 0 or int(idx.max()) >= n_cols):
            raise ValueError(f"indices holds column {int(idx.min() if idx.min() < 0 else idx.max())}, expected "
                             f"0..K - 1 = 0..{n_cols - 1}")
        vr = self.vec_row_of()
        bad = (vr[1:] == vr[:-1]) & (idx[1:] <= idx[:-1])
        if np.any(bad):
            b = int(np.flatnonzero(bad)[0]) + 1
            raise ValueError(f"indices not strictly increasing in vector row {int(vr[b])} at vector {b}: "
                             f"{int(idx[b - 1])} then {int(idx[b])}")
        nz = self.data.view(_uint(self.data.dtype)) != 0  # bit test: -0.0 counts
        outside = nz & (V * vr[:, None] + np.arange(V) >= n_rows)
        if np.any(outside):
            b, v = (int(x[0]) for x in np.nonzero(outside))
            raise ValueError(f"vector {b} holds a value at v = {v}, row {V * int(vr[b]) + v} >= M = {n_rows} "
                             "(padding must be 0)")


def _uint(dtype) -> np.dtype:
    return np.dtype(f"u{np.dtype(dtype).itemsize}")


def check_vector(V: int) -> int:
    if int(V) not in VECTORS:
        raise ValueError(f"vector length V is {V}, expected one of {VECTORS} (V must divide the 16-row windows)")
    return int(V)


def csr_to_cvse(A, *, vector: int = 8, to_storage=None) -> CVSE:
    """Canonical CSR -> CVSE with V = ``vector``. ``to_storage`` maps float32 values to the stored dtype
    (``Precision.to_storage``); default: kept as float32. Forward map of the class docstring: each vector row's V
    sorted rows merged by column in a numba kernel, twice (count, then fill; values cast to float32 as NumPy casts
    them). 9.9M nonzeros (SBM after TCA, 2-core host): 0.37 s at V = 8, 0.72 s at V = 16, where one sort of the
    (vector row, column) keys and the scatters of the vectors' values took 1.57 / 2.32 s (2026-11-29); the same
    arrays (compared on 640 random matrices of every shape class, dtype and V)."""
    V = check_vector(vector)
    A = canonical_csr(A, "csr_to_cvse")
    n_rows, n_cols = (int(s) for s in A.shape)
    to_storage = to_storage or (lambda x: np.asarray(x, dtype=np.float32))
    nvr = -(-n_rows // V)
    indptr = np.asarray(A.indptr, dtype=np.int64)
    # float32 values, cast as NumPy casts them: float64 by the kernel's store, any other dtype (integers) here, so
    # the kernel is compiled for two value types only
    values = A.data if A.data.dtype in (np.float32, np.float64) else A.data.astype(np.float32)
    counts = np.zeros(nvr, dtype=np.int64)
    _merge_vector_rows(indptr, A.indices, values, n_rows, V, counts, None, None, None)
    vec_ptr = np.zeros(nvr + 1, dtype=np.int64)
    np.cumsum(counts, out=vec_ptr[1:])
    n_vectors = int(vec_ptr[-1])
    indices = np.empty(n_vectors, dtype=index_dtype(n_cols))
    data = np.zeros((n_vectors, V), dtype=np.float32)
    _merge_vector_rows(indptr, A.indices, values, n_rows, V, counts, vec_ptr, indices, data)
    return CVSE((n_rows, n_cols), vec_ptr.astype(index_dtype(n_vectors)), indices, to_storage(data))


@numba.njit(cache=True, nogil=True)
def _merge_vector_rows(indptr, cols, values, n_rows, V, counts, vec_ptr, indices, data):
    """Each vector row's rows (sorted, distinct columns) merged by column: without ``vec_ptr`` the distinct columns
    of each vector row into ``counts``; with it, vector b's column into ``indices[b]`` and row v's value into
    ``data[b, v]``, the vectors of vector row i from ``vec_ptr[i]`` in ascending column."""
    head = np.empty(V, dtype=np.int64)
    end = np.empty(V, dtype=np.int64)
    for i in range(counts.size):
        n = min(V, n_rows - i * V)
        for v in range(n):
            head[v] = indptr[i * V + v]
            end[v] = indptr[i * V + v + 1]
        b = 0 if vec_ptr is None else vec_ptr[i]
        while True:
            col = -1
            for v in range(n):  # the smallest column at the rows' heads
                if head[v] < end[v] and (col < 0 or cols[head[v]] < col):
                    col = cols[head[v]]
            if col < 0:
                break
            for v in range(n):  # every row holding it gives its value and moves on
                if head[v] < end[v] and cols[head[v]] == col:
                    if vec_ptr is not None:
                        data[b, v] = values[head[v]]
                    head[v] += 1
            if vec_ptr is not None:
                indices[b] = col
            b += 1
        if vec_ptr is None:
            counts[i] = b


def cvse_concat(pieces: list[CVSE]) -> CVSE:
    """CVSE of the row-stacked matrix of ``pieces`` (consecutive row blocks of one matrix, converted apart): equal,
    array by array, to `csr_to_cvse` of the stacked CSR. All pieces but the last need a multiple of V rows."""
    check_pieces(pieces, "cvse_concat", pieces[0].vector if pieces else 1,
                 lambda P: f"{int(P.shape[1])} columns, V = {P.vector}, {P.data.dtype}",
                 f"V = {pieces[0].vector}" if pieces else "")
    n_cols = int(pieces[0].shape[1])
    vec_ptr = stack_offsets([P.vec_ptr for P in pieces])
    nv = int(vec_ptr[-1])
    return CVSE((sum(int(P.shape[0]) for P in pieces), n_cols), vec_ptr.astype(index_dtype(nv)),
                np.concatenate([P.indices.astype(np.int64) for P in pieces]).astype(index_dtype(n_cols)),
                np.concatenate([P.data for P in pieces]))


def cvse_from_arrays(arrays: dict) -> CVSE:
    """A CVSE from ``store.read_format`` output (window_ptr, vec_row, indices, the flat ``values`` over
    ``value_offset``, shape). V is values per vector; a range without vectors has no V on disk and reads back
    with ``arrays.get("vector", 8)`` (its product is zero at any V)."""
    wptr = np.asarray(arrays["window_ptr"], dtype=np.int64)
    values = np.asarray(arrays["values"])
    nv = int(wptr[-1]) if len(wptr) else 0
    V = values.size // nv if nv else int(arrays.get("vector", 8))
    check_vector(V)
    vofs = np.asarray(arrays.get("value_offset", np.arange(nv + 1) * V), dtype=np.int64)
    if values.size != V * nv or np.any(np.diff(vofs) != V):
        raise ValueError(f"values hold {values.size} entries for {nv} vectors, expected the same V per vector")
    shape = tuple(int(s) for s in arrays["shape"])
    per = WINDOW_ROWS // V
    window = segment_ids(wptr)
    vrow = window * per + np.asarray(arrays["vec_row"], dtype=np.int64)
    nvr = -(-shape[0] // V)
    if nv and (np.any(vrow[1:] < vrow[:-1]) or int(vrow[-1]) >= nvr):
        raise ValueError(f"vec_row places vectors outside vector rows 0..{nvr - 1} or out of order")
    vec_ptr = np.zeros(nvr + 1, dtype=index_dtype(nv))
    np.cumsum(np.bincount(vrow, minlength=nvr), out=vec_ptr[1:])
    return CVSE(shape, vec_ptr, np.asarray(arrays["indices"]).astype(index_dtype(shape[1]), copy=False),
                values.reshape(nv, V))


def values_float64(data: np.ndarray) -> np.ndarray:
    """Vector values widened exactly to float64 (uint16 is bfloat16 bits)."""
    if data.dtype == np.uint16:
        return from_bf16_bits(data).astype(np.float64)
    return data.astype(np.float64)


def cvse_to_csr(X: CVSE) -> sp.csr_array:
    """The inverse map: canonical CSR of the nonzero vector values: float64 for bfloat16 bits, float32 for float16
    (exact; SciPy has no float16 sparse arrays), else data's dtype."""
    vals = (values_float64(X.data) if X.data.dtype == np.uint16
            else X.data.astype(np.float32) if X.data.dtype == np.float16 else X.data)
    b, v = np.nonzero(vals.view(_uint(vals.dtype)))
    rows = X.vector * X.vec_row_of()[b] + v
    cols = X.indices.astype(np.int64)[b]
    n_rows, n_cols = X.shape
    order = np.lexsort((cols, rows))
    idx = index_dtype(max(n_rows, n_cols), order.size)
    indptr = np.zeros(n_rows + 1, dtype=idx)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    return sp.csr_array((vals[b, v][order], cols[order].astype(idx), indptr), shape=(n_rows, n_cols))


def _member_csr(X: CVSE, v: int, vals: np.ndarray) -> sp.csr_array:
    """Member v of every vector as an n_vec_rows x K CSR (row i = A's row V*i + v, padding included)."""
    return sp.csr_array((vals[:, v], X.indices.astype(np.int64), X.vec_ptr.astype(np.int64)),
                        shape=(X.n_vec_rows, int(X.shape[1])))


def cvse_spmm(X: CVSE, B) -> np.ndarray:
    """float64 C = A @ B from the vectors: C[V*i + v] = sum over b of vector row i of data[b, v] * B[indices[b]]
    (one sparse product per member v, so its temporaries stay at one C)."""
    B = np.asarray(B, dtype=np.float64)
    vector = B.ndim == 1
    B2 = B.reshape(-1, 1) if vector else B
    n_rows, n_cols = X.shape
    if B2.shape[0] != n_cols:
        raise ValueError(f"B has {B2.shape[0]} rows, expected A's column count {n_cols}")
    V, vals = X.vector, values_float64(X.data)
    C = np.zeros((X.n_vec_rows * V, B2.shape[1]))
    for v in range(V):  # V <= 16 sparse products
        C[v::V] = _member_csr(X, v, vals) @ B2
    C = C[:n_rows]
    return C.reshape(-1) if vector else C


def cvse_sddmm(X: CVSE, A, B) -> np.ndarray:
    """float64 SDDMM on the vectors: out[b, v] = data[b, v] * (A[V*i + v] . B[indices[b]]) for vector b of vector
    row i, i.e. ((A @ B^T) (.) S) at S's vector positions ([n_vectors, V]; zero at padding). A [M, Kd], B [K, Kd]."""
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    n_rows, n_cols = X.shape
    if A.ndim != 2 or B.ndim != 2 or A.shape[0] != n_rows or B.shape[0] != n_cols or A.shape[1] != B.shape[1]:
        raise ValueError(f"A is {A.shape} and B {B.shape}; expected ({n_rows}, Kd) and ({n_cols}, Kd) for S of shape "
                         f"{X.shape}")
    V = X.vector
    Ap = np.zeros((X.n_vec_rows * V, A.shape[1]))
    Ap[:n_rows] = A
    rows = V * X.vec_row_of()[:, None] + np.arange(V)  # [n_vectors, V]
    out = np.empty((X.n_vectors, V))
    step = max(1, (1 << 22) // max(V * A.shape[1], 1))
    idx = X.indices.astype(np.int64)
    for b0 in range(0, X.n_vectors, step):  # chunks of vectors: temporaries stay ~32 MB
        b1 = min(X.n_vectors, b0 + step)
        out[b0:b1] = np.einsum("bvk,bk->bv", Ap[rows[b0:b1]], B[idx[b0:b1]])
    return out * values_float64(X.data)


def cvse_stats(X: CVSE, csr_nbytes: int | None = None) -> dict:
    """Vectors, the padding Sparse Vector Compression adds (stored zeros), the new sparsity inside the vectors
    (SSpMM eq. 1: 1 - nnz / (V n_vectors)) and its compute-density improvement, vectors per vector row, bytes."""
    nnz, nv, V = X.nnz, X.n_vectors, X.vector
    if csr_nbytes is None:
        idx = np.dtype(index_dtype(max(X.shape), nnz)).itemsize
        csr_nbytes = (int(X.shape[0]) + 1) * idx + nnz * (idx + X.data.dtype.itemsize)
    per = np.diff(X.vec_ptr.astype(np.int64))
    mean = float(per.mean()) if per.size else 0.0
    slots = nv * V
    dense = int(X.shape[0]) * int(X.shape[1])
    return {"shape": tuple(int(s) for s in X.shape), "nnz": nnz, "vector": V, "n_vec_rows": X.n_vec_rows,
            "n_vectors": nv, "padding": slots - nnz, "fill": nnz / slots if slots else 0.0,
            "new_sparsity": 1.0 - nnz / slots if slots else 0.0,
            "sparsity": 1.0 - nnz / dense if dense else 0.0,
            "density_improvement": dense / slots if slots else float("nan"),
            "mean_nnz_tc": nnz / nv if nv else 0.0,
            "vectors_per_row_min": int(per.min()) if per.size else 0, "vectors_per_row_mean": mean,
            "vectors_per_row_max": int(per.max()) if per.size else 0,
            "vectors_per_row_cv": float(per.std() / mean) if mean > 0 else 0.0,
            "cvse_bytes": X.nbytes, "csr_bytes": int(csr_nbytes),
            "cvse_over_csr": X.nbytes / csr_nbytes if csr_nbytes else float("nan")}
