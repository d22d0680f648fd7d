"""The resident "rows" overlap on CPU workers (host transport): boundary rows first, their exchange beside the interior
rows' kernel, two extended Bs. Its C must equal the plain loop's bitwise (each row is computed once, with the same
columns in the same order, by the same row-wise CPU product), for every format and precision, batched or per call,
advancing or not, and for the corner cases of the split (no boundary rows, no interior rows, one shard, an empty
shard)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats import get
from kernels.precision import precision
from tasks.distribute import DistributedSpmm, cluster_client, make_plan
from tasks.distribute.formats import sharded_formats
from tasks.distribute.resident import OVERLAP_DEFAULT, overlap_mode
from tasks.distribute.row_split import RowSplit
from tasks.distribute.synth import sbm_keys

FORMATS = sharded_formats()  # bcsr, csr, cvse, metcf, tiledcsr
N_COLS = 12


@pytest.fixture(scope="module")
def client():
    with cluster_client(n_workers=2, gpu=False) as c:
        yield c


def sbm(n=400, blocks=4, seed=3):
    """Communities in natural order (shards follow them): a mix of boundary and interior rows per shard; 400 rows =
    25 windows, so shards end inside a community at P = 3."""
    keys, _ = sbm_keys(np, n, blocks, 6.0, 0.4, seed)
    rows, cols = np.divmod(keys, n)
    vals = np.random.default_rng(seed).standard_normal(rows.shape[0]).astype(np.float32) / 4
    return sp.csr_array((vals, (rows, cols)), shape=(n, n))


@pytest.fixture(scope="module")
def case():
    """(A, perm, A[perm], B): perm shuffles the rows inside each community (a real reordering: C must come back in
    the original order), so the shards still follow the communities."""
    rng = np.random.default_rng(11)
    A = sbm()
    perm = np.concatenate([100 * b + rng.permutation(100) for b in range(4)])
    B = rng.standard_normal((A.shape[0], N_COLS)).astype(np.float32)
    return A, perm, sp.csr_array(A[perm]), B


def parts_of(plan, B):
    return [B[plan.shard_rows(k)] for k in range(plan.n_parts)]


def plain_then_rows(ds, plan, B, n=3):
    """(plain, rows) C of: a batch of n advancing iterations from B, a batch of 2 without advancing, a per-call
    step; the same instance, the overlap switched between the two runs."""
    out = []
    for mode in (False, "rows"):
        ds.set_overlap(mode)
        got = [ds.iterate(n, parts_of(plan, B)).gather(), ds.iterate(2, advance=False).gather(),
               ds.step().gather()]
        out.append(got)
    return out


def assert_rows_equal_plain_and_a3b(ds, plan, A, B):
    """The rows overlap's C equal the plain loop's bit for bit, and its first (3 advancing iterations) A^3 B."""
    plain, rows = plain_then_rows(ds, plan, B)
    for p, r in zip(plain, rows):
        np.testing.assert_array_equal(r, p)
    want = A.astype(np.float64) @ (A.astype(np.float64) @ (A.astype(np.float64) @ B))
    np.testing.assert_allclose(rows[0], want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("n_parts", [1, 2, 3])
def test_rows_overlap_equals_plain_loop_bitwise(client, case, n_parts):
    A, perm, Ap, B = case
    X = get("metcf").convert(Ap, precision("float32"))
    plan = make_plan(X, n_parts, perm=perm)
    with DistributedSpmm(plan, client, M=X) as ds:
        assert_rows_equal_plain_and_a3b(ds, plan, A, B)
        info = ds.info
        assert all(i["overlap"] == "rows" for i in info)
        assert all(i["boundary_rows"] + i["interior_rows"] == i["n_own"] for i in info)
        if n_parts == 1:
            assert info[0]["boundary_rows"] == 0
        else:  # communities: both kinds of rows in every shard
            assert all(0 < i["boundary_rows"] < i["n_own"] for i in info)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_rows_overlap_every_format_and_precision_bitwise(client, case, fmt, dtype):
    """Halo-order formats (BCSR: the halo gathered before the kernels) and any-order ones, each precision's
    storage (bfloat16 bits) and rounding at C -> B: the same C as the plain loop, bit for bit."""
    A, perm, Ap, B = case
    X = get(fmt).convert(Ap, precision(dtype))
    plan = make_plan(X, 2, perm=perm)
    with DistributedSpmm(plan, client, M=X, dtype=dtype) as ds:
        plain, rows = plain_then_rows(ds, plan, B, n=3)
        for p, r in zip(plain, rows):
            np.testing.assert_array_equal(r, p)
        assert all(i["format"] == fmt and i["dtype"] == dtype for i in ds.info)


def test_rows_overlap_history_fields(client, case):
    A, perm, Ap, B = case
    X = get("metcf").convert(Ap, precision("float32"))
    plan = make_plan(X, 2, perm=perm)
    with DistributedSpmm(plan, client, M=X, overlap="rows") as ds:
        assert ds.overlap == "rows"
        ds.iterate(3, parts_of(plan, B))
        batch = ds.history[-3:]
        for h in batch:
            assert h["overlap"] == "rows" and h["batched"]
            assert 0 <= h["boundary_ms"] <= h["kernel_ms"] and h["exposed_ms"] >= 0 and h["exchange_ms"] > 0
            for s in h["shards"]:
                assert s["overlap"] == "rows" and "+" in s["kernel"] and s["boundary_ms"] <= s["kernel_ms"]
                assert s["halo_bytes_recv"] == plan.remote_mask(s["shard"]).sum() * 4 * N_COLS
        ds.run()  # per call: two kernels one after the other, boundary_ms reported
        assert ds.history[-1]["boundary_ms"] is not None and not ds.history[-1]["batched"]


def test_rows_overlap_spot_rows_follow_the_split_order(client, case):
    """`CParts.rows` fetches rows of a C kept in the split's row order: the natural rows come back."""
    A, perm, Ap, B = case
    X = get("metcf").convert(Ap, precision("float32"))
    plan = make_plan(X, 3, perm=perm)
    with DistributedSpmm(plan, client, M=X, overlap="rows") as ds:
        parts = ds.iterate(2, parts_of(plan, B))
        C = parts.gather()
        pick = np.random.default_rng(0).choice(A.shape[0], 50, replace=False)
        np.testing.assert_array_equal(parts.rows(pick), C[pick])
        for k, C_k in enumerate(parts.parts()):
            np.testing.assert_array_equal(C_k, C[plan.shard_rows(k)])


