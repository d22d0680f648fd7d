"""GPU BCSR kernels (kernels/launch_bcsr.py, kernels/cuda/bcsr_spmm.cu) for TF32 / FP16 / BF16 against float64:
every call on a NaN-poisoned out (every element must be written), twice (bit-identical), every ksplit; the plan
with format="bcsr" and "auto"."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)

from kernels import launch_bcsr as lb  # noqa: E402
from kernels.formats import get  # noqa: E402
from kernels.precision import precision  # noqa: E402
from kernel_cases import BASE_CASES, random_csr  # noqa: E402

PRECISIONS = ("float32", "float16", "bfloat16")
# Against the float64 product of the precision-rounded A and B (TF32 products are exact in fp32, 16-bit ones too):
# only fp32 summation order differs, ~1e-6 relative; the hub row sums 40,000 products, hence 1e-4 (a wrong slot or
# B row gives O(1)). A 16-bit C adds one rounding per element: 2^-11 float16, 2^-8 bfloat16.
ROUNDED_RTOL = {"float32": 1e-4, "float16": 1e-3, "bfloat16": 8e-3}
NAN = {"float32": np.float32(np.nan), "float16": np.float16(np.nan)}

CASES = {**{k: v for k, v in BASE_CASES.items() if k != "explicit_zeros"},
         "partial_last_blocks": lambda: random_csr((37, 45), 900, seed=11),  # 37 = 2 x 16 + 5 rows, 45 columns
         "block_structured": lambda: sp.csr_array(sp.kron(sp.random(20, 30, density=0.2, random_state=3),
                                                          np.ones((4, 4))))}


def host_b(K, N, seed=1):
    return np.random.default_rng(seed).standard_normal((K, N)).astype(np.float32)


def rounded_ref(A, B, p):
    """float64 product of A and B rounded to the precision (TF32 for float32), what the Tensor Cores multiply."""
    A = sp.csr_array(A, dtype=np.float32)
    Ar = sp.csr_array((p.rounded(A.data), A.indices, A.indptr), shape=A.shape)
    return Ar @ p.rounded(B)


def poisoned(shape, dtype_name, p):
    if dtype_name == "float32":
        return cupy.full(shape, np.nan, dtype=cupy.float32)
    bits = 0x7E00 if p.name == "float16" else 0x7FC0
    return cupy.full(shape, bits, dtype=cupy.uint16).view(p.storage_dtype)


def rel_err(C, ref):
    return float(np.linalg.norm(C - ref) / max(np.linalg.norm(ref), 1e-300))


@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("N", [1, 13, 64, 136])
def test_kernel_against_float64(name, p_name, N):
    p = precision(p_name)
    A = sp.csr_array(CASES[name](), dtype=np.float32)
    A.eliminate_zeros()
    X = get("bcsr").convert(A, p)
    dm = lb.upload(X, p_name)
    B = host_b(A.shape[1], N)
    Bd = cupy.asarray(p.to_storage(B))
    ref = rounded_ref(A, B, p)
    outs = ["float32"] if p_name == "float32" else ["float32", "half"]
    for ksplit in (1, *lb.ksplits(N)):
        for out_kind in outs:
            dtype = np.float32 if out_kind == "float32" else p.storage_dtype
            tol = ROUNDED_RTOL["float32" if out_kind == "float32" else p_name]
            runs = []
            for _ in range(2):
                out = poisoned((A.shape[0], N), out_kind, p)
                lb.spmm(dm, Bd, out, ksplit=ksplit)
                runs.append(cupy.asnumpy(out))
            assert np.array_equal(runs[0].view(np.uint8), runs[1].view(np.uint8)), (ksplit, out_kind)  # bitwise
            C = p.to_float32(runs[0]).astype(np.float64) if out_kind == "half" else runs[0].astype(np.float64)
            assert np.isfinite(C).all(), (ksplit, out_kind)  # every element written (out was NaN)
            if A.nnz:
                assert rel_err(C, ref) < tol, (ksplit, out_kind, rel_err(C, ref))
            else:
                assert not C.any()


@pytest.mark.parametrize("p_name", PRECISIONS)
def test_contract_against_unrounded_float64(p_name):
    p = precision(p_name)
    A = sp.csr_array(CASES["block_structured"](), dtype=np.float32)
    B = host_b(A.shape[1], 128, seed=4)
    C = lb.spmm(lb.upload(get("bcsr").convert(A, p), p_name), cupy.asarray(p.to_storage(B)))
    exact = A.astype(np.float64) @ B.astype(np.float64)
    assert rel_err(cupy.asnumpy(C).astype(np.float64), exact) < p.tolerance


@pytest.mark.parametrize("p_name", PRECISIONS)
def test_accumulate_adds_to_out(p_name):
    p = precision(p_name)
    A = sp.csr_array(random_csr((70, 50), 700, seed=3), dtype=np.float32)
    dm = lb.upload(get("bcsr").convert(A, p), p_name)
    B = host_b(50, 24)
    Bd = cupy.asarray(p.to_storage(B))
    base = cupy.asarray(np.random.default_rng(5).standard_normal((70, 24)).astype(np.float32))
    out = base.copy()
    lb.spmm(dm, Bd, out, accumulate=True)
    ref = cupy.asnumpy(base).astype(np.float64) + rounded_ref(A, B, p)
    assert rel_err(cupy.asnumpy(out).astype(np.float64), ref) < ROUNDED_RTOL["float32"]


def test_launcher_checks():
    p = precision("float16")
    A = sp.csr_array(random_csr((40, 30), 200, seed=2), dtype=np.float32)
    dm = lb.upload(get("bcsr").convert(A, p), "float16")
    with pytest.raises(TypeError, match="float16"):
        lb.spmm(dm, cupy.zeros((30, 8), dtype=cupy.float32))
    with pytest.raises(ValueError, match="B has 31 rows, expected A's column count 30"):
        lb.spmm(dm, cupy.zeros((31, 8), dtype=cupy.float16))
    with pytest.raises(ValueError, match="ksplit is 3"):
        lb.spmm(dm, cupy.zeros((30, 8), dtype=cupy.float16), ksplit=3)
    with pytest.raises(ValueError, match="needs 16-wide"):
        lb.upload(get("bcsr").convert(A, precision("float32")), "float16")


@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("fmt", ["bcsr", "auto"])
def test_plan(fmt, p_name):
    from kernels.spmm import SpmmPlan

    p = precision(p_name)
    A = sp.csr_array(CASES["block_structured"](), dtype=np.float32)
    B = host_b(A.shape[1], 128, seed=6)
    plan = SpmmPlan(A, dtype=p_name, format=fmt, out_dtype=np.float32)
    C1, C2 = plan.run(B), plan.run(B)
    assert np.array_equal(C1, C2)
    assert plan.choice["format"] in (("bcsr",) if fmt == "bcsr" else ("bcsr", "metcf"))
    if fmt == "auto":
        assert set(plan.choice["formats_measured_ms"]) == {"metcf", "bcsr"}
    exact = A.astype(np.float64) @ B.astype(np.float64)
    assert rel_err(C1.astype(np.float64), exact) < p.tolerance
    # the converted object, as the SpMM stage passes it: the same kernel gives the same bits
    plan2 = SpmmPlan(get("bcsr").convert(A, p), dtype=p_name, format="bcsr", out_dtype=np.float32)
    assert plan2.choice["format"] == "bcsr"
    assert np.array_equal(plan2.run(B, kernel="bcsr-window"), plan.run(B, kernel="bcsr-window"))
