"""GPU ME-TCF SpMM kernels (window and strict-balance) and SpmmPlan against the float64 reference."""
from __future__ import annotations

import io
from dataclasses import replace
import tarfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)

from kernels import launch  # noqa: E402
from kernels.choice import decide  # noqa: E402
from kernels.formats.metcf import launch as metcf_launch  # noqa: E402
from kernels.formats.metcf.config import BITMAP_CONFIG, CONFIG, V0_CONFIG, KernelConfig  # noqa: E402
from kernels.formats.metcf.container import csr_to_metcf  # noqa: E402
from configs import fixture_roots  # noqa: E402
from kernels.reference import csr_spmm  # noqa: E402
from kernels.spmm import SpmmPlan  # noqa: E402

# TF32 keeps 10 mantissa bits (unit roundoff 2^-11 ~ 4.9e-4 per rounded operand); with fp32 accumulation the
# norm-wise error of a sum of products lands near 3e-4, so 1e-3 passes real results and fails any wrong index.
TF32_RTOL = 1e-3
FIXTURES = next((root / "suitesparse" / "MM" for root in fixture_roots(Path(__file__).resolve().parents[4])
                 if (root / "suitesparse" / "MM").exists()), Path("/nonexistent"))
SPLIT_CONFIG = KernelConfig(blocks_per_item=3)  # tiny items: every multi-block window is split across items


def random_csr(n_rows, n_cols, nnz_per_row, rng, *, empty_cols=0.2):
    """Random CSR whose last `empty_cols` fraction of columns is empty (B's NaN rows go there)."""
    used = max(1, int(n_cols * (1 - empty_cols)))
    counts = rng.poisson(nnz_per_row, n_rows).clip(0, used)
    rows = np.repeat(np.arange(n_rows), counts)
    cols = np.concatenate([rng.choice(used, c, replace=False) for c in counts]) if counts.sum() else np.zeros(0, int)
    A = sp.csr_array((rng.standard_normal(rows.size).astype(np.float32), (rows, cols)), shape=(n_rows, n_cols))
    A.sum_duplicates()
    return A


def dense_b(A, N, rng):
    """Random B with NaN in every row that no nonzero of A references (a padding read would spread it)."""
    B = rng.standard_normal((A.shape[1], N)).astype(np.float32)
    unused = np.setdiff1d(np.arange(A.shape[1]), np.unique(A.indices))
    B[unused] = np.nan
    return B


def split_ks(N, config=None):
    """Every ksplit metcf_spmm_split takes at N (2, 4, ... up to metcf_launch.max_ksplit)."""
    return metcf_launch.ksplits(N, config or CONFIG)


def run_kernel(kernel, dm, Bd, out, config=None, **kw):
    """kernel: "window", "balanced" or "split-k<ksplit>" (kernels.formats.metcf.launch.spmm_*)."""
    cfg = {"config": config} if config else {}
    if kernel.startswith("split-k"):
        return metcf_launch.spmm_split(dm, Bd, out, ksplit=int(kernel[7:]), **cfg, **kw)
    return getattr(metcf_launch, f"spmm_{kernel}")(dm, Bd, out, **cfg, **kw)


def check(A, N, rng, *, kernels=("window", "balanced", "split"), config=None):
    """Each kernel ("split": at every ksplit; skipped for the v0 pipeline) vs float64 on a NaN-poisoned out, twice:
    bit-identical."""
    M = csr_to_metcf(A)
    dm = metcf_launch.upload(M)
    B = dense_b(A, N, rng)
    ref = csr_spmm(A, np.nan_to_num(B, nan=0.0))
    Bd = cupy.asarray(B)
    if "split" in kernels:
        ks = split_ks(N, config) if (config or CONFIG).a_regs else []
        kernels = [k for k in kernels if k != "split"] + [f"split-k{k}" for k in ks]
    for kernel in kernels:
        outs = []
        for _ in range(2):
            out = cupy.full((A.shape[0], N), np.nan, dtype=cupy.float32)  # poison: every element must be written
            run_kernel(kernel, dm, Bd, out, config)
            outs.append(cupy.asnumpy(out))
        C = outs[0]
        assert np.isfinite(C).all(), f"{kernel}: {np.count_nonzero(~np.isfinite(C))} unwritten/NaN elements"
        err = np.linalg.norm(C - ref) / max(np.linalg.norm(ref), 1e-30)
        assert err < TF32_RTOL or np.linalg.norm(ref) == 0, f"{kernel} N={N}: relative error {err:.2e}"
        assert np.array_equal(outs[0], outs[1]), f"{kernel}: two calls differ"


