"""ME-TCF conversion: the index maps, round trips on edge cases, validation, balanced work items."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats.metcf.container import (METCF, balance, balanced_items, csr_to_metcf, metcf_stats, metcf_to_csr)
from kernel_cases import BASE_CASES, empty_windows, hub_row, random_csr


def int64_columns():
    """Columns beyond 2**31: sparse_a_to_b and the CSR indices must be int64."""
    cols = np.array([0, 2**31 + 5, 3 * 10**9, 7, 2**31 + 5, 2**33], dtype=np.int64)
    rows = np.array([0, 0, 3, 17, 18, 18], dtype=np.int64)
    A = sp.csr_array((np.arange(1.0, 7.0), (rows, cols)), shape=(20, 2**34))
    A.indices, A.indptr = A.indices.astype(np.int64), A.indptr.astype(np.int64)
    return A


def huge_width():
    """n_windows * n_cols > 2**62: the (window, col) sort key would overflow int64 without chunking/ranking."""
    cols = np.array([2**61 - 1, 3, 2**40, 5, 2**61 - 1, 9], dtype=np.int64)
    rows = np.array([0, 0, 17, 20, 33, 39], dtype=np.int64)
    return sp.csr_array((np.arange(1.0, 7.0), (rows, cols)), shape=(40, 2**61))


CASES = {
    **BASE_CASES,
    "zero_rows": lambda: sp.csr_array((0, 5)),
    "int64_columns": int64_columns,
    "huge_width": huge_width,
    "int64_indices_small": lambda: random_csr((300, 200), 2000, seed=7, index_dtype=np.int64),
}


def assert_same_csr(R, A):
    assert R.shape == A.shape
    np.testing.assert_array_equal(R.indptr, A.indptr)
    np.testing.assert_array_equal(R.indices, A.indices)
    np.testing.assert_array_equal(R.data, A.data)
    assert R.data.dtype == A.data.dtype


@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip(name):
    A = CASES[name]()
    M = csr_to_metcf(A)
    M.validate(full=True)
    assert M.nnz == A.nnz
    assert_same_csr(metcf_to_csr(M), A)


@pytest.mark.parametrize("name", ["1000x37", "hub_row", "empty_windows", "37x5000"])
def test_chunking_does_not_change_the_result(name):
    A = CASES[name]()
    whole, chunked = csr_to_metcf(A), csr_to_metcf(A, chunk_nnz=37)
    for field in ("row_window_offset", "tc_offset", "tc_local_id", "sparse_a_to_b", "data"):
        np.testing.assert_array_equal(getattr(chunked, field), getattr(whole, field), err_msg=field)
        assert getattr(chunked, field).dtype == getattr(whole, field).dtype


def test_index_dtypes():
    M = csr_to_metcf(int64_columns())
    assert M.sparse_a_to_b.dtype == np.int64 and M.tc_offset.dtype == np.int32
    assert M.row_window_offset.dtype == np.int32 and M.tc_local_id.dtype == np.uint8
    assert metcf_to_csr(M).indices.dtype == np.int64
    assert csr_to_metcf(CASES["7x333"]()).sparse_a_to_b.dtype == np.int32


def test_hub_row_spans_thousands_of_blocks():
    M = csr_to_metcf(hub_row())
    assert int(np.diff(M.row_window_offset).max()) >= 5000


def test_empty_windows_own_no_blocks():
    M = csr_to_metcf(empty_windows())
    assert list(np.diff(M.row_window_offset)[1:3]) == [0, 0]


def test_nnz0():
    M = csr_to_metcf(sp.csr_array((40, 30)))
    assert (M.n_windows, M.n_blocks, M.nnz, M.mean_nnz_tc) == (3, 0, 0, 0.0)
    assert M.sparse_a_to_b.shape == (0, 8) and list(M.row_window_offset) == [0, 0, 0, 0]


def test_unsorted_duplicate_input_is_canonicalized():
    A = sp.csr_array((np.array([1.0, 2.0, 3.0]), np.array([4, 1, 4]), np.array([0, 3])), shape=(1, 6))
    R = metcf_to_csr(csr_to_metcf(A))
    assert list(R.indices) == [1, 4] and list(R.data) == [2.0, 4.0]


# Tiny 18 x 12 matrix (values are entry numbers; '.' = not stored):
#
#         col: 0  1  2  3  4  5  6  7  8  9 10 11
#   row  0     1  .  .  .  .  .  .  .  .  .  .  2      window 0 (rows 0..15), distinct columns
#   row  1     .  .  .  .  .  3  .  .  .  .  .  .        0 1 2 3 5 7 9 10 | 11
#   row  3     .  4  5  6  .  .  .  .  .  .  .  .      -> block 0 = [0 1 2 3 5 7 9 10]
#   row 15     .  .  .  .  .  .  .  7  .  8  9  .         block 1 = [11 -1 -1 -1 -1 -1 -1 -1]
#   row 16     .  .  .  .  .  . 10  .  .  .  .  .      window 1 (rows 16..17): columns 4 6
#   row 17     .  .  .  . 11  . 12  .  .  .  .  .      -> block 2 = [4 6 -1 -1 -1 -1 -1 -1]
#   (rows 2, 4..14 empty)
TINY = [(0, 0, 1.0), (0, 11, 2.0), (1, 5, 3.0), (3, 1, 4.0), (3, 2, 5.0), (3, 3, 6.0), (15, 7, 7.0),
        (15, 9, 8.0), (15, 10, 9.0), (16, 6, 10.0), (17, 4, 11.0), (17, 6, 12.0)]


def tiny():
    r, c, v = zip(*TINY)
    return sp.csr_array((np.array(v), (np.array(r), np.array(c))), shape=(18, 12))


def test_tiny_arrays():
    M = csr_to_metcf(tiny())
    np.testing.assert_array_equal(M.row_window_offset, [0, 2, 3])
    np.testing.assert_array_equal(M.tc_offset, [0, 8, 9, 12])
    np.testing.assert_array_equal(M.sparse_a_to_b, [[0, 1, 2, 3, 5, 7, 9, 10], [11] + [-1] * 7, [4, 6] + [-1] * 6])
    # block 0: (r, c) = (0,0) (1,4) (3,1) (3,2) (3,3) (15,5) (15,6) (15,7); block 1: (0,0); block 2: (0,1) (1,0) (1,1)
    np.testing.assert_array_equal(M.tc_local_id, [0, 12, 25, 26, 27, 125, 126, 127, 0, 1, 8, 9])
    np.testing.assert_array_equal(M.data, [1, 3, 4, 5, 6, 7, 8, 9, 2, 10, 11, 12])
    assert M.mean_nnz_tc == 4.0


@pytest.mark.parametrize("name", ["tiny", "1000x37", "hub_row", "empty_windows"])
def test_forward_and_inverse_maps_elementwise(name):
    """Every stored (row, col, value) sits where the contract's forward map says, and maps back."""
    A = tiny() if name == "tiny" else CASES[name]()
    M = csr_to_metcf(A)
    coo = A.tocoo()
    entries = np.arange(coo.nnz)
    if coo.nnz > 400:  # the big cases: a seeded sample (incl. the first and last entry); round trips cover the rest
        entries = np.unique(np.r_[0, coo.nnz - 1, np.random.default_rng(0).choice(coo.nnz, 400, replace=False)])
    window_cols = {}
    for i in entries.tolist():
        row, col, value = int(coo.row[i]), int(coo.col[i]), coo.data[i]
        window, r = divmod(row, 16)
        if window not in window_cols:
            lo_row, hi_row = 16 * window, min(16 * window + 16, A.shape[0])
            window_cols[window] = np.unique(A.indices[A.indptr[lo_row]:A.indptr[hi_row]])
        k = int(np.searchsorted(window_cols[window], col))
        block, c = int(M.row_window_offset[window]) + k // 8, k % 8
        lo, hi = int(M.tc_offset[block]), int(M.tc_offset[block + 1])
        (hit,) = np.flatnonzero(M.tc_local_id[lo:hi] == r * 8 + c)
        assert M.data[lo + hit] == value
        # inverse
        assert int(M.row_window_offset[window]) <= block < int(M.row_window_offset[window + 1])
        assert 16 * window + int(M.tc_local_id[lo + hit]) // 8 == row
        assert int(M.sparse_a_to_b[block, int(M.tc_local_id[lo + hit]) % 8]) == col


