"""Partition plans: balance, halos against brute force, resident exchange layout, persistence. No Dask."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats.metcf.container import WINDOW, csr_to_metcf
from kernels.formats.metcf.reference import metcf_spmm
from storage import BlockStore
from kernels.formats.metcf.container import metcf_from_arrays
from kernels.formats.metcf.shard import remap_columns, split_columns
from tasks.distribute.plan import exchange_lists, make_plan, persist_plan, shard_of, split_windows


def power_law(n_rows, n_cols, nnz, seed):
    """Skewed rows (a few hubs) so shards differ in rows but not in blocks; float32 like the generators."""
    rng = np.random.default_rng(seed)
    rows = np.minimum((rng.pareto(1.2, nnz) * 7).astype(np.int64), n_rows - 1)
    rows = rng.permutation(n_rows)[rows]
    cols = rng.integers(0, n_cols, nnz)
    A = sp.csr_array((rng.standard_normal(nnz).astype(np.float32), (rows, cols)), shape=(n_rows, n_cols))
    A.sum_duplicates()
    return A


@pytest.mark.parametrize("n_parts", [1, 2, 3, 7])
def test_shards_balanced_by_blocks(n_parts):
    A = power_law(1001, 900, 20_000, seed=1)
    M = csr_to_metcf(A)
    plan = make_plan(M, n_parts)
    per_window = np.diff(M.row_window_offset)
    assert plan.partptr[0] == 0 and plan.partptr[-1] == M.n_windows and np.all(np.diff(plan.partptr) >= 0)
    assert plan.n_blocks.sum() == M.n_blocks and plan.nnz.sum() == M.nnz
    assert plan.n_blocks.max() <= M.n_blocks / n_parts + per_window.max()
    assert plan.row_stop[-1] == 1001 and np.all(plan.row_start[1:] == plan.row_stop[:-1])


def test_split_windows_bound_on_adversarial_weights():
    rng = np.random.default_rng(5)
    for _ in range(50):
        w = rng.integers(0, 1000, rng.integers(1, 60)).astype(float)
        w[rng.integers(0, len(w))] *= 40  # one heavy window
        P = int(rng.integers(1, 9))
        ptr = split_windows(w, P)
        sums = np.add.reduceat(np.append(w, 0), ptr[:-1]) * (np.diff(ptr) > 0)
        assert ptr.shape == (P + 1,) and np.all(np.diff(ptr) >= 0)
        assert sums.max() <= w.sum() / P + w.max() + 1e-9


def test_more_parts_than_windows_gives_empty_shards():
    A = power_law(20, 20, 60, seed=2)  # 2 windows
    plan = make_plan(csr_to_metcf(A), 4)
    assert plan.n_parts == 4 and plan.n_blocks.sum() == csr_to_metcf(A).n_blocks
    assert (plan.n_rows == 0).sum() >= 2


def test_balance_by_bytes():
    M = csr_to_metcf(power_law(500, 500, 8000, seed=3))
    plan = make_plan(M, 3, balance_by="bytes")
    assert plan.nbytes.max() <= plan.nbytes.sum() / 3 + 16 * 1024 * 50  # within one heavy window
    with pytest.raises(ValueError, match="balance_by"):
        make_plan(M, 3, balance_by="rows")


def test_halo_matches_brute_force_and_owners():
    rng = np.random.default_rng(4)
    A = power_law(333, 333, 4000, seed=4)
    perm = rng.permutation(333)
    M = csr_to_metcf(A[perm])
    plan = make_plan(M, 3, perm=perm)
    inv = np.argsort(perm)
    for k in range(3):
        r0, r1 = plan.row_start[k], plan.row_stop[k]
        brute = np.unique(A[perm[r0:r1]].indices)  # columns used by the shard's (original) rows
        np.testing.assert_array_equal(plan.halo_cols[k], brute)
        owner = np.searchsorted(plan.row_stop, inv[brute], side="right")
        np.testing.assert_array_equal(plan.halo_owner[k], owner)
        np.testing.assert_array_equal(plan.halo_local[k], inv[brute] - plan.row_start[owner])
    hb = plan.halo_bytes(256)
    np.testing.assert_array_equal(hb, [len(c) * 256 * 4 for c in plan.halo_cols])
    assert np.all(plan.halo_bytes(256, remote_only=True) <= hb)


def test_send_all_when_halo_covers_b():
    #  dense-ish A: every shard touches every column -> sending B whole is cheaper than halo rows + index
    A = sp.csr_array(np.ones((64, 40), dtype=np.float32))
    plan = make_plan(csr_to_metcf(A), 2)
    assert plan.send_all(8).all()
    #  block diagonal: each shard touches only its own 32 of 64 columns -> halo only
    D = sp.block_diag([np.ones((32, 32))] * 2, format="csr").astype(np.float32)
    plan = make_plan(csr_to_metcf(D), 2)
    assert not plan.send_all(8).any()
    assert plan.halo_bytes(8, remote_only=True).sum() == 0


def test_rectangular_plan_has_no_owners():
    plan = make_plan(csr_to_metcf(power_law(100, 37, 500, seed=6)), 2)
    assert all(np.all(o == -1) for o in plan.halo_owner)
    with pytest.raises(ValueError, match="square"):
        exchange_lists(plan, 0)


@pytest.mark.parametrize("use_perm", [False, True])
def test_exchange_layout_reproduces_product(use_perm):
    """Assemble each shard's extended B by hand from the layout and multiply: equals A @ B on its rows."""
    rng = np.random.default_rng(7)
    A = power_law(200, 200, 3000, seed=7)
    perm = rng.permutation(200) if use_perm else None
    M = csr_to_metcf(A[perm] if use_perm else A)
    plan = make_plan(M, 3, perm=perm)
    B = rng.standard_normal((200, 5))
    parts = [B[plan.shard_rows(k)] for k in range(3)]
    for k in range(3):
        lay = exchange_lists(plan, k)
        ext = np.full((lay["n_ext"], 5), np.nan)
        n_own = plan.n_rows[k]
        ext[lay["own_offset"]:lay["own_offset"] + n_own] = parts[k]
        for p, idx, start in lay["recv"]:
            assert p != k
            ext[start:start + len(idx)] = parts[p][idx]
        S = remap_columns(shard_of(M, plan, k), plan.halo_cols[k], lay["ext_index"], lay["n_ext"])
        if not use_perm:
            S.validate(full=True)  # natural order keeps the renamed shard canonical
        np.testing.assert_allclose(metcf_spmm(S, ext), A[plan.shard_rows(k)] @ B, rtol=1e-10, atol=1e-10)