@pytest.mark.parametrize("N", [1, 7, 32, 128, 256, 512])
def test_random_rectangular(N):
    rng = np.random.default_rng(N)
    check(random_csr(333, 517, 9, rng), N, rng)


@pytest.mark.parametrize("N", [7, 128])
def test_split_windows_small_items(N):
    rng = np.random.default_rng(10 + N)
    check(random_csr(400, 300, 20, rng), N, rng, kernels=("balanced",), config=SPLIT_CONFIG)


def test_empty_rows_and_windows():
    #  rows 0..15   x . x .      window 0: 2 nonzeros
    #  rows 16..63  . . . .      windows 1-3: empty (must come out as zeros)
    #  rows 64..70  . x . x      window 4: 7 rows (M = 71 is not a multiple of 16)
    rng = np.random.default_rng(3)
    A = random_csr(71, 90, 6, rng).tolil()
    A[16:64] = 0
    A = sp.csr_array(A)
    A.eliminate_zeros()
    for N in (1, 33, 128):
        check(A, N, rng)
        check(A, N, rng, kernels=("balanced",), config=SPLIT_CONFIG)


def test_hub_rows():
    # One row with 6000 nonzeros: its window owns ~750 TC blocks (a 'hub' window); the rest stay sparse.
    rng = np.random.default_rng(4)
    A = random_csr(500, 20000, 3, rng).tolil()
    A[37, rng.choice(16000, 6000, replace=False)] = rng.standard_normal(6000)
    A = sp.csr_array(A)
    for N in (32, 128, 200):
        check(A, N, rng)


def test_no_nonzeros():
    A = sp.csr_array((40, 30), dtype=np.float32)
    rng = np.random.default_rng(5)
    for kernel in ("window", "balanced", "split-k2"):
        dm = metcf_launch.upload(csr_to_metcf(A))
        out = cupy.full((40, 8), np.nan, dtype=cupy.float32)
        run_kernel(kernel, dm, cupy.asarray(rng.standard_normal((30, 8)).astype(np.float32)), out)
        assert cupy.all(out == 0)


def test_unaligned_b_scalar_path():
    rng = np.random.default_rng(6)
    A = random_csr(100, 64, 8, rng)
    dm = metcf_launch.upload(csr_to_metcf(A))
    B = rng.standard_normal((64, 64)).astype(np.float32)
    raw = cupy.empty(B.size + 1, dtype=cupy.float32)
    Bd = raw[1:].reshape(64, 64)  # 4-byte offset: float4 loads would fault or misread
    Bd[...] = cupy.asarray(B)
    for kernel in ("window", "balanced", "split-k4"):
        C = cupy.asnumpy(run_kernel(kernel, dm, Bd, None))
        ref = csr_spmm(A, B)
        assert np.linalg.norm(C - ref) / np.linalg.norm(ref) < TF32_RTOL


@pytest.mark.parametrize("config", [CONFIG, SPLIT_CONFIG, BITMAP_CONFIG, V0_CONFIG],
                         ids=["v6", "v6-split", "bitmap", "v0"])
