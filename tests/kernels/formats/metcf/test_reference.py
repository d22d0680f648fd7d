"""The float64 references: metcf_spmm (from ME-TCF arrays) equals SciPy's CSR product; csr_spmm equals dense."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats.metcf.container import csr_to_metcf
from kernels.formats.metcf.reference import metcf_spmm
from kernels.reference import csr_spmm
from kernel_cases import BASE_CASES, random_csr

# Both sides sum the same float64 products per row (different chunking/order only): 1e-12 relative is ~1e4 ulp.
RTOL = 1e-12


CASES = {
    **BASE_CASES,
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
