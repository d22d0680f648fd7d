"""SpmmPlan's per-call path on the GPU: bound launches, automatic CUDA-graph replay, no allocation in steady state."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)

from cupy.cuda import memory_hook  # noqa: E402

from kernels.reference import csr_spmm  # noqa: E402
from kernels.spmm import AUTO_GRAPH_AFTER, SpmmPlan  # noqa: E402

TF32_RTOL = 1e-3  # as tests/kernels/test_gpu_spmm.py: TF32 operands, fp32 accumulation
KERNELS = ["metcf-window", "metcf-split", "metcf-balanced"]


def hub_csr(rng, n_rows=700, n_cols=500):
    """Random rows plus one hub row wider than a TC block and an empty window (rows 32-47)."""
    A = sp.random_array((n_rows, n_cols), density=0.02, format="lil", dtype=np.float32, rng=rng)
    A[3, :300] = rng.standard_normal(300).astype(np.float32)
    A[32:48, :] = 0
    return sp.csr_array(A)


class CountMallocs(memory_hook.MemoryHook):
    """Counts every allocation through CuPy's memory pool (and every pool miss) while active."""

    name = "CountMallocs"

    def __init__(self):
        self.mallocs = self.allocs = 0

    def malloc_preprocess(self, **kw):
        self.mallocs += 1

    def alloc_preprocess(self, **kw):
        self.allocs += 1


def rel_err(C, ref):
    return np.linalg.norm(C.astype(np.float64) - ref) / np.linalg.norm(ref)


def assert_steady_state_allocates_nothing(plan, A, label, **run_kw):
    """20 calls of plan.run on prepared buffers, after the decide / bind / capture calls, allocate nothing on the
    device (CuPy pool counters and a malloc hook) and return ``out``, within the precision's tolerance."""
    rng = np.random.default_rng(0)
    B = cupy.asarray(plan.precision.to_storage(rng.standard_normal((A.shape[1], 64)).astype(np.float32)))
    out = cupy.empty((A.shape[0], 64), dtype=plan.out_dtype)
    for _ in range(AUTO_GRAPH_AFTER + 2):  # decide and bind, launch, capture (graphs), replay
        plan.run(B, out, **run_kw)
    cupy.cuda.Device().synchronize()
    pool = cupy.get_default_memory_pool()
    used, total = pool.used_bytes(), pool.total_bytes()
    hook = CountMallocs()
    with hook:
        for _ in range(20):
            C = plan.run(B, out, **run_kw)
    cupy.cuda.Device().synchronize()
    assert C is out
    assert (hook.mallocs, hook.allocs) == (0, 0), label
    assert (pool.used_bytes(), pool.total_bytes()) == (used, total), label
    ref = csr_spmm(A, plan.precision.to_float32(cupy.asnumpy(B)).astype(np.float64))
    assert rel_err(plan.precision.to_float32(cupy.asnumpy(out)), ref) < plan.precision.tolerance, label


@pytest.mark.parametrize("graphs", [True, False])
@pytest.mark.parametrize("kernel,dtype,deterministic", [*((k, "float32", True) for k in KERNELS),
                                                        ("metcf-window", "float16", True),
                                                        ("metcf-split", "bfloat16", True),
                                                        ("cusparse", "float32", False)])
