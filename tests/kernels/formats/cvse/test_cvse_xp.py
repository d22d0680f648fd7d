"""The GPU CVSE converter (kernels/formats/cvse/gpu.py) run on NumPy: bit for bit the host converter's arrays
(`csr_to_cvse` at the precision's storage dtype), dtypes included, at every V and precision and on every edge
case; the GPU run of the same function is checked in tests/kernels/formats/cvse/test_gpu_cvse_convert.py."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernel_cases import CONVERTER_CASES, assert_same_arrays, random_csr
from kernels.formats.cvse import gpu as cvse_gpu
from kernels.formats.cvse.container import VECTORS, csr_to_cvse
from kernels.formats.cvse.gpu import csr_to_cvse_gpu, csr_to_cvse_gpu_from_scipy, to_host
from kernels.precision import precision

PRECISIONS = ("float32", "float16", "bfloat16")


def shared_columns():
    """  rows 0..7   column 5 in every row (one vector of 8 at V = 8, four of 2 at V = 2), column 9 in row 3
         rows 8..12  empty; row 13 one entry (a partial last vector row at V = 16 and V = 8)"""
    rows = [*range(8), 3, 13]
    cols = [5] * 8 + [9, 0]
    return sp.csr_array((np.arange(1.0, 11.0), (rows, cols)), shape=(14, 12))


CASES = {**CONVERTER_CASES, "shared_columns": shared_columns}


def assert_same_bits(G, X):
    assert_same_arrays(G, X, ("vec_ptr", "indices", "data"))


@pytest.mark.parametrize("vector", VECTORS)
@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_equals_host_conversion(name, p_name, vector):
    p = precision(p_name)
    A = CASES[name]()
    X = csr_to_cvse(A, vector=vector, to_storage=p.to_storage)
    G = csr_to_cvse_gpu_from_scipy(A, p, vector=vector, xp=np)
    assert_same_bits(G, X)
    G.validate(full=True)
    assert to_host(G) is G


def test_unsorted_columns_and_default_values():
    """Columns unsorted within rows (the contract allows it) and no to_storage: float32 values, the host's."""
    A = random_csr((45, 60), 500, seed=12)
    perm = np.concatenate([np.random.default_rng(r).permutation(np.arange(A.indptr[r], A.indptr[r + 1]))
                           for r in range(A.shape[0])])
    assert not np.array_equal(perm, np.arange(A.nnz))
    G = csr_to_cvse_gpu(A.indptr, A.indices[perm], A.data[perm], A.shape, vector=4)
    assert_same_bits(G, csr_to_cvse(A, vector=4))


def test_wide_keys_rank_the_columns(monkeypatch):
    """At KEY_LIMIT and past it the columns are ranked first: the same arrays."""
    A = random_csr((200, 3000), 4000, seed=13)
    monkeypatch.setattr(cvse_gpu, "KEY_LIMIT", 10)
    p = precision("bfloat16")
    assert_same_bits(csr_to_cvse_gpu_from_scipy(A, p, vector=8, xp=np), csr_to_cvse(A, vector=8,
                                                                                   to_storage=p.to_storage))


def test_bad_inputs_are_refused_in_one_line():
    A = random_csr((20, 10), 30, seed=14)
    with pytest.raises(ValueError, match="vector length V is 3, expected one of"):
        csr_to_cvse_gpu(A.indptr, A.indices, A.data, A.shape, vector=3)
    with pytest.raises(ValueError, match="indptr has 20 entries, expected n_rows \\+ 1 = 21"):
        csr_to_cvse_gpu(A.indptr[:-1], A.indices, A.data, A.shape)
    with pytest.raises(ValueError, match="indices/data have 29/30 entries, expected nnz = 30"):
        csr_to_cvse_gpu(A.indptr, A.indices[:-1], A.data, A.shape)
