"""dask-cuda options as users set them (tasks.distribute.cluster.gpu_cluster_options): the comm protocol and the
RMM pool, from arguments or the environment, one-line errors for bad values; CPU clusters take the protocol too; and
the worker list a distributed run starts from (a reconnecting worker waited for)."""
from __future__ import annotations

import pytest

from configs.errors import InputError
from tasks.distribute import cluster
from tasks.distribute.cluster import gpu_cluster_options


def test_defaults_and_environment(monkeypatch):
    monkeypatch.setattr(cluster, "has_rmm", lambda: True)
    assert gpu_cluster_options(env={}) == {"protocol": "tcp", "rmm_pool_size": 0.5,
                                           "rmm_allocator_external_lib_list": ["cupy"]}
    opts = gpu_cluster_options(env={"TCSPMM_DASK_PROTOCOL": "UCX", "TCSPMM_RMM_POOL": "20GB"})
    assert opts["protocol"] == "ucx" and opts["rmm_pool_size"] == "20GB"
    assert gpu_cluster_options(env={"TCSPMM_RMM_POOL": "off"}) == {"protocol": "tcp"}
    assert gpu_cluster_options("ucx", "0", env={"TCSPMM_DASK_PROTOCOL": "tcp"}) == {"protocol": "ucx"}  # args win


def test_no_pool_where_rmm_is_missing(monkeypatch):
    monkeypatch.setattr(cluster, "has_rmm", lambda: False)
    assert gpu_cluster_options(env={}) == {"protocol": "tcp"}


@pytest.mark.parametrize("env, words", [({"TCSPMM_DASK_PROTOCOL": "mpi"}, "expected one of tcp, ucx"),
                                        ({"TCSPMM_RMM_POOL": "1.5"}, "expected a fraction in (0, 1)"),
                                        ({"TCSPMM_RMM_POOL": "0.0"}, "must lie in (0, 1)"),
                                        ({"TCSPMM_RMM_POOL": "lots"}, "expected a fraction")])
def test_bad_values_fail_in_one_line(env, words):
    with pytest.raises(ValueError) as err:
        gpu_cluster_options(env=env)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_cpu_cluster_checks_the_protocol_before_starting(monkeypatch):
    """A CPU cluster takes TCSPMM_DASK_PROTOCOL too: a bad one is refused before any process starts."""
    monkeypatch.setenv("TCSPMM_DASK_PROTOCOL", "carrier-pigeon")
    with pytest.raises(ValueError, match="TCSPMM_DASK_PROTOCOL"):
        cluster.make_cluster(1, gpu=False)


class _Client:
    """scheduler_info / wait_for_workers of a distributed.Client whose workers connect after ``arrive_after`` waits
    (None: never)."""

    def __init__(self, arrive_after):
        self.arrive_after, self.waits = arrive_after, []

    def scheduler_info(self, n_workers=5):
        here = self.arrive_after is not None and len(self.waits) >= self.arrive_after
        return {"workers": {"tcp://b:2": {}, "tcp://a:1": {}} if here else {}}

    def wait_for_workers(self, n_workers, timeout=None):
        self.waits.append((n_workers, timeout))
        if self.arrive_after is None:
            raise TimeoutError(f"Only 0 / {n_workers} workers arrived after {timeout}")


def test_workers_waits_for_a_reconnecting_worker_then_refuses_in_one_line():
    from tasks.distribute.oneshot import _workers

    assert _workers(_Client(0)) == ["tcp://a:1", "tcp://b:2"]  # connected: no wait
    late = _Client(1)
    assert _workers(late, wait_s=5) == ["tcp://a:1", "tcp://b:2"] and late.waits == [(1, 5)]
    with pytest.raises(InputError, match=r"the Dask cluster has no workers \(none connected within 5 s\)"):
        _workers(_Client(None), wait_s=5)
