"""Torch autograd functions and layers on the CPU path, against float64 references: gradcheck on each function,
whole layers against gnn.reference and PyG's own layers (where PyG imports). Needs torch (the ``gnn`` extra)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch", reason="needs torch: pip install -e '.[gnn]'")

import gnn  # noqa: E402
from gnn import reference as ref  # noqa: E402
from gnn.norm import with_self_loops  # noqa: E402


def graph(n=9, nnz=30, seed=0):
    """9 nodes, ~30 random directed edges, row 4 without in-edges, values in [0.5, 1.5)."""
    rng = np.random.default_rng(seed)
    r, c = rng.integers(0, n, nnz), rng.integers(0, n, nnz)
    keep = r != 4
    A = sp.csr_array((rng.random(keep.sum()) + 0.5, (r[keep], c[keep])), shape=(n, n))
    A.sum_duplicates()
    return A


def op_with_perm(A, seed=0):
    return gnn.SparseOp(A, np.random.default_rng(seed).permutation(A.shape[0]))


def t64(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=torch.float64, generator=g).requires_grad_()


def test_spmm_gradcheck_with_a_permutation_and_a_directed_graph():
    op = op_with_perm(graph())
    assert not op.symmetric
    assert torch.autograd.gradcheck(lambda X: gnn.spmm(op, X), (t64(9, 3),))


def test_spmm_on_a_rectangular_matrix_and_its_values():
    A = sp.csr_array(graph()[:, :5])  # 9 x 5
    op = gnn.SparseOp(A)
    X = t64(5, 4)
    np.testing.assert_allclose(gnn.spmm(op, X).detach().numpy(), A @ X.detach().numpy(), rtol=1e-12)
    assert torch.autograd.gradcheck(lambda X: gnn.spmm(op, X), (X,))


def test_edge_spmm_gradcheck_in_values_and_features():
    op = op_with_perm(graph(seed=1), seed=1)
    assert torch.autograd.gradcheck(lambda v, X: gnn.edge_spmm(op, v, X), (t64(op.nnz, seed=2), t64(9, 3)))


def test_edge_spmm_with_heads_is_one_product_per_column_block_and_passes_gradcheck():
    """values [nnz, H]: head h's values weight X's columns h C .. (h + 1) C (C = 2 here); the values gradient is
    the per-head SDDMM; rectangular (9 x 5)."""
    A = sp.csr_array(graph(seed=3)[:, :5])
    op = gnn.SparseOp(A)
    v, X = t64(op.nnz, 3, seed=5), t64(5, 6, seed=6)
    got = gnn.edge_spmm(op, v, X).detach().numpy()
    for h in range(3):
        Ah = sp.csr_array((v.detach().numpy()[:, h], A.indices, A.indptr), shape=A.shape)
        np.testing.assert_allclose(got[:, 2 * h:2 * h + 2], Ah @ X.detach().numpy()[:, 2 * h:2 * h + 2], rtol=1e-12)
    assert torch.autograd.gradcheck(lambda v, X: gnn.edge_spmm(op, v, X), (v, X))
    with pytest.raises(ValueError, match=r"with H dividing X's 5 columns"):
        op.matmul_values(v.detach(), torch.zeros(5, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="split into the heads"):
        op.sddmm(torch.zeros(9, 4), torch.zeros(5, 4), heads=3)


def test_edge_attention_with_heads_is_each_heads_softmax_and_passes_gradcheck():
    A = with_self_loops(graph(seed=4))
    op = gnn.SparseOp(A)
    d, s = t64(9, 2, seed=7), t64(9, 2, seed=8)
    got = gnn.edge_attention(op, d, s, 0.2).detach().numpy()
    rows = ref.edge_rows(A.indptr)
    for h in range(2):
        e = ref.leaky_relu(d.detach().numpy()[rows, h] + s.detach().numpy()[A.indices, h], 0.2)
        np.testing.assert_allclose(got[:, h], ref.edge_softmax(A.indptr, e), rtol=1e-12)
    assert torch.autograd.gradcheck(lambda d, s: gnn.edge_attention(op, d, s, 0.2), (d, s))
    with pytest.raises(ValueError, match="gnn.edge_attention: d"):
        gnn.edge_attention(op, d, s[:, :1])
    with pytest.raises(ValueError, match="runs on one CUDA device"):  # the fused kernels' entry: CUDA only
        op.attention(d.detach(), s.detach(), 0.2)


def test_sddmm_gradcheck_and_value():
    op = gnn.SparseOp(graph(seed=2))
    U, V = t64(9, 4, seed=3), t64(9, 4, seed=4)
    expect = ref.sddmm(op.A.indptr, op.A.indices, U.detach().numpy(), V.detach().numpy())
    np.testing.assert_allclose(gnn.sddmm(op, U, V).detach().numpy(), expect, rtol=1e-12)
    assert torch.autograd.gradcheck(lambda U, V: gnn.sddmm(op, U, V), (U, V))


def test_edge_sum_is_the_rank_one_sddmm_with_row_and_column_sums_for_gradients():
    """GAT's logits: d[row] + s[col]; empty rows (row 4) and empty columns get zero gradients; rectangular."""
    A = sp.csr_array(graph(seed=2)[:, :6])  # 9 x 6: some columns without entries
    op = gnn.SparseOp(A)
    d, s = t64(9, seed=3), t64(6, seed=4)
    ones = torch.ones(9, 1, dtype=torch.float64)
    expect = gnn.sddmm(op, torch.cat([d.detach()[:, None], ones], 1), torch.cat([ones[:6], s.detach()[:, None]], 1))
    torch.testing.assert_close(gnn.edge_sum(op, d, s), expect, rtol=1e-15, atol=0)
    assert torch.autograd.gradcheck(lambda d, s: gnn.edge_sum(op, d, s), (d, s))
    g = t64(op.nnz, seed=5).detach()
    gd, gs = torch.autograd.grad(gnn.edge_sum(op, d, s), (d, s), g)
    csr = sp.csr_array((g.numpy(), A.indices, A.indptr), shape=A.shape)
    np.testing.assert_allclose(gd.numpy(), csr.sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(gs.numpy(), csr.sum(axis=0), rtol=1e-12)
    assert gd[4] == 0 and (gs[np.bincount(A.indices, minlength=6) == 0] == 0).all()
    g32 = gnn.edge_sum(op, d.detach().float().requires_grad_(), s.detach().half())
    assert g32.dtype == torch.float32  # promoted, as sddmm's
    with pytest.raises(ValueError, match=r"gnn.edge_sum: d \(6,\) and s \(9,\), expected \(9,\) and \(6,\)"):
        gnn.edge_sum(op, s, d)


def test_edge_softmax_gradcheck_matches_the_numpy_twin():
    op = gnn.SparseOp(graph(seed=3))
    e = t64(op.nnz, 2, seed=5)
    np.testing.assert_allclose(gnn.edge_softmax(op, e).detach().numpy(),
                               ref.edge_softmax(op.A.indptr, e.detach().numpy()), rtol=1e-12)
    assert torch.autograd.gradcheck(lambda e: gnn.edge_softmax(op, e), (e,))


def test_gcnconv_matches_the_reference_and_passes_gradcheck_in_its_parameters():
    A = graph(seed=4)
    conv = gnn.GCNConv(3, 2).double()
    with torch.no_grad():
        conv.bias.normal_()
    X = t64(9, 3, seed=6)
    expect = ref.gcn_layer(gnn.gcn_norm(A, dtype=np.float64), X.detach().numpy(), conv.lin.weight.detach().numpy(),
                           conv.bias.detach().numpy())
    np.testing.assert_allclose(conv(X, A).detach().numpy(), expect, rtol=1e-12)
    names = [n for n, _ in conv.named_parameters()]

    def f(X, *params):
        return torch.func.functional_call(conv, dict(zip(names, params)), (X, A))

    assert torch.autograd.gradcheck(f, (X, *[p.detach().clone().requires_grad_() for p in conv.parameters()]))


@pytest.mark.parametrize("concat", [True, False])
def test_gatconv_matches_the_reference_and_passes_gradcheck_in_its_parameters(concat):
    A = graph(seed=5)
    conv = gnn.GATConv(3, 2, heads=2, concat=concat).double()
    with torch.no_grad():
        conv.bias.normal_()
    X = t64(9, 3, seed=7)
    P = with_self_loops(A)
    expect = ref.gat_layer(P.indptr, P.indices, X.detach().numpy(), conv.lin.weight.detach().numpy(),
                           conv.att_src.detach().numpy()[0], conv.att_dst.detach().numpy()[0],
                           conv.bias.detach().numpy(), heads=2, concat=concat)
    np.testing.assert_allclose(conv(X, A).detach().numpy(), expect, rtol=1e-10, atol=1e-12)
    names = [n for n, _ in conv.named_parameters()]

    def f(X, *params):
        return torch.func.functional_call(conv, dict(zip(names, params)), (X, A))

    assert torch.autograd.gradcheck(f, (X, *[p.detach().clone().requires_grad_() for p in conv.parameters()]))


@pytest.mark.parametrize("bias", [True, False])
def test_linear_spmm_is_the_composition_bitwise_and_passes_gradcheck(bias):
    """gnn.linear_spmm (GCN's layer as one autograd node) against spmm(op, F.linear(X, W)) + b: the same float32
    bits forward and in every gradient (the same mm calls as torch's linear backward), with a row permutation and
    a rectangular A (9 x 5), first without an input gradient (a first layer) then with; gradcheck in float64;
    operands that do not chain raise."""
    A = sp.csr_array(graph(seed=7)[:, :5])
    op = gnn.SparseOp(A, np.random.default_rng(2).permutation(9))
    g = torch.Generator().manual_seed(3)
    X = torch.randn(5, 4, generator=g)
    W = torch.randn(6, 4, generator=g).requires_grad_()
    b = torch.randn(6, generator=g).requires_grad_() if bias else None
    up = torch.randn(9, 6, generator=g)
    for x_grad in (False, True):
        X.requires_grad_(x_grad)
        fused = gnn.linear_spmm(op, X, W, b)
        composed = gnn.spmm(op, torch.nn.functional.linear(X, W))
        composed = composed + b if bias else composed
        assert fused.dtype == torch.float32 and torch.equal(fused, composed)
        inputs = [t for t in (X, W, b) if t is not None and t.requires_grad]
        for a, e in zip(torch.autograd.grad(fused, inputs, up), torch.autograd.grad(composed, inputs, up)):
            assert torch.equal(a, e)
    X64, W64 = t64(5, 4, seed=8), t64(6, 4, seed=9)
    args = (X64, W64, t64(6, seed=10)) if bias else (X64, W64)
    assert torch.autograd.gradcheck(lambda *a: gnn.linear_spmm(op, *a), args)
    with pytest.raises(ValueError, match="do not chain"):
        gnn.linear_spmm(op, X, W.t())


def test_linear_spmm_under_cpu_autocast_saves_its_casts():
    """Under autocast the mm runs in autocast's dtype, as torch's linear would (the composition's bits), and the
    backward, which no CPU autocast context re-enters, multiplies the saved casts: gradients in each input's own
    dtype."""
    A = graph(seed=8)
    op = gnn.SparseOp(A)
    X = torch.randn(9, 4).requires_grad_()
    W = torch.randn(3, 4).requires_grad_()
    b = torch.randn(3).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused = gnn.linear_spmm(op, X, W, b)
        composed = gnn.spmm(op, torch.nn.functional.linear(X, W)) + b
    assert fused.dtype == composed.dtype == torch.float32 and torch.equal(fused, composed)
    grads = torch.autograd.grad(fused.sum(), (X, W, b))
    assert [t.dtype for t in grads] == [torch.float32] * 3
    for a, e in zip(grads, torch.autograd.grad(composed.sum(), (X, W, b))):
        assert torch.equal(a, e)


def test_layers_take_a_graph_cache_its_operator_and_keep_half_dtypes():
    A = graph(seed=6)
    g = gnn.Graph("g", A, perm=np.random.default_rng(0).permutation(9))
    conv = gnn.GCNConv(3, 4)
    x = torch.randn(9, 3)
    out = conv(x, g)
    op = conv.propagation(g)
    assert op is conv.propagation(g) and op.perm is g.perm  # built once, the graph's row order inside
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = conv.lin(x)
        propagated = gnn.spmm(op, h)
        half = conv(x, g)  # + the float32 bias: float32, as in PyG under autocast
        att = gnn.GATConv(3, 4, heads=2)(x, g)
    assert h.dtype == propagated.dtype == torch.bfloat16 and torch.isfinite(att).all()
    # bfloat16 keeps 8 bits of mantissa: relative error about 2**-8 per rounding, a few roundings deep
    np.testing.assert_allclose(half.float().detach().numpy(), out.detach().numpy(), rtol=0.05, atol=0.05)
    half.float().sum().backward()
    assert conv.lin.weight.grad.dtype == torch.float32


def test_a_normalised_variant_is_not_normalised_twice():
    A = graph(seed=7)
    N = gnn.gcn_norm(A)
    g = gnn.Graph("g.gcn", N, meta={"normalization": "gcn"})
    conv = gnn.GCNConv(3, 2).double()
    x = t64(9, 3)
    # the stored variant is float32 (like tasks.features.gcn_variant): 1e-6 relative to the values' scale
    np.testing.assert_allclose(conv(x, g).detach().numpy(), conv(x, A).detach().numpy(), rtol=1e-6, atol=1e-6)


# torch 2.11 notes once per process that sparse invariant checks are off when PyG's EdgeIndex path meets a sparse
# tensor built without an explicit choice; not ours to act on (gnn.to_torch_csr makes its choice)
@pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled:UserWarning")
def test_pyg_layers_agree_forward_and_backward():
    tg = pytest.importorskip("torch_geometric", reason="needs PyG: pip install -e '.[gnn]'")
    from torch_geometric.nn import GATConv as PygGAT
    from torch_geometric.nn import GCNConv as PygGCN

    A = graph(n=30, nnz=150, seed=8)
    g = gnn.Graph("g", A, perm=np.random.default_rng(1).permutation(30))
    data = gnn.to_pyg(g)
    x = torch.randn(30, 5, dtype=torch.float64)
    for ours, theirs, kw in ((gnn.GCNConv(5, 4), PygGCN(5, 4), {"edge_weight": data.edge_weight.double()}),
                             (gnn.GATConv(5, 3, heads=2), PygGAT(5, 3, heads=2), {})):
        ours, theirs = ours.double(), theirs.double()
        ours.load_state_dict({k: v for k, v in theirs.state_dict().items()})
        ei = data.edge_index.as_tensor() if hasattr(data.edge_index, "as_tensor") else data.edge_index
        a, b = ours(x, g), theirs(x, ei, **kw)
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)
        a.square().sum().backward()
        b.square().sum().backward()
        for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)
    assert tg.__version__


