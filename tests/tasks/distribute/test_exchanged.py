"""tasks/distribute/exchanged.py on a 2-process CPU LocalCluster: the one-shot that reads B once (each worker its own
rows, the halo by the exchange) gives C within the precision's contract, in the store, read back in the original
row order; each worker read only its share of B; bad inputs fail in one line and leave no result."""
from __future__ import annotations

import uuid

import numpy as np
import pytest
import scipy.sparse as sp

from configs.errors import InputError
from kernels.formats import get
from kernels.precision import precision
from storage import BlockStore
from tasks.distribute import make_plan, persist_plan
from tasks.distribute.direct import b_artifact, read_c, store_b
from tasks.distribute.exchanged import run_oneshot_exchanged

TOL = {"float32": 1e-5, "float16": 1e-2, "bfloat16": 3e-2}  # as test_direct.py: the precisions' contracts


def stored(tmp_path, A, perm, B, fmt, dtype, n_parts=2):
    M = get(fmt).convert(sp.csr_array(A[perm]), precision(dtype))
    plan = make_plan(M, n_parts, perm=perm)
    mstore = BlockStore(tmp_path).matrix("m")
    persist_plan(M, plan, mstore, f"k-{dtype}")
    return plan, mstore, store_b(mstore, B, b_artifact(B.shape[1], 0))["artifact"]


@pytest.mark.parametrize("fmt,dtype", [("metcf", "float32"), ("cvse", "float16"), ("bcsr", "bfloat16")])
def test_b_read_once_and_the_halo_exchanged(cpu_client, square_case, tmp_path, fmt, dtype):
    A, perm, B, ref = square_case
    client = cpu_client
    plan, mstore, b = stored(tmp_path, A, perm, B, fmt, dtype)
    run_id = uuid.uuid4().hex[:12]
    timings = run_oneshot_exchanged(plan, client, mstore, b=b, perm_key=f"k-{dtype}", fmt=fmt, run_id=run_id,
                                    dtype=dtype)
    C = read_c(mstore, run_id, perm)
    err = float(np.linalg.norm(C - ref) / np.linalg.norm(ref))
    assert err < TOL[dtype], err
    assert [t["shard"] for t in timings] == [0, 1]
    own = (plan.row_stop - plan.row_start).tolist()
    assert [t["b_rows"] for t in timings] == own and sum(own) == A.shape[0]  # each read its share, B read once
    for t in timings:
        assert t["halo_rows"] > 0 and t["transport"] == "dask" and t["c_bytes_written"] > 0
        for key in ("setup_ms", "load_ms", "plan_ms", "b_ms", "b_wait_ms", "h2d_ms", "exchange_ms", "kernel_ms", "d2h_ms",
                    "write_ms", "wall_ms", "commit_ms"):
            assert t[key] >= 0.0, key
        parts = t["setup_parts"]  # the setup split: actors (shard load, plan), peers and info, the transport
        assert set(parts) == {"actors_ms", "peers_ms", "transport_ms"} and min(parts.values()) >= 0.0
        assert sum(parts.values()) <= t["setup_ms"] + 1.0
    entry = mstore.manifest.entry(f"results/{run_id}")
    assert entry["meta"]["source"]["b_read"] == "own rows, halo exchanged"


def test_bad_inputs_fail_in_one_line_and_leave_no_result(cpu_client, square_case, tmp_path):
    A, perm, B, _ = square_case
    client = cpu_client
    plan, mstore, b = stored(tmp_path, A, perm, B, "metcf", "float32")
    short = store_b(mstore, B[:-1], b_artifact(12, 1))["artifact"]
    with pytest.raises(InputError, match=f"stored B {short} has 332 rows, expected A's 333 columns"):
        run_oneshot_exchanged(plan, client, mstore, b=short, perm_key="k-float32", run_id="r1")
    with pytest.raises(Exception):  # shards never persisted under this key: the actors cannot load them
        run_oneshot_exchanged(plan, client, mstore, b=b, perm_key="k-missing", run_id="r2")
    assert not (mstore.folder / "results" / "r2").exists() and mstore.manifest.entry("results/r2") is None
    rect = sp.csr_array(sp.random(333, 200, density=0.03, random_state=5, format="csr", dtype=np.float32))
    plan_r = make_plan(get("metcf").convert(rect, precision("float32")), 2)
    with pytest.raises(InputError, match="needs a square A"):
        run_oneshot_exchanged(plan_r, client, mstore, b=b, perm_key="k-float32", run_id="r3")


def test_load_b_takes_the_prefetched_rows_only_when_they_are_the_same(monkeypatch):
    """`ShardActor.load_B` waits for the read started at setup (``prefetch``) when the artifact and rows match, and
    reads anew otherwise; either way the prefetch is used at most once."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from tasks.distribute import shard_actor as sa

    reads = []

    def read(b, rows):
        reads.append((b.artifact, np.asarray(rows).tolist()))
        return np.full((len(rows), 2), len(reads), np.float32), 8, 1.0

    monkeypatch.setattr(sa, "read_own_rows", read)
    actor = sa.ShardActor.__new__(sa.ShardActor)  # no shard: only what load_B touches
    actor.k, actor.on_gpu, uploaded = 0, False, []
    actor.set_B = uploaded.append
    ref = SimpleNamespace(artifact="B-a")

    def prefetched(rows):
        fut = Future()
        fut.set_result(read(ref, rows))
        return ("B-a", np.asarray(rows), fut)

    actor._b_prefetch = prefetched([3, 1])
    t = actor.load_B(ref, [3, 1])
    assert len(reads) == 1 and uploaded[-1][0, 0] == 1 and t["b_rows"] == 2 and t["b_wait_ms"] >= 0
    assert actor._b_prefetch is None
    actor.load_B(ref, [3, 1])  # no prefetch left: read
    actor._b_prefetch = prefetched([3, 1])
    actor.load_B(ref, [1, 3])  # other rows: read anew
    actor._b_prefetch = prefetched([3, 1])
    actor.load_B(SimpleNamespace(artifact="B-b"), [3, 1])  # another B: read anew
    # reads: prefetch 1 (taken), the read without prefetch, prefetch 2, the other rows, prefetch 3, the other B
    assert [r[1] for r in reads] == [[3, 1], [3, 1], [3, 1], [1, 3], [3, 1], [3, 1]] and reads[-1][0] == "B-b"
