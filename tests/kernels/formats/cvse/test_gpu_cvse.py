"""GPU CVSE kernels (kernels/formats/cvse/launch.py, kernels/formats/cvse/cvse_spmm.cu, cvse_sddmm.cu) for TF32 / FP16 / BF16 and
every V against float64: every call on a NaN-poisoned out (every element must be written), rectangular shapes,
empty vector rows, K not a multiple of V, N and Kd off the 16-byte path, accumulate, determinism (two runs
bit-identical); the plans with format="cvse" and the SDDMM plan's cvse kernel. Skipped while the format is not
gpu_ready (kernels/formats/cvse/plugin.py): flip it when this module passes."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)
from kernels.formats import get as _get_format  # noqa: E402

if not _get_format("cvse").gpu_ready:  # gated off in kernels/formats/cvse/plugin.py until these pass
    pytest.skip(f"cvse: {_get_format('cvse').gpu_not_ready_why}", allow_module_level=True)

from kernels.formats.cvse import launch as lc  # noqa: E402
from kernels.formats.cvse.container import CVSE, csr_to_cvse, cvse_sddmm, cvse_spmm  # noqa: E402
from kernels.precision import precision  # noqa: E402
from kernel_cases import BASE_CASES, random_csr  # noqa: E402

PRECISIONS = ("float32", "float16", "bfloat16")
VECTORS = (2, 4, 8, 16)
# Against the float64 product of the precision-rounded inputs (TF32 and 16-bit products are exact in fp32): only
# the fp32 summation order differs, ~1e-6 relative; the hub row sums 40,000 products, hence 1e-4. A 16-bit C adds
# one rounding per element: 2^-11 float16, 2^-8 bfloat16.
ROUNDED_RTOL = {"float32": 1e-4, "float16": 1e-3, "bfloat16": 8e-3}


def empty_vector_rows():
    A = random_csr((100, 50), 600, seed=2).tolil()
    A[16:48] = 0
    return sp.csr_array(A)


def stage_edges():
    """Vector rows (V = 2) of 32 (one f16 stage), 33, 131 (the cp.async ring of 3 stages wraps) and 0 vectors."""
    rng = np.random.default_rng(13)
    D = np.zeros((8, 140), dtype=np.float32)
    for r, n in enumerate((32, 33, 131, 0)):
        D[2 * r:2 * r + 2, np.sort(rng.choice(140, n, replace=False))] = rng.standard_normal((2, n))
    return sp.csr_array(D)


CASES = {**{k: v for k, v in BASE_CASES.items() if k != "explicit_zeros"},
         "empty_vector_rows": empty_vector_rows,
         "k_not_multiple_of_v": lambda: random_csr((37, 45), 900, seed=11),  # 37 rows, 45 columns
         "dense_rows": lambda: random_csr((64, 300), 64 * 200, seed=12),
         "stage_edges": stage_edges,  # vector rows ending on, just past and far past a pipeline stage
         "long_rows": lambda: random_csr((48, 4000), 48 * 1500, seed=14)}  # ~100 stages per vector row


def convert(A, name, V):
    A = sp.csr_array(A, dtype=np.float32)
    A.eliminate_zeros()
    return csr_to_cvse(A, vector=V, to_storage=precision(name).to_storage)


def rounded(X: CVSE, name):
    p = precision(name)
    return CVSE(X.shape, X.vec_ptr, X.indices, p.rounded(p.to_float32(X.data)))


def rel_err(C, ref):
    scale = max(np.linalg.norm(ref), 1e-30)
    return np.linalg.norm(np.asarray(C, dtype=np.float64) - ref) / scale


def device_b(B, name):
    p = precision(name)
    return cupy.asarray(p.to_storage(B))


@pytest.mark.parametrize("N", [64, 200, 37])  # whole warps; a partial chunk; N % 8 != 0 (checked path)
@pytest.mark.parametrize("V", VECTORS)
@pytest.mark.parametrize("name", PRECISIONS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_spmm_against_float64(case, name, V, N):
    X = convert(CASES[case](), name, V)
    dm = lc.upload(X, name)
    B = np.random.default_rng(1).standard_normal((X.shape[1], N)).astype(np.float32)
    p = precision(name)
    ref = cvse_spmm(rounded(X, name), p.rounded(B))
    out = cupy.full(X.shape[:1] + (N,), np.nan, dtype=cupy.float32)
    C = lc.spmm(dm, device_b(B, name), out).get()
    assert not np.isnan(C).any()  # every element written
    assert rel_err(C, ref) < ROUNDED_RTOL[name]
    if p.half:  # 16-bit C: one more rounding
        C16 = lc.spmm(dm, device_b(B, name), out_dtype=p.storage_dtype)
        assert rel_err(p.to_float32(C16.get()), ref) < ROUNDED_RTOL[name] + 2 ** -7


@pytest.mark.parametrize("V", VECTORS)
@pytest.mark.parametrize("name", PRECISIONS)
def test_spmm_accumulate_and_determinism(name, V):
    X = convert(random_csr((333, 257), 5000, seed=4), name, V)
    dm = lc.upload(X, name)
    Bd = device_b(np.random.default_rng(2).standard_normal((257, 128)).astype(np.float32), name)
    C1 = lc.spmm(dm, Bd).get()
    C2 = lc.spmm(dm, Bd).get()
    assert np.array_equal(C1.view(np.uint32), C2.view(np.uint32))  # bitwise repeatable
    out = cupy.ones((333, 128), dtype=cupy.float32)
    lc.spmm(dm, Bd, out, accumulate=True)
    np.testing.assert_allclose(out.get(), C1 + 1.0, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("V", VECTORS)
@pytest.mark.parametrize("name", PRECISIONS)
def test_spmm_pipeline_knobs_do_not_change_the_bits(name, V):
    """CvseConfig.steps_per_stage and stages only change how far ahead the kernel loads: the summation order (steps
    in vector order) and so every bit of C are the same."""
    X = convert(random_csr((333, 2000), 60000, seed=15), name, V)
    dm = lc.upload(X, name)
    Bd = device_b(np.random.default_rng(5).standard_normal((2000, 136)).astype(np.float32), name)
    ref = lc.spmm(dm, Bd).get()
    for cfg in (lc.CvseConfig(steps_per_stage=1, stages=2), lc.CvseConfig(steps_per_stage=1, stages=4),
                lc.CvseConfig(steps_per_stage=2, stages=2)):
        got = lc.spmm(dm, Bd, config=cfg).get()
        assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), cfg


@pytest.mark.parametrize("Kd", [64, 21])  # 16-byte pieces; Kd % 8 != 0 (checked path)
@pytest.mark.parametrize("V", VECTORS)
@pytest.mark.parametrize("name", PRECISIONS)
@pytest.mark.parametrize("case", ["k_not_multiple_of_v", "empty_vector_rows", "37x5000", "nnz0", "dense_rows"])
def test_sddmm_against_float64(case, name, V, Kd):
    X = convert(CASES[case](), name, V)
    dm = lc.upload(X, name)
    rng = np.random.default_rng(3)
    p = precision(name)
    A = rng.standard_normal((X.shape[0], Kd)).astype(np.float32)
    B = rng.standard_normal((X.shape[1], Kd)).astype(np.float32)
    ref = cvse_sddmm(rounded(X, name), p.rounded(A), p.rounded(B))
    out = cupy.full((X.n_vectors, V), np.nan, dtype=cupy.float32)
    got = lc.sddmm(dm, device_b(A, name), device_b(B, name), out).get()
    assert not np.isnan(got).any()
    assert rel_err(got, ref) < ROUNDED_RTOL[name]
    again = lc.sddmm(dm, device_b(A, name), device_b(B, name)).get()
    assert np.array_equal(got.view(np.uint32), again.view(np.uint32))


@pytest.mark.parametrize("Kd", [64, 21])
@pytest.mark.parametrize("V", VECTORS)
@pytest.mark.parametrize("name", PRECISIONS)
@pytest.mark.parametrize("case", ["k_not_multiple_of_v", "empty_vector_rows", "37x5000", "nnz0", "long_rows"])
def test_sddmm_scatter_is_the_vector_order_gathered(case, name, V, Kd):
    """With the scatter map the kernel writes S's CSR order itself: every element (a NaN-poisoned out), each the
    same bits as the vector-order result gathered at `gather_positions`; padding slots are not written."""
    from kernels.formats.cvse.sddmm import gather_positions

    S = sp.csr_array(CASES[case](), dtype=np.float32)
    S.eliminate_zeros()
    X = convert(S, name, V)
    dm = lc.upload(X, name)
    gather = gather_positions(X, S)
    dest = cupy.asarray(lc.scatter_map(gather, X.n_vectors * V))
    rng = np.random.default_rng(9)
    Ad = device_b(rng.standard_normal((X.shape[0], Kd)).astype(np.float32), name)
    Bd = device_b(rng.standard_normal((X.shape[1], Kd)).astype(np.float32), name)
    want = lc.sddmm(dm, Ad, Bd).get().reshape(-1)[gather]
    out = cupy.full(S.nnz, np.nan, dtype=cupy.float32)
    got = lc.sddmm(dm, Ad, Bd, out, dest=dest).get()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(lc.sddmm(dm, Ad, Bd, dest=dest, nnz=S.nnz).get().view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("name", PRECISIONS)
def test_sddmm_route_without_the_scatter_map_gathers_the_same_bits(name, monkeypatch):
    """Where S's positions pass int32 (no scatter map) the route runs the vector order and a gather: run and bind
    give the scatter route's bits."""
    from kernels.formats.cvse.sddmm import SDDMM

    S = sp.csr_array(random_csr((203, 170), 2500, seed=4), dtype=np.float32)
    p = precision(name)
    host, _ = SDDMM.prepare(sp.csr_array((p.rounded(S.data).astype(np.float32), S.indices, S.indptr), shape=S.shape),
                            p)
    fused = SDDMM.upload(host, p)
    monkeypatch.setattr(lc, "scatter_map", lambda gather, slots: None)
    split = SDDMM.upload(host, p)
    assert fused.dest is not None and split.dest is None
    rng = np.random.default_rng(10)
    Ad = device_b(rng.standard_normal((203, 64)).astype(np.float32), name)
    Bd = device_b(rng.standard_normal((170, 64)).astype(np.float32), name)
    want = fused.run(Ad, Bd).get()
    assert np.array_equal(split.run(Ad, Bd).get().view(np.uint32), want.view(np.uint32))
    for dev in (fused, split):
        out = cupy.full(S.nnz, np.nan, dtype=cupy.float32)
        bound = dev.bind(Ad, Bd, out)
        assert bound(cupy.cuda.get_current_stream().ptr) is out
        assert np.array_equal(out.get().view(np.uint32), want.view(np.uint32))


