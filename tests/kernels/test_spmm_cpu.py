"""SpmmPlan's CPU path (no GPU needed): the NumPy reference behind the same API."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats.metcf.container import csr_to_metcf
from kernels.reference import csr_spmm
from kernels.spmm import SpmmPlan, gpu_available, spmm


def _matrix():
    return sp.random_array((70, 45), density=0.1, format="csr", dtype=np.float32, rng=np.random.default_rng(0))


@pytest.mark.parametrize("as_metcf", [False, True])
def test_cpu_plan_matches_reference(as_metcf):
    A = _matrix()
    plan = SpmmPlan(csr_to_metcf(A) if as_metcf else A, device="cpu")
    B = np.random.default_rng(1).standard_normal((45, 7)).astype(np.float32)
    C = plan.run(B)
    assert C.dtype == np.float32 and C.shape == (70, 7)
    np.testing.assert_allclose(C, csr_spmm(A, B), rtol=1e-5, atol=1e-5)
    assert plan.choice["kernel"] == "cpu-csr"
    out = np.full((70, 7), np.nan, dtype=np.float32)
    assert plan.run(B, out) is out and np.isfinite(out).all()
    v = plan.run(B[:, 0])
    assert v.shape == (70,)
    bench = plan.benchmark(B, repeats=3, warmup=1)
    assert bench["kernel"] == "cpu-csr" and bench["median_ms"] > 0


def test_cpu_accumulate_adds_to_out():
    A = _matrix()
    plan = SpmmPlan(A, device="cpu")
    rng = np.random.default_rng(2)
    B = rng.standard_normal((45, 5)).astype(np.float32)
    C0 = rng.standard_normal((70, 5)).astype(np.float32)
    out = C0.copy()
    assert plan.run(B, out, accumulate=True) is out
    np.testing.assert_allclose(out, C0 + csr_spmm(A, B), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="pass out"):
        plan.run(B, accumulate=True)


def test_spmm_function_and_errors():
    A = _matrix()
    B = np.ones((45, 3), dtype=np.float32)
    np.testing.assert_allclose(spmm(A, B, device="cpu"), csr_spmm(A, B), rtol=1e-5)
    with pytest.raises(ValueError, match="float32"):
        SpmmPlan(A, dtype=np.float64)
    with pytest.raises(ValueError, match="balance"):
        SpmmPlan(A, balance="sometimes")
    with pytest.raises(TypeError, match="SciPy sparse matrix or a registered format"):
        SpmmPlan(np.ones((3, 3)))


@pytest.mark.skipif(gpu_available(), reason="checks the error raised when no GPU is present")
def test_device_gpu_without_gpu_raises():
    with pytest.raises(RuntimeError, match="CuPy or a CUDA device"):
        SpmmPlan(_matrix(), device="gpu")


def test_import_does_not_import_cupy():
    import subprocess
    import sys

    code = "import sys, kernels, kernels.spmm, kernels.formats.metcf.selector, kernels.launch, kernels.cusparse; " \
           "print('cupy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
