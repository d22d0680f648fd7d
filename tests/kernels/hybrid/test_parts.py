"""kernels.hybrid.parts._take_rows: A[rows] by runs of consecutive rows (slices) or by one gather, both equal to the
plain gather it replaced, bit for bit and dtype for dtype, on sorted windows, permutations and the edge cases."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.hybrid import parts
from kernels.hybrid.parts import _take_rows


def take_rows_reference(A, rows):
    """_take_rows before the run path: every nonzero's position gathered (the oracle)."""
    indptr = np.asarray(A.indptr, dtype=np.int64)
    start, length = indptr[rows], indptr[rows + 1] - indptr[rows]
    ptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(length, out=ptr[1:])
    pos = np.repeat(start - ptr[:-1], length) + np.arange(int(ptr[-1]), dtype=np.int64)
    return sp.csr_array((A.data[pos], A.indices[pos], ptr), shape=(int(rows.size), int(A.shape[1])))


def random_csr(n_rows, n_cols, mean_row_nnz, dtype, index_dtype=np.int32, seed=0):
    """Rows of Poisson lengths (some empty), values of ``dtype`` (uint16: bfloat16 bits, NaN patterns included)."""
    rng = np.random.default_rng(seed)
    indptr = np.concatenate([[0], np.cumsum(rng.poisson(mean_row_nnz, n_rows))]).astype(index_dtype)
    nnz = int(indptr[-1])
    if dtype == np.uint16:
        data = rng.integers(0, 1 << 16, nnz, dtype=np.uint16)
    else:
        data = rng.standard_normal(nnz).astype(dtype)
        data[::97] = np.nan
    indices = rng.integers(0, n_cols, nnz).astype(index_dtype)
    return sp.csr_array((data, indices, indptr), shape=(n_rows, n_cols))


def windows(n_rows, mask):
    rows = (np.flatnonzero(mask)[:, None] * 16 + np.arange(16)).ravel()
    return rows[rows < n_rows].astype(np.int64)


def row_sets(n_rows, rng):
    n_windows = -(-n_rows // 16)
    return {
        "none": np.zeros(0, dtype=np.int64), "all": np.arange(n_rows, dtype=np.int64),
        "first": np.array([0]), "last": np.array([n_rows - 1]), "middle": np.array([n_rows // 2]),
        "alternate windows": windows(n_rows, np.arange(n_windows) % 2 == 0),
        "random windows": windows(n_rows, rng.random(n_windows) < 0.3),
        "tail window only": windows(n_rows, np.arange(n_windows) == n_windows - 1),
        "scattered rows": np.sort(rng.choice(n_rows, n_rows // 7, replace=False)).astype(np.int64),
        "permutation": rng.permutation(n_rows).astype(np.int64),
        "reversed": np.arange(n_rows - 1, -1, -1, dtype=np.int64),
        "runs out of order": np.concatenate([np.arange(50, 90), np.arange(0, 50), np.arange(90, n_rows)]),
        "repeated rows": np.array([3, 3, 4, 5, 5, 5, 6], dtype=np.int64),
    }


def assert_same(got, want, case=""):
    assert got.shape == want.shape, case
    for name in ("data", "indices", "indptr"):
        g, w = getattr(got, name), getattr(want, name)
        assert g.dtype == w.dtype, (case, name)
        assert g.tobytes() == w.tobytes(), (case, name)  # bitwise: NaN values and bfloat16 bit patterns included


@pytest.mark.parametrize("min_run_nnz", [0, 160, 10**18])  # every run sliced / the measured rule / always gathered
@pytest.mark.parametrize("dtype,index_dtype", [(np.float32, np.int32), (np.float64, np.int64),
                                               (np.float16, np.int32), (np.uint16, np.int32)])
def test_take_rows_equals_the_gather(monkeypatch, min_run_nnz, dtype, index_dtype):
    monkeypatch.setattr(parts, "_SLICE_MIN_RUN_NNZ", min_run_nnz)
    rng = np.random.default_rng(5)
    for n_rows, mean_row_nnz in ((333, 20), (333, 0.3), (1, 5), (17, 40)):  # long runs, mostly empty rows, tiny
        A = random_csr(n_rows, 71, mean_row_nnz, dtype, index_dtype, seed=n_rows)
        for name, rows in row_sets(n_rows, rng).items():
            if rows.size and int(rows.max()) >= n_rows:
                continue
            assert_same(_take_rows(A, rows), take_rows_reference(A, rows), name)


def test_take_rows_on_an_empty_matrix_and_its_rows_in_scipy_order():
    A = sp.csr_array((np.zeros(0, np.float16), np.zeros(0, np.int32), np.zeros(6, np.int32)), shape=(5, 9))
    for rows in (np.zeros(0, dtype=np.int64), np.arange(5, dtype=np.int64), np.array([4, 0])):
        assert_same(_take_rows(A, rows), take_rows_reference(A, rows))
    B = random_csr(400, 50, 30, np.float32, seed=1)
    rows = windows(400, np.arange(25) % 3 != 1)  # runs of 32 rows: about 960 nonzeros a run, the slice path
    assert np.array_equal(_take_rows(B, rows).toarray(), B.toarray()[rows], equal_nan=True)