# Kd 256: whole steps; 80: TF32's second step has 1 of its 4 chunks, 16-bit's a half chunk; 20: a partial piece of
# 4 floats (TF32 16-byte path), the checked element path (16-bit)
@pytest.mark.parametrize("Kd", [256, 80, 20])
@pytest.mark.parametrize("V", VECTORS)
@pytest.mark.parametrize("name", PRECISIONS)
def test_sddmm_tile_knobs_do_not_change_the_bits(name, V, Kd):
    """CvseConfig.sddmm_groups and sddmm_loads only change how many vectors share an A piece and how far ahead a
    lane loads: each output's mma sequence (chunks in k order) and so every bit of out are the same. Vector rows of
    ~1,300 (V = 2) to ~3,000 (V = 16) vectors: every warp loops over several tiles."""
    X = convert(random_csr((48, 3000), 48 * 700, seed=16), name, V)
    dm = lc.upload(X, name)
    rng = np.random.default_rng(8)
    Ad = device_b(rng.standard_normal((48, Kd)).astype(np.float32), name)
    Bd = device_b(rng.standard_normal((3000, Kd)).astype(np.float32), name)
    ref = lc.sddmm(dm, Ad, Bd).get()
    for cfg in (lc.CvseConfig(sddmm_groups=1, sddmm_loads=4), lc.CvseConfig(sddmm_groups=1, sddmm_loads=16),
                lc.CvseConfig(sddmm_groups=2, sddmm_loads=10), lc.CvseConfig(sddmm_groups=4, sddmm_loads=12)):
        got = lc.sddmm(dm, Ad, Bd, config=cfg).get()
        assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), cfg