def test_rows_overlap_shards_without_boundary_rows(client):
    """Block-diagonal A, shards on the blocks: nothing to send (the boundary kernel has no rows), no exchange."""
    rng = np.random.default_rng(4)
    A = sp.block_diag([sbm(160, 2, s) for s in range(2)], format="csr").astype(np.float32)
    X = get("metcf").convert(sp.csr_array(A), precision("float32"))
    plan = make_plan(X, 2)
    assert [int(m.sum()) for m in (plan.remote_mask(k) for k in range(2))] == [0, 0]
    B = rng.standard_normal((A.shape[0], N_COLS)).astype(np.float32)
    with DistributedSpmm(plan, client, M=X) as ds:
        plain, rows = plain_then_rows(ds, plan, B)
        for p, r in zip(plain, rows):
            np.testing.assert_array_equal(r, p)
        assert [i["boundary_rows"] for i in ds.info] == [0, 0]


def test_rows_overlap_shards_whose_rows_are_all_boundary(client):
    """Every row of each shard is read by the other one (row i reads row i +- 64): no interior rows.

        shard 0: rows 0..63    reads 64..127 (and itself)
        shard 1: rows 64..127  reads 0..63
    """
    n, rng = 128, np.random.default_rng(5)
    i = np.arange(n)
    A = sp.csr_array((np.ones(2 * n, np.float32) / 2, (np.r_[i, i], np.r_[i, (i + 64) % n])), shape=(n, n))
    X = get("csr").convert(A, precision("float32"))
    plan = make_plan(X, 2)
    B = rng.standard_normal((n, N_COLS)).astype(np.float32)
    with DistributedSpmm(plan, client, M=X) as ds:
        plain, rows = plain_then_rows(ds, plan, B)
        for p, r in zip(plain, rows):
            np.testing.assert_array_equal(r, p)
        assert [(i["boundary_rows"], i["interior_rows"]) for i in ds.info] == [(64, 0), (64, 0)]