def test_steady_state_run_allocates_nothing(kernel, dtype, deterministic, graphs):
    A = hub_csr(np.random.default_rng(0))
    plan = SpmmPlan(A, device="gpu", dtype=dtype, format="metcf", deterministic=deterministic, autotune=False,
                    graphs=graphs)
    assert_steady_state_allocates_nothing(plan, A, kernel, kernel=kernel)
    call = next(iter(plan._calls.values()))
    assert (call.graph is not None) == graphs


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_default_plan_is_auto_with_the_base_format_and_its_steady_state_allocates_nothing(dtype):
    """SpmmPlan(A) builds "auto" (issue 32): the cost model's first format and the base format, timed on the first
    run; then the call path is the same as a single format's (bound call, graph replay, nothing allocated), and
    two runs give the same bits."""
    from configs.names import BASE_FORMAT

    A = hub_csr(np.random.default_rng(0))
    plan = SpmmPlan(A, device="gpu", dtype=dtype)
    assert plan.ranking is not None and BASE_FORMAT in plan.ranking["built"]
    assert len(plan.ranking["built"]) == 2
    assert_steady_state_allocates_nothing(plan, A, f"default {dtype}")
    ch = plan.choices[64]
    assert set(ch["formats_measured_ms"]) == set(plan.ranking["built"])
    B = cupy.asarray(plan.precision.to_storage(np.random.default_rng(5).standard_normal((500, 64)).astype(np.float32)))
    one, two = plan.run(B).copy(), plan.run(B)
    assert bool((one.view(cupy.uint16 if one.itemsize == 2 else cupy.uint32)
                 == two.view(cupy.uint16 if two.itemsize == 2 else cupy.uint32)).all())


@pytest.mark.parametrize("graphs", [True, False])
@pytest.mark.parametrize("fmt", ["bcsr", "tiledcsr", "cvse"])
def test_steady_state_run_of_the_other_formats_allocates_nothing(fmt, graphs):
    """The same for the plugin formats' own kernels (Tiled-CSR's split-group workspace, made on the first call)."""
    A = hub_csr(np.random.default_rng(0))
    assert_steady_state_allocates_nothing(SpmmPlan(A, device="gpu", dtype="float16", format=fmt, graphs=graphs), A,
                                          fmt)


@pytest.mark.parametrize("kernel", KERNELS)
def test_replay_reads_b_in_place_and_matches_the_launch_bitwise(kernel):
    """A refilled B (a GNN layer, a solver) is what every later call reads, graph or not; the graph's C is bitwise
    the launched kernel's."""
    rng = np.random.default_rng(1)
    A = hub_csr(rng)
    plan = SpmmPlan(A, device="gpu", format="metcf", autotune=False)
    B = cupy.empty((500, 40), dtype=cupy.float32)
    out = cupy.empty((700, 40), dtype=cupy.float32)
    for i in range(AUTO_GRAPH_AFTER + 3):
        Bh = rng.standard_normal((500, 40)).astype(np.float32)
        B[...] = cupy.asarray(Bh)
        out.fill(np.nan)
        plan.run(B, out, kernel=kernel)
        direct = plan._launch(kernel, B, cupy.empty_like(out))  # the RawKernel launch of the same kernel
        assert rel_err(cupy.asnumpy(out), csr_spmm(A, Bh.astype(np.float64))) < TF32_RTOL, (kernel, i)
        assert bool((out.view(cupy.uint32) == direct.view(cupy.uint32)).all()), (kernel, i)
    assert next(iter(plan._calls.values())).graph is not None


@pytest.mark.parametrize("fmt", ["bcsr", "tiledcsr", "cvse"])
def test_replay_of_the_other_formats_reads_b_in_place(fmt):
    """The plugin formats launch through their device operator on the current stream (no bind): the captured
    graph must hold that launch, so a refilled B is what every later call reads."""
    rng = np.random.default_rng(4)
    A = hub_csr(rng)
    plan = SpmmPlan(A, device="gpu", dtype="float16", format=fmt, autotune=False)
    p = plan.precision
    B = cupy.empty((A.shape[1], 64), dtype=p.storage_dtype)
    out = cupy.empty((A.shape[0], 64), dtype=plan.out_dtype)
    for i in range(AUTO_GRAPH_AFTER + 3):
        Bh = p.to_storage(rng.standard_normal((A.shape[1], 64)).astype(np.float32))
        B[...] = cupy.asarray(Bh)
        out.fill(0)
        plan.run(B, out)
        ref = csr_spmm(A, p.to_float32(Bh).astype(np.float64))
        assert rel_err(p.to_float32(cupy.asnumpy(out)), ref) < p.tolerance, (fmt, i)
    assert next(iter(plan._calls.values())).graph is not None, fmt


