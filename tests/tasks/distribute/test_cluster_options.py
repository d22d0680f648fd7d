"""dask-cuda options as users set them (tasks.distribute.cluster.gpu_cluster_options): the comm protocol and the
RMM pool, from arguments or the environment, one-line errors for bad values; CPU clusters take the protocol too."""
from __future__ import annotations

import pytest

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
