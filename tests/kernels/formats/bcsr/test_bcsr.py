"""BCSR (SMaT): index maps, round trips on edge cases, row-block conversion + concat, validation, the NumPy twin,
stats, the store round trip and the CPU plan."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernel_cases import (BASE_CASES, as_float32, check_cpu_plan, check_plugin_precision, check_store_round_trip,
                          int64_columns, random_csr)
from kernels.formats import get
from kernels.formats.bcsr.container import (BCSR, bcsr_concat, bcsr_from_arrays, bcsr_spmm, bcsr_stats, bcsr_to_csr,
                                  csr_to_bcsr)
from kernels.precision import precision


CASES = {**{k: v for k, v in BASE_CASES.items() if k != "explicit_zeros"},
         "zero_rows": lambda: sp.csr_array((0, 5)),
         "int64_columns": int64_columns,
         "int64_indices_small": lambda: random_csr((300, 200), 2000, seed=7, index_dtype=np.int64)}


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip(name, width):
    A = as_float32(CASES[name]())
    X = csr_to_bcsr(A, width=width)
    X.validate(full=True)
    R = bcsr_to_csr(X)
    assert R.shape == A.shape and R.dtype == np.float32
    assert (R != A).nnz == 0 and R.nnz == A.nnz
    np.testing.assert_array_equal(R.indptr, A.indptr)
    np.testing.assert_array_equal(R.indices, A.indices)


# 18 x 20 matrix, 16 x 8 blocks (TF32); digits are the values, '.' not stored:
#   row 0:  1 . . . . . . . | . . . . . . . . | . . 2 .     block row 0: block columns 0 and 2
#   row 15: . . . . . . . . | . . . . . . . . | . . . 3
#   row 17: . . . . . . . . | . 4 . . . . . . | . . . .     block row 1 (partial, 2 rows): block column 1
def test_tiny_arrays():
    A = sp.csr_array((np.array([1.0, 2.0, 3.0, 4.0]), ([0, 0, 15, 17], [0, 18, 19, 9])), shape=(18, 20))
    X = csr_to_bcsr(A, width=8)
    assert X.indptr.tolist() == [0, 2, 3] and X.indices.tolist() == [0, 2, 1]
    assert X.data.shape == (3, 16, 8) and X.data.dtype == np.float32
    assert X.data[0, 0, 0] == 1 and X.data[1, 0, 2] == 2 and X.data[1, 15, 3] == 3 and X.data[2, 1, 1] == 4
    assert np.count_nonzero(X.data) == 4
    s = bcsr_stats(X)
    assert (s["n_blocks"], s["blocks_per_row_min"], s["blocks_per_row_max"]) == (3, 1, 2)
    assert s["fill"] == pytest.approx(4 / (3 * 128)) and s["blocks_per_row_mean"] == 1.5


@pytest.mark.parametrize("name", ["7x333", "1000x37", "37x5000", "empty_windows", "int64_indices_small"])
def test_forward_map_elementwise(name):
    """Every stored (row, col, value) sits at data[b, row % 16, col % w] with indices[b] = col // w."""
    A = as_float32(CASES[name]())
    X = csr_to_bcsr(A, width=16)
    coo = A.tocoo()
    brow = X.block_row_of()
    for r, c, v in zip(coo.row, coo.col, coo.data):
        i = r // 16
        blocks = np.arange(X.indptr[i], X.indptr[i + 1])
        b = blocks[X.indices[blocks] == c // 16]
        assert b.size == 1 and brow[b[0]] == i and X.data[b[0], r % 16, c % 16] == v


def test_empty_block_rows_own_no_blocks():
    A = as_float32(BASE_CASES["empty_windows"]())  # rows 16..47 empty: block rows 1 and 2
    X = csr_to_bcsr(A, width=16)
    assert np.diff(X.indptr)[1:3].tolist() == [0, 0]
    assert bcsr_stats(X)["blocks_per_row_min"] == 0


def test_last_partial_block_is_zero_padded():
    A = as_float32(random_csr((37, 45), 600, seed=11))  # 37 = 2 * 16 + 5 rows, 45 = 2 * 16 + 13 columns
    X = csr_to_bcsr(A, width=16)
    last_row_blocks = slice(X.indptr[2], X.indptr[3])
    assert not X.data[last_row_blocks, 5:, :].any()
    assert not X.data[X.indices == 2][:, :, 13:].any()
    X.validate(full=True)


def test_int64_sizes():
    X = csr_to_bcsr(int64_columns(), width=8)
    assert X.indices.dtype == np.int64 and X.indptr.dtype == np.int32
    X.validate(full=True)
    assert bcsr_to_csr(X).indices.dtype == np.int64
    # small arrays carried as int64 (as a shard read back from a store of a large matrix) are recast
    Y = csr_to_bcsr(random_csr((50, 40), 300, seed=3), width=16)
    back = bcsr_from_arrays({"indptr": Y.indptr.astype(np.int64), "indices": Y.indices.astype(np.int64),
                             "values": Y.values, "value_offset": Y.value_offset.astype(np.int64),
                             "shape": Y.shape})
    assert back.indptr.dtype == np.int32 and back.indices.dtype == np.int32
    np.testing.assert_array_equal(back.data, Y.data)
    with pytest.raises(ValueError, match="indptr has dtype int64, expected int32"):
        BCSR(Y.shape, Y.indptr.astype(np.int64), Y.indices, Y.data).validate()


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("cuts", [[0, 16, 48, 100], [0, 100], [0, 96, 100]])
def test_row_blocks_then_concat_equal_one_conversion(width, cuts):
    A = as_float32(BASE_CASES["empty_windows"]())
    whole = csr_to_bcsr(A, width=width)
    pieces = [csr_to_bcsr(A[a:b], width=width) for a, b in zip(cuts[:-1], cuts[1:])]
    cat = bcsr_concat(pieces)
    assert cat.shape == whole.shape
    for field in ("indptr", "indices", "data"):
        assert np.array_equal(getattr(cat, field), getattr(whole, field)), field
        assert getattr(cat, field).dtype == getattr(whole, field).dtype, field
    with pytest.raises(ValueError, match="multiple of 16"):
        bcsr_concat([csr_to_bcsr(A[:10], width=width), csr_to_bcsr(A[10:], width=width)])


def test_chunking_does_not_change_the_result():
    A = as_float32(random_csr((300, 250), 5000, seed=9))
    whole = csr_to_bcsr(A, width=8)
    small = csr_to_bcsr(A, width=8, chunk_nnz=40)
    for field in ("indptr", "indices", "data"):
        assert np.array_equal(getattr(small, field), getattr(whole, field)), field


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("name", ["7x333", "1000x37", "37x5000", "empty_windows", "nnz0", "hub_row", "zero_rows"])
def test_numpy_twin_equals_float64_product(name, width):
    A = as_float32(CASES[name]())
    B = np.random.default_rng(1).standard_normal((A.shape[1], 13))
    C = bcsr_spmm(csr_to_bcsr(A, width=width), B, chunk_elems=5000)  # small chunks: several per matrix
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-12, atol=1e-12)
    v = bcsr_spmm(csr_to_bcsr(A, width=width), B[:, 0])
    assert v.shape == (A.shape[0],)