@pytest.mark.parametrize("graphs", [True, False])
@pytest.mark.parametrize("fmt", ["metcf", "cvse"])
def test_autotune_times_candidates_the_way_run_issues_them(fmt, graphs, monkeypatch):
    """With graphs (run replays a graph from the third call) autotune compares the candidates' GPU time (graph
    replay); without, their time as issued (host cost charged): a host-bound launcher must not decide the choice.
    The CSR kernel's two 16-bit mappings (`CsrRows.tune`, when ME-TCF times it as its fallback) are compared by GPU
    time either way: the same launches, the same host cost."""
    import kernels.launch as kl

    calls = {"graph": 0, "issued": 0}
    real = {"graph": kl.graph_ms, "issued": kl.issued_ms}

    def counted(how):
        def timed(*a, **kw):
            calls[how] += 1
            return real[how](*a, **kw)
        return timed

    monkeypatch.setattr(kl, "graph_ms", counted("graph"))
    monkeypatch.setattr(kl, "issued_ms", counted("issued"))
    from tasks.fetch.generators import generate

    A = generate("dlmc", "rows=1024&cols=1024&sparsity=0.7&vector=8&seed=2")  # CVSE's tiled kernel is a candidate
    plan = SpmmPlan(A, device="gpu", dtype="float16", format=fmt, autotune=True, graphs=graphs)
    B = cupy.asarray(plan.precision.to_storage(np.random.default_rng(6).standard_normal((1024, 64)).astype(np.float32)))
    plan.run(B)
    assert plan.choice.get("measured_ms"), plan.choice  # the choice was timed
    csr = plan._by_kernel.get("csr-rows")
    mappings = sum(len(ms) for ms in csr._rows.mapping_ms.values()) if csr is not None and csr._rows else 0
    assert calls["graph" if graphs else "issued"] >= 2, calls
    assert calls["issued" if graphs else "graph"] == (0 if graphs else mappings), (calls, mappings)


@pytest.mark.parametrize("dtype, out_dtype", [("float32", None), ("float16", None), ("float16", "float32")])
def test_fallback_reuses_the_csr_tune_timing(dtype, out_dtype, monkeypatch):
    """ME-TCF's timed choice is compared with its CSR fallback: the CSR kernel's own `tune` has just timed its
    kept mapping on the same B into a C of the plan's dtype, so the decision takes that time (``timed_ms``) instead
    of timing the same bound launch again. Every CSR timing is one of `tune`'s mappings."""
    import kernels.launch as kl
    from kernels.formats.csr.launch import CsrRows

    csr_bounds, timed = [], []  # the CSR kernel's bound launches, held (an id alone could be reused)
    real_bind, real_time = CsrRows.bind, kl.time_bound

    def bind(self, *a, **kw):
        bound = real_bind(self, *a, **kw)
        csr_bounds.append(bound)
        return bound

    def time_bound(bound, *a, **kw):
        timed.append(any(b is bound for b in csr_bounds))
        return real_time(bound, *a, **kw)

    monkeypatch.setattr(CsrRows, "bind", bind)
    monkeypatch.setattr(kl, "time_bound", time_bound)
    rng = np.random.default_rng(8)
    A = hub_csr(rng)
    plan = SpmmPlan(A, device="gpu", dtype=dtype, format="metcf", autotune=True, graphs=True, out_dtype=out_dtype)
    B = cupy.asarray(plan.precision.to_storage(rng.standard_normal((A.shape[1], 64)).astype(np.float32)))
    plan.run(B)
    rows = plan._by_kernel["csr-rows"]._rows
    kept = rows.mapping_ms[64][rows.mapping(64)]
    assert plan.choice["csr_rows_ms"] == kept, (plan.choice, rows.mapping_ms)
    assert sum(timed) == len(rows.mapping_ms[64]), (timed, rows.mapping_ms)
    assert rows.tuned_out[64] == np.dtype(plan.out_dtype)


