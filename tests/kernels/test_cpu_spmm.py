"""kernels.cpu_spmm: the multithreaded float32 CSR SpMM, against the float64 reference, on shapes that hit the
row-block remainders, and as SpmmPlan's float32 CPU path."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import kernels.cpu_spmm
from kernels.cpu_spmm import CpuCsr, cpu_spmm, default_threads, row_blocks
from kernels.formats.metcf.container import csr_to_metcf
from kernels.spmm import SpmmPlan

# float32 products with FP32 accumulation: rows of up to ~600 nonzeros, so a few ulps of float32 relative to the
# norm (1e-5 leaves two orders of margin; TF32 would be 1e-3).
RTOL = 1e-5


def _rel(C, ref):
    return np.linalg.norm(C.astype(np.float64) - ref) / max(np.linalg.norm(ref), 1e-300)


def _random(m, n, nnz, seed):
    rng = np.random.default_rng(seed)
    rows, cols = rng.integers(0, m, nnz), rng.integers(0, n, nnz)
    return sp.csr_array((rng.standard_normal(nnz), (rows, cols)), shape=(m, n))


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("N", [1, 7, 33])
def test_matches_float64_reference(threads, N, monkeypatch):
    monkeypatch.setattr(kernels.cpu_spmm, "MIN_PARALLEL_FMAS", 0)  # threads even on this small product
    A = _random(7 * 41, 53, 333, seed=N)  # remainders everywhere: 287 rows, 333 nnz, odd N
    B = np.random.default_rng(1).standard_normal((53, N)).astype(np.float32)
    C = CpuCsr(A, threads=threads).run(B)
    assert C.dtype == np.float32 and C.shape == (287, N)
    assert _rel(C, A.toarray() @ B.astype(np.float64)) < RTOL


def test_same_bits_for_every_thread_count(monkeypatch):
    monkeypatch.setattr(kernels.cpu_spmm, "MIN_PARALLEL_FMAS", 0)
    A = _random(500, 400, 6000, seed=3)
    B = np.random.default_rng(2).standard_normal((400, 16)).astype(np.float32)
    C1 = CpuCsr(A, threads=1).run(B)
    for t in (2, 5):
        np.testing.assert_array_equal(CpuCsr(A, threads=t, blocks_per_thread=3).run(B), C1)


def test_empty_rows_zero_nnz_and_a_hub_row(monkeypatch):
    monkeypatch.setattr(kernels.cpu_spmm, "MIN_PARALLEL_FMAS", 0)
    # . . . .      row 0 empty
    # x x x x      row 1 dense (the hub: one block holds it)
    # . . . .      rows 2.. empty
    A = sp.csr_array((np.arange(1.0, 5.0), np.arange(4), [0, 0, 4, 4, 4]), shape=(4, 4))
    B = np.arange(8, dtype=np.float32).reshape(4, 2)
    C = cpu_spmm(A, B, threads=2)
    np.testing.assert_array_equal(C, A.toarray().astype(np.float32) @ B)
    Z = sp.csr_array((5, 3), dtype=np.float32)
    np.testing.assert_array_equal(cpu_spmm(Z, np.ones((3, 2), np.float32), threads=2), np.zeros((5, 2)))
    assert cpu_spmm(sp.csr_array((0, 3)), np.ones((3, 2)), threads=2).shape == (0, 2)


def test_vector_out_and_input_checks():
    A = _random(30, 20, 90, seed=5)
    b = np.random.default_rng(0).standard_normal(20)
    op = CpuCsr(A, threads=2)
    v = op.run(b)
    assert v.shape == (30,) and _rel(v, A @ b) < RTOL
    out = np.full((30, 3), np.nan, dtype=np.float32)
    assert op.run(np.ones((20, 3)), out) is out and np.isfinite(out).all()
    with pytest.raises(ValueError, match=r"B has shape \(21, 3\), expected \(20, N\)"):
        op.run(np.ones((21, 3)))
    with pytest.raises(ValueError, match="expected C-contiguous float32"):
        op.run(np.ones((20, 3)), np.empty((30, 3)))
    with pytest.raises(TypeError, match="complex"):
        CpuCsr(A.astype(np.complex64))
    with pytest.raises(ValueError, match="threads is 0"):
        CpuCsr(A, threads=0)


def test_row_blocks_balance_nonzeros():
    indptr = np.array([0, 100, 100, 101, 102, 103, 104, 105, 106])  # one hub row, then short rows
    bounds = row_blocks(indptr, 4)
    assert bounds[0] == 0 and bounds[-1] == 8 and np.all(np.diff(bounds) > 0)
    assert bounds[1] == 1  # the hub row alone fills the first block
    assert row_blocks(np.zeros(1, dtype=np.int32), 4).tolist() == [0]


def test_threads_from_environment(monkeypatch):
    monkeypatch.setenv("TCSPMM_CPU_THREADS", "3")
    assert default_threads() == 3 and CpuCsr(_random(5, 5, 5, 0)).threads == 3
    monkeypatch.setenv("TCSPMM_CPU_THREADS", "many")
    with pytest.raises(ValueError, match="TCSPMM_CPU_THREADS is 'many'"):
        default_threads()
    monkeypatch.delenv("TCSPMM_CPU_THREADS")
    assert default_threads() >= 1


@pytest.mark.parametrize("as_metcf", [False, True])
def test_spmm_plan_float32_cpu_uses_it(as_metcf):
    A = _random(70, 45, 400, seed=7).astype(np.float32)
    plan = SpmmPlan(csr_to_metcf(A) if as_metcf else A, device="cpu")
    B = np.random.default_rng(1).standard_normal((45, 9)).astype(np.float32)
    C = plan.run(B)
    assert isinstance(plan._cpu.csr, CpuCsr)  # the float32 product path, not the float64 reference
    np.testing.assert_array_equal(C, plan._cpu.csr.run(B))
    assert _rel(C, A.toarray().astype(np.float64) @ B) < RTOL
    out = np.ones((70, 9), dtype=np.float32)
    np.testing.assert_allclose(plan.run(B, out, accumulate=True), 1 + C, rtol=1e-6)


def test_half_plans_keep_the_reference():
    A = _random(40, 30, 200, seed=8).astype(np.float32)
    plan = SpmmPlan(A, device="cpu", dtype="float16")
    plan.run(np.ones((30, 4), dtype=np.float16))
    assert plan._cpu.csr is None and plan.choice["kernel"] == "cpu-reference"  # the float64 twin, no CpuCsr
