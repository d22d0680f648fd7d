"""ME-TCF blocks: arrays round trip, window sub-ranges with rebuilt offsets, shards as files."""
import numpy as np
import pytest
import scipy.sparse as sp
from storage_helpers import canonical, csr_to_metcf, random_csr

from configs.errors import InputError, StorageError

# 20 x 20, values 1 + 20 * row + col at the x's:
#          col 0         1
#              01234567890123456789
#   row  0     x.........x.........
#        1     .x.......x..........
#        2     ..x.................
#        3     ....................
#        4     x...x...x...x...x...
#        5     ...................x
#        6-15  ....................
#       16     .....x..............
#       17     .....xx.............
#       18     ....................
#       19     ...................x
# window 0 (rows 0-15) distinct columns 0 1 2 4 8 9 10 12 | 16 19 -> 2 TC blocks
# window 1 (rows 16-19) distinct columns 5 6 19              -> 1 TC block
PICTURE = {0: [0, 10], 1: [1, 9], 2: [2], 4: [0, 4, 8, 12, 16], 5: [19], 16: [5], 17: [5, 6], 19: [19]}


def picture_matrix():
    dense = np.zeros((20, 20), dtype=np.float32)
    for r, cols in PICTURE.items():
        dense[r, cols] = 1 + 20 * r + np.asarray(cols)
    return canonical(sp.csr_array(dense))


def assert_arrays_equal(got, want):
    for name in ("row_window_offset", "tc_offset", "tc_local_id", "sparse_a_to_b", "data"):
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert tuple(got["shape"]) == tuple(want["shape"])


def sub_range(M, w0, w1, window=16):
    """The expected arrays of windows [w0, w1), offsets from 0."""
    rwo, tco = M["row_window_offset"], M["tc_offset"]
    b0, b1 = rwo[w0], rwo[w1]
    n0, n1 = tco[b0], tco[b1]
    n_rows = M["shape"][0]
    return {"row_window_offset": rwo[w0:w1 + 1] - b0, "tc_offset": tco[b0:b1 + 1] - n0,
            "tc_local_id": M["tc_local_id"][n0:n1], "sparse_a_to_b": M["sparse_a_to_b"][b0:b1],
            "data": M["data"][n0:n1], "shape": (min(window * w1, n_rows) - window * w0, M["shape"][1])}


def test_picture_metcf_by_hand():
    M = csr_to_metcf(picture_matrix())
    np.testing.assert_array_equal(M["row_window_offset"], [0, 2, 3])
    np.testing.assert_array_equal(M["sparse_a_to_b"], [[0, 1, 2, 4, 8, 9, 10, 12], [16, 19, -1, -1, -1, -1, -1, -1],
                                                       [5, 6, 19, -1, -1, -1, -1, -1]])
    np.testing.assert_array_equal(M["tc_offset"], [0, 9, 11, 15])
    # block 2 (window 1): (16,5) (17,5) (17,6) (19,19) -> r*8+c = 0, 8, 9, 26
    np.testing.assert_array_equal(M["tc_local_id"][11:], [0, 8, 9, 26])
    np.testing.assert_array_equal(M["data"][11:], [1 + 20 * 16 + 5, 1 + 20 * 17 + 5, 1 + 20 * 17 + 6,
                                                   1 + 20 * 19 + 19])


def test_metcf_round_trip_and_window_ranges(store):
    M = csr_to_metcf(picture_matrix())
    m = store.matrix("pic")
    m.write_format("metcf", "none-0", M, {"source_url": "drawn"})
    assert m.has_format("metcf", "none-0") and not m.has_format("metcf", "tca-1")
    assert_arrays_equal(m.read_format("metcf", "none-0"), M)
    for w0, w1 in [(0, 1), (1, 2), (1, 1), (0, 2)]:
        got = m.read_format("metcf", "none-0", w0, w1)
        assert_arrays_equal(got, sub_range(M, w0, w1))
        assert got["window_range"] == (w0, w1)
    meta = m.format_meta("metcf", "none-0")
    assert (meta["n_windows"], meta["n_tiles"], meta["nnz"], meta["source"]) == (2, 3, 15, {"source_url": "drawn"})
    with pytest.raises(InputError, match="outside"):
        m.read_format("metcf", "none-0", 0, 3)


@pytest.mark.parametrize("window_ranges", [[0, 3, 3, 7, 10], [(0, 3), (3, 7), (7, 10)], None])
def test_metcf_shards_are_files(store, window_ranges):
    # 155 rows -> 10 windows (last one 11 rows); rows 48-63 empty -> window 3 owns no block
    A = random_csr(155, 70, 0.08, dtype=np.float64, seed=11, empty_rows=range(48, 64))
    M = csr_to_metcf(A)
    assert M["row_window_offset"][3] == M["row_window_offset"][4]
    m = store.matrix("shards")
    entry = m.write_format("metcf", "rcm-abc", M, window_ranges=window_ranges, max_block_nnz=150,
                           max_block_rows=48)
    names = sorted(f["path"].rsplit("/", 1)[1] for f in entry["files"])
    if window_ranges is not None:
        assert names == sorted(["part-0-3.parquet", "part-3-7.parquet", "part-7-10.parquet"])
    else:
        assert len(names) >= 4  # at most 3 windows and about 150 nonzeros each
    assert all(f["path"].startswith("formats/metcf/rcm-abc/") for f in entry["files"])
    assert_arrays_equal(m.read_format("metcf", "rcm-abc"), M)
    for w0, w1 in [(2, 5), (3, 4), (0, 10), (6, 10), (9, 10), (4, 4)]:
        assert_arrays_equal(m.read_format("metcf", "rcm-abc", w0, w1), sub_range(M, w0, w1))


def test_metcf_int64_and_empty(store):
    M = csr_to_metcf(canonical(sp.csr_array((20, 9), dtype=np.float32)))
    m = store.matrix("e")
    m.write_format("metcf", "none-0", M)
    got = m.read_format("metcf", "none-0")
    assert_arrays_equal(got, M)
    M64 = {k: (v.astype(np.int64) if k in ("row_window_offset", "tc_offset", "sparse_a_to_b") else v)
           for k, v in csr_to_metcf(picture_matrix()).items()}
    m.write_format("metcf", "none-1", M64, window_ranges=[0, 1, 2])
    assert_arrays_equal(m.read_format("metcf", "none-1", 1, 2), sub_range(M64, 1, 2))


def test_format_validation(store):
    M = csr_to_metcf(picture_matrix())
    m = store.matrix("bad")
    with pytest.raises(InputError, match="tc_offset has 3 entries, expected"):
        m.write_format("metcf", "k", {**M, "tc_offset": M["tc_offset"][:3]})
    with pytest.raises(InputError, match="partptr"):
        m.write_format("metcf", "k", M, window_ranges=[0, 1])
    with pytest.raises(InputError, match="no storage layout"):
        m.write_format("csc", "k", M)  # no registered format is called csc
    with pytest.raises(StorageError, match="not found"):
        m.read_format("metcf", "k")
