"""The GPU Tiled-CSR converter (kernels/formats/tiledcsr/gpu.py) run on NumPy: bit for bit the host converter's
arrays (the plugin's `convert`), dtypes included, at every precision and on every edge case; the GPU run of the
same function is checked in tests/kernels/formats/tiledcsr/test_gpu_tiledcsr_convert.py."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernel_cases import CONVERTER_CASES, assert_same_arrays, random_csr
from kernels.formats import get
from kernels.formats.tiledcsr import gpu as tiled_gpu
from kernels.formats.tiledcsr.gpu import csr_to_tiledcsr_gpu, csr_to_tiledcsr_gpu_from_scipy, to_host
from kernels.precision import precision

PRECISIONS = ("float32", "float16", "bfloat16")
FIELDS = ("group_ptr", "tile_ptr", "tile_cols", "tile_indptr", "tile_indices", "data")


def dense_group():
    """  rows 0..15  all 40 columns stored: 5 tiles of 8 (TF32) or 3 of 16, the last padded
         rows 16..20 one long row (row 18) and four empty ones"""
    A = sp.lil_array((21, 40))
    A[:16, :] = np.arange(1.0, 641.0).reshape(16, 40)
    A[18, ::3] = -1.0
    return sp.csr_array(A)


CASES = {**CONVERTER_CASES, "dense_group": dense_group}


def assert_same_bits(G, X):
    assert_same_arrays(G, X, FIELDS)


@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_equals_host_conversion(name, p_name):
    p = precision(p_name)
    A = CASES[name]()
    X = get("tiledcsr").convert(A, p)
    G = csr_to_tiledcsr_gpu_from_scipy(A, p, xp=np)
    assert_same_bits(G, X)
    G.validate(full=True)
    assert to_host(G) is G


def test_unsorted_columns_and_default_values():
    """Columns unsorted within rows (the contract allows it) and no to_storage: float32 values, the host's."""
    A = random_csr((45, 60), 500, seed=12)
    X = get("tiledcsr").convert(A, precision("float32"))  # float32 storage: the values as float32
    perm = np.concatenate([np.random.default_rng(r).permutation(np.arange(A.indptr[r], A.indptr[r + 1]))
                           for r in range(A.shape[0])])
    assert not np.array_equal(perm, np.arange(A.nnz))
    G = csr_to_tiledcsr_gpu(A.indptr, A.indices[perm], A.data[perm], A.shape, width=8)
    assert_same_bits(G, X)
    assert tiled_gpu.to_host(G) is G


def test_wide_keys_rank_the_columns(monkeypatch):
    """Past KEY_LIMIT the columns are ranked first: the same arrays."""
    A = random_csr((200, 3000), 4000, seed=13)
    p = precision("float16")
    monkeypatch.setattr(tiled_gpu, "KEY_LIMIT", 10)
    assert_same_bits(csr_to_tiledcsr_gpu_from_scipy(A, p, xp=np), get("tiledcsr").convert(A, p))


def test_bad_inputs_are_refused_in_one_line():
    A = random_csr((20, 10), 30, seed=14)
    with pytest.raises(ValueError, match="width is 4, expected 8"):
        csr_to_tiledcsr_gpu(A.indptr, A.indices, A.data, A.shape, width=4)
    with pytest.raises(ValueError, match="indptr has 20 entries, expected n_rows \\+ 1 = 21"):
        csr_to_tiledcsr_gpu(A.indptr[:-1], A.indices, A.data, A.shape)
    with pytest.raises(ValueError, match="indices/data have 29/30 entries, expected nnz = 30"):
        csr_to_tiledcsr_gpu(A.indptr, A.indices[:-1], A.data, A.shape)
