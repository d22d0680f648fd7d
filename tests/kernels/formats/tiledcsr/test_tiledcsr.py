"""Tiled-CSR (ICCD'23): index maps, round trips on edge cases, row-block conversion + concat, validation, the NumPy
twin against SciPy, the paper's effective computation rate, the store round trip and the CPU plan."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernel_cases import (BASE_CASES, check_cpu_plan, check_plugin_precision, check_store_round_trip, int64_columns,
                          random_csr)
from kernel_cases import as_float32 as kernel_cases_as_float32
from kernels.formats import get
from kernels.formats.tiledcsr.container import (TiledCSR, csr_to_tiledcsr, effective_rate, tiledcsr_concat,
                                      tiledcsr_from_arrays, tiledcsr_spmm, tiledcsr_stats, tiledcsr_to_csr)
from kernels.precision import precision

FIELDS = ("group_ptr", "tile_ptr", "tile_cols", "tile_indptr", "tile_indices", "data")


CASES = {**BASE_CASES, "zero_rows": lambda: sp.csr_array((0, 5)), "int64_columns": int64_columns,
         "int64_indices_small": lambda: random_csr((300, 200), 2000, seed=7, index_dtype=np.int64)}


def as_float32(A):
    return kernel_cases_as_float32(A, drop_zeros=False)


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip(name, width):
    A = as_float32(CASES[name]())
    X = csr_to_tiledcsr(A, width=width)
    X.validate(full=True)
    R = tiledcsr_to_csr(X)
    assert R.shape == A.shape and R.dtype == np.float32 and R.nnz == A.nnz  # explicit zeros kept
    np.testing.assert_array_equal(R.indptr, A.indptr)
    np.testing.assert_array_equal(R.indices, A.indices)
    np.testing.assert_array_equal(R.data, A.data)


# 18 x 20 matrix, 16 x 8 tiles (TF32); digits are values, '.' not stored. Group 0 (rows 0..15) uses columns
# 0, 3, 5, 7, 9, 11, 13, 15, 19 (9 distinct: tiles of 8 + 1); group 1 (rows 16, 17) uses column 9 only.
#   row 0:  1 . . 2 . 3 . 4 . 5 . 6 . 7 . 8 . . . .
#   row 15: . . . . . . . . . . . . . . . . . . . 9
#   row 17: . . . . . . . . . 4 . . . . . . . . . .
def test_tiny_arrays():
    rows = [0] * 8 + [15, 17]
    cols = [0, 3, 5, 7, 9, 11, 13, 15, 19, 9]
    A = sp.csr_array((np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 4], dtype=np.float32), (rows, cols)), shape=(18, 20))
    X = csr_to_tiledcsr(A, width=8)
    assert X.group_ptr.tolist() == [0, 2, 3] and X.tile_ptr.tolist() == [0, 8, 9, 10]
    assert X.tile_cols.tolist() == [[0, 3, 5, 7, 9, 11, 13, 15], [19, -1, -1, -1, -1, -1, -1, -1],
                                    [9, -1, -1, -1, -1, -1, -1, -1]]
    assert X.tile_indptr.dtype == np.uint8 and X.tile_indices.dtype == np.uint8
    assert X.tile_indptr[0].tolist() == [0] + [8] * 16  # row 0 holds all 8
    assert X.tile_indptr[1].tolist() == [0] * 16 + [1]  # row 15 holds one
    assert X.tile_indptr[2].tolist() == [0, 0, 1] + [1] * 14  # group 1, local row 1 = row 17
    assert X.tile_indices.tolist() == list(range(8)) + [0, 0]
    s = tiledcsr_stats(X)
    assert s["n_tiles"] == 3 and s["effective_rate"] == pytest.approx(10 / (3 * 128))
    assert (s["tile_rate_min"], s["tile_rate_max"]) == (pytest.approx(1 / 128), pytest.approx(8 / 128))
    # SR-BCRS: row 0 needs 1 tile (8 nonzeros), rows 15 and 17 one each
    assert s["srbcrs_rate"] == pytest.approx(10 / (3 * 128)) and s["gain_over_srbcrs"] == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["7x333", "1000x37", "37x5000", "empty_windows", "int64_indices_small"])
def test_forward_map_elementwise(name):
    """Every stored (row, col, value) sits where the forward map of the class docstring says."""
    A = as_float32(CASES[name]())
    X = csr_to_tiledcsr(A, width=16)
    coo = A.tocoo()
    for r, c, v in zip(coo.row[::7], coo.col[::7], coo.data[::7]):
        g, lr = divmod(int(r), 16)
        group_cols = np.unique(A.indices[A.indptr[16 * g]:A.indptr[min(16 * g + 16, A.shape[0])]])
        k = int(np.searchsorted(group_cols, c))
        t, slot = int(X.group_ptr[g]) + k // 16, k % 16
        assert X.tile_cols[t, slot] == c
        lo = int(X.tile_ptr[t]) + int(X.tile_indptr[t, lr])
        hi = int(X.tile_ptr[t]) + int(X.tile_indptr[t, lr + 1])
        p = lo + int(np.flatnonzero(X.tile_indices[lo:hi] == slot)[0])
        assert X.data[p] == v


def test_empty_groups_and_tile_rows():
    A = as_float32(BASE_CASES["empty_windows"]())  # rows 16..47 empty (groups 1, 2), rows 5 and 99 empty
    X = csr_to_tiledcsr(A, width=16)
    assert np.diff(X.group_ptr)[1:3].tolist() == [0, 0]
    t0 = int(X.group_ptr[0])
    assert all(X.tile_indptr[t, 5] == X.tile_indptr[t, 6] for t in range(t0, int(X.group_ptr[1])))
    last = slice(int(X.group_ptr[6]), int(X.group_ptr[7]))  # rows 96..99: local rows 4..15 past M
    assert np.all(X.tile_indptr[last, 3:] == X.tile_indptr[last, -1:])
    assert tiledcsr_stats(X)["tiles_per_group_min"] == 0


def test_width_not_a_multiple_of_the_tile():
    A = as_float32(random_csr((37, 45), 900, seed=11))  # 45 = 2 * 16 + 13 columns; groups with 20-45 columns
    X = csr_to_tiledcsr(A, width=16)
    distinct = [np.unique(A[16 * g:16 * g + 16].indices).size for g in range(3)]
    assert np.diff(X.group_ptr).tolist() == [-(-d // 16) for d in distinct]
    last_tiles = X.tile_cols[X.group_ptr[1:] - 1]
    assert [int((row < 0).sum()) for row in last_tiles] == [(-d) % 16 for d in distinct]


def test_int64_sizes():
    X = csr_to_tiledcsr(int64_columns(), width=8)
    assert X.tile_cols.dtype == np.int64 and X.group_ptr.dtype == np.int32 and X.tile_ptr.dtype == np.int32
    X.validate(full=True)
    assert tiledcsr_to_csr(X).indices.dtype == np.int64
    Y = csr_to_tiledcsr(random_csr((50, 40), 300, seed=3), width=16)
    arrays = {f: getattr(Y, f) for f in FIELDS}
    arrays.update(group_ptr=Y.group_ptr.astype(np.int64), tile_ptr=Y.tile_ptr.astype(np.int64),
                  tile_cols=Y.tile_cols.astype(np.int64), shape=Y.shape)
    back = tiledcsr_from_arrays(arrays)  # a shard read back from a large matrix's store carries int64
    assert back.group_ptr.dtype == back.tile_ptr.dtype == back.tile_cols.dtype == np.int32
    with pytest.raises(ValueError, match="tile_ptr has dtype int64, expected int32"):
        TiledCSR(Y.shape, Y.group_ptr, Y.tile_ptr.astype(np.int64), Y.tile_cols, Y.tile_indptr, Y.tile_indices,
                 Y.data).validate()


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("cuts", [[0, 16, 48, 100], [0, 100], [0, 96, 100]])
def test_row_blocks_then_concat_equal_one_conversion(width, cuts):
    A = as_float32(BASE_CASES["empty_windows"]())
    whole = csr_to_tiledcsr(A, width=width)
    cat = tiledcsr_concat([csr_to_tiledcsr(A[a:b], width=width) for a, b in zip(cuts[:-1], cuts[1:])])
    assert cat.shape == whole.shape
    for f in FIELDS:
        assert np.array_equal(getattr(cat, f), getattr(whole, f)), f
        assert getattr(cat, f).dtype == getattr(whole, f).dtype, f
    with pytest.raises(ValueError, match="multiple of 16"):
        tiledcsr_concat([csr_to_tiledcsr(A[:10], width=width), csr_to_tiledcsr(A[10:], width=width)])


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("name", ["7x333", "1000x37", "37x5000", "empty_windows", "nnz0", "hub_row", "zero_rows",
                                  "explicit_zeros"])
def test_numpy_twin_equals_scipy(name, width):
    A = as_float32(CASES[name]())
    B = np.random.default_rng(1).standard_normal((A.shape[1], 13))
    X = csr_to_tiledcsr(A, width=width)
    C = tiledcsr_spmm(X, B, chunk_elems=5000)  # small chunks: several per matrix
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-12, atol=1e-12)
    assert tiledcsr_spmm(X, B[:, 0]).shape == (A.shape[0],)


def test_validate_messages():
    X = csr_to_tiledcsr(as_float32(random_csr((40, 30), 200, seed=2)), width=16)
    args = {f: getattr(X, f) for f in FIELDS}

    def broken(**kw):
        return TiledCSR(X.shape, **{**args, **kw})

    with pytest.raises(ValueError, match=r"group_ptr has shape \(2,\), expected .* \(4,\)"):
        broken(group_ptr=X.group_ptr[:2]).validate()
    with pytest.raises(ValueError, match="tile_indptr is uint8"):
        broken(tile_indptr=X.tile_indptr.astype(np.uint8)).validate()
    ip = X.tile_indptr.copy()
    ip[0, 3] = ip[0, 4] + 1
    with pytest.raises(ValueError, match="tile 0: tile_indptr .* not non-decreasing"):
        broken(tile_indptr=ip).validate(full=True)
    cols = X.tile_cols.copy()
    cols[0, [0, 1]] = cols[0, [1, 0]]
    with pytest.raises(ValueError, match="not strictly increasing within a group"):
        broken(tile_cols=cols).validate(full=True)
    idx = X.tile_indices.copy()
    lo, hi = int(X.tile_ptr[0]), int(X.tile_ptr[1])
    row = np.flatnonzero(np.diff(X.tile_indptr[0].astype(int)) >= 2)[0]
    p = lo + int(X.tile_indptr[0, row])
    idx[[p, p + 1]] = idx[[p + 1, p]]
    assert hi > p + 1
    with pytest.raises(ValueError, match="tile_indices not strictly increasing"):
        broken(tile_indices=idx).validate(full=True)


def test_effective_rate_by_hand():
    # 2 x 4 tiles as in the paper's Fig. 4(b): rows 0 and 3 share columns, rows 1 and 2 share others
    #   row 0: x x . .  . . . .      grouping (0, 1), (2, 3): every group uses 4 distinct columns -> 2 tiles
    #   row 1: . . x x  . . . .      grouping (0, 3), (1, 2): 2 distinct columns each -> 1 tile each
    #   row 2: . . x x  . . . .
    #   row 3: x x . .  . . . .
    A = sp.csr_array(np.array([[1, 1, 0, 0, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0, 0, 0],
                               [1, 1, 0, 0, 0, 0, 0, 0]], dtype=np.float32))
    assert effective_rate(A, 2, 4)["n_tiles"] == 2
    s = effective_rate(A[[0, 3, 1, 2]], 2, 4)
    assert s["n_tiles"] == 2 and s["effective_rate"] == pytest.approx(8 / 16)
    assert s["srbcrs_tiles"] == 4 and s["gain_over_srbcrs"] == pytest.approx(2.0)
    X = csr_to_tiledcsr(as_float32(random_csr((70, 90), 900, seed=5)), width=16)
    s, e = tiledcsr_stats(X), effective_rate(tiledcsr_to_csr(X), 16, 16)
    assert (s["n_tiles"], s["effective_rate"], s["srbcrs_rate"]) == (e["n_tiles"], e["effective_rate"],
                                                                     e["srbcrs_rate"])


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_plugin_conversion_uses_the_precision(dtype):
    X = check_plugin_precision("tiledcsr", dtype)
    assert X.tile_indptr.dtype == (np.uint8 if dtype == "float32" else np.uint16)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_store_round_trip(tmp_path, dtype):
    A, X, ms = check_store_round_trip(tmp_path, "tiledcsr", dtype, FIELDS)
    p = precision(dtype)
    part = get("tiledcsr").from_arrays(ms.read_format("tiledcsr", f"k-{dtype}", 3, 7))  # groups 3..6
    assert np.array_equal(part.data, X.data[X.tile_ptr[X.group_ptr[3]]:])
    np.testing.assert_allclose(tiledcsr_spmm(part, np.eye(A.shape[1])), tiledcsr_spmm(X, np.eye(A.shape[1]))[48:])
    empty = get("tiledcsr").convert(sp.csr_array((30, 20), dtype=np.float32), p)
    ms.write_format("tiledcsr", f"e-{dtype}", empty, {"dtype": dtype})
    back = get("tiledcsr").from_arrays(ms.read_format("tiledcsr", f"e-{dtype}"))
    assert back.n_tiles == 0 and back.width == p.block_width and back.data.dtype == p.storage_dtype
    back.validate(full=True)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cpu_plan_runs_tiledcsr(dtype):
    check_cpu_plan("tiledcsr", dtype)
