"""tc_stats against a brute-force count over windows."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats.metrics import tc_stats


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
def test_matches_brute_force(shape, density, seed):
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
    import kernels.formats.metrics as m
    A = sp.random(2000, 300, density=0.03, format="csr", random_state=5)
    full = tc_stats(A)
    monkeypatch.setattr(m, "_CHUNK_NNZ", 100)
    assert m.tc_stats(A) == full


def test_empty_and_edge_cases():
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
