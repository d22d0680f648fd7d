"""Shared by the multi-GPU tests: `cluster_watch`, so that a worker lost in one test is reported by that test (with
the nanny's reason in the log) instead of failing the tests after it, which start only when the cluster is whole.
Shared by the one-shot tests on CPU workers: `cpu_client` (a 2-process CPU LocalCluster per module) and
`square_case` (a small square A, a random row order, B and the float64 product)."""
from __future__ import annotations

import numpy as np
import pytest

WHOLE_TIMEOUT_S = 120  # a nanny restarts a dead worker in seconds; CUDA and the RMM pool take a few more
IDLE_TIMEOUT_S = 30  # a task of nothing must finish on every worker within this before the next test


def _dump_stacks() -> None:
    import faulthandler
    import sys
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)


def stuck_workers(client) -> list[str]:
    """Workers on which a trivial task does not finish within IDLE_TIMEOUT_S (a task thread blocked in CUDA, NCCL
    or a lock, while the event loop still answers heartbeats); their thread stacks are written to their stderr."""
    from distributed import wait
    workers = sorted(workers_of(client))
    futures = {w: client.submit(int, 1, workers=[w], allow_other_workers=False, pure=False) for w in workers}
    try:
        wait(list(futures.values()), timeout=IDLE_TIMEOUT_S)
    except TimeoutError:  # distributed raises instead of returning what finished
        pass
    stuck = [w for w, f in futures.items() if not f.done()]
    if stuck:
        client.run(_dump_stacks, workers=stuck, on_error="ignore")
    for f in futures.values():
        f.cancel()
    return stuck


def workers_of(client) -> set[str]:
    return set(client.scheduler_info(n_workers=-1)["workers"])


@pytest.fixture
def cluster_watch(request):
    """For a test that uses ``client`` or ``address`` (module fixtures; others are left alone): waits until the
    cluster has its workers before the test, and fails the test's teardown naming the workers that left during it
    or that are still busy after it (`stuck_workers`; then the cluster is restarted)."""
    names = request.fixturenames
    if "client" in names:
        client, own = request.getfixturevalue("client"), None
    elif "address" in names:
        from distributed import Client
        client = own = Client(request.getfixturevalue("address"))
    else:
        yield
        return
    n = getattr(request.module, "N_GPUS", 2)
    try:
        client.wait_for_workers(n, timeout=WHOLE_TIMEOUT_S)
        before = workers_of(client)
        yield
        lost = sorted(before - workers_of(client))
        if lost:
            pytest.fail(f"worker(s) {', '.join(lost)} left the cluster during this test (see the nanny's log above)")
        stuck = stuck_workers(client)
        if stuck:
            client.restart(timeout=WHOLE_TIMEOUT_S)  # the next test starts on a whole, idle cluster
            pytest.fail(f"worker(s) {', '.join(stuck)} still busy {IDLE_TIMEOUT_S} s after this test (their "
                        "thread stacks are in the log above); the cluster was restarted")
    finally:
        if own is not None:
            own.close()


@pytest.fixture(scope="module")
def cpu_client():
    from tasks.distribute import cluster_client
    with cluster_client(n_workers=2, gpu=False) as c:
        yield c


@pytest.fixture(scope="module")
def square_case():
    """(A 333 x 333 float32 CSR of 3 % density, perm, B [333, 12], A @ B in float64)."""
    import scipy.sparse as sp
    rng = np.random.default_rng(3)
    n = 333
    A = sp.csr_array(sp.random(n, n, density=0.03, random_state=4, format="csr", dtype=np.float32))
    perm = rng.permutation(n)
    B = rng.standard_normal((n, 12)).astype(np.float32)
    return A, perm, B, A.astype(np.float64) @ B.astype(np.float64)
