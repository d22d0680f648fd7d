"""GPU CSR -> ME-TCF conversion (CuPy) equals the CPU converter array by array, dtypes included."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from kernels.formats.metcf.container import METCF, csr_to_metcf, metcf_to_csr  # noqa: E402
from kernels.formats.metcf.gpu import (DeviceMETCF, csr_to_metcf_gpu, csr_to_metcf_gpu_from_scipy,  # noqa: E402
                                      metcf_to_csr_gpu)

# The CPU tests' edge-case matrices, loaded by path (tests/ is not a package under --import-mode=importlib).
_spec = importlib.util.spec_from_file_location("_metcf_cases", Path(__file__).with_name("test_metcf.py"))
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)
CASES = dict(cases.CASES, tiny=cases.tiny)
FIELDS = ("row_window_offset", "tc_offset", "tc_local_id", "sparse_a_to_b", "data")


def power_law(n_rows=5000, n_cols=3000, nnz=200_000, seed=0):
    """Skewed rows (Pareto degrees) and clustered columns: many partial blocks, a few wide windows."""
    rng = np.random.default_rng(seed)
    deg = rng.pareto(1.5, n_rows) + 1.0
    deg = np.minimum(np.floor(deg / deg.sum() * nnz).astype(np.int64) + 1, n_cols)
    rows = np.repeat(np.arange(n_rows), deg)
    cols = (rows + rng.geometric(0.01, rows.size)) % n_cols
    A = sp.csr_array((rng.standard_normal(rows.size).astype(np.float32), (rows, cols)), shape=(n_rows, n_cols))
    A.sum_duplicates()
    return A


def assert_equal_metcf(G, M):
    assert G.shape == M.shape
    for field in FIELDS:
        got, want = getattr(G, field), getattr(M, field)
        assert got.dtype == want.dtype, f"{field}: dtype {got.dtype}, expected {want.dtype}"
        np.testing.assert_array_equal(got, want, err_msg=field)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_equals_cpu(name):
    A = CASES[name]()
    D = csr_to_metcf_gpu_from_scipy(A)
    assert isinstance(D, DeviceMETCF) and all(isinstance(D[f], cupy.ndarray) for f in FIELDS)
    G = D.to_host()
    G.validate(full=True)
    assert_equal_metcf(G, csr_to_metcf(A))


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_gpu_equals_cpu_power_law_device_inputs(index_dtype):
    A = power_law()
    D = csr_to_metcf_gpu(cupy.asarray(A.indptr.astype(index_dtype)), cupy.asarray(A.indices.astype(index_dtype)),
                         cupy.asarray(A.data), A.shape)
    assert_equal_metcf(D.to_host(), csr_to_metcf(A))


def test_column_order_within_rows_does_not_matter():
    A = power_law(n_rows=300, n_cols=500, nnz=6000, seed=1)
    rng = np.random.default_rng(2)
    perm = np.concatenate([lo + rng.permutation(hi - lo) for lo, hi in zip(A.indptr[:-1], A.indptr[1:])])
    D = csr_to_metcf_gpu(A.indptr, A.indices[perm], A.data[perm], A.shape)
    assert_equal_metcf(D.to_host(), csr_to_metcf(A))


def test_indptr_length_is_checked():
    A = CASES["tiny"]()
    with pytest.raises(ValueError, match="indptr has 19 entries, expected n_rows \\+ 1 = 20"):
        csr_to_metcf_gpu(A.indptr, A.indices, A.data, (19, 12))


def assert_same_scipy_csr(G, C):
    assert G.shape == C.shape and G.has_canonical_format
    for field in ("indptr", "indices", "data"):
        got, want = getattr(G, field), getattr(C, field)
        assert got.dtype == want.dtype, f"{field}: dtype {got.dtype}, expected {want.dtype}"
        np.testing.assert_array_equal(got, want, err_msg=field)


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("name", sorted(CASES) + ["power_law"])
def test_to_csr_on_the_gpu_equals_the_host(name, width):
    """metcf_to_csr_gpu (a GPU plan's inverse conversion) equals metcf_to_csr array by array: every edge case,
    both block widths, float16 values for the k16 blocks (moved as bits, never read)."""
    A = power_law() if name == "power_law" else CASES[name]()
    M = csr_to_metcf(A, width=width)
    if width == 16:
        M = METCF(M.shape, M.row_window_offset, M.tc_offset, M.tc_local_id, M.sparse_a_to_b, M.data.astype(np.float16))
    assert_same_scipy_csr(metcf_to_csr_gpu(M), metcf_to_csr(M))


def test_to_csr_on_the_gpu_sorts_renumbered_blocks():
    """A shard's halo remap may leave a window's block columns out of order: the GPU conversion sorts by
    (row, col) as the host's lexsort fallback does."""
    A = power_law(seed=4)
    M = csr_to_metcf(A)
    rename = np.random.default_rng(3).permutation(A.shape[1])
    R = METCF(M.shape, M.row_window_offset, M.tc_offset, M.tc_local_id,
              np.where(M.sparse_a_to_b >= 0, rename[M.sparse_a_to_b], -1).astype(M.sparse_a_to_b.dtype), M.data)
    got = metcf_to_csr_gpu(R)
    assert_same_scipy_csr(got, metcf_to_csr(R))
    want = sp.csr_array((A.data, rename[A.indices], A.indptr), shape=A.shape)
    want.sort_indices()
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.data, want.data)


def test_a_plan_given_metcf_builds_its_csr_candidates_on_the_gpu():
    """SpmmPlan given ME-TCF takes the CSR of its CUDA-core candidates from the GPU conversion, once."""
    from kernels.spmm import SpmmPlan

    A = power_law(seed=2)
    M = csr_to_metcf(A)
    plan = SpmmPlan(M)
    first = plan._csr_of()
    assert first is plan._csr_of()
    assert_same_scipy_csr(first, metcf_to_csr(M))
    B = cupy.random.default_rng(0).standard_normal((A.shape[1], 32), dtype=cupy.float32)
    C = cupy.asnumpy(plan.run(B, kernel="csr-rows"))
    ref = A.astype(np.float64) @ cupy.asnumpy(B).astype(np.float64)
    assert np.linalg.norm(C - ref) <= 1e-3 * np.linalg.norm(ref)