def test_fit_refuses_a_cuda_graph_on_the_cpu():
    from gnn.models import GCN, fit, split_masks

    A = graph(n=50, nnz=200, seed=9)
    with pytest.raises(ValueError, match="cuda_graph=True needs CUDA tensors"):
        fit(GCN(8, 8, 2), torch.randn(50, 8), torch.randint(0, 2, (50,)), gnn.Graph("g", A + A.T),
            split_masks(50, 0), epochs=1, cuda_graph=True)


def test_backward_skips_the_autocast_context_only_where_the_forward_had_none(monkeypatch):
    """gnn.functional's custom_bwd: without autocast in the forward (and none on in the backward's thread) the
    backward runs as written, no autocast context entered; a forward under autocast is tested on CUDA
    (tests/gnn/test_gpu_layers.py)."""
    from gnn import functional

    entered = []
    real = torch.amp.autocast_mode.autocast.__enter__
    monkeypatch.setattr(torch.amp.autocast_mode.autocast, "__enter__",
                        lambda self: entered.append(self) or real(self))
    A = sp.random_array((30, 30), density=0.2, random_state=1, format="csr", dtype=np.float64)
    op = gnn.SparseOp(A)
    X = torch.randn(30, 4, dtype=torch.float64, requires_grad=True)
    functional.spmm(op, X).sum().backward()
    assert not entered
    assert torch.allclose(X.grad, torch.from_numpy(A.T @ np.ones((30, 4))))