def test_persist_plan_writes_one_file_per_shard(tmp_path):
    A = power_law(300, 300, 3000, seed=8)
    M = csr_to_metcf(A)
    plan = make_plan(M, 3)
    store = BlockStore(tmp_path).matrix("gen.test")
    path = persist_plan(M, plan, store, "none-000000000000", n_cols_b=16)
    doc = json.loads(path.read_text())
    assert path.name == f"3-{plan.fingerprint()}.json" and doc["partptr"] == plan.partptr.tolist()
    files = store.manifest.require("formats/metcf/none-000000000000")["files"]
    assert [f["range"] for f in files] == [[int(a), int(b)] for a, b in zip(plan.partptr[:-1], plan.partptr[1:])]
    for k in range(3):
        S = metcf_from_arrays(store.read_format("metcf", "none-000000000000", plan.partptr[k], plan.partptr[k + 1]))
        S.validate(full=True)
        ref = shard_of(M, plan, k)
        assert S.shape == ref.shape == (plan.n_rows[k], 300)
        np.testing.assert_array_equal(S.sparse_a_to_b, ref.sparse_a_to_b)
        np.testing.assert_array_equal(S.data, ref.data)
    assert WINDOW * plan.partptr[1] == plan.row_stop[0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_split_columns_parts_sum_to_the_shard(seed):
    """own/remote split used to overlap the halo exchange with the local kernel: parts add up, stay canonical."""
    rng = np.random.default_rng(seed)
    A = power_law(333, 250, 6000, seed=seed)
    M = csr_to_metcf(A)
    keep = rng.random(250) < 0.4
    own, rem = split_columns(M, keep), split_columns(M, ~keep)
    own.validate(full=True)
    rem.validate(full=True)
    assert own.nnz + rem.nnz == M.nnz
    assert np.all(keep[own.sparse_a_to_b[own.sparse_a_to_b >= 0]])
    B = rng.standard_normal((250, 3))
    np.testing.assert_allclose(metcf_spmm(own, B) + metcf_spmm(rem, B), A @ B, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(split_columns(M, np.ones(250, bool)).sparse_a_to_b, M.sparse_a_to_b)
    assert split_columns(M, np.zeros(250, bool)).nnz == 0


@pytest.mark.parametrize("use_perm", [False, True])
def test_locate_inverts_shard_rows(use_perm):
    """locate(rows) gives (shard, index) with shard_rows(shard)[index] == rows, empty shards included."""
    rng = np.random.default_rng(9)
    A = sp.random_array((100, 100), density=0.05, format="csr", dtype=np.float32, rng=rng)
    perm = rng.permutation(100) if use_perm else None
    M = csr_to_metcf(A[perm] if use_perm else A)
    plan = make_plan(M, 9, perm=perm)  # 7 windows, 9 shards: some empty
    assert (plan.n_rows == 0).any()
    rows = rng.permutation(100)
    shard, index = plan.locate(rows)
    for r, k, i in zip(rows, shard, index):
        assert plan.shard_rows(int(k))[i] == r