@pytest.mark.parametrize("name", PRECISIONS)
def test_plans_with_format_cvse(name):
    from kernels.sddmm import SddmmPlan, csr_sddmm
    from kernels.spmm import SpmmPlan

    A = sp.csr_array(random_csr((300, 200), 4000, seed=5), dtype=np.float32)
    p = precision(name)
    B = np.random.default_rng(4).standard_normal((200, 96)).astype(np.float32)
    plan = SpmmPlan(A, device="gpu", dtype=name, format="cvse")
    C = p.to_float32(plan.run(p.to_storage(B))).astype(np.float64)
    exact = A.astype(np.float64) @ B.astype(np.float64)
    assert rel_err(C, exact) < p.tolerance and plan.choice["format"] == "cvse"
    U = np.random.default_rng(6).standard_normal((300, 32)).astype(np.float32)
    W = np.random.default_rng(7).standard_normal((200, 32)).astype(np.float32)
    sd = SddmmPlan(A, dtype=name, format="cvse", kernel="cvse", device="gpu")
    assert sd.choice["kernel"] == "cvse"
    first = sd.run(U, W)
    assert rel_err(first, csr_sddmm(A, U, W)) < p.tolerance
    # storage-dtype device operands, a caller's out: nothing allocated per call, the same bits every call
    Ud, Wd = cupy.asarray(p.to_storage(U)), cupy.asarray(p.to_storage(W))
    out = cupy.full(A.nnz, cupy.nan, dtype=cupy.float32)
    assert sd.run(Ud, Wd, out=out) is out
    pool = cupy.get_default_memory_pool()
    used = pool.used_bytes()
    for _ in range(3):
        sd.run(Ud, Wd, out=out)
    assert pool.used_bytes() == used
    assert np.array_equal(out.get().view(np.uint32), first.view(np.uint32))
    with pytest.raises(ValueError, match="out must be a C-contiguous float32 cupy array"):
        sd.run(Ud, Wd, out=cupy.zeros(A.nnz, dtype=cupy.float64))


