"""The SpMM stage's decisions, with the GPU pieces replaced by CPU stand-ins that report chosen timings."""
import numpy as np
import pytest
import scipy.sparse as sp

import kernels.spmm
from tasks import execute


class FakeGpuPlan:
    """Stands in for SpmmPlan on a GPU: the product of the reordered matrix, timed at ``KERNEL_MS``."""
    KERNEL_MS = 2.0

    def __init__(self, M, device, dtype="float32", format="metcf", deterministic=True, allow_overflow=False):
        self.M, self.device = M, "gpu"
        self.choice = {"kernel": "metcf-window", "reason": "model", "device": "fake"}

    def run(self, B):
        return (self.M @ B).astype(np.float32)

    def benchmark(self, B, repeats):
        return {"median_ms": self.KERNEL_MS}


@pytest.fixture
def problem():
    A = sp.random(300, 200, density=0.05, format="csr", random_state=np.random.default_rng(1), dtype=np.float32)
    perm = np.random.default_rng(2).permutation(300)
    B = execute.dense_b(200, 16, seed=3)
    return A, perm, B


@pytest.mark.parametrize("original_ms, expect", [(1.0, "cusparse-original-order"), (3.0, "metcf-window")])
def test_one_device_never_slower_than_cusparse_on_the_original_order(monkeypatch, problem, original_ms, expect):
    A, perm, B = problem
    monkeypatch.setattr(kernels.spmm, "SpmmPlan", FakeGpuPlan)
    timed = {}

    def fake_baseline(matrix, B, repeats, dtype="float32"):
        key = "original" if (matrix != A).nnz == 0 else "reordered"
        timed[key] = True
        return {"algorithm": "CSR_ALG2", "median_ms": original_ms if key == "original" else 2.5}

    monkeypatch.setattr(execute, "cusparse_baseline", fake_baseline)
    monkeypatch.setattr(execute, "cusparse_product", lambda A, B, algorithm, dtype="float32": (A @ B).astype(np.float32))
    C, result = execute._run_one_device(A, perm, A[perm], B, "auto", repeats=3, deterministic=False)
    assert timed == {"original": True, "reordered": True}
    assert result["kernel"] == expect
    assert result["kernel_ms"] == min(original_ms, FakeGpuPlan.KERNEL_MS)
    assert result["baseline"]["reordered"]["speedup"] == pytest.approx(2.5 / FakeGpuPlan.KERNEL_MS)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)  # original row order either way


def test_deterministic_run_times_cusparse_but_never_falls_back_to_it(monkeypatch, problem):
    A, perm, B = problem
    monkeypatch.setattr(kernels.spmm, "SpmmPlan", FakeGpuPlan)
    monkeypatch.setattr(execute, "cusparse_baseline", lambda matrix, B, repeats, dtype="float32":
                        {"algorithm": "CSR_ALG2", "median_ms": 0.5})
    C, result = execute._run_one_device(A, perm, A[perm], B, "auto", repeats=3)
    assert result["kernel"] == "metcf-window" and result["kernel_ms"] == FakeGpuPlan.KERNEL_MS
    assert result["baseline"]["original"]["speedup"] == pytest.approx(0.25)  # reported, not hidden


def test_cpu_path_reports_no_baseline(problem):
    from kernels.formats.metcf.container import csr_to_metcf

    A, perm, B = problem
    C, result = execute._run_one_device(A, perm, csr_to_metcf(A[perm]), B, "cpu", repeats=2)
    assert result["kernel"] == "cpu-csr" and result["baseline"] == {}
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad, message", [("0", "at least 1"), ("many", "expected auto, cpu, all")])
def test_bad_devices_are_input_errors(bad, message):
    with pytest.raises(execute.InputError, match=message):
        execute.parse_devices(bad)


def _has_gpu() -> bool:
    return kernels.spmm.gpu_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _has_gpu(), reason="needs CuPy and a CUDA device")
@pytest.mark.parametrize("force_fallback", [False, True])
def test_one_device_on_the_gpu_with_and_without_the_original_order_fallback(monkeypatch, problem, force_fallback):
    # The real SpmmPlan, cuSPARSE baseline and cuSPARSE product; which branch runs is forced by making one side's
    # measured time lose (on a small matrix either may win on its own), so both branches return C in the original
    # row order within TF32 tolerance.
    from kernels.formats.metcf.container import csr_to_metcf

    A, perm, B = problem
    if force_fallback:
        real = kernels.spmm.SpmmPlan.benchmark
        monkeypatch.setattr(kernels.spmm.SpmmPlan, "benchmark",
                            lambda self, B, repeats=20, **kw: {**real(self, B, repeats=repeats), "median_ms": 1e9})
    else:
        real_baseline = execute.cusparse_baseline
        monkeypatch.setattr(execute, "cusparse_baseline",
                            lambda matrix, B, repeats, dtype="float32": {**real_baseline(matrix, B, repeats, dtype),
                                                                        "median_ms": 1e9})
    # the original-order fallback is cuSPARSE: only a plan that gives up determinism may take it
    C, result = execute._run_one_device(A, perm, csr_to_metcf(A[perm]), B, "gpu", repeats=5, deterministic=False)
    assert set(result["baseline"]) == {"original", "reordered"}
    assert (result["kernel"] == "cusparse-original-order") == force_fallback
    ref = A.astype(np.float64) @ B.astype(np.float64)
    assert np.linalg.norm(C - ref) / np.linalg.norm(ref) < execute.REL_TOL["tf32"]


@pytest.mark.parametrize("fmt, devices, expect", [("auto", "2", "metcf"), ("auto", "all", "metcf"),
                                                  ("auto", 3, "metcf"), ("auto", "auto", "auto"),
                                                  ("auto", "cpu", "auto"), ("auto", "1", "auto"),
                                                  ("cvse", "2", "cvse"), ("hybrid", "auto", "hybrid")])
def test_auto_over_several_devices_runs_the_base_format(fmt, devices, expect):
    from configs.names import BASE_FORMAT

    assert BASE_FORMAT == "metcf"
    assert execute.run_format(fmt, devices) == expect