def corrupt(M, **arrays):
    return dataclasses.replace(M, **arrays)


def test_validate_messages():
    M = csr_to_metcf(tiny())
    M.validate(full=True)
    with pytest.raises(ValueError, match=r"row_window_offset has 2 entries, expected n_windows \+ 1 = 3"):
        corrupt(M, row_window_offset=M.row_window_offset[:2]).validate()
    with pytest.raises(ValueError, match=r"sparse_a_to_b has shape \(2, 8\), expected \(n_blocks, width\) = \(3, 8 or 16\)"):
        corrupt(M, sparse_a_to_b=M.sparse_a_to_b[:2]).validate()
    with pytest.raises(ValueError, match="tc_local_id has dtype int32, expected uint8"):
        corrupt(M, tc_local_id=M.tc_local_id.astype(np.int32)).validate()
    with pytest.raises(ValueError, match=r"tc_offset runs 0\.\.11, expected 0\.\.nnz = 0\.\.12"):
        corrupt(M, tc_offset=np.array([0, 8, 9, 11], dtype=np.int32)).validate()
    swapped = M.tc_local_id.copy()
    swapped[[2, 3]] = swapped[[3, 2]]  # 26 before 25 inside block 0: passes O(1) checks, fails the full check
    bad = corrupt(M, tc_local_id=swapped)
    bad.validate()
    with pytest.raises(ValueError, match="tc_local_id not strictly increasing within block 0 at nonzero 3: 26 then 25"):
        bad.validate(full=True)
    sab = M.sparse_a_to_b.copy()
    sab[0, [1, 2]] = sab[0, [2, 1]]
    with pytest.raises(ValueError, match="sparse_a_to_b block 0: slot columns 2, 1 are not ascending"):
        corrupt(M, sparse_a_to_b=sab).validate(full=True)
    lid = M.tc_local_id.copy()
    lid[8] = 3  # block 1 slot 3 is padding
    with pytest.raises(ValueError, match="nonzero 8 uses padding slot 3 of block 1"):
        corrupt(M, tc_local_id=lid).validate(full=True)
    lid = M.tc_local_id.copy()
    lid[11] = 8 * 2 + 1  # row 16 + 2 = 18 >= 18 rows
    with pytest.raises(ValueError, match="nonzero 11 lies in row 18, expected < n_rows = 18"):
        corrupt(M, tc_local_id=lid).validate(full=True)


