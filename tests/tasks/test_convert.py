"""ME-TCF conversion sharded over Dask workers equals the one-process conversion, array by array."""
import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats.metcf.container import csr_to_metcf, metcf_concat
from tasks.convert import convert_on_cluster


def _matrix():
    """333 x 500, a hub row and two empty windows (rows 32..63), float32 values."""
    A = sp.random(333, 500, density=0.03, format="lil", random_state=np.random.default_rng(5), dtype=np.float32)
    A[32:64] = 0
    A[7, ::2] = 1.5
    A = sp.csr_array(A)
    A.eliminate_zeros()
    return A


def _assert_same(M, ref):
    for field in dataclasses.fields(ref):
        a, b = getattr(M, field.name), getattr(ref, field.name)
        if field.name == "shape":
            assert tuple(a) == tuple(b)
        else:
            np.testing.assert_array_equal(a, b, err_msg=field.name)
            assert a.dtype == b.dtype, field.name


def test_concat_of_window_aligned_pieces_equals_one_conversion():
    A = _matrix()
    pieces = [csr_to_metcf(A[r0:r1]) for r0, r1 in ((0, 48), (48, 64), (64, 320), (320, 333))]
    _assert_same(metcf_concat(pieces), csr_to_metcf(A))


def test_concat_refuses_a_piece_that_splits_a_window():
    A = _matrix()
    with pytest.raises(ValueError, match="piece 0 has 40 rows, expected a multiple of 16"):
        metcf_concat([csr_to_metcf(A[:40]), csr_to_metcf(A[40:])])


def test_convert_on_cluster_equals_one_process():
    from distributed import Client, LocalCluster

    A = _matrix()
    with LocalCluster(n_workers=2, processes=False, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        M = convert_on_cluster(A, client, chunk_nnz=700)  # several blocks, the hub row's window alone
    _assert_same(M, csr_to_metcf(A))


def test_convert_stage_shards_large_matrices_over_the_flows_cluster(monkeypatch, data_root):
    from distributed import LocalCluster

    import tasks.convert
    from storage import BlockStore
    from tasks import stages
    from tasks.execute import load_format

    monkeypatch.setattr(tasks.convert, "SHARD_MIN_NNZ", 1)
    monkeypatch.setattr(tasks.convert, "CHUNK_NNZ", 5000)
    calls = []
    monkeypatch.setattr(tasks.convert, "convert_on_cluster",
                        lambda A, client, *args, **kw: calls.append(len(client.scheduler_info()["workers"]))
                        or convert_on_cluster(A, client, *args, chunk_nnz=5000))
    out = stages.ingest("gen:sbm?n=4000&blocks=40&p_in=0.05&p_out=0.0005&seed=3", str(data_root))
    order = stages.reorder(out["matrix_id"], "degree", str(data_root))
    with LocalCluster(n_workers=2, processes=False, threads_per_worker=1, dashboard_address=None) as cluster:
        conv = stages.convert(out["matrix_id"], order["perm_key"], str(data_root), fmt="metcf",
                              scheduler=cluster.scheduler_address)
    assert calls == [2]
    mstore = BlockStore(data_root).matrix(out["matrix_id"])
    A = mstore.read_csr()
    perm = mstore.read_perm(order["perm_key"])
    _assert_same(load_format(mstore, "metcf", conv["format_key"]), csr_to_metcf(A[perm].astype(np.float32)))
