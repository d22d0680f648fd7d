"""The GNN layers' per-epoch fixed cost, counted on the CPU (issue #33): gnn.products.PlanProduct on SpmmPlan's CPU
path, and gnn.gpu.GpuEngine's per-call logic run on that path (its CuPy stream scope and host sync swapped for
counters), through whole training epochs of the 2-layer GCN. What is counted per epoch after the first: plan
constructions, bindings, slow-path ``SpmmPlan.run`` calls, DLPack conversions, host syncs, kernel-output
allocations. tests/gnn/test_gpu_layers.py counts the same on CUDA."""
from __future__ import annotations

import contextlib
import gc

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch", reason="needs torch: pip install -e '.[gnn]'")

import gnn  # noqa: E402
import kernels.spmm  # noqa: E402
from gnn import layers  # noqa: E402
from gnn.gpu import GpuEngine  # noqa: E402
from gnn.models import GCN  # noqa: E402
from gnn.products import PlanProduct, array_view  # noqa: E402


def graph(n=37, deg=4, seed=0):
    """37 nodes (remainders against 16-row windows and 8-wide tiles), symmetric, rows 5..7 without edges."""
    rng = np.random.default_rng(seed)
    r, c = rng.integers(0, n, n * deg), rng.integers(0, n, n * deg)
    keep = ~np.isin(r, (5, 6, 7)) & ~np.isin(c, (5, 6, 7))
    A = sp.csr_array((np.ones(keep.sum()), (r[keep], c[keep])), shape=(n, n))
    A = sp.csr_array(((A + A.T) > 0).astype(np.float64))
    A.sort_indices()
    return A


def inverse_of(perm):
    inv = np.empty_like(perm)
    inv[perm] = np.arange(len(perm))
    return torch.from_numpy(inv)


@pytest.fixture
def counts(monkeypatch):
    """Counters of SpmmPlan constructions, bind and run calls."""
    n = {"plans": 0, "bind": 0, "run": 0}
    real_init, real_bind, real_run = kernels.spmm.SpmmPlan.__init__, kernels.spmm.SpmmPlan.bind, \
        kernels.spmm.SpmmPlan.run

    def init(self, *a, **kw):
        n["plans"] += 1
        real_init(self, *a, **kw)

    def bind(self, *a, **kw):
        n["bind"] += 1
        return real_bind(self, *a, **kw)

    def run(self, *a, **kw):
        n["run"] += 1
        return real_run(self, *a, **kw)

    monkeypatch.setattr(kernels.spmm.SpmmPlan, "__init__", init)
    monkeypatch.setattr(kernels.spmm.SpmmPlan, "bind", bind)
    monkeypatch.setattr(kernels.spmm.SpmmPlan, "run", run)
    return n


def test_a_product_binds_once_reuses_its_buffer_and_returns_fresh_outputs(counts):
    A = graph()
    perm = np.random.default_rng(1).permutation(A.shape[0])
    plan = kernels.spmm.SpmmPlan(sp.csr_array(A[perm], dtype=np.float32), device="cpu")
    X0 = torch.randn(37, 12)
    product = PlanProduct(plan, X0, inverse_of(perm))
    C_ptr, outs = product.C.data_ptr(), []
    for seed in range(4):  # a new X each call, as a layer gets per epoch
        X = torch.randn(37, 12, generator=torch.Generator().manual_seed(seed))
        out = product(X)
        np.testing.assert_allclose(out.numpy(), A @ X.double().numpy(), rtol=1e-5, atol=1e-5)
        outs.append((X, out.clone(), out))
    assert counts["bind"] == 1 and counts["run"] == 0 and product.binds == 1
    assert product.C.data_ptr() == C_ptr  # the kernel's output: one buffer, overwritten by every call
    assert len({o.data_ptr() for _, _, o in outs}) == len(outs)  # what is returned: fresh, held by its caller
    for X, first, kept in outs:  # no later call wrote into an earlier call's output
        assert torch.equal(first, kept)
    assert product.rebinds >= 1 and product.calls == 4


