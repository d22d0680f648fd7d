"""One-shot and resident SpMM on a 2-process CPU LocalCluster: results vs the float64 reference, gather order,
retries after a killed worker, and the named error after two failures."""
from __future__ import annotations

import os
import sys

import cloudpickle
import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats.metcf.container import csr_to_metcf
from storage import BlockStore
from tasks.distribute import (DistributedSpmm, ShardFailedError, cluster_client, make_plan, persist_plan,
                              run_oneshot, run_shard)

pytestmark = [
    # distributed logs (not warns) on worker death; these come from its own shutdown of killed workers' comms.
    pytest.mark.filterwarnings("ignore:.*Restarting worker.*:UserWarning"),
    pytest.mark.filterwarnings("ignore:.*coroutine.*was never awaited:RuntimeWarning"),
]

# The fault-injecting shard functions below run on the workers; this test module is not importable there
# (--import-mode=importlib), so cloudpickle ships it by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

# float32 kernels vs the float64 reference: ~1e-6 relative per product, summed over ~30 terms per row.
RTOL, ATOL = 1e-5, 1e-5


@pytest.fixture(scope="module")
def client():
    with cluster_client(n_workers=2, gpu=False) as c:
        yield c


def graph(n=333, nnz=5000, seed=0):
    """Square power-law-ish graph: 333 rows (21 windows, the last one partial), float32 values."""
    rng = np.random.default_rng(seed)
    rows = np.minimum((rng.pareto(1.1, nnz) * 5).astype(np.int64), n - 1)
    rows = rng.permutation(n)[rows]
    A = sp.csr_array((rng.standard_normal(nnz).astype(np.float32), (rows, rng.integers(0, n, nnz))), shape=(n, n))
    A.sum_duplicates()
    return A


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(1)
    A = graph()
    perm = rng.permutation(A.shape[0])  # a non-trivial reordering: C must still come back in original order
    M = csr_to_metcf(A[perm])
    B = rng.standard_normal((A.shape[1], 12)).astype(np.float32)
    return A, perm, M, B, A.astype(np.float64) @ B.astype(np.float64)


@pytest.mark.parametrize("n_parts", [2, 3])
def test_oneshot_in_memory_matches_reference(client, case, n_parts):
    A, perm, M, B, C_ref = case
    plan = make_plan(M, n_parts, perm=perm)
    C, timings = run_oneshot(plan, B, client, M=M, repeats=1)
    np.testing.assert_allclose(C, C_ref, rtol=RTOL, atol=ATOL)
    assert [t["shard"] for t in timings] == list(range(n_parts))
    assert {t["worker"] for t in timings} == set(client.scheduler_info()["workers"])
    for t in timings:
        assert t["kernel_ms"] >= 0 and t["bytes_out"] == plan.n_rows[t["shard"]] * 12 * 4 and t["attempts"] == 1


def test_oneshot_halo_rows_only(client):
    """Block-diagonal A: each shard gets only its halo rows of B (not all of B), columns renamed on the worker."""
    rng = np.random.default_rng(2)
    A = sp.block_diag([graph(96, 800, s) for s in range(3)], format="csr").astype(np.float32)
    M = csr_to_metcf(A)
    plan = make_plan(M, 3)
    B = rng.standard_normal((A.shape[1], 4)).astype(np.float32)
    C, timings = run_oneshot(plan, B, client, M=M, repeats=1)
    np.testing.assert_allclose(C, A @ B, rtol=RTOL, atol=ATOL)
    assert not any(t["send_all"] for t in timings)
    assert all(t["b_rows"] == len(plan.halo_cols[t["shard"]]) < A.shape[1] for t in timings)


