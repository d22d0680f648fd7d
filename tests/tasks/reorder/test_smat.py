"""SMaT preprocessing (tasks/reorder/smat.py): the heap-driven clustering equals the paper's quadratic sequential
scan, is a permutation, lowers BCSR blocks on shuffled block structure, never adds blocks, and the API scores it."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from tasks.reorder import auto_reorder, reorder, smat
from tasks.reorder.smat import bcsr_score, block_patterns, smat_order, sylos_labini_order


def paper_scan(A, tau, width):
    """Section IV-C verbatim: cluster from the first unclustered row; every later unclustered row, in order, joins
    when its Jaccard distance to the cluster's union pattern is below tau (the pattern grows by it)."""
    pptr, pidx = block_patterns(A, width)
    pats = [set(pidx[pptr[i]:pptr[i + 1]].tolist()) for i in range(A.shape[0])]
    done, out = [False] * len(pats), []
    for i, p in enumerate(pats):
        if done[i]:
            continue
        done[i], pc = True, set(p)
        out.append(i)
        for j in range(i + 1, len(pats)):
            if done[j]:
                continue
            union = len(pats[j] | pc)
            dist = 0.0 if union == 0 else 1.0 - len(pats[j] & pc) / union
            if dist < tau:
                done[j] = True
                pc |= pats[j]
                out.append(j)
    return np.array(out, dtype=np.int64)


def shuffled_blocks(seed=0, n_block_rows=30, n_block_cols=40, density=0.1, width=16):
    """A block-sparse matrix (16 x width blocks, fully dense) with its rows shuffled."""
    rng = np.random.default_rng(seed)
    S = sp.random(n_block_rows, n_block_cols, density=density, random_state=seed, format="csr")
    A = sp.csr_array(sp.kron(S, np.ones((16, width)), format="csr"))
    return A[rng.permutation(A.shape[0])]


@pytest.mark.parametrize("tau", [0.3, 0.7, 1.0])
@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_the_papers_sequential_scan(tau, width, seed):
    rng = np.random.default_rng(seed)
    A = sp.random(150, 120, density=0.04, random_state=seed, format="lil")
    A[[3, 40, 41]] = 0  # empty rows
    A = sp.csr_array(A)[rng.permutation(150)]
    A.sort_indices()
    np.testing.assert_array_equal(sylos_labini_order(A, tau=tau, width=width), paper_scan(A, tau, width))


def test_recovers_shuffled_block_structure():
    A = shuffled_blocks()
    perm = smat_order(A, tau=0.7, width=16)
    assert np.array_equal(np.sort(perm), np.arange(A.shape[0]))
    before, after = bcsr_score(A, 16), bcsr_score(A[perm], 16)
    assert after["bcsr_blocks"] < 0.5 * before["bcsr_blocks"]
    assert after["bcsr_blocks_per_row_max"] <= before["bcsr_blocks_per_row_max"]


def test_never_applied_when_it_adds_blocks():
    # a band of width 16 aligned to the block grid: 1 block per block row; tau = 1 merges every overlapping row
    # into one long cluster in a different order only when that pays, so the identity must come back when not
    A = sp.csr_array(sp.kron(sp.eye(20), np.ones((16, 16)), format="csr")) + sp.eye(320, k=17)
    A = sp.csr_array(A)
    A.sort_indices()
    raw = sylos_labini_order(A, tau=1.0, width=16)
    if bcsr_score(A[raw], 16)["bcsr_blocks"] >= bcsr_score(A, 16)["bcsr_blocks"]:
        np.testing.assert_array_equal(smat_order(A, tau=1.0, width=16), np.arange(320))
    perm = smat_order(A, tau=1.0, width=16)
    assert bcsr_score(A[perm], 16)["bcsr_blocks"] <= bcsr_score(A, 16)["bcsr_blocks"]


def test_blocks_never_grow_on_random_inputs():
    for seed in range(5):
        A = sp.csr_array(sp.random(200, 180, density=0.03, random_state=seed, format="csr"))
        perm = smat_order(A, width=8)
        assert bcsr_score(A[perm], 8)["bcsr_blocks"] <= bcsr_score(A, 8)["bcsr_blocks"]


@pytest.mark.parametrize("count", ["markers", "sorted"])
def test_bcsr_score_counts_blocks_and_spread(count, monkeypatch):
    if count == "sorted":  # what a hypersparse wide matrix takes (kernels.formats.metrics.markers_fit)
        monkeypatch.setattr(smat, "markers_fit", lambda shape, nnz: False)
    # block row 0: column blocks {0, 2}; block row 1: {1}; block row 2 (rows 32-36): none
    A = sp.csr_array((np.ones(4), ([0, 5, 17, 20], [3, 40, 20, 31])), shape=(37, 50))
    s = bcsr_score(A, 16)
    assert (s["bcsr_blocks"], s["bcsr_blocks_per_row_min"], s["bcsr_blocks_per_row_max"]) == (3, 0, 2)
    assert s["bcsr_blocks_per_row_mean"] == pytest.approx(1.0)
    assert s["bcsr_blocks_per_row_cv"] == pytest.approx(np.std([2, 1, 0]) / 1.0)


def test_bcsr_score_matches_brute_force():
    A = sp.random(333, 700, density=0.03, format="csr", random_state=7)  # 21 block rows, the last of 13 rows
    brute = smat.bcsr_summary(np.array([len({c // 8 for r in range(w * 16, min(333, w * 16 + 16))
                                                for c in A.indices[A.indptr[r]:A.indptr[r + 1]]})
                                           for w in range(-(-333 // 16))]), 8)
    assert bcsr_score(A, 8) == brute


def test_api_method_and_scores():
    A = shuffled_blocks(seed=3)
    perm = reorder(A, "smat", tau=0.7, width=16)
    np.testing.assert_array_equal(perm, smat_order(A, tau=0.7, width=16))
    method, perm, report = auto_reorder(A, candidates=["smat", "jaccard"], width=16)
    for name in ("none", "smat", "jaccard"):
        assert {"bcsr_blocks", "bcsr_blocks_per_row_cv", "bcsr_blocks_per_row_max"} <= set(report["methods"][name])
    assert report["methods"]["smat"]["bcsr_blocks"] < report["methods"]["none"]["bcsr_blocks"]
    with pytest.raises(ValueError, match="tau is 0"):
        reorder(A, "smat", tau=0.0)
