"""The row cut of the deterministic CUDA-core CSR kernel (kernels.formats.csr.launch.segments) and its NumPy twin, on the CPU:
pieces partition the nonzeros in row order, no piece longer than seg_len, every row (empty ones too) has one, a long
row's workspace rows are contiguous and in piece order; the twin equals A @ B; sizes past int32 are refused."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernel_cases import BASE_CASES
from kernels.formats.csr.launch import CsrConfig, Layout, reference, segments, walk_order


@pytest.mark.parametrize("seg_len", [1, 3, 256])
@pytest.mark.parametrize("name", sorted(BASE_CASES))
def test_segments_partition_rows(name, seg_len):
    A = sp.csr_array(BASE_CASES[name]())
    seg = segments(A.indptr, seg_len)
    lens = np.diff(seg.seg_ptr)
    assert seg.seg_ptr[0] == 0 and seg.seg_ptr[-1] == A.nnz and (lens >= 0).all() and (lens <= seg_len).all()
    assert np.array_equal(np.unique(seg.seg_row), np.arange(A.shape[0]))  # every row, even an empty one
    assert (np.diff(seg.seg_row) >= 0).all()
    for s in range(seg.seg_row.shape[0]):  # each piece inside its row
        r = seg.seg_row[s]
        assert A.indptr[r] <= seg.seg_ptr[s] and seg.seg_ptr[s + 1] <= A.indptr[r + 1]
    pieces = np.bincount(seg.seg_row, minlength=A.shape[0])
    assert np.array_equal(seg.fix_row, np.flatnonzero(pieces > 1))
    assert np.array_equal(np.diff(seg.fix_ptr), pieces[pieces > 1])
    slots = seg.seg_slot[seg.seg_slot >= 0]
    assert np.array_equal(slots, np.arange(seg.n_slots))  # in piece order
    assert ((seg.seg_slot >= 0) == (pieces[seg.seg_row] > 1)).all()


@pytest.mark.parametrize("name", sorted(BASE_CASES))
def test_reference_equals_the_product(name):
    A = sp.csr_array(BASE_CASES[name]())
    B = np.random.default_rng(0).standard_normal((A.shape[1], 5))
    assert np.allclose(reference(A, B, segments(A.indptr, 7)), A @ B)


def test_checks():
    with pytest.raises(ValueError, match="seg_len is 0"):
        segments(np.array([0, 1]), 0)
    assert CsrConfig().defines() == ("-DCSR_WARPS=2", "-DCSR_UNROLL=4", "-DCSR_TAIL_GROUP=8", "-DCSR_PACK_ROWS=2")
    assert [CsrConfig(pack_rows=2).pack_rows_for(n) for n in (8, 128, 136)] == [2, 2, 1]


def test_short_tail_is_the_even_start_of_the_last_run_of_short_segments():
    from kernels.formats.csr.launch import short_tail

    def ptr(lens):
        return np.concatenate([[0], np.cumsum(lens)])

    assert short_tail(ptr([40, 17, 16, 3, 0, 0]), 16) == 2  # segments 2.. are <= 16
    assert short_tail(ptr([40, 17, 20, 3, 0]), 16) == 4  # from 3, rounded up to even
    assert short_tail(ptr([5, 40, 3, 1]), 16) == 2  # a short segment before a long one stays in the head
    assert short_tail(ptr([3, 1, 0]), 16) == 0 and short_tail(ptr([]), 16) == 0  # all short; none
    assert short_tail(ptr([3, 1, 20]), 16) == 4  # the last segment long: no tail (past the end, even)
    assert short_tail(ptr([40, 17, 16, 3, 2, 0, 1])) == 4  # the default: <= 2 nonzeros
    assert short_tail(ptr([9, 9]), short=8) == 2


def test_walk_order_puts_long_rows_first_and_keeps_the_rest():
    from kernels.formats.csr.launch import walk_order

    lengths = np.array([2, 40, 1, 0, 90, 3, 40, 2])  # mean 22.25: rows of >= 2 x 22.25 go first
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    assert walk_order(indptr, 2.0).tolist() == [4, 0, 1, 2, 3, 5, 6, 7]
    assert walk_order(indptr, 1.0).tolist() == [4, 1, 6, 0, 2, 3, 5, 7]  # longest first, ties in A's order
    assert walk_order(indptr, 0.0) is None and walk_order(indptr, 5.0) is None  # off; no row that long
    assert walk_order(np.array([0, 5, 10, 15]), 1.0) is None  # equal rows: A's own order
    assert walk_order(np.zeros(4, dtype=np.int64), 1.0) is None  # empty A
    order = walk_order(indptr, 1e-9)  # every non-empty row, longest first, then the empty one
    assert sorted(order.tolist()) == list(range(8)) and order[-1] == 3 and order[0] == 4


def test_walk_heavy_sorts_16_bit_rows_by_length_unless_walked_as_given():
    from kernels.formats.csr.launch import HEAVY, HEAVY_HALF, walk_order

    assert CsrConfig().walk_heavy(False) == HEAVY and CsrConfig().walk_heavy(True) == HEAVY_HALF
    assert CsrConfig(heavy=0.0).walk_heavy(True) == 0.0 and CsrConfig(heavy=0.0).walk_heavy(False) == 0.0
    assert CsrConfig(heavy_half=3.0).walk_heavy(True) == 3.0
    lengths = np.array([2, 40, 1, 0, 90, 3, 40, 2])
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    assert walk_order(indptr, HEAVY_HALF).tolist() == [4, 1, 6, 5, 0, 7, 2, 3]  # longest first, ties in A's order


def test_maps_for_offers_the_16_column_mappings_from_256_columns_of_16():
    from kernels.formats.csr.launch import MAPS, maps_for

    assert maps_for(132) == () and maps_for(12) == ()  # N % 8: the 4-values kernel only
    assert maps_for(8) == maps_for(128) == maps_for(136) == maps_for(248) == ("wide", "pair")
    assert maps_for(264) == ("wide", "pair")  # N % 16 != 0: a 16-column lane would straddle N
    assert maps_for(256) == maps_for(272) == maps_for(4096) == MAPS
    assert MAPS[0] == "wide"  # the untimed default and the first in a tie


def test_walk_order_sorts_hub_rows_longest_first_stably():
    # 16-bit keys take NumPy's radix sort; longer rows keep the general sort: both the same stable order
    from kernels.formats.csr.launch import walk_order

    for hub in (40, 40_000):
        lengths = np.array([1, hub, 3, hub, 1, 50, 2, 50, 1] * 3)
        order = walk_order(np.concatenate([[0], np.cumsum(lengths)]), heavy=2.0)
        big = np.flatnonzero(lengths >= 2.0 * lengths.mean())
        big = big[sorted(range(big.size), key=lambda i: -lengths[big[i]])]  # Python's sort is stable
        rest = np.setdiff1d(np.arange(lengths.size), big)
        assert np.array_equal(order, np.concatenate([big, rest]))


@pytest.mark.parametrize("chunk", [1, 5, 1 << 24])
def test_row_gather_index_arithmetic(monkeypatch, chunk):
    # the device gather's arithmetic with NumPy standing in for CuPy (their calls are the same): rows in a given
    # order, empty ones included, in chunks that cut rows
    import sys

    from kernels.formats.csr import upload

    monkeypatch.setitem(sys.modules, "cupy", np)
    monkeypatch.setattr(upload, "CHUNK", chunk)
    A = sp.random(28, 17, density=0.2, format="csr", random_state=3, dtype=np.float32)
    A = sp.csr_array(sp.vstack([A[:10], sp.csr_array((2, 17), dtype=np.float32), A[10:]], format="csr"))
    assert A.shape == (30, 17) and (np.diff(A.indptr) == 0).sum() >= 2
    order = np.random.default_rng(4).permutation(30)
    idx, val = upload._gather_rows(np.asarray(A.indptr, dtype=np.int64), order, upload.ordered_ptr(A.indptr, order),
                                   A.indices.copy(), A.data.copy())
    want = A[order]
    assert np.array_equal(idx, want.indices) and np.array_equal(val, want.data)


@pytest.mark.parametrize("p_name", ["float32", "float16"])
def test_layout_maps_pieces_to_rows_of_c_and_puts_copied_rows_after_the_long_ones(p_name):
    """Layout.of (what CsrRows uploads, made on the host alone): the walk of A's rows, its pieces each writing the row
    of C its row maps to, the long rows' workspace rows in piece order, then one workspace row per copied row."""
    rng = np.random.default_rng(4)
    A = sp.random_array((60, 50), density=0.1, random_state=rng, format="csr", dtype=np.float32)
    A = sp.csr_array(sp.vstack([A, sp.csr_array(np.ones((1, 50), np.float32))]))  # row 60: a hub of 50
    rows = rng.permutation(80)[:61]  # A's row i writes C's row rows[i], C of 80 rows
    copy = np.setdiff1d(np.arange(80), rows)[:5]
    config = CsrConfig(seg_len=16)
    lay = Layout.of(A, p_name, config, rows=rows, n_rows=80, copy_rows=copy)
    walk = walk_order(A.indptr, config.walk_heavy(True))  # float32 with B's 16-bit copy walks by length too
    assert lay.shape == (80, 50) and lay.packs == (p_name == "float32")
    assert np.array_equal(lay.walk, walk) and lay.walk[0] == 60  # the hub first
    seg = segments(lay.indptr, 16)
    assert np.array_equal(lay.seg.seg_ptr, seg.seg_ptr)
    assert np.array_equal(lay.seg_row, rows[walk][seg.seg_row])
    assert lay.n_split == len(seg.fix_row) and np.array_equal(lay.fix_row[:lay.n_split], rows[walk][seg.fix_row])
    assert np.array_equal(lay.fix_row[lay.n_split:], copy) and lay.n_copy == 5 and lay.copy_slot0 == seg.n_slots
    assert np.array_equal(lay.fix_ptr[-6:], seg.n_slots + np.arange(6))
    assert np.array_equal(lay.slot_long, np.repeat(np.arange(lay.n_split), np.diff(seg.fix_ptr)))
    with pytest.raises(ValueError, match="one row of C"):
        Layout.of(A, p_name, config, rows=rows[:-1], n_rows=80)
