"""reorder / reorder_checked / auto_reorder on small matrices (no Dask here)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats.metrics import tc_stats
from tasks.reorder import METHODS, auto_reorder, reorder, reorder_checked


@pytest.mark.parametrize("method", METHODS)
def test_perm_is_permutation_and_spmm_unchanged(matrix, method):
    before = matrix.copy()
    perm = reorder(matrix, method, seed=3)
    assert perm.dtype == np.int64 and perm.shape == (matrix.shape[0],)
    assert np.array_equal(np.sort(perm), np.arange(matrix.shape[0]))
    assert (matrix != before).nnz == 0  # input untouched
    B = np.random.default_rng(0).random((matrix.shape[1], 5))
    C = matrix @ B
    C2 = np.empty_like(C)
    C2[perm] = matrix[perm] @ B  # perm[new] = old
    np.testing.assert_allclose(C2, C, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("method", ["tca", "jaccard"])
def test_same_seed_same_perm(make_community, method):
    A = make_community(1000, 6, 32, seed=1)[1]
    assert np.array_equal(reorder(A, method, seed=4), reorder(A, method, seed=4))


def test_tca_recovers_communities(make_community):
    nat, shuf = make_community(8192, 8, 64, seed=2)
    perm = reorder(shuf, "tca", seed=0)
    b_nat, b_shuf = tc_stats(nat)["n_tc_blocks"], tc_stats(shuf)["n_tc_blocks"]
    b_tca = tc_stats(shuf[perm])["n_tc_blocks"]
    assert b_tca <= 1.3 * b_nat
    assert b_tca <= 0.75 * b_shuf


def test_tca_threads_and_blocks_do_not_change_result(make_community):
    A = make_community(3000, 8, 64, seed=3)[1]
    ref = reorder(A, "tca", seed=1)
    assert np.array_equal(ref, reorder(A, "tca", seed=1, n_threads=1, block_rows=100, pair_shard=777))


def test_tca_hub_and_huge_bucket_stay_capped():
    # 100,000 identical rows {0, 1, 2}: every LSH band is one 100k-row bucket. Plus one hub row of 1M nonzeros.
    n = 100_000
    indptr = np.concatenate([np.arange(0, 3 * n + 1, 3), [3 * n + 1_000_000]]).astype(np.int64)
    indices = np.concatenate([np.tile([0, 1, 2], n), np.arange(1_000_000)]).astype(np.int64)
    A = sp.csr_matrix((np.ones(indices.size, np.float32), indices, indptr), shape=(n + 1, 1_000_000))
    from tasks.reorder import tca
    stats = {}
    perm = tca.tca_order(A.indptr, A.indices, A.shape[1], seed=0, bands=8, pair_window=2, stats=stats)
    assert np.array_equal(np.sort(perm), np.arange(n + 1))
    assert stats["hubs"] == 1 and perm[-1] == n  # the hub is placed last, not clustered
    assert stats["candidate_pairs"] <= n * 8 * 2  # at most n * bands * window
    assert stats["full_clusters"] == n // 16
    assert tc_stats(A[perm])["n_tc_blocks"] <= tc_stats(A)["n_tc_blocks"]


@pytest.mark.parametrize("method", [m for m in METHODS if m != "none"])
def test_reorder_checked_never_increases_blocks(method):
    # A banded matrix: the natural order is already ideal, most methods make it worse.
    n = 600
    A = sp.diags([np.ones(n - abs(k)) for k in range(-3, 4)], list(range(-3, 4)), format="csr")
    perm, before, after, applied = reorder_checked(A, method, seed=0)
    assert after["n_tc_blocks"] <= before["n_tc_blocks"]
    if not applied:
        assert np.array_equal(perm, np.arange(n))
    else:
        assert tc_stats(A[perm])["n_tc_blocks"] < before["n_tc_blocks"]


def test_reorder_checked_applies_an_improvement(make_community):
    A = make_community(4096, 8, 64, seed=4)[1]
    perm, before, after, applied = reorder_checked(A, "tca")
    assert applied and after["n_tc_blocks"] < before["n_tc_blocks"]


def test_auto_reorder_picks_fewest_blocks_and_reports(make_community):
    A = make_community(4096, 8, 64, seed=6)[1]
    method, perm, report = auto_reorder(A, candidates=["tca", "degree", "rcm"])
    blocks = {m: r["n_tc_blocks"] for m, r in report["methods"].items()}
    assert method == min(blocks, key=blocks.get) and method != "none"
    assert tc_stats(A[perm])["n_tc_blocks"] == blocks[method]
    _, _, report = auto_reorder(A, candidates=["tca"], max_cost=1e-9)
    assert "skipped" in report["methods"]["tca"] and report["chosen"] == "none"


def test_auto_reorder_keeps_none_on_ideal_order():
    A = sp.identity(256, format="csr")
    method, perm, report = auto_reorder(A)
    assert method == "none" and np.array_equal(perm, np.arange(256)) and "no candidate" in report["reason"]
    # the default candidates are the density methods that won somewhere (api.AUTO_METHODS); the others when named
    assert set(report["methods"]) == {"none", "tca", "rcm", "degree"}
    _, _, named = auto_reorder(A, candidates=["rowshuffle", "jaccard"])
    assert set(named["methods"]) == {"none", "rowshuffle", "jaccard"}


def test_unknown_method_is_rejected():
    with pytest.raises(ValueError, match="unknown reorder method 'metis'"):
        reorder(sp.identity(4, format="csr"), "metis")