@pytest.mark.parametrize("N", [7, 128])
def test_accumulate_adds_to_out(config, N):
    """accumulate=True: out += A @ B (a column split's second half), twice in a row bit-identical from the same
    start; empty windows leave out as it was; without out it is refused."""
    rng = np.random.default_rng(20 + N)
    A = random_csr(300, 250, 12, rng).tolil()
    A[32:80] = 0  # empty windows: their rows of out must stay untouched
    A = sp.csr_array(A)
    dm = metcf_launch.upload(csr_to_metcf(A))
    B = rng.standard_normal((250, N)).astype(np.float32)
    C0 = rng.standard_normal((300, N)).astype(np.float32)
    ref = C0.astype(np.float64) + csr_spmm(A, B)
    for kernel in ("window", "balanced", *(("split-k2", "split-k4") if config.a_regs else ())):
        outs = []
        for _ in range(2):
            out = cupy.asarray(C0)
            run_kernel(kernel, dm, cupy.asarray(B), out, config, accumulate=True)
            outs.append(cupy.asnumpy(out))
        err = np.linalg.norm(outs[0] - ref) / np.linalg.norm(ref)
        assert err < TF32_RTOL, f"{kernel}: relative error {err:.2e}"
        assert np.array_equal(outs[0][32:80], C0[32:80]), f"{kernel}: empty windows changed out"
        assert np.array_equal(outs[0], outs[1]), f"{kernel}: two calls differ"
        with pytest.raises(ValueError, match="pass out"):
            run_kernel(kernel, dm, cupy.asarray(B), None, config, accumulate=True)


def test_plan_accumulate_equals_column_split_sum():
    """SpmmPlan.run(accumulate=True) on each kernel (cuSPARSE included) and on host and device arrays: A's columns
    split in two, C = A_1 B, then C += A_2 B gives A B."""
    rng = np.random.default_rng(30)
    A = random_csr(500, 400, 10, rng, empty_cols=0)
    left = np.zeros(400, dtype=bool)
    left[rng.choice(400, 150, replace=False)] = True
    A1, A2 = A @ sp.diags_array(left.astype(np.float32)), A @ sp.diags_array((~left).astype(np.float32))
    B = rng.standard_normal((400, 64)).astype(np.float32)
    ref = csr_spmm(A, B)
    p1, p2 = (SpmmPlan(sp.csr_array(A), device="gpu", format="metcf") for A in (A1, A2))
    for kernel in ("metcf-window", "metcf-balanced", "metcf-split", "cusparse"):
        out = p1.run(cupy.asarray(B), kernel=kernel)
        p2.run(cupy.asarray(B), out, kernel=kernel, accumulate=True)
        host = p1.run(B, kernel=kernel)
        p2.run(B, host, kernel=kernel, accumulate=True)
        for C in (cupy.asnumpy(out), host):
            assert np.linalg.norm(C - ref) / np.linalg.norm(ref) < TF32_RTOL, kernel
    with pytest.raises(ValueError, match="pass out"):
        p2.run(B, accumulate=True)


def fixture_matrices():
    out = []
    for path in sorted(FIXTURES.glob("*/*.tar.gz")):
        with tarfile.open(path) as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith(".mtx"))
            A = scipy.io.mmread(io.BytesIO(tar.extractfile(member).read()))
        if np.iscomplexobj(A.data):
            continue  # young1c: complex values, no complex kernel
        out.append(pytest.param(sp.csr_array(A, dtype=np.float32), id=path.name.removesuffix(".tar.gz")))
    return out


@pytest.mark.skipif(not FIXTURES.exists(), reason="needs the fixtures (.fixtures, ../shared/fixtures or TCSPMM_FIXTURES)")
@pytest.mark.parametrize("A", fixture_matrices() if FIXTURES.exists() else [])
def test_fixture_matrices(A):
    rng = np.random.default_rng(7)
    for N in (7, 128):
        check(A, N, rng)


