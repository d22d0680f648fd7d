"""The hybrid plan on the GPU (kernels.hybrid.device): SpmmPlan(format="hybrid") against float64 in every
precision, both launches (the TC part's and the CUDA-core part's) writing their own rows, NaN-poisoned out (every
element written once by some part), bitwise-repeatable C over plain, bound and graph-replayed calls, accumulate,
float32 C of a 16-bit plan, forced splits (scattered windows through the workspace copy, one run written into C's
slice, all, none), and format="auto" on a power-law graph with a dense core (hybrid_cases.dense_core), which it
splits."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)

from hybrid_cases import CASES, FORCED  # noqa: E402
from kernels.formats.csr.launch import FLOAT32_MAPS  # noqa: E402
from kernels.hybrid.parts import split_matrix  # noqa: E402
from kernels.precision import precision as as_precision  # noqa: E402
from kernels.spmm import SpmmPlan  # noqa: E402

PRECISIONS = ("float32", "float16", "bfloat16")


def rel_err(C, ref) -> float:
    return float(np.linalg.norm(C - ref) / max(np.linalg.norm(ref), 1e-30))


def poisoned(shape, dtype):
    out = cupy.empty(shape, dtype=dtype)
    out.view(cupy.uint8).fill(0xFF)  # NaN in every float type
    return out


def check(plan, A, N, prec, out_dtype=None):
    """C of ``plan`` on a NaN-poisoned out (plain, then bound and graph-replayed calls) meets the precision
    contract and is bitwise the same every time."""
    Bh = np.random.default_rng(N).standard_normal((A.shape[1], N)).astype(np.float32)
    B = cupy.asarray(prec.to_storage(Bh))
    ref = A.astype(np.float64) @ Bh.astype(np.float64)
    dtype = out_dtype or prec.storage_dtype
    first = plan.run(B, poisoned((A.shape[0], N), dtype))
    C = prec.to_float32(cupy.asnumpy(first)).astype(np.float64)
    assert np.isfinite(C).all(), "every row of C is written by one part"
    if A.nnz:
        assert rel_err(C, ref) <= prec.tolerance, rel_err(C, ref)
    else:
        assert not C.any()
    out = poisoned((A.shape[0], N), dtype)
    for _ in range(5):  # plain, bound, then CUDA-graph replays (kernels.calls.AUTO_GRAPH_AFTER = 3)
        plan.run(B, out)
        assert cupy.array_equal(out.view(cupy.uint8), first.view(cupy.uint8))
    return B, first


@pytest.mark.parametrize("N", [13, 128])
@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_model_split_against_float64(name, p_name, N):
    A = sp.csr_array(CASES[name](), dtype=np.float32)
    prec = as_precision(p_name)
    plan = SpmmPlan(A, device="gpu", dtype=p_name, format="hybrid", autotune=False)
    assert plan.choice["kernel"] == "hybrid" and plan.choice["hybrid"]["tc_rows"] + \
        plan.choice["hybrid"]["cuda_rows"] == A.shape[0]
    check(plan, A, N, prec)


@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("name", sorted(FORCED))
def test_forced_split_both_launches(name, p_name):
    make, mask = FORCED[name]
    A = sp.csr_array(make(), dtype=np.float32)
    prec = as_precision(p_name)
    H = split_matrix(A, p_name, tc_windows=mask(-(-A.shape[0] // 16)))
    plan = SpmmPlan(H, device="gpu", dtype=p_name, autotune=False)
    op = plan._op("hybrid")
    assert (op.tc_op is not None) == bool(H.tc_rows.size)
    assert (op.cuda is not None) == bool(H.cuda_rows.size or H.split.scattered)
    assert op.cuda is None or op.cuda.n_copy == (H.tc_rows.size if H.split.scattered else 0)
    B, C = check(plan, A, 64, prec)
    if p_name != "float32":
        check(plan, A, 64, prec, out_dtype=np.dtype(np.float32))
        plan32 = SpmmPlan(H, device="gpu", dtype=p_name, autotune=False, out_dtype=np.float32)
        check(plan32, A, 64, prec, out_dtype=np.dtype(np.float32))
    acc = C.copy()
    plan.run(B, acc, accumulate=True)  # out += A @ B: every row once, by its part
    want = 2 * prec.to_float32(cupy.asnumpy(C)).astype(np.float64)
    got = prec.to_float32(cupy.asnumpy(acc)).astype(np.float64)
    assert rel_err(got, want) <= prec.tolerance


@pytest.mark.parametrize("p_name", PRECISIONS)
def test_autotuned_hybrid_is_timed_against_the_csr_fallback(p_name):
    A = sp.csr_array(CASES["power_law"](), dtype=np.float32)
    prec = as_precision(p_name)
    H = split_matrix(A, p_name, tc_windows=FORCED["scattered"][1](-(-A.shape[0] // 16)))
    plan = SpmmPlan(H, device="gpu", dtype=p_name)
    B, _ = check(plan, A, 128, prec)
    choice = plan.choices[128]
    assert "hybrid" in (choice.measured_ms or {}) and "csr_rows_ms" in choice  # the fallback was timed too
    assert choice["kernel"] in ("hybrid", "csr-rows")
    if H.cuda_rows.size:  # the CUDA-core part's mappings timed, the fastest kept (float32: and "rows")
        timed = ("wide", "pair") if prec.half else ("rows",) + FLOAT32_MAPS  # N = 128
        assert choice["cuda_part_mapping"] in timed and set(choice["cuda_part_mapping_ms"]) == set(timed)
    else:
        assert "cuda_part_mapping" not in choice
    ms = plan.benchmark(B, repeats=5)["median_ms"]
    assert ms > 0


@pytest.mark.parametrize("p_name", ["float32", "float16"])
def test_auto_builds_the_hybrid_where_it_ranks_first(p_name):
    A = sp.csr_array(CASES["dense_core"](), dtype=np.float32)
    plan = SpmmPlan(A, device="gpu", dtype=p_name, format="auto")
    assert plan.ranking["built"][0] == "hybrid" and plan.ranking["estimate_us"]["hybrid"] is not None
    check(plan, A, 128, as_precision(p_name))