def test_a_product_repoints_only_when_a_buffer_moves_and_repeats_bitwise():
    A = graph(seed=2)
    plan = kernels.spmm.SpmmPlan(sp.csr_array(A, dtype=np.float32), device="cpu")
    X = torch.randn(37, 8)
    product = PlanProduct(plan, X)  # unpermuted: the kernel writes the returned tensor itself
    first = product(X)
    rebinds = product.rebinds
    again = product(X)
    assert torch.equal(first, again)  # bitwise repeatable
    Y = X.clone()
    assert torch.equal(product(Y), first) and product.rebinds >= rebinds + 1  # moved X: re-pointed, same result
    np.testing.assert_allclose(first.numpy(), A @ X.double().numpy(), rtol=1e-5, atol=1e-5)


def test_array_view_shares_memory_on_the_cpu():
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    v = array_view(t)
    v[1, 2] = 42.0
    assert t[1, 2] == 42.0 and v.shape == (2, 3)
    b = torch.ones(3, dtype=torch.bfloat16)
    assert array_view(b).dtype == np.uint16 and array_view(b)[0] == 0x3F80  # bfloat16 1.0 as bits


def test_two_layers_on_one_graph_share_one_operator_dropped_with_the_graph(monkeypatch):
    built = []
    real = gnn.SparseOp.gcn.__func__

    def gcn(cls, *a, **kw):
        built.append(1)
        return real(cls, *a, **kw)

    monkeypatch.setattr(gnn.SparseOp, "gcn", classmethod(gcn))
    g = gnn.Graph("g", graph())
    model = GCN(6, 8, 3, dropout=0.0)
    model(torch.randn(37, 6), g)
    model(torch.randn(37, 6), g)
    assert len(built) == 1  # one SparseOp (so one set of plans) for both layers, over both calls
    assert model.conv1.propagation(g) is model.conv2.propagation(g)
    gat_a, gat_b = gnn.GATConv(6, 4, heads=2), gnn.GATConv(6, 4, heads=1)
    assert gat_a.pattern(g) is gat_b.pattern(g)  # A + I for every head count: one operator
    assert gat_a.pattern(g) is not model.conv1.propagation(g)  # a different operator of the same graph: its own
    assert gnn.GATConv(6, 4, heads=2, add_self_loops=False).pattern(g) is not gat_a.pattern(g)
    gid = id(g)
    del g
    gc.collect()
    assert gid not in layers._SHARED


class CountingEngine(GpuEngine):
    """GpuEngine on SpmmPlan's CPU path: the CuPy stream scope is empty and the host sync is counted."""

    def __init__(self, op):
        super().__init__(op, torch.device("cpu"))
        self.syncs = 0

    def _on_torch_stream(self):
        return contextlib.nullcontext()

    def _synchronize(self) -> None:
        self.syncs += 1


@pytest.fixture
def cpu_plans(monkeypatch):
    """SpmmPlan(device="gpu") built as device="cpu": the engine's plans run the CPU path."""
    real = kernels.spmm.SpmmPlan.__init__

    def init(self, A, *, device="auto", **kw):
        real(self, A, device="cpu", **kw)

    monkeypatch.setattr(kernels.spmm.SpmmPlan, "__init__", init)


def train(op, engine, epochs, adam_epochs, seed=0):
    """Epochs (``adam_epochs``: the fixture's loop) of the 2-layer GCN on ``op`` with its products through
    ``engine`` (None: SparseOp's own CPU path); the losses."""
    if engine is not None:
        op.matmul = lambda X, transpose=False, bias=None: engine.matmul(X.detach(), transpose, bias)
    torch.manual_seed(seed)
    n = op.shape[0]
    x, y = torch.randn(n, 16), torch.randint(0, 3, (n,))
    model = GCN(16, 8, 3, dropout=0.5)
    return [float(loss) for loss in adam_epochs(model, x, y, op, epochs)]


