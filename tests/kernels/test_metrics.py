"""tc_stats against a brute-force count over windows, by both of its counts (markers, sorting); window_counts."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import kernels.formats.metrics as metrics
from kernels.formats.metrics import tc_stats, window_counts


@pytest.fixture(params=["markers", "sorted"])
def count_path(request, monkeypatch):
    """tc_stats by its marker count, or forced onto the sort-based one (what a hypersparse wide matrix takes)."""
    if request.param == "sorted":
        monkeypatch.setattr(metrics, "_MARKER_COLS_PER_NNZ", 0)
        monkeypatch.setattr(metrics, "_MARKER_SLACK", -1)
    return request.param


def brute(A, window=16, width=8, group_windows=8):
    A = sp.csr_matrix(A)
    n_rows, n_cols = A.shape
    n_windows = -(-n_rows // window)
    per_window, bcsr, groups = [], 0, []
    for w in range(n_windows):
        cols = set()
        for r in range(w * window, min(n_rows, (w + 1) * window)):
            cols.update(A.indices[A.indptr[r]:A.indptr[r + 1]].tolist())
        per_window.append(-(-len(cols) // width))
        bcsr += len({c // width for c in cols})
        if w % group_windows == 0:
            groups.append(set())
        groups[-1].update(cols)
    per_window = np.array(per_window)
    return per_window, bcsr, [len(g) for g in groups]


@pytest.mark.parametrize("shape,density,seed", [((7, 5), 0.5, 0), ((333, 120), 0.02, 1), ((100, 1000), 0.01, 2),
                                                ((1000, 50), 0.05, 3), ((257, 257), 0.004, 4)])
def test_matches_brute_force(shape, density, seed, count_path):
    A = sp.random(*shape, density=density, format="csr", random_state=seed)
    A.indices = A.indices.astype(np.int64)
    A.indptr = A.indptr.astype(np.int64)
    per_window, bcsr, groups = brute(A, group_windows=3)
    s = tc_stats(A, group_windows=3)
    assert s["n_tc_blocks"] == per_window.sum()
    assert s["bcsr_blocks"] == bcsr
    assert s["blocks_per_window_max"] == per_window.max()
    assert s["blocks_per_window_min"] == per_window.min()
    assert s["blocks_per_window_mean"] == pytest.approx(per_window.mean())
    assert s["l2_distinct_cols_per_group"] == pytest.approx(np.mean(groups))
    assert s["mean_nnz_tc"] == pytest.approx(A.nnz / max(per_window.sum(), 1) if per_window.sum() else 0.0)


def test_small_chunks_same_answer(monkeypatch):
    A = sp.random(2000, 300, density=0.03, format="csr", random_state=5)
    full = tc_stats(A)
    monkeypatch.setattr(metrics, "_MARKER_SLACK", -1)  # the sort-based count, in chunks of ~100 nonzeros
    monkeypatch.setattr(metrics, "_MARKER_COLS_PER_NNZ", 0)
    monkeypatch.setattr(metrics, "_CHUNK_NNZ", 100)
    assert tc_stats(A) == full


def test_hypersparse_wide_matrix_is_counted_by_sorting():
    # 3 x 10^9 columns, 4 entries: markers would take ~9 GB; the sort-based count takes it, same numbers
    A = sp.csr_matrix(([1.0, 1.0, 1.0, 1.0], [5, 999_999_990, 6, 13], [0, 2, 3, 4]), shape=(3, 1_000_000_000))
    assert not metrics.markers_fit(A.shape, A.nnz)
    s = tc_stats(A)
    assert s["n_tc_blocks"] == 1 and s["bcsr_blocks"] == 3 and s["l2_distinct_cols_per_group"] == 4
    with pytest.raises(ValueError, match="markers_fit"):
        window_counts(A)


def test_window_counts_every_width_in_one_pass_duplicates_once():
    # window 0 (rows 0-15): row 0 columns 1, 0; row 2 column 9 stored twice; row 3 columns 17, 9 (unsorted);
    # window 1 (row 16): column 40
    indices = np.array([1, 0, 9, 9, 17, 9, 40])
    indptr = np.array([0, 2, 2, 4, 6] + [6] * 12 + [7])
    A = sp.csr_matrix((np.ones(7), indices, indptr), shape=(17, 41))
    assert A.nnz == 7 and not A.has_canonical_format
    distinct, blocks, groups = window_counts(A, widths=(8, 16), group_windows=1)
    assert distinct.tolist() == [4, 1]
    assert blocks[8].tolist() == [3, 1] and blocks[16].tolist() == [2, 1]  # 0..7, 8..15, 16..23 / 0..15, 16..31
    assert groups.tolist() == [4, 1]
    for w in (8, 16):
        assert tc_stats(A, width=w)["n_tc_blocks"] == int((-(-distinct // w)).sum())


def test_window_counts_refuses_a_malformed_csr():
    A = sp.csr_matrix((np.ones(2), np.array([0, 3]), np.array([0, 1, 2])), shape=(2, 4))
    A.indices[1] = 7  # past the 4 columns: the marker kernel would write out of its arrays
    with pytest.raises(ValueError, match=r"column ids must lie in \[0, 4\)"):
        window_counts(A)


def test_empty_and_edge_cases(count_path):
    # nnz = 0: no blocks, mean 0
    s = tc_stats(sp.csr_matrix((40, 9)))
    assert s["n_tc_blocks"] == 0 and s["mean_nnz_tc"] == 0.0 and s["n_windows"] == 3
    # zero rows
    s = tc_stats(sp.csr_matrix((0, 5)))
    assert s["n_windows"] == 0 and s["n_tc_blocks"] == 0
    # one dense row wider than a tile: 20 columns -> 3 blocks in its window
    s = tc_stats(sp.csr_matrix(np.ones((1, 20))))
    assert s["n_tc_blocks"] == 3 and s["bcsr_blocks"] == 3
    # empty rows between full ones, coo input accepted
    A = sp.coo_matrix(([1.0, 1.0], ([0, 33], [3, 3])), shape=(40, 4))
    assert tc_stats(A)["n_tc_blocks"] == 2