@pytest.mark.parametrize("within_windows", [False, True])
@pytest.mark.parametrize("blocks_per_tb", [1, 3, 32])
@pytest.mark.parametrize("name", ["1000x37", "hub_row", "empty_windows", "nnz0", "37x5000"])
def test_balanced_items_cover_every_block_once_in_order(name, blocks_per_tb, within_windows):
    M = csr_to_metcf(CASES[name]())
    plan = balance(M, blocks_per_tb, within_windows=within_windows)
    start, end, window = plan["item_block_start"], plan["item_block_end"], plan["item_window"]
    covered = np.concatenate([np.arange(s, e) for s, e in zip(start, end)]) if len(start) else np.zeros(0)
    np.testing.assert_array_equal(covered, np.arange(M.n_blocks))
    assert np.all(end - start >= 1) and plan["max_blocks_per_item"] <= blocks_per_tb
    bw = M.block_window()
    np.testing.assert_array_equal(window, bw[start])  # item_window = window of the item's first block
    if within_windows:
        assert np.all(bw[end - 1] == window)  # items never cross a window
    else:
        assert np.all((end - start)[:-1] == blocks_per_tb)  # strict balance: all but the last are full
    w2, b2 = balanced_items(M.row_window_offset, blocks_per_tb, within_windows=within_windows)
    np.testing.assert_array_equal(w2, window)
    np.testing.assert_array_equal(b2, start)


