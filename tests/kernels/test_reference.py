"""The float64 references: metcf_spmm (from ME-TCF arrays) equals SciPy's CSR product; csr_spmm equals dense."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats.metcf import csr_to_metcf
from kernels.reference import csr_spmm, metcf_spmm

# Both sides sum the same float64 products per row (different chunking/order only): 1e-12 relative is ~1e4 ulp.
RTOL = 1e-12


def random_csr(shape, nnz, seed, index_dtype=np.int32):
    rng = np.random.default_rng(seed)
    n_rows, n_cols = shape
    flat = rng.choice(n_rows * n_cols, size=min(nnz, n_rows * n_cols), replace=False)
    rows, cols = np.divmod(flat.astype(np.int64), n_cols)
    A = sp.csr_array((rng.standard_normal(len(rows)), (rows, cols)), shape=shape)
    A.indices, A.indptr = A.indices.astype(index_dtype), A.indptr.astype(index_dtype)
    return A


def empty_windows():
    A = random_csr((100, 50), 600, seed=2).tolil()
    A[16:48] = 0  # windows 1 and 2 entirely empty
    A[5] = 0
    A = sp.csr_array(A)
    A.eliminate_zeros()
    return A


def hub_row():
    """Row 17 holds 40,000 nonzeros (5,000 blocks in window 1)."""
    A = random_csr((33, 100_000), 500, seed=3).tolil()
    A[17, np.random.default_rng(4).choice(100_000, 40_000, replace=False)] = 1.5
    return sp.csr_array(A)


def explicit_zeros():
    A = random_csr((50, 70), 400, seed=5)
    A.data[::3] = 0.0
    return A


CASES = {
    "7x333": lambda: random_csr((7, 333), 333, seed=0),
    "1000x37": lambda: random_csr((1000, 37), 3000, seed=1),
    "37x5000": lambda: random_csr((37, 5000), 2000, seed=6),
    "empty_windows": empty_windows,
    "nnz0": lambda: sp.csr_array((40, 30)),
    "hub_row": hub_row,
    "explicit_zeros": explicit_zeros,
    "int64_indices": lambda: random_csr((300, 200), 2000, seed=7, index_dtype=np.int64),
    "float32_values": lambda: random_csr((90, 60), 700, seed=8).astype(np.float32),
}


def assert_close(C, ref):
    assert C.shape == ref.shape and C.dtype == np.float64
    scale = np.linalg.norm(ref)
    err = np.linalg.norm(C - ref)
    assert err <= RTOL * scale if scale else err == 0.0, f"relative error {err / (scale or 1):.3e}"


@pytest.mark.parametrize("n", [1, 7, 32, 128])
@pytest.mark.parametrize("name", sorted(CASES))
def test_metcf_spmm_matches_scipy(name, n):
    A = CASES[name]()
    B = np.random.default_rng(n).standard_normal((A.shape[1], n))
    M = csr_to_metcf(A)
    ref = csr_spmm(A, B)
    assert_close(metcf_spmm(M, B), ref)
    assert_close(metcf_spmm(M, B, chunk_nnz=53), ref)  # many window chunks


def test_int64_columns_beyond_int32():
    """A B of 2**31 rows would not fit in memory here: check the int64 path converts, then multiply on the used
    columns only (the product depends on nothing else)."""
    cols = np.array([0, 2**31 + 5, 7, 2**31 + 5], dtype=np.int64)
    A = sp.csr_array((np.array([1.0, 2.0, 3.0, 4.0]), (np.array([0, 0, 17, 18]), cols)), shape=(20, 2**31 + 6))
    M = csr_to_metcf(A)
    assert M.sparse_a_to_b.dtype == np.int64
    # B[k] = k + 1 restricted to the used columns
    used = np.unique(cols)
    A_small = sp.csr_array((A.data, np.searchsorted(used, A.indices), A.indptr), shape=(20, len(used)))
    B = (used + 1.0)[:, None]
    expected = np.zeros((20, 1))
    expected[[0, 17, 18], 0] = [1.0 * 1 + 2.0 * (2**31 + 6), 3.0 * 8, 4.0 * (2**31 + 6)]
    assert_close(csr_spmm(A_small, B), expected)
    assert_close(metcf_spmm(csr_to_metcf(A_small), B), expected)


def test_vector_b_and_dense_agreement():
    A = CASES["7x333"]()
    x = np.random.default_rng(1).standard_normal(333)
    assert metcf_spmm(csr_to_metcf(A), x).shape == (7,)
    np.testing.assert_allclose(metcf_spmm(csr_to_metcf(A), x), A.toarray() @ x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(csr_spmm(A, x[:, None])[:, 0], A.toarray() @ x, rtol=1e-12, atol=1e-12)


def test_float32_b_is_upcast():
    A = CASES["1000x37"]()
    B = np.random.default_rng(2).standard_normal((37, 7)).astype(np.float32)
    assert_close(metcf_spmm(csr_to_metcf(A), B), A.toarray() @ B.astype(np.float64))


def test_shape_mismatch_message():
    M = csr_to_metcf(CASES["7x333"]())
    with pytest.raises(ValueError, match="B has 332 rows, expected A's column count 333"):
        metcf_spmm(M, np.zeros((332, 4)))