def test_oneshot_from_parquet_writes_result(client, case, tmp_path):
    A, perm, M, B, C_ref = case
    plan = make_plan(M, 2, perm=perm)
    store = BlockStore(tmp_path).matrix("gen.case")
    persist_plan(M, plan, store, "rowshuffle-000000000001", n_cols_b=B.shape[1])
    C, timings = run_oneshot(plan, B, client, store=store, perm_key="rowshuffle-000000000001", out="run1",
                             repeats=2)
    np.testing.assert_allclose(C, C_ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(store.read_result("run1"), C)
    assert all(t["load_ms"] > 0 and t["write_ms"] > 0 for t in timings)


@pytest.mark.parametrize("use_perm", [False, True])
def test_resident_three_iterations(client, case, use_perm):
    A, perm, _, B, _ = case
    M = csr_to_metcf(A[perm] if use_perm else A)
    plan = make_plan(M, 3, perm=perm if use_perm else None)
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    ds = DistributedSpmm(plan, client, M=M)
    try:
        assert ds.transport == "dask"
        parts = ds.run([B[plan.shard_rows(k)] for k in range(3)])
        want = A64 @ B64
        np.testing.assert_allclose(parts.gather(), want, rtol=RTOL, atol=ATOL)
        for _ in range(2):
            parts = ds.step()
            want = A64 @ want
        scale = np.abs(want).max()
        np.testing.assert_allclose(parts.gather(), want, rtol=1e-4, atol=1e-5 * scale)
        for k, C_k in enumerate(parts.parts()):
            np.testing.assert_allclose(C_k, want[plan.shard_rows(k)], rtol=1e-4, atol=1e-5 * scale)
        some = np.array([332, 0, 17, 200, 5, 17])  # any order, repeats allowed: C's rows, fetched from their shards
        np.testing.assert_array_equal(parts.rows(some), parts.gather()[some])
        with pytest.raises(IndexError, match="row ids"):
            parts.rows([333])
        assert len(ds.history) == 3
        row_bytes = 4 * B.shape[1]
        for s in ds.history[-1]["shards"]:
            assert s["halo_bytes_recv"] == plan.remote_mask(s["shard"]).sum() * row_bytes
        sent = sum(s["halo_bytes_sent"] for s in ds.history[-1]["shards"])
        assert sent == sum(s["halo_bytes_recv"] for s in ds.history[-1]["shards"])
    finally:
        ds.close()


def test_resident_from_parquet(client, case, tmp_path):
    A, perm, M, B, C_ref = case
    plan = make_plan(M, 2, perm=perm)
    store = BlockStore(tmp_path).matrix("gen.case")
    persist_plan(M, plan, store, "rowshuffle-000000000001")
    ds = DistributedSpmm(plan, client, store=store, perm_key="rowshuffle-000000000001")
    try:
        ds.scatter(B)
        np.testing.assert_allclose(ds.run().gather(), C_ref, rtol=RTOL, atol=ATOL)
    finally:
        ds.close()


def kill_once(k, shard, B_rows, cols, *, marker, **kw):
    """Shard 0 kills its worker process the first time (marker file absent), then runs normally."""
    if k == 0 and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return run_shard(k, shard, B_rows, cols, **kw)


def always_fail(k, shard, B_rows, cols, **kw):
    if k == 1:
        raise RuntimeError("injected failure")
    return run_shard(k, shard, B_rows, cols, **kw)


def test_retry_after_killed_worker(client, case, tmp_path):
    A, perm, M, B, C_ref = case
    plan = make_plan(M, 2, perm=perm)
    marker = str(tmp_path / "killed")

    def fn(*args, **kw):
        return kill_once(*args, marker=marker, **kw)

    C, timings = run_oneshot(plan, B, client, M=M, repeats=1, shard_fn=fn)
    assert os.path.exists(marker)
    np.testing.assert_allclose(C, C_ref, rtol=RTOL, atol=ATOL)
    client.wait_for_workers(2, timeout=60)  # the nanny restarts the killed worker for the next tests


def test_shard_failing_twice_raises_named_error_and_writes_nothing(client, case, tmp_path):
    A, perm, M, B, _ = case
    plan = make_plan(M, 2, perm=perm)
    store = BlockStore(tmp_path).matrix("gen.case")
    persist_plan(M, plan, store, "none-000000000000")
    with pytest.raises(ShardFailedError, match=r"shard 1 .*failed twice, last on worker tcp://.*injected failure"):
        run_oneshot(plan, B, client, store=store, perm_key="none-000000000000", out="bad", repeats=1,
                    shard_fn=always_fail)
    assert not store.has_result("bad")
    assert not (store.folder / "results" / "bad").exists() or not any((store.folder / "results" / "bad").iterdir())


def test_timing_reports(client, case, tmp_path):
    from tasks.distribute import markdown_table, runs_rows
    A, perm, M, B, _ = case
    plan = make_plan(M, 2, perm=perm)
    _, timings = run_oneshot(plan, B, client, M=M, repeats=1)
    rows = runs_rows(timings, run_id="r1", matrix_id="gen.case", n_cols_b=B.shape[1], reorder="rowshuffle")
    BlockStore(tmp_path).append_runs(rows)  # the rows fit the runs schema
    assert BlockStore(tmp_path).read_runs().num_rows == 2
    table = markdown_table(timings)
    assert table.count("\n| ") == 2 and "slowest GPU" in table  # one line per shard after the header
    for t in timings:  # the itemized one-shot path: each part inside the whole it belongs to
        assert t["shard_ms"] >= t["load_ms"] + t["remap_ms"] + t["timing_ms"] >= t["timing_ms"] > t["first_ms"] > 0
        assert 0 < t["scatter_ms"] < t["done_ms"] <= t["wall_ms"] and t["gather_ms"] <= t["done_ms"]


def test_more_shards_than_windows_and_empty_rows(client):
    """4 shards over 2 windows (two shards own nothing) and a shard whose rows are all empty."""
    rng = np.random.default_rng(9)
    A = sp.lil_array((40, 40), dtype=np.float32)
    A[0:5, :] = rng.standard_normal((5, 40)).astype(np.float32)  # rows 16..39 stay empty
    A = sp.csr_array(A)
    M = csr_to_metcf(A)
    B = rng.standard_normal((40, 3)).astype(np.float32)
    plan = make_plan(M, 4)
    C, _ = run_oneshot(plan, B, client, M=M, repeats=1)
    np.testing.assert_allclose(C, A @ B, rtol=RTOL, atol=ATOL)
    ds = DistributedSpmm(plan, client, M=M)
    try:
        ds.scatter(B)
        np.testing.assert_allclose(ds.run().gather(), A @ B, rtol=RTOL, atol=ATOL)
    finally:
        ds.close()


@pytest.mark.parametrize("mode", ["columns", "rows"])
def test_resident_overlap_split_gives_the_same_result(client, case, mode):
    """Overlap modes (own-column part + halo part, summed; boundary rows then interior rows) equal the plain
    iteration, over 3 steps."""
    A, perm, M, B, _ = case
    plan = make_plan(M, 2, perm=perm)
    ds = DistributedSpmm(plan, client, M=M, overlap=mode)
    try:
        ds.scatter(B)
        want = A.astype(np.float64) @ B.astype(np.float64)
        np.testing.assert_allclose(ds.run().gather(), want, rtol=RTOL, atol=ATOL)
        for _ in range(2):
            parts = ds.step()
            want = A.astype(np.float64) @ want
        scale = np.abs(want).max()
        np.testing.assert_allclose(parts.gather(), want, rtol=1e-4, atol=1e-5 * scale)
        assert all(h["overlap"] == mode for h in ds.history)
        ds.set_overlap(False)
        prev = parts.gather()
        nxt = ds.step()
        np.testing.assert_allclose(nxt.gather(), A @ prev, rtol=1e-4, atol=1e-4 * np.abs(A @ prev).max())
        with pytest.raises(RuntimeError, match="replaced"):
            parts.gather()  # a handle to an older iteration's C
    finally:
        ds.close()


# ---- batched resident iterations: several iterations in one actor call per shard ----------------------------------

def power(A64, B64, n):
    want = B64
    for _ in range(n):
        want = A64 @ want
    return want


@pytest.mark.parametrize("n_parts", [1, 2, 3])  # 1: no peers; 3: two shards' actors share a worker
def test_resident_batched_equals_single_steps_and_reference(client, case, n_parts):
    A, perm, M, B, _ = case
    plan = make_plan(M, n_parts, perm=perm)
    parts_B = [B[plan.shard_rows(k)] for k in range(n_parts)]
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    with DistributedSpmm(plan, client, M=M) as ds:
        assert ds.transport == "dask"
        ds.run(parts_B)
        for _ in range(3):
            single = ds.step()
        C_single = single.gather()  # A^4 B, one actor call per shard per iteration
        assert not any(h["batched"] for h in ds.history)

        batched = ds.iterate(4, parts_B)  # run(B) + 3 steps in one call per shard
        C_batched = batched.gather()
        np.testing.assert_array_equal(C_batched, C_single)
        want = power(A64, B64, 4)
        scale = np.abs(want).max()
        np.testing.assert_allclose(C_batched, want, rtol=1e-4, atol=1e-5 * scale)
        for k, C_k in enumerate(batched.parts()):
            np.testing.assert_array_equal(C_k, C_single[plan.shard_rows(k)])

        assert len(ds.history) == 8
        batch = ds.history[4:]
        assert [h["iteration"] for h in batch] == [4, 5, 6, 7] and batched.iteration == 7
        assert all(h["batched"] and h["batch_size"] == 4 for h in batch)
        assert [h["batch_index"] for h in batch] == [0, 1, 2, 3]
        assert all(h["iteration_ms"] == pytest.approx(h["batch_ms"] / 4) for h in batch)
        assert all(0 < h["batch_loop_ms"] <= h["batch_ms"] for h in batch)
        row_bytes = 4 * B.shape[1]
        for h in batch:
            assert len(h["shards"]) == n_parts and h["kernel_ms"] > 0
            assert h["exchange_ms"] == max(s["exchange_ms"] for s in h["shards"])
            for s in h["shards"]:
                assert s["transport"] == "dask" and s["kernel_ms"] >= 0
                assert s["halo_bytes_recv"] == plan.remote_mask(s["shard"]).sum() * row_bytes
        with pytest.raises(RuntimeError, match="replaced"):
            single.gather()

        # continuing without B_parts advances first: 2 batched steps == 2 more single steps
        nxt = ds.step(2).gather()
        np.testing.assert_allclose(nxt, A @ (A @ C_batched), rtol=1e-4, atol=1e-4 * np.abs(nxt).max())
        want = power(A64, B64, 6)
        np.testing.assert_allclose(nxt, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
        assert len(ds.history) == 10 and ds.history[-1]["batch_size"] == 2


def test_resident_batched_without_advance_repeats_run(client, case):
    """advance=False: every iteration multiplies the resident B (the benchmark's timing mode), like run()."""
    A, perm, M, B, C_ref = case
    plan = make_plan(M, 2, perm=perm)
    with DistributedSpmm(plan, client, M=M) as ds:
        ds.scatter(B)
        C_run = ds.run().gather()
        parts = ds.iterate(3, advance=False)
        np.testing.assert_array_equal(parts.gather(), C_run)
        np.testing.assert_allclose(parts.gather(), C_ref, rtol=RTOL, atol=ATOL)
        parts = ds.iterate(2, advance=False)  # a second batch right after: new batch id, same result
        np.testing.assert_array_equal(parts.gather(), C_run)
        assert len(ds.history) == 6


@pytest.mark.parametrize("mode", ["columns", "rows"])
def test_resident_batched_overlap_split(client, case, mode):
    A, perm, M, B, _ = case
    plan = make_plan(M, 3, perm=perm)
    with DistributedSpmm(plan, client, M=M, overlap=mode) as ds:
        ds.scatter(B)
        parts = ds.iterate(3, [B[plan.shard_rows(k)] for k in range(3)])
        want = power(A.astype(np.float64), B.astype(np.float64), 3)
        np.testing.assert_allclose(parts.gather(), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
        assert all(h["overlap"] and h["batched"] for h in ds.history)
        assert all("+" in s["kernel"] for s in ds.history[-1]["shards"] if s["kernel"] != "empty")


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "3", None])
def test_resident_batched_rejects_bad_n_iters(client, case, bad):
    A, perm, M, B, _ = case
    plan = make_plan(M, 2, perm=perm)
    with DistributedSpmm(plan, client, M=M) as ds:
        ds.scatter(B)
        with pytest.raises(ValueError, match="n_iters must be"):
            ds.iterate(bad)
        with pytest.raises(ValueError, match="n_iters must be"):
            ds.step(bad)
        assert ds.history == []


def test_resident_batched_advance_needs_a_c(client, case):
    """iterate(n) advances first (C becomes B): without any C yet that is a clear error, not garbage."""
    A, perm, M, B, _ = case
    plan = make_plan(M, 2, perm=perm)
    with DistributedSpmm(plan, client, M=M) as ds:
        ds.scatter(B)
        with pytest.raises(RuntimeError, match="no C to advance from"):
            ds.iterate(2)
        assert ds.history == []
        np.testing.assert_allclose(ds.iterate(1, advance=False).gather(), A @ B, rtol=RTOL, atol=ATOL)


def _break_compute(dask_worker, key, after):
    """Make the actor ``key`` (if on this worker) raise in its compute after ``after`` calls; None: restore."""
    actor = dask_worker.state.actors.get(key)
    if actor is None:
        return False
    if after is None:
        actor.__dict__.pop("compute", None)
        return True
    calls, compute = [0], type(actor).compute.__get__(actor)

    def failing(repeats=0):
        calls[0] += 1
        if calls[0] > after:
            raise RuntimeError("injected kernel failure")
        return compute(repeats)
    actor.compute = failing
    return True


def test_resident_batched_failure_mid_batch_raises_and_recovers(client, case):
    """One shard's kernel fails in iteration 2 of a batch: the peers waiting on its rows stop too, the driver gets
    the error (no hang), and the next batch runs normally."""
    A, perm, M, B, _ = case
    plan = make_plan(M, 3, perm=perm)
    parts_B = [B[plan.shard_rows(k)] for k in range(3)]
    with DistributedSpmm(plan, client, M=M) as ds:
        key = ds._futures[1].key
        assert sum(client.run(_break_compute, key=key, after=1).values()) == 1
        with pytest.raises(RuntimeError, match="injected kernel failure"):
            ds.iterate(4, parts_B)
        assert ds.history == []
        client.run(_break_compute, key=key, after=None)
        parts = ds.iterate(3, parts_B)
        want = power(A.astype(np.float64), B.astype(np.float64), 3)
        np.testing.assert_allclose(parts.gather(), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def test_warm_cluster_reaches_every_worker_and_loads_nothing_off_the_gpu(cpu_client):
    from tasks.distribute import warm_cluster
    res = warm_cluster(cpu_client, dtypes=("float32", "float16"))
    assert sorted(res) == sorted(cpu_client.scheduler_info(n_workers=-1)["workers"])
    assert all(r == {"ms": 0.0, "failed": {}} for r in res.values())
