"""The GPU BCSR converter (kernels/formats/bcsr/gpu.py) run on NumPy: bit for bit the CPU converter's arrays
(`csr_to_bcsr` through the plugin's `convert`), dtypes included, at every precision and on every edge case; the
GPU run of the same function is checked in tests/kernels/test_gpu_bcsr.py."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernel_cases import BASE_CASES, assert_same_arrays, int64_columns, random_csr
from kernels.formats import get
from kernels.formats.bcsr import gpu as bcsr_gpu
from kernels.formats.bcsr.gpu import csr_to_bcsr_gpu, csr_to_bcsr_gpu_from_scipy, to_host
from kernels.precision import precision

PRECISIONS = ("float32", "float16", "bfloat16")


def hub_column():
    """Column 3 holds a value in every one of 100 rows: one block column, 7 block rows (the last partial)."""
    return sp.csr_array((np.linspace(-2.0, 2.0, 100), (np.arange(100), np.full(100, 3))), shape=(100, 40))


def special_values():
    """-0.0, NaN, inf, a float16 overflow (1e6 -> inf), a bfloat16 tie and a float16 subnormal: the storage
    conversion per nonzero must give the CPU's bits."""
    vals = np.array([-0.0, np.nan, np.inf, 1e6, 1.0 + 2.0**-8, 3e-6, 1.0 / 3.0, -7.0])
    return sp.csr_array((vals, ([0, 1, 2, 3, 15, 16, 16, 40], [0, 9, 17, 30, 31, 0, 33, 1])), shape=(41, 34))


# Every BASE_CASES shape (remainders of 16 and the width, rectangular both ways, empty block rows, nnz = 0, a hub row
# over 5,000 blocks, stored zeros: they make blocks on both sides) plus the ones BCSR adds.
CASES = {**BASE_CASES,
         "zero_rows": lambda: sp.csr_array((0, 5)),
         "one_row_no_cols": lambda: sp.csr_array((1, 0)),
         "partial_last_blocks": lambda: random_csr((37, 45), 600, seed=11),  # 2 x 16 + 5 rows, 45 columns
         "hub_column": hub_column,
         "special_values": special_values,
         "int64_columns": int64_columns,  # K = 2**36: indices int64
         "int64_indices_small": lambda: random_csr((300, 200), 2000, seed=7, index_dtype=np.int64)}


def assert_same_bits(G, X):
    assert_same_arrays(G, X, ("indptr", "indices", "data"))


@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_equals_cpu_conversion(name, p_name):
    p = precision(p_name)
    A = CASES[name]()
    X = get("bcsr").convert(A, p)
    G = csr_to_bcsr_gpu_from_scipy(A, p, xp=np)
    assert_same_bits(G, X)
    assert to_host(G) is G
    G.validate(full=True)


@pytest.mark.parametrize("p_name", PRECISIONS)
def test_arrays_as_given(p_name):
    """Raw arrays: int32 and int64 index arrays, float32 values, columns shuffled within their rows (the CSR need
    not be sorted, only duplicate-free), indices/data longer than nnz (a preallocated buffer)."""
    p = precision(p_name)
    A = random_csr((333, 250), 7000, seed=12)
    want = get("bcsr").convert(A, p)
    rng = np.random.default_rng(3)
    perm = np.concatenate([lo + rng.permutation(hi - lo) for lo, hi in zip(A.indptr[:-1], A.indptr[1:])])
    for idx in (np.int32, np.int64):
        indices = np.concatenate([A.indices[perm], np.full(5, 10**6)]).astype(idx)
        data = np.concatenate([A.data[perm], np.full(5, np.nan)])
        G = csr_to_bcsr_gpu(A.indptr.astype(idx), indices, data, A.shape, width=p.block_width,
                            to_storage=p.to_storage)
        assert_same_bits(G, want)


def test_default_storage_is_float32():
    A = random_csr((40, 30), 300, seed=4)
    from kernels.formats.bcsr.container import csr_to_bcsr

    for width in (8, 16):
        assert_same_bits(csr_to_bcsr_gpu(A.indptr, A.indices, A.data, A.shape, width=width),
                         csr_to_bcsr(A, width=width))


def test_duplicates_are_summed_by_the_scipy_wrapper():
    A = sp.coo_array((np.array([1.0, 2.0, 4.0]), (np.array([3, 3, 20]), np.array([5, 5, 9]))), shape=(30, 20))
    G = csr_to_bcsr_gpu_from_scipy(A, "float32", xp=np)
    assert G.data[0, 3, 5] == 3.0 and G.n_blocks == 2
    assert_same_bits(G, get("bcsr").convert(A, precision("float32")))


@pytest.mark.parametrize("p_name", PRECISIONS)
def test_ranked_block_columns_when_the_key_would_overflow(monkeypatch, p_name):
    """n_block_rows x n_block_cols past KEY_LIMIT ranks the block columns first; forced here on small matrices."""
    monkeypatch.setattr(bcsr_gpu, "KEY_LIMIT", 0)
    p = precision(p_name)
    for make in (int64_columns, BASE_CASES["hub_row"], BASE_CASES["empty_windows"], hub_column):
        A = make()
        assert_same_bits(csr_to_bcsr_gpu_from_scipy(A, p, xp=np), get("bcsr").convert(A, p))


def test_block_memory_is_checked_before_allocating():
    A = random_csr((100, 50), 600, seed=2)
    p = precision("float16")
    X = get("bcsr").convert(A, p)
    need = X.n_blocks * 16 * 16 * 2  # float16 blocks: 512 B each
    G = csr_to_bcsr_gpu(A.indptr, A.indices, A.data, A.shape, width=16, to_storage=p.to_storage, max_bytes=need)
    assert_same_bits(G, X)
    with pytest.raises(ValueError, match=rf"100 x 50 matrix needs {X.n_blocks} blocks x 512 B = .* GiB, more than "
                                         r"the .* GiB available"):
        csr_to_bcsr_gpu(A.indptr, A.indices, A.data, A.shape, width=16, to_storage=p.to_storage, max_bytes=need - 1)


def test_input_checks():
    A = random_csr((20, 12), 50, seed=1)
    with pytest.raises(ValueError, match=r"indptr has 21 entries, expected n_rows \+ 1 = 20"):
        csr_to_bcsr_gpu(A.indptr, A.indices, A.data, (19, 12))
    with pytest.raises(ValueError, match="indices/data have 49/50 entries, expected nnz = 50"):
        csr_to_bcsr_gpu(A.indptr, A.indices[:-1], A.data, A.shape)
    with pytest.raises(ValueError, match="width is 4"):
        csr_to_bcsr_gpu(A.indptr, A.indices, A.data, A.shape, width=4)
    with pytest.raises(TypeError, match="csr_to_bcsr_gpu needs a scipy.sparse matrix"):
        csr_to_bcsr_gpu_from_scipy(A.toarray(), "float16", xp=np)