@pytest.mark.parametrize("symmetric", [True, False])
def test_epochs_after_the_first_build_bind_convert_and_sync_nothing(counts, cpu_plans, monkeypatch, symmetric,
                                                                   adam_epochs):
    A = graph(seed=3)
    if not symmetric:
        A = sp.csr_array(sp.triu(A, format="csr") + sp.eye_array(37))
    perm = np.random.default_rng(3).permutation(37)
    op = gnn.SparseOp.gcn(A, perm)
    engine = CountingEngine(op)
    dlpack = []
    monkeypatch.setattr(torch, "from_dlpack", lambda *a: dlpack.append(a) or pytest.fail("DLPack per call"))
    products = []
    real_init = PlanProduct.__init__

    def product_init(self, *a, **kw):
        products.append(self)
        real_init(self, *a, **kw)

    monkeypatch.setattr(PlanProduct, "__init__", product_init)
    train(op, engine, 1, adam_epochs)
    first = dict(counts, syncs=engine.syncs, products=len(products))
    # epoch 1: one plan (A's) when symmetric, else A's and A.T's; one product per (plan, N, direction): N = 8 and
    # 3, forward and backward apart also where they share A's plan (each then keeps its own buffers)
    assert first["plans"] == (1 if symmetric else 2) and first["bind"] == first["products"] == 4
    assert first["syncs"] == first["products"]  # each product's first call syncs (a CPU plan records no choice)
    ptrs = [p.C.data_ptr() for p in products]
    train(op, engine, 3, adam_epochs)
    assert counts["plans"] == first["plans"] and counts["bind"] == first["bind"]  # nothing built or bound
    assert counts["run"] == 0  # never the slow path
    assert engine.syncs == first["syncs"] and not dlpack
    assert len(products) == first["products"] and [p.C.data_ptr() for p in products] == ptrs  # buffers reused
    assert sum(p.calls for p in products) == 4 * 4  # 2 forward + 2 backward products per epoch


def test_the_engine_path_repeats_bitwise_and_follows_the_scipy_loss_curve(cpu_plans, adam_epochs):
    A = graph(seed=4)
    perm = np.random.default_rng(4).permutation(37)
    op_a, op_b, op_ref = (gnn.SparseOp.gcn(A, perm) for _ in range(3))
    a = train(op_a, CountingEngine(op_a), 6, adam_epochs)
    b = train(op_b, CountingEngine(op_b), 6, adam_epochs)
    ref = train(op_ref, None, 6, adam_epochs)  # scipy csr @ X in float32: another summation order
    assert a == b  # bitwise, epoch by epoch
    np.testing.assert_allclose(a, ref, rtol=1e-5)


def test_index_tensors_and_engines_are_kept_per_device(monkeypatch):
    # one index tensor per (name, device) however the device is named; one engine per CUDA device index, "cuda"
    # meaning the current device (engines stubbed: no GPU needed)
    op = gnn.SparseOp(graph())
    rows = op.index("rows", "cpu")
    assert op.index("rows", torch.device("cpu")) is rows and op.index("rows", rows.device) is rows
    assert np.array_equal(rows.numpy(), np.repeat(np.arange(37), np.diff(op.A.indptr)))
    made = []
    monkeypatch.setattr("gnn.gpu.GpuEngine", lambda op_, dev: made.append(dev) or ("engine", dev))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    e1 = op._engine("cuda")
    assert e1 == ("engine", torch.device("cuda", 1))
    assert op._engine(torch.device("cuda", 1)) is e1 and op._engine("cuda:1") is e1
    assert op._engine(torch.device("cuda", 0)) == ("engine", torch.device("cuda", 0))
    assert made == [torch.device("cuda", 1), torch.device("cuda", 0)]
