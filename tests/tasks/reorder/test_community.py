"""Community ordering (label propagation): it must put a graph community's rows together, which shrinks the
halo a row partition over GPUs moves every resident iteration, where similarity orderings (TCA) cannot."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats.metcf.container import csr_to_metcf
from tasks.distribute import make_plan
from tasks.distribute.synth import relabel, sbm_keys
from tasks.reorder import reorder
from tasks.reorder.community import community_order, label_propagation_sorted


def sbm(n=6000, blocks=12, seed=1):
    """(shuffled SBM pattern, the shuffle q: node v has label q[v]); 24 neighbours, 2% of them across blocks."""
    keys, shape = sbm_keys(np, n, blocks, 23.5, 0.5, seed)
    q = np.random.default_rng(seed + 1).permutation(n)
    rows, cols = np.divmod(relabel(np, keys, shape, q), shape[1])
    return sp.csr_matrix((np.ones(rows.size, np.float32), (rows, cols)), shape=shape), q


def halo_mb(A, perm, P=2):
    plan = make_plan(csr_to_metcf(A[perm]), P, perm=perm)
    return plan.halo_bytes(256, remote_only=True).max() / 2**20


@pytest.mark.parametrize("P", [2, 4])
def test_recovers_communities_and_shrinks_the_halo(P):
    A, q = sbm()
    none, natural = halo_mb(A, np.arange(A.shape[0]), P), halo_mb(A, q.astype(np.int64), P)
    found = halo_mb(A, reorder(A, "community", seed=0), P)
    tca = halo_mb(A, reorder(A, "tca", seed=0), P)
    assert natural < 0.3 * none  # the generator's own order: the ideal
    assert found <= 1.1 * natural, (found, natural, none)
    assert tca > 2 * found  # row similarity does not see 500-node communities of degree 24


def test_sorted_variant_numpy_agrees_in_quality():
    """The GPU path's algorithm, run with NumPy: communities recovered as well (labels differ: other draws)."""
    A, q = sbm(seed=3)
    n = A.shape[0]
    rows = np.repeat(np.arange(n), np.diff(A.indptr))
    keep = rows != A.indices
    src = np.concatenate((rows[keep], A.indices[keep]))
    dst = np.concatenate((A.indices[keep], rows[keep]))
    labels = label_propagation_sorted(src, dst, n, xp=np, seed=0)
    perm = np.argsort(labels, kind="stable").astype(np.int64)
    assert halo_mb(A, perm) <= 1.1 * halo_mb(A, q.astype(np.int64))
    assert np.unique(labels).size <= 3 * 12  # about the 12 planted blocks, not thousands of fragments


def test_deterministic_rectangular_and_edge_cases():
    A, _ = sbm(2000, 8, seed=5)
    assert np.array_equal(community_order(A, seed=2), community_order(A, seed=2))
    R = sp.random(300, 1000, density=0.01, format="csr", random_state=1)  # bipartite graph: rows and columns
    perm = community_order(R)
    assert np.array_equal(np.sort(perm), np.arange(300))
    assert community_order(sp.csr_matrix((0, 5))).shape == (0,)
    assert np.array_equal(community_order(sp.csr_matrix((7, 7))), np.arange(7))  # no edges: input order
    with pytest.raises(ValueError, match="device"):
        community_order(A, device="tpu")


@pytest.mark.gpu
def test_gpu_path_recovers_communities():
    cupy = pytest.importorskip("cupy")
    if cupy.cuda.runtime.getDeviceCount() == 0:
        pytest.skip("needs a CUDA device")
    A, q = sbm(seed=7)
    perm = reorder(A, "community", device="gpu")
    assert np.array_equal(np.sort(perm), np.arange(A.shape[0]))
    assert halo_mb(A, perm) <= 1.1 * halo_mb(A, q.astype(np.int64))
    assert np.array_equal(perm, reorder(A, "community", device="gpu"))  # same seed, same order