@pytest.mark.parametrize("name", PRECISIONS)
def test_sddmm_plan_times_its_two_routes_per_kd(name):
    """SddmmPlan(format="cvse") on a GPU: the first run with a Kd times the CVSE kernel and the cuSPARSE route
    and keeps the faster; both routes (and each fixed one) within the precision's tolerance of float64, S's
    non-unit values applied on either route, the same bits on a second call."""
    from kernels.sddmm import CUSPARSE_MARGIN, SddmmPlan, csr_sddmm

    A = sp.csr_array(random_csr((300, 200), 4000, seed=6), dtype=np.float32)
    assert not np.all(A.data == 1)
    p = precision(name)
    plan = SddmmPlan(A, dtype=name, format="cvse", device="gpu")
    assert plan.kernel == "auto" and not plan.choices
    fixed = {r: SddmmPlan(A, dtype=name, format="cvse", kernel=r, device="gpu") for r in ("cvse", "cusparse")}
    rng = np.random.default_rng(11)
    for Kd in (16, 64):
        U = rng.standard_normal((300, Kd)).astype(np.float32)
        W = rng.standard_normal((200, Kd)).astype(np.float32)
        Ud, Wd = cupy.asarray(p.to_storage(U)), cupy.asarray(p.to_storage(W))
        exact = csr_sddmm(A, U, W)
        got = plan.run(Ud, Wd)
        ms = plan.timings[Kd]
        assert set(ms) == set(plan.routes) and {"cvse", "cusparse"} <= set(ms)
        ours = min((r for r in ms if r != "cusparse"), key=ms.get)
        assert plan.choices[Kd] == ("cusparse" if ms["cusparse"] < CUSPARSE_MARGIN * ms[ours] else ours)
        assert plan.choice["kernel"] == plan.choices[Kd] and f"Kd={Kd}" in plan.choice["reason"]
        assert rel_err(cupy.asnumpy(got), exact) < p.tolerance
        assert bool((plan.run(Ud, Wd) == got).all())
        for route, other in fixed.items():
            vals = other.run(Ud, Wd)
            assert other.choices[Kd] == route and not other.timings
            assert rel_err(cupy.asnumpy(vals), exact) < p.tolerance, route


