"""kernels.calls.Call.set_io (a bound call re-pointed at new buffers, issue #33) and SpmmPlan.bind on the CPU path:
the re-pointing logic is host-only, so fake buffers (anything with ``.data.ptr``) and a fake bound launch test it
without a GPU; tests/kernels/test_gpu_host_path.py and tests/gnn/test_gpu_layers.py run the real ones."""
from __future__ import annotations

import types

import numpy as np
import pytest
import scipy.sparse as sp

from kernels import calls
from kernels.spmm import SpmmPlan


def buf(ptr):
    return types.SimpleNamespace(data=types.SimpleNamespace(ptr=ptr))


class FakeBound:
    def __init__(self):
        self.io, self.launches = [], 0

    def set_io(self, B, out):
        self.io.append((B.data.ptr, out.data.ptr))

    def __call__(self, stream_ptr):
        self.launches += 1


class FakeStream:
    ptr = 0
    capturing = False

    def is_capturing(self):
        return self.capturing


@pytest.fixture(autouse=True)
def stream(monkeypatch):
    """The current stream as kernels.calls sees it (no CuPy here); RETIRED emptied around each test."""
    s = FakeStream()
    monkeypatch.setattr(calls, "_current_stream", lambda: s)
    calls.RETIRED.clear()
    yield s
    calls.RETIRED.clear()


def test_set_io_repoints_once_per_move_and_keeps_each_pointer_pairs_graph():
    bound = FakeBound()
    call = calls.Call(bound, buf(20), {"kernel": "k"}, True, ptrs=(10, 20))
    call.graph, call.calls = "graph-10-20", 5  # as if captured on the first buffers
    call.set_io(buf(10), buf(20))  # same pointers: nothing to do
    assert bound.io == [] and call.graph == "graph-10-20" and call.rebinds == 0
    call.set_io(buf(11), buf(21))
    assert bound.io == [(11, 21)] and call.graph is None and call.calls == 0 and call.ret.data.ptr == 21
    call.calls = 1  # one call on the second buffers, no graph yet
    call.set_io(buf(10), buf(20))  # back to the first buffers: their graph replays again, no capture
    assert call.graph == "graph-10-20" and call.calls == 5 and call.rebinds == 2
    assert call.kept == {(11, 21): (None, 1)}
    call.set_io(buf(11), buf(21))  # alternating pairs keep counting towards AUTO_GRAPH_AFTER each
    assert call.calls == 1 and call.graph is None
    assert call.kernel == "k"


def test_set_io_keeps_a_bounded_number_of_graphs():
    call = calls.Call(FakeBound(), buf(0), {"kernel": "k"}, True, ptrs=(0, 0))
    for i in range(1, calls.KEPT_GRAPHS + 4):
        call.graph = f"g{i - 1}"
        call.set_io(buf(i), buf(i))
    assert len(call.kept) == calls.KEPT_GRAPHS
    assert (1, 1) not in call.kept and (0, 0) not in call.kept  # the oldest went first


def test_graphs_let_go_of_inside_a_capture_wait_for_its_end(stream):
    """A graph pushed out of KEPT_GRAPHS while the caller's stream captures (torch.cuda.graph re-points a layer's
    products at its pool's buffers) is not destroyed then (cudaGraphExecDestroy would invalidate the capture): it
    waits in RETIRED and goes at the first call outside the capture; outside a capture nothing waits."""
    call = calls.Call(FakeBound(), buf(0), {"kernel": "k"}, False, ptrs=(0, 0))
    for i in range(1, calls.KEPT_GRAPHS + 1):
        call.graph = f"g{i - 1}"
        call.set_io(buf(i), buf(i))
    assert calls.RETIRED == []  # not capturing: the oldest graph went at once
    stream.capturing = True
    call.graph = "g-last"
    call.set_io(buf(99), buf(99))
    call.set_io(buf(98), buf(98))
    assert len(calls.RETIRED) == 2 and all(isinstance(r, tuple) for r in calls.RETIRED)
    call()  # inside the capture: launched, and the retired graphs stay
    assert len(calls.RETIRED) == 2 and call.bound.launches == 1
    stream.capturing = False
    call()
    assert calls.RETIRED == [] and call.bound.launches == 2


def test_cpu_plan_bind_writes_into_out_and_repoints():
    rng = np.random.default_rng(0)
    A = sp.random_array((7, 9), density=0.4, rng=rng, format="csr", dtype=np.float32)
    plan = SpmmPlan(A, device="cpu")
    B, out = rng.standard_normal((9, 5)).astype(np.float32), np.empty((7, 5), np.float32)
    call = plan.bind(B, out)
    assert call() is out and call.kernel == "cpu-csr"
    np.testing.assert_allclose(out, A @ B, rtol=1e-5, atol=1e-6)
    B2, out2 = 2 * B, np.empty_like(out)
    call.set_io(B2, out2)
    assert call() is out2 and call.rebinds == 1
    np.testing.assert_allclose(out2, 2 * out, rtol=1e-6)
    with pytest.raises(ValueError, match=r"expected \(9, N\)"):
        plan.bind(B[:8], out)
    with pytest.raises(TypeError, match="NumPy B and out"):
        plan.bind(B.tolist(), out)


def test_a_gathered_call_repoints_the_product_at_its_own_c_and_the_gather_at_out(monkeypatch):
    """kernels.calls.gathered: the product pointed at (B, C) when the call is made (the plan's call may have been
    re-pointed since its bind); set_io(B, out) re-points the product at (B, C), C fixed, and the gather at (C, out);
    one call launches the product, then the gather; an out off the gather's word alignment is refused."""
    import kernels.gather

    gather = FakeBound()
    monkeypatch.setattr(kernels.gather, "bind_rows", lambda C, index, out, bias=None: (gather, 16))
    product = FakeBound()
    order = []
    product.__class__ = type("P", (FakeBound,), {"__call__": lambda self, s: order.append("product")})
    gather.__class__ = type("G", (FakeBound,), {"__call__": lambda self, s: order.append("gather")})
    call = calls.gathered(calls.Call(product, buf(0x200), {"kernel": "k"}, False, ptrs=(0x100, 0x200)),
                          buf(0x100), buf(0x200), buf(0x300), buf(0x400))
    assert product.io == [(0x100, 0x200)]
    assert call().data.ptr == 0x400 and order == ["product", "gather"]
    call.set_io(buf(0x110), buf(0x500))
    assert product.io == [(0x100, 0x200), (0x110, 0x200)] and gather.io == [(0x200, 0x500)]
    assert call.ret.data.ptr == 0x500
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        call.set_io(buf(0x110), buf(0x508))
    assert call.kernel == "k"
