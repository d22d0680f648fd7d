"""Small builders shared by the storage tests (imported by path: tests run with --import-mode=importlib)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from storage.indexing import index_dtype


def canonical(A) -> sp.csr_array:
    """A CSR with indices in ``index_dtype(max(shape), nnz)``, as the parser produces."""
    A = sp.csr_array(A)
    idx = index_dtype(max(A.shape), A.nnz)
    return sp.csr_array((A.data, A.indices.astype(idx), A.indptr.astype(idx)), shape=A.shape)


def random_csr(n_rows, n_cols, density, dtype=np.float64, seed=0, empty_rows=()) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    A = sp.random_array((n_rows, n_cols), density=density, format="csr", dtype=dtype, rng=rng).tolil()
    for r in empty_rows:
        A[r, :] = 0
    A = sp.csr_array(A)
    A.eliminate_zeros()
    return canonical(A)


def assert_same_csr(B, A) -> None:
    """Bit-exact: shape, dtypes, indptr, indices, data."""
    assert B.shape == A.shape
    assert B.indptr.dtype == A.indptr.dtype and B.indices.dtype == A.indices.dtype and B.dtype == A.dtype
    np.testing.assert_array_equal(B.indptr, A.indptr)
    np.testing.assert_array_equal(B.indices, A.indices)
    assert B.data.tobytes() == A.data.tobytes()


def csr_to_metcf(A, window=16, width=8) -> dict:
    """Reference ME-TCF builder (docs/architecture.md canonical form), loops are fine at test sizes."""
    A = sp.csr_array(A)
    n_rows = A.shape[0]
    n_windows = -(-n_rows // window)
    rwo, tco, s2b, tlid, data = [0], [0], [], [], []
    for w in range(n_windows):
        rows = range(w * window, min((w + 1) * window, n_rows))
        cols = np.unique(np.concatenate([A.indices[A.indptr[r]:A.indptr[r + 1]] for r in rows] + [np.empty(0,
                                                                                                        int)]))
        n_blocks = -(-len(cols) // width)
        for b in range(n_blocks):
            slot = cols[b * width:(b + 1) * width]
            s2b.append(np.pad(slot, (0, width - len(slot)), constant_values=-1))
            items = []
            for r in rows:
                for k in range(A.indptr[r], A.indptr[r + 1]):
                    c = int(np.searchsorted(cols, A.indices[k]))
                    if c // width == b:
                        items.append(((r - w * window) * width + c % width, A.data[k]))
            items.sort()
            tlid += [i for i, _ in items]
            data += [v for _, v in items]
            tco.append(tco[-1] + len(items))
        rwo.append(rwo[-1] + n_blocks)
    idx = index_dtype(max(A.shape), A.nnz)
    return {"shape": A.shape, "row_window_offset": np.asarray(rwo, idx), "tc_offset": np.asarray(tco, idx),
            "tc_local_id": np.asarray(tlid, np.uint8),
            "sparse_a_to_b": np.asarray(s2b, idx).reshape(-1, width),
            "data": np.asarray(data, A.dtype)}