def test_balanced_items_rejects_zero():
    with pytest.raises(ValueError, match="blocks_per_tb is 0, expected >= 1"):
        balanced_items(np.array([0, 1], dtype=np.int32), 0)


def test_stats():
    A = tiny()
    s = metcf_stats(csr_to_metcf(A), A_csr_nbytes=A.indptr.nbytes + A.indices.nbytes + A.data.nbytes)
    # ME-TCF: 3 + 4 offsets (int32) + 12 uint8 ids + 24 int32 slots + 12 float64 values
    assert s["metcf_bytes"] == 3 * 4 + 4 * 4 + 12 + 24 * 4 + 12 * 8
    assert s["csr_bytes"] == A.indptr.nbytes + A.indices.nbytes + A.data.nbytes
    assert (s["n_blocks"], s["mean_nnz_tc"], s["blocks_per_window_min"], s["blocks_per_window_max"]) == (3, 4.0, 1, 2)
    assert s["blocks_per_window_mean"] == 1.5
    # default CSR bytes: index_dtype(max(shape), nnz) = int32 indptr and indices, float64 data
    assert metcf_stats(csr_to_metcf(A))["csr_bytes"] == 19 * 4 + 12 * 4 + 12 * 8


def test_frozen():
    M = csr_to_metcf(tiny())
    with pytest.raises(dataclasses.FrozenInstanceError):
        M.data = None  # type: ignore[misc]
    assert isinstance(M, METCF)


def test_metcf_to_csr_sorts_rows_of_a_non_canonical_metcf():
    """Blocks whose slot columns are not ascending (as after a shard's column remap) still give sorted CSR rows."""
    A = random_csr((40, 30), 300, seed=11)
    M = csr_to_metcf(A)
    flipped = M.sparse_a_to_b.copy()
    flipped[:, :] = np.where(M.sparse_a_to_b >= 0, A.shape[1] - 1 - M.sparse_a_to_b, -1)  # descending columns
    B = metcf_to_csr(dataclasses.replace(M, sparse_a_to_b=flipped))
    expected = sp.csr_array(A[:, ::-1])
    expected.sort_indices()
    assert B.has_sorted_indices
    for r in range(A.shape[0]):
        row = slice(B.indptr[r], B.indptr[r + 1])
        assert np.all(np.diff(B.indices[row]) > 0)
    np.testing.assert_allclose(B.toarray(), expected.toarray())


def test_to_csr_sorts_rows_whose_blocks_were_renumbered():
    """A METCF whose column map was renumbered out of order (as a shard's halo remap may) still converts to
    canonical CSR: the stable sort by row alone would leave such rows unsorted, the fallback sorts by (row, col)."""
    A = CASES["1000x37"]()
    M = csr_to_metcf(A)
    rename = np.random.default_rng(3).permutation(A.shape[1])  # new column of each old one
    R = METCF(M.shape, M.row_window_offset, M.tc_offset, M.tc_local_id,
              rename[M.sparse_a_to_b].astype(M.sparse_a_to_b.dtype), M.data)
    want = sp.csr_array((A.data, rename[A.indices], A.indptr), shape=A.shape)
    want.sort_indices()
    assert_same_csr(metcf_to_csr(R), want)
