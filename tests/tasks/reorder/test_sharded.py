"""TCA on Dask: the same permutation for 1, 2 and 4 workers, threads or processes, any block size."""
from __future__ import annotations

import numpy as np
import pytest

from tasks.reorder import reorder

distributed = pytest.importorskip("distributed")

CLUSTERS = [(1, False), (2, True), (4, False)]  # (n_workers, processes); one cluster each, reused by the module


@pytest.fixture(scope="module")
def clients():
    made = {}
    yield lambda n, proc: made.setdefault((n, proc), _client(n, proc))
    for cluster, client in made.values():
        client.close()
        cluster.close()


def _client(n, processes):
    cluster = distributed.LocalCluster(n_workers=n, processes=processes, threads_per_worker=1,
                                       dashboard_address=None)
    return cluster, distributed.Client(cluster, timeout=60)  # generous: startup is slow on a loaded 2-core box


@pytest.fixture(scope="module")
def matrix_and_ref():
    rng = np.random.default_rng(11)
    import scipy.sparse as sp
    n, deg, block = 5000, 8, 64
    r = rng.integers(0, n, n * deg)
    c = np.where(rng.random(r.size) < 0.9, (r // block) * block + rng.integers(0, block, r.size),
                 rng.integers(0, n, r.size))
    A = sp.csr_matrix((np.ones(r.size), (r, np.minimum(c, n - 1))), shape=(n, n))
    p = rng.permutation(n)
    A = sp.csr_matrix(A[p][:, p])
    A.sort_indices()
    return A, reorder(A, "tca", seed=5)


@pytest.mark.parametrize("n_workers,processes", CLUSTERS)
def test_same_perm_any_workers(clients, matrix_and_ref, n_workers, processes):
    A, ref = matrix_and_ref
    _, client = clients(n_workers, processes)
    perm = reorder(A, "tca", seed=5, client=client, block_rows=700, pair_shard=5000)
    assert np.array_equal(perm, ref)


def test_same_perm_other_blocks(clients, matrix_and_ref):
    A, ref = matrix_and_ref
    _, client = clients(4, False)
    assert np.array_equal(reorder(A, "tca", seed=5, client=client, block_rows=4999, pair_shard=123), ref)


@pytest.mark.parametrize("n_workers,processes", [(1, False), (2, True)])
def test_many_calls_on_one_client(clients, n_workers, processes):
    """Issue 17 item 7: the catalog flow and long-lived clusters reuse one client for many matrices and repeats.
    Content-hashed scatter keys made the 2nd call on the same matrix wait on data an earlier call had released
    ("lost dependencies"); every call must work and give the same permutation."""
    from tasks.fetch.generators import generate

    A = generate("longrow", "rows=3000&cols=6000&min_row_nnz=40&max_row_nnz=80&seed=2")
    _, client = clients(n_workers, processes)
    ref = reorder(A, "tca", seed=1)
    for _ in range(5):
        assert np.array_equal(reorder(A, "tca", seed=1, client=client, block_rows=500, pair_shard=20_000), ref)
    import time

    deadline = time.monotonic() + 30  # releases reach the scheduler asynchronously
    while client.who_has() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not client.who_has(), "calls must release what they scattered"