def test_plan_numpy_cupy_vector_and_choice():
    rng = np.random.default_rng(8)
    A = random_csr(1000, 800, 12, rng)
    plan = SpmmPlan(A, format="metcf")
    B = rng.standard_normal((800, 64)).astype(np.float32)
    ref = csr_spmm(A, B)
    C = plan.run(B)
    assert isinstance(C, np.ndarray) and np.linalg.norm(C - ref) / np.linalg.norm(ref) < TF32_RTOL
    Cd = plan.run(cupy.asarray(B))
    assert isinstance(Cd, cupy.ndarray)
    assert {"kernel", "reason", "predicted_ms"} <= set(plan.choice)
    v = plan.run(B[:, 0])
    assert v.shape == (1000,) and np.linalg.norm(v - ref[:, 0]) / np.linalg.norm(ref[:, 0]) < TF32_RTOL
    for kernel in ("metcf-window", "metcf-balanced", "metcf-split", "cusparse"):
        out = cupy.full((1000, 64), np.nan, dtype=cupy.float32)
        plan.run(cupy.asarray(B), out, kernel=kernel)
        assert np.linalg.norm(cupy.asnumpy(out) - ref) / np.linalg.norm(ref) < TF32_RTOL, kernel
    bench = plan.benchmark(B, repeats=5, warmup=2)
    assert bench["median_ms"] > 0


def test_plan_autotune_records_measurements():
    rng = np.random.default_rng(9)
    A = random_csr(3000, 3000, 10, rng)
    plan = SpmmPlan(A, format="metcf", autotune=True)
    B = rng.standard_normal((3000, 128)).astype(np.float32)
    C = plan.run(B)
    pred = plan.choice["prediction"]
    expected = {"metcf-window"} | ({"cusparse"} if not plan.deterministic else set()) | ({"metcf-balanced"} if pred["approximation_ratio"] >= 1.05 else set()) \
        | ({"metcf-split"} if pred["split_ksplit"] else set())
    assert pred["split_ksplit"] >= 2  # the device model knows the split kernel's occupancy
    assert set(plan.choice["measured_ms"]) == expected
    timed = {**plan.choice["measured_ms"], "csr-rows": plan.choice["csr_rows_ms"]}  # + the CUDA-core fallback
    assert plan.choice["kernel"] == min(timed, key=timed.get)
    by_k = plan.choice["split_ms_by_ksplit"]  # every ksplit timed; the fastest is the split candidate
    assert set(by_k) == {2, 4, 8} and plan.choice["measured_ms"]["metcf-split"] == by_k[plan.choice["ksplit"]]
    ref = csr_spmm(A, B)
    assert np.linalg.norm(C - ref) / np.linalg.norm(ref) < TF32_RTOL


