"""``overlap="auto"`` (tasks.distribute.overlap_choice): the resident loop's overlap decided from the partition's
halo alone, so the same partition always gets the same mode (and the same C). Pure functions of a `PartitionPlan`
here; on CPU workers the host transport keeps it off (below); benchmarks/multi_gpu.py records its pick per row
beside the modes it times on GPUs."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats import get
from kernels.precision import precision
from tasks.distribute import DistributedSpmm, cluster_client, make_plan
from tasks.distribute.overlap_choice import AUTO_BOUNDARY_MAX, AUTO_HALO_MAX, auto_overlap, halo_shape
from tasks.distribute.plan import exchange_lists
from tasks.distribute.synth import sbm_keys


def metcf(A):
    return get("metcf").convert(sp.csr_array(A), precision("float32"))


def plan_of(A, P):
    plan = make_plan(metcf(A), P)
    return plan, [exchange_lists(plan, k) for k in range(P)]


def communities(n=1600, blocks=4, seed=3):
    """SBM in natural order: shards follow the communities, few rows have a neighbour in another shard."""
    keys, _ = sbm_keys(np, n, blocks, 8.0, 0.05, seed)
    rows, cols = np.divmod(keys, n)
    return sp.csr_array((np.ones(rows.shape[0], np.float32), (rows, cols)), shape=(n, n))


def scattered(n=1600, degree=24, seed=5):
    """Random columns: every row of every shard is some peer's halo row."""
    A = sp.random_array((n, n), density=degree / n, rng=np.random.default_rng(seed), format="csr",
                        dtype=np.float32)
    return sp.csr_array(A + sp.eye_array(n, dtype=np.float32))


def test_communities_get_the_row_overlap():
    plan, layouts = plan_of(communities(), 2)
    boundary, halo = halo_shape(plan, layouts)
    assert boundary <= AUTO_BOUNDARY_MAX
    mode, reason = auto_overlap(plan, layouts, "nccl")
    assert mode == "rows" and "interior" in reason


def test_no_interior_but_a_halo_the_size_of_a_shard_gets_the_column_overlap():
    plan, layouts = plan_of(scattered(), 2)
    boundary, halo = halo_shape(plan, layouts)
    assert boundary > AUTO_BOUNDARY_MAX and halo <= AUTO_HALO_MAX  # each shard receives about the other's rows
    assert auto_overlap(plan, layouts, "nccl")[0] == "columns"


def test_a_halo_several_times_a_shard_gets_no_overlap():
    plan, layouts = plan_of(scattered(), 4)
    boundary, halo = halo_shape(plan, layouts)
    assert halo > AUTO_HALO_MAX  # three peers' rows per shard
    mode, reason = auto_overlap(plan, layouts, "nccl")
    assert mode is False and "outlast" in reason


def test_the_host_transport_and_one_shard_keep_it_off():
    plan, layouts = plan_of(communities(), 2)
    assert auto_overlap(plan, layouts, "dask")[0] is False
    one, lay1 = plan_of(communities(), 1)
    assert auto_overlap(one, lay1, "nccl") == (False, "one shard: nothing to exchange")


def test_halo_shape_counts_boundary_and_received_rows():
    """A 2-shard chain: shard 0 sends its last row, shard 1 its first; each receives one row."""
    n = 64
    A = sp.csr_array(sp.diags_array([np.ones(n - 1), np.ones(n), np.ones(n - 1)], offsets=[-1, 0, 1],
                                    dtype=np.float32))
    plan, layouts = plan_of(A, 2)
    own = int(plan.row_stop[0] - plan.row_start[0])
    assert halo_shape(plan, layouts) == pytest.approx((1 / own, 1 / own))


def test_distributed_spmm_auto_on_cpu_workers_is_off_and_says_why():
    with cluster_client(n_workers=2, gpu=False) as client:
        A = communities(n=400)
        M = metcf(A)
        plan = make_plan(M, 2)
        with DistributedSpmm(plan, client, M=M, overlap="auto") as ds:
            assert ds.transport == "dask" and ds.overlap is False
            assert "dask transport" in ds.overlap_reason and ds.auto_overlap() == (False, ds.overlap_reason)
            ds.set_overlap("rows")
            assert ds.overlap == "rows" and ds.overlap_reason == "asked for"


def test_a_bad_overlap_names_auto_among_the_choices():
    from tasks.distribute.resident import overlap_mode
    with pytest.raises(ValueError, match="overlap is 'Auto', expected .*'auto'"):
        overlap_mode("Auto")
