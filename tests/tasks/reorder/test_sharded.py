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