def test_accumulate_and_alternating_buffers():
    rng = np.random.default_rng(2)
    A = hub_csr(rng)
    plan = SpmmPlan(A, device="gpu", format="metcf", autotune=False)
    Bs = [cupy.asarray(rng.standard_normal((500, 32)).astype(np.float32)) for _ in range(2)]
    outs = [cupy.zeros((700, 32), dtype=cupy.float32) for _ in range(2)]
    n = AUTO_GRAPH_AFTER + 3
    for _ in range(n):  # two bound calls side by side, each accumulating into its own out
        for B, out in zip(Bs, outs):
            plan.run(B, out, accumulate=True)
    for B, out in zip(Bs, outs):
        assert rel_err(cupy.asnumpy(out), n * csr_spmm(A, cupy.asnumpy(B).astype(np.float64))) < TF32_RTOL
    assert len(plan._calls) == 2


def test_vector_odd_n_and_views_take_the_bound_path_correctly():
    rng = np.random.default_rng(3)
    A = hub_csr(rng)
    plan = SpmmPlan(A, device="gpu", format="metcf", autotune=False)
    big = cupy.asarray(rng.standard_normal((500, 9)).astype(np.float32))
    v, vout = cupy.ascontiguousarray(big[:, 0]), cupy.empty(700, dtype=cupy.float32)
    B7, out7 = cupy.ascontiguousarray(big[:, 1:8]), cupy.empty((700, 7), dtype=cupy.float32)
    for _ in range(AUTO_GRAPH_AFTER + 1):
        assert plan.run(v, vout) is vout
        plan.run(B7, out7)
    ref = csr_spmm(A, cupy.asnumpy(big).astype(np.float64))
    assert rel_err(cupy.asnumpy(vout), ref[:, 0]) < TF32_RTOL
    assert rel_err(cupy.asnumpy(out7), ref[:, 1:8]) < TF32_RTOL
    strided = big[:, 1:8]  # not C-contiguous: converted per call, never bound
    C = plan.run(strided, cupy.empty((700, 7), dtype=cupy.float32))
    assert rel_err(cupy.asnumpy(C), ref[:, 1:8]) < TF32_RTOL
    assert len(plan._calls) == 2


def test_run_inside_a_callers_capture_records_the_kernel():
    """After the plan has its own graph, a caller capturing its stream still gets the kernel in its graph (a graph
    launch inside a capture is refused by CUDA)."""
    rng = np.random.default_rng(4)
    A = hub_csr(rng)
    plan = SpmmPlan(A, device="gpu", format="metcf", autotune=False)
    B = cupy.asarray(rng.standard_normal((500, 32)).astype(np.float32))
    out = cupy.empty((700, 32), dtype=cupy.float32)
    for _ in range(AUTO_GRAPH_AFTER + 1):
        plan.run(B, out)
    assert next(iter(plan._calls.values())).graph is not None
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        plan.run(B, out)
        graph = stream.end_capture()
    Bh = rng.standard_normal((500, 32)).astype(np.float32)
    B[...] = cupy.asarray(Bh)
    out.fill(np.nan)
    cupy.cuda.Device().synchronize()  # the copy and fill ran on the default stream, which `stream` does not wait for
    graph.launch(stream)
    stream.synchronize()
    assert rel_err(cupy.asnumpy(out), csr_spmm(A, Bh.astype(np.float64))) < TF32_RTOL


def test_graphs_opt_out_and_release():
    rng = np.random.default_rng(5)
    plan = SpmmPlan(hub_csr(rng), device="gpu", format="metcf", autotune=False)
    plan.graphs = False
    B = cupy.asarray(rng.standard_normal((500, 16)).astype(np.float32))
    out = cupy.empty((700, 16), dtype=cupy.float32)
    for _ in range(AUTO_GRAPH_AFTER + 2):
        plan.run(B, out)
    assert next(iter(plan._calls.values())).graph is None
    plan.release()
    assert not plan._calls