def test_rows_overlap_uneven_and_empty_shards(client):
    """40 rows = 3 windows over 4 shards: one shard owns nothing; the others 16, 16 and 8 rows."""
    rng = np.random.default_rng(6)
    A = sp.random(40, 40, density=0.1, format="csr", random_state=7, dtype=np.float32)
    X = get("tiledcsr").convert(A, precision("float32"))
    plan = make_plan(X, 4)
    assert sorted(plan.n_rows.tolist()) == [0, 8, 16, 16]
    B = rng.standard_normal((40, N_COLS)).astype(np.float32)
    with DistributedSpmm(plan, client, M=X) as ds:
        assert_rows_equal_plain_and_a3b(ds, plan, A, B)


def test_rows_overlap_switches_with_the_column_overlap(client, case):
    """rows -> columns -> off -> rows on one instance: every switch continues the same power iteration (a C left in
    the split's row order is advanced in that order)."""
    A, perm, Ap, B = case
    X = get("metcf").convert(Ap, precision("float32"))
    plan = make_plan(X, 2, perm=perm)
    A64 = A.astype(np.float64)
    with DistributedSpmm(plan, client, M=X, overlap=True) as ds:
        assert ds.overlap == OVERLAP_DEFAULT == "rows"
        want = B.astype(np.float64)
        C = ds.iterate(2, parts_of(plan, B)).gather()
        want = A64 @ (A64 @ want)
        for mode in ("columns", False, "rows"):
            ds.set_overlap(mode)
            C = ds.step(2).gather()
            want = A64 @ (A64 @ want)
            np.testing.assert_allclose(C, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
            assert ds.history[-1]["overlap"] == mode


@pytest.mark.parametrize("bad", ["row", "yes", 1, 0.5])
def test_overlap_mode_rejects_bad_values(bad):
    with pytest.raises(ValueError, match="overlap is .* expected 'rows', 'columns'") as err:
        overlap_mode(bad)
    assert "\n" not in str(err.value)


def test_overlap_mode_values():
    assert overlap_mode(True) == OVERLAP_DEFAULT and overlap_mode(np.bool_(True)) == OVERLAP_DEFAULT
    assert overlap_mode(False) is False and overlap_mode(None) is False
    assert overlap_mode("rows") == "rows" and overlap_mode("columns") == "columns"


def test_row_split_order_and_store():
    """The split order: boundary rows (union of the sends) ascending, then the interior rows; C in that order goes
    back to the natural order in `natural` and into B's own rows in `store`, each part separately or all at once.

        sends: peer 1 <- rows [5, 2], peer 2 <- rows [2, 7]  =>  rows = [2, 5, 7 | 0, 1, 3, 4, 6]
    """
    A = sp.random(8, 20, density=0.3, format="csr", random_state=1, dtype=np.float32)
    prec = precision("float16")
    S = get("metcf").convert(A, prec)
    split = RowSplit(S, {1: np.array([5, 2]), 2: np.array([2, 7])}, prec, on_gpu=False)
    assert split.n_bnd == 3 and split.rows.tolist() == [2, 5, 7, 0, 1, 3, 4, 6]
    assert np.array_equal(split.rows[split.pos], np.arange(8))
    B = prec.to_storage(np.random.default_rng(0).standard_normal((20, 3)).astype(np.float32))
    C = np.empty((8, 3), np.float32)
    split.run("boundary", B, C)
    split.run("interior", B, C)
    ref = get("metcf").reference_spmm(S, prec.to_float32(B).astype(np.float64), prec).astype(np.float32)
    np.testing.assert_array_equal(split.natural(C), ref)
    own = np.zeros((8, 3), prec.storage_dtype)
    split.store(own, C, "boundary")
    assert np.all(own[[0, 1, 3, 4, 6]] == 0) and np.array_equal(own[[2, 5, 7]], prec.to_storage(ref[[2, 5, 7]]))
    split.store(own, C, "interior")
    np.testing.assert_array_equal(own, prec.to_storage(ref))
    own2 = np.zeros_like(own)
    split.store(own2, C)
    np.testing.assert_array_equal(own2, own)
