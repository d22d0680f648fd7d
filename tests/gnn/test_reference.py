"""The NumPy twins of the GNN pieces (gnn.norm, gnn.reference) against dense float64 formulas. No torch needed:
these run in CI with the base install."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from gnn import reference as ref
from gnn.norm import gcn_norm, with_self_loops


def random_graph(n=7, nnz=20, seed=0, empty_rows=(2,)):
    """7 nodes, random directed edges, row 2 without in-edges (an isolated destination)."""
    rng = np.random.default_rng(seed)
    r, c = rng.integers(0, n, nnz), rng.integers(0, n, nnz)
    keep = ~np.isin(r, empty_rows)
    A = sp.csr_array((rng.random(keep.sum()) + 0.5, (r[keep], c[keep])), shape=(n, n))
    A.sum_duplicates()
    return A


def test_gcn_norm_matches_the_dense_formula():
    A = random_graph()
    A[0, 0] = 3.0  # an existing loop keeps its weight; the others get weight 1 (PyG's add_remaining_self_loops)
    D = A.toarray()
    missing = np.flatnonzero(D.diagonal() == 0)
    D[missing, missing] = 1.0
    inv = 1 / np.sqrt(D.sum(1))
    np.testing.assert_allclose(gcn_norm(A, dtype=np.float64).toarray(), inv[:, None] * D * inv[None, :],
                               rtol=1e-12)


def test_gcn_norm_without_loops_gives_isolated_nodes_a_zero_row():
    #   row 2 has no entries and no loop is added: degree 0 -> factor 0, not inf
    A = random_graph()
    N = gcn_norm(A, add_self_loops=False, dtype=np.float64)
    assert np.isfinite(N.data).all() and N[[2]].nnz == 0
    had = A.diagonal() != 0
    loops = with_self_loops(A).diagonal()
    np.testing.assert_array_equal(loops[had], A.diagonal()[had])
    assert (loops[~had] == 1.0).all()
    A = sp.csr_array(A.toarray())
    A[3, 3] = 0.0  # an explicit zero loop (SciPy stores the assigned zero) is a loop: kept, not filled
    assert with_self_loops(A).diagonal()[3] == 0.0
    stored_loops = int((ref.edge_rows(A.indptr) == A.indices).sum())
    assert with_self_loops(A).nnz == A.nnz + 7 - stored_loops


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gcn_norm_of_a_symmetric_adjacency_is_symmetric_bit_for_bit(dtype):
    """So that gnn.SparseOp finds A == A.T and its backward reuses the forward's plan (scaling an edge by its two
    ends' factors in different orders rounded some of them apart: the A.T plan was built as well)."""
    rng = np.random.default_rng(3)
    A = sp.random_array((400, 400), density=0.03, rng=rng, format="csr") * 7.3
    A = sp.csr_array(A + A.T)
    N = gcn_norm(A, dtype=dtype)
    assert N.dtype == dtype and (N != N.T).nnz == 0
    D = N.toarray()
    assert np.array_equal(D.view(np.uint64 if dtype == np.float64 else np.uint32),
                          D.T.view(np.uint64 if dtype == np.float64 else np.uint32))


def test_gcn_norm_refuses_a_rectangular_matrix():
    with pytest.raises(Exception, match="expected a square matrix"):
        gcn_norm(sp.csr_array(np.ones((2, 3))))


def test_sddmm_reads_the_sampled_product_in_csr_order():
    A = random_graph(n=9, nnz=40, seed=1)
    rng = np.random.default_rng(1)
    U, V = rng.standard_normal((9, 5)), rng.standard_normal((9, 5))
    dense = (U @ V.T) * (A.toarray() != 0)
    got = sp.csr_array((ref.sddmm(A.indptr, A.indices, U, V), A.indices, A.indptr), shape=A.shape)
    np.testing.assert_allclose(got.toarray(), dense, rtol=1e-12, atol=1e-12)


def test_edge_softmax_rows_sum_to_one_and_match_dense():
    A = random_graph(n=7, nnz=30, seed=2)
    e = np.random.default_rng(2).standard_normal((A.nnz, 3)) * 10  # large logits: the max shift matters
    alpha = ref.edge_softmax(A.indptr, e)
    for h in range(3):
        M = np.full(A.shape, -np.inf)
        M[tuple(np.stack([ref.edge_rows(A.indptr), A.indices]))] = e[:, h]
        with np.errstate(invalid="ignore"):
            dense = np.exp(M - M.max(1, keepdims=True))
            dense /= dense.sum(1, keepdims=True)
        got = sp.csr_array((alpha[:, h], A.indices, A.indptr), shape=A.shape).toarray()
        mask = A.toarray() != 0
        np.testing.assert_allclose(got[mask], dense[mask], rtol=1e-12)
    sums = np.add.reduceat(alpha, A.indptr[:-1][np.diff(A.indptr) > 0], axis=0)
    np.testing.assert_allclose(sums, 1.0, rtol=1e-12)


def test_edge_softmax_backward_matches_finite_differences():
    A = random_graph(n=6, nnz=18, seed=3)
    rng = np.random.default_rng(3)
    e, g = rng.standard_normal(A.nnz), rng.standard_normal(A.nnz)
    analytic = ref.edge_softmax_backward(A.indptr, ref.edge_softmax(A.indptr, e), g)
    eps, numeric = 1e-6, np.empty(A.nnz)
    for k in range(A.nnz):
        d = np.zeros(A.nnz)
        d[k] = eps
        numeric[k] = g @ (ref.edge_softmax(A.indptr, e + d) - ref.edge_softmax(A.indptr, e - d)) / (2 * eps)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-9)


def test_transpose_order_maps_values_of_a_onto_a_transposed():
    A = random_graph(n=8, nnz=30, seed=4)
    A = sp.csr_array(A[:, :5])  # rectangular, 8 x 5
    indptr, indices, order = ref.transpose_order(A.indptr, A.indices, A.shape)
    T = sp.csr_array((A.data[order], indices, indptr), shape=(5, 8))
    np.testing.assert_array_equal(T.toarray(), A.toarray().T)


def test_pieces_on_an_empty_pattern():
    A = sp.csr_array((4, 4))
    assert ref.sddmm(A.indptr, A.indices, np.ones((4, 2)), np.ones((4, 2))).shape == (0,)
    assert ref.edge_softmax(A.indptr, np.empty(0)).shape == (0,)
    assert ref.transpose_order(A.indptr, A.indices, A.shape)[2].shape == (0,)


def test_gat_reference_equals_dense_attention():
    A = with_self_loops(random_graph(n=7, nnz=20, seed=5))
    rng = np.random.default_rng(5)
    X, W = rng.standard_normal((7, 4)), rng.standard_normal((2 * 3, 4))
    a_s, a_d = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    out = ref.gat_layer(A.indptr, A.indices, X, W, a_s, a_d, heads=2)
    H = (X @ W.T).reshape(7, 2, 3)
    mask = A.toarray() != 0
    for h in range(2):
        s = H[:, h] @ a_d[h]
        t = H[:, h] @ a_s[h]
        logits = s[:, None] + t[None, :]
        logits = np.where(logits > 0, logits, 0.2 * logits)
        logits = np.where(mask, logits, -np.inf)
        P = np.exp(logits - logits.max(1, keepdims=True))
        P /= P.sum(1, keepdims=True)
        np.testing.assert_allclose(out[:, h * 3:(h + 1) * 3], P @ H[:, h], rtol=1e-10, atol=1e-12)