# ---- the tiled kernel (16-bit; B's K chunk staged once per block of vector rows: kernels/formats/cvse/tiles.py) ----
HALF = ("float16", "bfloat16")
TILED_CASES = ("empty_vector_rows", "k_not_multiple_of_v", "dense_rows", "long_rows", "stage_edges", "37x5000",
               "nnz0", "pruned_600x700")
CASES["pruned_600x700"] = lambda: random_csr((600, 700), 600 * 700 * 3 // 10, seed=17)  # 3 chunks, many row blocks


def tiled_run(dm, tl, Bd, shape, **kw):
    return lc.spmm_tiled(dm, tl, Bd, warps=shape[0], halves=shape[1], **kw)


@pytest.mark.parametrize("N", [200, 64, 8])  # a partial 64-column half; one whole half; one 16-byte piece
@pytest.mark.parametrize("shape", [(8, 1), (16, 2), (4, 2)])  # (warps, 64-column halves) per block
@pytest.mark.parametrize("V", VECTORS)
@pytest.mark.parametrize("name", HALF)
@pytest.mark.parametrize("case", TILED_CASES)
def test_spmm_tiled_against_float64(case, name, V, shape, N):
    X = convert(CASES[case](), name, V)
    dm, tl = lc.upload(X, name), lc.upload_tiles(X, name)
    B = np.random.default_rng(1).standard_normal((X.shape[1], N)).astype(np.float32)
    p = precision(name)
    need = lc.tiled_smem(V, X.shape[1], *shape, tl.gcap(shape[0] * lc.rows_per_warp(V)))
    if need > lc.device_limits()[0]:  # dense rows: a block's groups per chunk outgrow shared memory at this shape
        with pytest.raises(ValueError, match="shared memory"):
            tiled_run(dm, tl, device_b(B, name), shape)
        assert shape not in [(c["warps"], c["halves"]) for c in lc.tiled_configs(tl, X.shape[1], N, 132, need - 1)]
        return
    ref = cvse_spmm(rounded(X, name), p.rounded(B))
    out = cupy.full(X.shape[:1] + (N,), np.nan, dtype=cupy.float32)
    C = tiled_run(dm, tl, device_b(B, name), shape, out=out).get()
    assert not np.isnan(C).any()  # every element written
    assert rel_err(C, ref) < ROUNDED_RTOL[name]
    out16 = cupy.full(X.shape[:1] + (N,), 0x7FC0 if name == "bfloat16" else np.nan, dtype=p.storage_dtype)  # NaN
    C16 = p.to_float32(tiled_run(dm, tl, device_b(B, name), shape, out=out16).get())
    assert not np.isnan(C16).any() and rel_err(C16, ref) < ROUNDED_RTOL[name] + 2 ** -7


@pytest.mark.parametrize("V", VECTORS)
@pytest.mark.parametrize("name", HALF)
def test_spmm_tiled_launch_shapes_give_the_same_bits_and_accumulate(name, V):
    """Every C element sums its chunks in order and its groups in layout order whatever the block shape: all launch
    shapes give the same bits, twice; accumulate adds in fp32; another B of the same shape (the sm_90 kernel's B
    workspace is reused) gives its own product."""
    X = convert(random_csr((700, 1000), 700 * 1000 // 4, seed=18), name, V)
    dm, tl = lc.upload(X, name), lc.upload_tiles(X, name)
    B = np.random.default_rng(9).standard_normal((1000, 264)).astype(np.float32)
    Bd = device_b(B, name)
    shapes = [(c["warps"], c["halves"]) for c in lc.tiled_configs(tl, 1000, 264, 132, lc.device_limits()[0])]
    assert len(shapes) >= 3, shapes  # those whose stages fit shared memory
    ref = tiled_run(dm, tl, Bd, shapes[-1]).get()
    for shape in shapes:
        got = tiled_run(dm, tl, Bd, shape).get()
        assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), shape
    out = cupy.ones((700, 264), dtype=cupy.float32)
    tiled_run(dm, tl, Bd, shapes[0], out=out, accumulate=True)
    np.testing.assert_allclose(out.get(), ref + 1.0, rtol=1e-6, atol=1e-6)
    assert np.array_equal(tiled_run(dm, tl, device_b(-B, name), shapes[0]).get(), -ref)  # a new B, same workspace


def test_spmm_tiled_on_two_streams_keeps_a_workspace_each():
    """One CvseTiles called on two streams at once: each stream has its own B workspace (the sm_90 kernel's
    chunk-major copy of B), so neither product reads the other's B."""
    X = convert(random_csr((700, 1000), 700 * 1000 // 4, seed=18), "float16", 8)
    dm, tl = lc.upload(X, "float16"), lc.upload_tiles(X, "float16")
    rng = np.random.default_rng(9)
    Bs = [device_b(rng.standard_normal((1000, 264)).astype(np.float32), "float16") for _ in range(2)]
    refs = [tiled_run(dm, tl, Bd, (8, 1)).get() for Bd in Bs]  # one after the other on the default stream
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in Bs]
    work = []
    for s in streams:
        with s:
            work.append(tl.b_tiles(1000, 264, 1))
    assert work[0].data.ptr != work[1].data.ptr
    for _ in range(3):
        outs = []
        for s, Bd in zip(streams, Bs):
            with s:
                outs.append(tiled_run(dm, tl, Bd, (8, 1)))
        for s in streams:
            s.synchronize()
        for C, ref in zip(outs, refs):
            assert np.array_equal(C.get(), ref)


def test_spmm_tiled_refuses_off_the_16_byte_path_and_the_plan_falls_back():
    from kernels.spmm import SpmmPlan

    A = sp.csr_array(random_csr((256, 512), 256 * 512 // 3, seed=19), dtype=np.float32)
    X = convert(A, "float16", 8)
    dm, tl = lc.upload(X, "float16"), lc.upload_tiles(X, "float16")
    with pytest.raises(ValueError, match="multiple of 8"):
        lc.spmm_tiled(dm, tl, cupy.zeros((512, 36), dtype=cupy.float16))
    with pytest.raises(ValueError, match="do not belong"):
        lc.spmm_tiled(lc.upload(convert(A, "float16", 4), "float16"), tl, cupy.zeros((512, 64), cupy.float16))
    plan = SpmmPlan(X, device="gpu", dtype="float16", format="cvse", autotune=False)
    assert plan.choice["kernel"] == "cvse-tiled"  # ~490 vectors per vector row: ~120 per 128 columns
    exact = A.astype(np.float64) @ np.ones((512, 36))
    for N in (36, 64):  # 36: the per-vector kernel runs the call; 64: the tiled kernel
        C = plan.run(np.ones((512, N), dtype=np.float16)).astype(np.float64)
        assert rel_err(C, exact[:, :1].repeat(N, 1)) < precision("float16").tolerance


@pytest.mark.parametrize("name", HALF)
def test_plan_autotunes_between_the_cvse_kernels(name):
    from kernels.spmm import SpmmPlan

    A = sp.csr_array(random_csr((1024, 1024), 1024 * 1024 // 5, seed=20), dtype=np.float32)
    p = precision(name)
    B = np.random.default_rng(4).standard_normal((1024, 128)).astype(np.float32)
    plan = SpmmPlan(A, device="gpu", dtype=name, format="cvse")
    C = p.to_float32(plan.run(p.to_storage(B))).astype(np.float64)
    ch = plan.choices[128]
    assert set(ch["measured_ms"]) >= {"cvse-vector", "cvse-tiled"} and ch["kernel"] in ("cvse-vector", "cvse-tiled")
    assert rel_err(C, A.astype(np.float64) @ p.rounded(B).astype(np.float64)) < p.tolerance