def test_validate_messages():
    X = csr_to_bcsr(as_float32(random_csr((40, 30), 200, seed=2)), width=16)
    with pytest.raises(ValueError, match=r"indptr has shape \(2,\), expected .* \(4,\)"):
        BCSR(X.shape, X.indptr[:2], X.indices, X.data).validate()
    with pytest.raises(ValueError, match="data has shape"):
        BCSR(X.shape, X.indptr, X.indices, X.data[:, :, :4]).validate()
    bad = X.indices.copy()
    bad[[0, 1]] = bad[[1, 0]]
    with pytest.raises(ValueError, match="not strictly increasing in block row 0"):
        BCSR(X.shape, X.indptr, bad, X.data).validate(full=True)
    pad = X.data.copy()
    pad[-1, 15, 0] = 1.0  # row 47 of a 40-row matrix
    with pytest.raises(ValueError, match="outside the 40 x 30 matrix"):
        BCSR(X.shape, X.indptr, X.indices, pad).validate(full=True)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_plugin_conversion_uses_the_precision(dtype):
    check_plugin_precision("bcsr", dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_store_round_trip(tmp_path, dtype):
    A, X, ms = check_store_round_trip(tmp_path, "bcsr", dtype, ("indptr", "indices", "data"))
    p = precision(dtype)
    part = get("bcsr").from_arrays(ms.read_format("bcsr", f"k-{dtype}", 3, 7))  # block rows 3..6
    assert np.array_equal(part.data, X.data[X.indptr[3]:])
    empty = get("bcsr").convert(sp.csr_array((30, 20), dtype=np.float32), p)
    ms.write_format("bcsr", f"e-{dtype}", empty, {"dtype": dtype})
    back = get("bcsr").from_arrays(ms.read_format("bcsr", f"e-{dtype}"))
    assert back.n_blocks == 0 and back.width == p.block_width and back.data.dtype == p.storage_dtype


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cpu_plan_runs_bcsr(dtype):
    check_cpu_plan("bcsr", dtype)
