"""`SddmmPlan.run`'s per-call path on the GPU: repeated calls on the same A and B go through the route's bound
launches (`kernels.sddmm.SddmmCall`), with the caller's ``out`` a replayed CUDA graph from the 3rd call, without it
a new output each call; every result bitwise the route's unbound run, no result overwritten by a later call."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)

from kernel_cases import random_csr  # noqa: E402
from kernels.calls import AUTO_GRAPH_AFTER, MAX_BOUND_CALLS  # noqa: E402
from kernels.sddmm import SddmmPlan  # noqa: E402

ROUTES = [("csr", "csr"), ("cvse", "cvse")]  # (format, kernel)
PRECISIONS = ("float32", "float16", "bfloat16")


def s_matrix():
    """Rectangular, empty rows (40-55), a hub row, S's values not all one (the CSR route scales)."""
    S = sp.lil_array(random_csr((203, 170), 2500, seed=4), dtype=np.float32)
    S[40:56, :] = 0
    S[7, :150] = 1.5
    return sp.csr_array(S)


def operands(S, Kd, p, seed):
    rng = np.random.default_rng(seed)
    return [cupy.asarray(p.to_storage(rng.standard_normal((rows, Kd)).astype(np.float32))) for rows in S.shape]


@pytest.fixture(params=[(*route, dtype) for route in ROUTES for dtype in PRECISIONS],
                ids=lambda r: "-".join(r[1:]))
def routed(request):
    """(S, a plan of one route in one precision, the route)."""
    fmt, kernel, dtype = request.param
    S = s_matrix()
    return S, SddmmPlan(S, dtype=dtype, format=fmt, kernel=kernel, device="gpu"), kernel


def test_bound_calls_without_out_are_fresh_and_bitwise_the_unbound_run(routed):
    S, plan, kernel = routed
    A1, B = operands(S, 64, plan.precision, 1)
    A2, _ = operands(S, 64, plan.precision, 2)
    dev = plan._dev[kernel]
    want1, want2 = cupy.asnumpy(dev.run(A1, B)), cupy.asnumpy(dev.run(A2, B))
    got = [plan.run(A1, B), plan.run(A2, B), plan.run(A1, B), plan.run(A1, B)]
    assert len(plan._calls) == 2  # (A1, B) and (A2, B), each bound once
    assert len({r.data.ptr for r in got}) == len(got)  # a new output each call: no result overwritten
    for r, want in zip(got, (want1, want2, want1, want1)):
        np.testing.assert_array_equal(cupy.asnumpy(r), want)


def test_bound_calls_into_out_replay_a_graph(routed):
    S, plan, kernel = routed
    A, B = operands(S, 96, plan.precision, 3)
    want = cupy.asnumpy(plan._dev[kernel].run(A, B))
    out = cupy.full(plan.nnz, np.nan, dtype=cupy.float32)
    for i in range(AUTO_GRAPH_AFTER + 2):
        out.fill(np.nan)
        assert plan.run(A, B, out=out) is out
        np.testing.assert_array_equal(cupy.asnumpy(out), want, err_msg=f"call {i}")
    call = next(iter(plan._calls.values()))
    assert call.fixed is not None and call.fixed.graph is not None


@pytest.mark.parametrize("fmt, kernel", ROUTES)
def test_converted_operands_are_not_bound(fmt, kernel):
    """float32 or strided operands of a float16 plan are converted per call: nothing is bound on them (a binding
    would hold a copy that the next call does not refill), and the result is the converted run's."""
    S = s_matrix()
    plan = SddmmPlan(S, dtype="float16", format=fmt, kernel=kernel, device="gpu")
    rng = np.random.default_rng(5)
    A32 = cupy.asarray(rng.standard_normal((S.shape[0], 64)).astype(np.float32))
    B32 = cupy.asarray(rng.standard_normal((S.shape[1], 64)).astype(np.float32))
    want = cupy.asnumpy(plan._dev[kernel].run(plan.precision.to_storage(A32), plan.precision.to_storage(B32)))
    wide = cupy.zeros((S.shape[0], 128), dtype=cupy.float16)
    wide[:, ::2] = plan.precision.to_storage(A32)
    for A in (A32, wide[:, ::2]):
        for _ in range(3):
            np.testing.assert_array_equal(cupy.asnumpy(plan.run(A, B32)), want)
    assert not plan._calls


def test_bound_calls_are_capped():
    S = s_matrix()
    plan = SddmmPlan(S, dtype="float16", format="csr", kernel="csr", device="gpu")
    A, B = operands(S, 32, plan.precision, 6)
    outs = [cupy.empty(plan.nnz, dtype=cupy.float32) for _ in range(MAX_BOUND_CALLS + 2)]
    for out in outs:
        plan.run(A, B, out=out)
    assert len(plan._calls) == MAX_BOUND_CALLS
    want = cupy.asnumpy(outs[0])
    for out in outs:
        np.testing.assert_array_equal(cupy.asnumpy(out), want)