VARIANTS = {  # every pipeline the config can select (the default: v6 dense fragments, 2 slices, unroll 2)
    "v0-smem": V0_CONFIG,
    "v0-smem-prefetch-b": replace(V0_CONFIG, prefetch_b=True),
    "v2-bitmap": BITMAP_CONFIG,
    "v2-bitmap-unroll3": replace(BITMAP_CONFIG, unroll=3, min_blocks_per_sm=4),
    "v2-bitmap-unroll4-split": replace(BITMAP_CONFIG, unroll=4, min_blocks_per_sm=4, blocks_per_item=3),
    "v3-bitmap-2-windows": replace(BITMAP_CONFIG, windows_per_block=2),
    "v3-bitmap-4-windows": replace(BITMAP_CONFIG, windows_per_block=4),
    "v4-bitmap-2-slices": replace(BITMAP_CONFIG, warp_slices=2, min_blocks_per_sm=6, balanced_min_blocks_per_sm=6),
    "v6-dense-default-split": replace(CONFIG, blocks_per_item=3),
    "v6-dense-1-slice": replace(CONFIG, warp_slices=1, unroll=1, min_blocks_per_sm=9, balanced_min_blocks_per_sm=8),
    "v6-dense-2-windows": replace(CONFIG, windows_per_block=2),
    "v3-8-windows-8-warps": replace(BITMAP_CONFIG, max_warps=8, windows_per_block=8, min_blocks_per_sm=4,
                                    balanced_min_blocks_per_sm=4),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("N", [7, 128, 200])
def test_pipeline_variants(name, N):
    # windows of 1..~20 blocks: group sizes that do and do not divide the unroll; a hub window; empty windows
    rng = np.random.default_rng(20 + N)
    check(random_csr(300, 400, 12, rng), N, rng, config=VARIANTS[name])
    A = random_csr(200, 3000, 2, rng).tolil()
    A[5, rng.choice(2400, 900, replace=False)] = rng.standard_normal(900)
    A[32:80] = 0
    A = sp.csr_array(A)
    A.eliminate_zeros()
    check(A, N, rng, config=VARIANTS[name])


def test_bitmap_matches_local_ids_and_rejects_non_canonical():
    rng = np.random.default_rng(30)
    M = csr_to_metcf(random_csr(120, 300, 10, rng))
    words = cupy.asnumpy(metcf_launch.bitmap(metcf_launch.upload(M)))
    block = np.repeat(np.arange(M.n_blocks), np.diff(M.tc_offset))
    expect = np.zeros((M.n_blocks, 4), dtype=np.uint32)
    np.bitwise_or.at(expect, (block, M.tc_local_id >> 5), (np.uint32(1) << (M.tc_local_id & 31)).astype(np.uint32))
    assert np.array_equal(words, expect)
    lid = M.tc_local_id.copy()
    first = int(np.flatnonzero(np.diff(M.tc_offset) >= 2)[0])
    i = int(M.tc_offset[first])
    lid[i], lid[i + 1] = lid[i + 1], lid[i]  # two nonzeros of one block out of order
    bad = metcf_launch.upload(type(M)(M.shape, M.row_window_offset, M.tc_offset, lid, M.sparse_a_to_b, M.data))
    with pytest.raises(ValueError, match="not canonical"):
        metcf_launch.bitmap(bad)


def test_plan_falls_back_to_bitmap_kernels_when_fragments_do_not_fit(monkeypatch):
    from kernels.formats.metcf.config import BITMAP_CONFIG
    from kernels.formats.metcf import plugin as spmm_mod

    rng = np.random.default_rng(31)
    A = random_csr(200, 150, 6, rng)
    B = rng.standard_normal((150, 64)).astype(np.float32)
    monkeypatch.setattr(spmm_mod, "FRAGMENT_MEMORY_FRACTION", 0.0)
    plan = SpmmPlan(A, device="gpu", format="metcf", autotune=False)
    assert plan.config == BITMAP_CONFIG and "bitmap kernels" in plan.timings["a_layout_fallback"]
    C = plan.run(B, kernel="metcf-window")
    ref = csr_spmm(A, B)
    assert np.linalg.norm(C - ref) / np.linalg.norm(ref) < TF32_RTOL


def test_split_rejects_bad_ksplit():
    rng = np.random.default_rng(40)
    dm = metcf_launch.upload(csr_to_metcf(random_csr(64, 64, 4, rng)))
    B = cupy.asarray(rng.standard_normal((64, 128)).astype(np.float32))
    with pytest.raises(ValueError, match="power of two"):
        metcf_launch.spmm_split(dm, B, ksplit=3)
    with pytest.raises(ValueError, match="split_max_warps"):
        metcf_launch.spmm_split(dm, B, ksplit=4 * metcf_launch.max_ksplit(128))
    with pytest.raises(ValueError, match="a_regs"):
        metcf_launch.spmm_split(dm, B, config=V0_CONFIG, ksplit=2)


def test_graph_ms_times_kernels_and_cusparse_on_a_private_stream():
    """graph_ms captures TC kernels and cuSPARSE (which must follow the capturing stream) and gives a positive
    per-call time; the captured calls really ran (out written)."""
    from kernels.cusparse import CusparseSpmm

    rng = np.random.default_rng(41)
    A = random_csr(2000, 1500, 10, rng, empty_cols=0)
    dm = metcf_launch.upload(csr_to_metcf(A))
    B = cupy.asarray(rng.standard_normal((1500, 128)).astype(np.float32))
    ref = csr_spmm(A, cupy.asnumpy(B))
    op = CusparseSpmm(A)
    for name, fn_out in (("window", lambda out: metcf_launch.spmm_window(dm, B, out)),
                         ("split", lambda out: metcf_launch.spmm_split(dm, B, out, ksplit=2)),
                         ("cusparse", lambda out: op.run(B, out))):
        out = cupy.full((2000, 128), np.nan, dtype=cupy.float32)
        fn_out(out)  # buffers and preprocessing outside the capture
        out.fill(np.nan)
        cupy.cuda.Device().synchronize()
        ms = launch.graph_ms(lambda: fn_out(out), repeats=5, warmup=1)
        assert 0 < ms < 50, name
        assert np.linalg.norm(cupy.asnumpy(out) - ref) / np.linalg.norm(ref) < TF32_RTOL, name
    assert set(op.tune(B)["ms"]) == {"CSR_ALG1", "CSR_ALG2", "CSR_ALG3"}


@pytest.mark.parametrize("kernel", ["metcf-window", "metcf-balanced", "metcf-split", "cusparse"])
def test_plan_capture_replays_with_new_b(kernel):
    """SpmmPlan.capture: the graph reads B's current contents on every replay (a GNN layer refilling B)."""
    rng = np.random.default_rng(42)
    A = random_csr(700, 500, 9, rng)
    plan = SpmmPlan(A, device="gpu", format="metcf", autotune=False)
    B = cupy.asarray(rng.standard_normal((500, 64)).astype(np.float32))
    out = cupy.empty((700, 64), dtype=cupy.float32)
    plan.choices[64] = {"kernel": kernel, "prediction": decide(plan, 64, None)["prediction"]}
    replay = plan.capture(B, out)
    assert replay.kernel == kernel
    for _ in range(2):
        B2 = rng.standard_normal((500, 64)).astype(np.float32)
        B[...] = cupy.asarray(B2)
        out.fill(np.nan)
        C = cupy.asnumpy(replay())
        assert np.linalg.norm(C - csr_spmm(A, B2)) / np.linalg.norm(csr_spmm(A, B2)) < TF32_RTOL, kernel
    with pytest.raises(TypeError, match="cupy arrays"):
        plan.capture(cupy.asnumpy(B), out)


def test_tf32_round_matches_ties_away_and_keeps_non_finite():
    x = np.array([1.0, 1 + 2**-11, 1 + 2**-12, -(1 + 2**-11), np.finfo(np.float32).max, np.inf, -np.inf, np.nan,
                  0.0, 1e-40], dtype=np.float32)
    got = cupy.asnumpy(launch.tf32_round(cupy.asarray(x)))
    bits = x.view(np.uint32)
    want = np.where(np.isfinite(x), (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000), bits).view(np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert got[1] == 1 + 2**-10 and got[2] == 1.0 and got[3] == -(1 + 2**-10)  # tie away from zero, below: down
    assert np.isposinf(got[4])  # the largest float rounds up to infinity, as cvt.rna does
    assert np.isposinf(got[5]) and np.isneginf(got[6]) and np.isnan(got[7])


def test_col_pairs_fill_padding_with_the_first_column_and_refuse_empty_blocks():
    rng = np.random.default_rng(43)
    M = csr_to_metcf(random_csr(100, 300, 5, rng))
    dm = metcf_launch.upload(M)
    pairs = cupy.asnumpy(metcf_launch.col_pairs(dm)).transpose(0, 2, 1).reshape(-1, 8)
    cols = M.sparse_a_to_b.reshape(-1, 8)
    assert (cols < 0).any()  # the test needs padded blocks
    assert np.array_equal(pairs, np.where(cols < 0, cols[:, :1], cols))
    bad = cols.copy()
    bad[0] = -1
    dm_bad = metcf_launch.upload(type(M)(M.shape, M.row_window_offset, M.tc_offset, M.tc_local_id, bad.reshape(-1),
                                   M.data))
    with pytest.raises(ValueError, match="first column is padding"):
        metcf_launch.col_pairs(dm_bad)


def test_the_device_model_is_measured_once_per_device_and_config():
    """selector.device_model: the same object for the same (device, config), equal to a fresh measurement; another
    config measures its own kernels."""
    from kernels.formats.metcf import selector
    from kernels.formats.metcf.config import BITMAP_CONFIG, CONFIG

    first = selector.device_model(CONFIG)
    assert selector.device_model(CONFIG) is first and selector._device_model(CONFIG) == first
    other = selector.device_model(BITMAP_CONFIG)
    assert other is selector.device_model(BITMAP_CONFIG) and other == selector._device_model(BITMAP_CONFIG)
