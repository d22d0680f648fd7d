"""SpmmPlan in every precision on the GPU: the accuracy contract (kernels.precision) against a float64 product of
the un-rounded inputs, bitwise determinism of every kernel a deterministic plan can choose (cuSPARSE is left out:
its CSR SpMM gave bitwise-different C on repeated calls), the cuSPARSE baselines in the same precision, float32 C
from a half plan, and graph capture of a half plan."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)

from kernels.precision import PRECISIONS, precision  # noqa: E402
from kernels.spmm import SpmmPlan  # noqa: E402

KERNELS = {"float32": ("metcf-window", "metcf-balanced", "metcf-split", "cusparse"),
           "float16": ("metcf-window", "metcf-split", "cusparse"),
           "bfloat16": ("metcf-window", "metcf-split", "cusparse")}


def matrix(n_rows, n_cols, per_row, seed):
    """Rows of Poisson length with a hub row (a window of many blocks) and a few empty rows; values N(0, 1)."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(per_row, n_rows).clip(0, n_cols)
    counts[3] = min(n_cols, 40 * per_row)  # hub
    counts[n_rows // 2: n_rows // 2 + 20] = 0  # an empty window and more
    rows = np.repeat(np.arange(n_rows), counts)
    cols = np.concatenate([rng.choice(n_cols, c, replace=False) for c in counts])
    A = sp.csr_array((rng.standard_normal(rows.size), (rows, cols)), shape=(n_rows, n_cols))
    A.sum_duplicates()
    return A


def rel_err(C, ref):
    return float(np.linalg.norm(C - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("dtype", list(PRECISIONS))
@pytest.mark.parametrize("N", [8, 72, 256])
def test_plan_meets_the_accuracy_contract_and_is_bitwise_repeatable(dtype, N):
    prec = precision(dtype)
    A = matrix(1003, 777, 9, seed=N)  # rectangular, last window partial, K not a multiple of 16
    rng = np.random.default_rng(1)
    B = rng.standard_normal((777, N)).astype(np.float32)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    plan = SpmmPlan(A, device="gpu", dtype=dtype, format="metcf", autotune=True)
    Bd = cupy.asarray(prec.to_storage(B))
    for kernel in (*KERNELS[dtype], None):  # None: the plan's own (deterministic) choice
        out = cupy.full((1003, N), np.nan, dtype=plan.out_dtype) if prec.name != "bfloat16" else \
            cupy.full((1003, N), 0x7FC0, dtype=cupy.uint16)  # poisoned: every element must be written
        C1 = plan.run(Bd, out, kernel=kernel).copy()
        C2 = plan.run(Bd, out, kernel=kernel)
        if kernel != "cusparse":  # cuSPARSE's CSR SpMM is not bitwise repeatable (kernels/cusparse.py)
            assert cupy.array_equal(C1.view(cupy.uint16 if C1.itemsize == 2 else cupy.uint32),
                                    C2.view(cupy.uint16 if C2.itemsize == 2 else cupy.uint32)), (kernel, "bitwise")
        err = rel_err(prec.to_float32(cupy.asnumpy(C1)).astype(np.float64), ref)
        assert err <= prec.tolerance, (kernel, err)
    assert plan.choices[N]["kernel"] != "cusparse" and "cusparse" not in plan.choices[N].get("measured_ms", {})


@pytest.mark.parametrize("dtype", list(PRECISIONS))
def test_nondeterministic_plan_may_choose_cusparse(dtype):
    A = matrix(3000, 2000, 3, seed=11)  # sparse rows: cuSPARSE is competitive here
    B = np.random.default_rng(5).standard_normal((2000, 64)).astype(np.float32)
    plan = SpmmPlan(A, device="gpu", dtype=dtype, format="metcf", autotune=True, deterministic=False)
    C = precision(dtype).to_float32(plan.run(B))
    assert "cusparse" in plan.choices[64]["measured_ms"]
    assert rel_err(C.astype(np.float64), A.astype(np.float64) @ B.astype(np.float64)) <= precision(dtype).tolerance


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_plan_chooses_by_timing_and_returns_float32_on_request(dtype):
    prec = precision(dtype)
    A = matrix(4000, 3000, 12, seed=5)
    B = np.random.default_rng(2).standard_normal((3000, 128)).astype(np.float32)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    plan = SpmmPlan(A, device="gpu", dtype=dtype, format="metcf", out_dtype=np.float32)
    C = plan.run(B)  # NumPy float32 B: converted to the precision on the way in
    assert C.dtype == np.float32 and rel_err(C, ref) <= prec.tolerance
    ch = plan.choices[128]
    assert "metcf-window" in ch["measured_ms"] and "cusparse" not in ch["measured_ms"]  # deterministic plan
    assert ch["precision"] == dtype
    assert ch["kernel"] == min(ch["measured_ms"], key=ch["measured_ms"].get)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_capture_replays_with_new_b(dtype):
    prec = precision(dtype)
    A = matrix(700, 500, 9, seed=7)
    plan = SpmmPlan(A, device="gpu", dtype=dtype, format="metcf", autotune=False)
    rng = np.random.default_rng(3)
    B = cupy.asarray(prec.to_storage(rng.standard_normal((500, 64)).astype(np.float32)))
    out = cupy.empty((700, 64), dtype=plan.out_dtype)
    replay = plan.capture(B, out)
    B2 = rng.standard_normal((500, 64)).astype(np.float32)
    B[...] = cupy.asarray(prec.to_storage(B2))
    replay()
    ref = A.astype(np.float64) @ prec.rounded(B2)
    assert rel_err(prec.to_float32(cupy.asnumpy(out)).astype(np.float64), ref) <= prec.tolerance


@pytest.mark.parametrize("dtype", list(PRECISIONS))
def test_cusparse_baseline_in_the_same_precision(dtype):
    from kernels.cusparse import CusparseSpmm

    prec = precision(dtype)
    A = matrix(3000, 2000, 10, seed=9)
    B = np.random.default_rng(4).standard_normal((2000, 128)).astype(np.float32)
    op = CusparseSpmm(A, dtype=dtype)
    t = op.tune(cupy.asarray(prec.to_storage(B)), repeats=3)
    assert t["best"] in t["ms"] and set(t["ms"]) | set(t["errors"]) == {"CSR_ALG1", "CSR_ALG2", "CSR_ALG3"}
    checked = CusparseSpmm(A, dtype=dtype, deterministic=True)
    try:  # the repeatability check drops what it saw differ; it may drop all (then tune says so)
        kept = checked.tune(cupy.asarray(prec.to_storage(B)), repeats=3)["ms"]
        assert not set(kept) & checked.nondeterministic
    except RuntimeError as err:
        assert "differ bitwise" in str(err)
    C = prec.to_float32(cupy.asnumpy(op.run(cupy.asarray(prec.to_storage(B)))))
    assert rel_err(C.astype(np.float64), A.astype(np.float64) @ B.astype(np.float64)) <= prec.tolerance


def test_blocked_ell_baseline_multiplies_correctly_and_refuses_oversized_padding():
    from kernels.cusparse_bell import CusparseBlockedEll

    n = 1000  # banded: every block row alike, Blocked-ELL's case; 1000 is not a multiple of 16
    A = sp.diags_array([np.full(n - abs(k), 0.5 + k / 10) for k in range(-9, 10)], offsets=list(range(-9, 10)),
                       format="csr")
    B = np.random.default_rng(6).standard_normal((n, 40)).astype(np.float32)
    op = CusparseBlockedEll(A, block=16, dtype="float16")
    Cp = op.run(op.padded_b(cupy.asarray(B.astype(np.float16))), op.padded_c(40))
    ref = A.astype(np.float64) @ B.astype(np.float16).astype(np.float64)
    assert rel_err(cupy.asnumpy(Cp[:n]).astype(np.float64), ref) <= 1e-2
    op.close()
    with pytest.raises(ValueError, match="Blocked-ELL does not apply"):
        CusparseBlockedEll(A, block=16, max_bytes=1024)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_auto_plan_built_beside_its_ranking_gives_the_base_formats_bits(dtype):
    """`auto` builds the base format's operator on the plan-build thread while the statistics are counted; its
    kernels give the bits of the same format's plan built in place."""
    from configs.names import BASE_FORMAT

    A = matrix(2000, 1500, 12, 11)
    B = cupy.asarray(precision(dtype).to_storage(np.random.default_rng(1).standard_normal((1500, 64))
                                                 .astype(np.float32)))
    auto = SpmmPlan(A, dtype=dtype, format="auto", out_dtype=np.float32)
    assert auto.ranking["ranked"] and BASE_FORMAT in auto._ops
    alone = SpmmPlan(A, dtype=dtype, format=BASE_FORMAT, out_dtype=np.float32)
    for kernel in auto._ops[BASE_FORMAT].kernels:
        C1, C2 = auto.run(B, kernel=kernel), alone.run(B, kernel=kernel)
        assert cupy.array_equal(C1, C2), kernel


def test_auto_plan_made_on_another_device_builds_there():
    """The background builds (the base format's, the CSR fallback's) run on the caller's current device (with a
    second GPU; skipped on one)."""
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two CUDA devices")
    from configs.names import BASE_FORMAT

    A = matrix(2000, 1500, 12, 12)
    with cupy.cuda.Device(1):
        plan = SpmmPlan(A, format="auto")
        B = cupy.asarray(np.random.default_rng(2).standard_normal((1500, 32)).astype(np.float32))
        C = plan.run(B)
        assert C.device.id == 1 and plan._ops[BASE_FORMAT]._dm.row_window_offset.device.id == 1
        assert "csr-rows" in plan._fallbacks and plan._op("csr-rows")._get().indices.device.id == 1
    ref = A.toarray().astype(np.float64) @ cupy.asnumpy(B).astype(np.float64)
    assert rel_err(cupy.asnumpy(C), ref) < 2e-3
