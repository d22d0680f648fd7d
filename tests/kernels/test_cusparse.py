"""cuSPARSE SpMM baseline (CSR_ALG1/2/3, row-major B and C) against the float64 reference; torch cross-check."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from kernels.cusparse import ALGORITHMS, CusparseSpmm  # noqa: E402
from kernels.reference import csr_spmm  # noqa: E402

FP32_RTOL = 1e-5  # fp32 products and sums (no TF32 in cuSPARSE's CSR SpMM): far below 1e-5 relative to the norm


def _matrix(seed, shape=(700, 333), density=0.02):
    return sp.random_array(shape, density=density, format="csr", dtype=np.float32, rng=np.random.default_rng(seed))


@pytest.mark.parametrize("alg", list(ALGORITHMS))
@pytest.mark.parametrize("N", [1, 7, 128])
def test_each_algorithm(alg, N):
    A = _matrix(N)
    op = CusparseSpmm(A)
    B = np.random.default_rng(1).standard_normal((A.shape[1], N)).astype(np.float32)
    out = cupy.full((A.shape[0], N), np.nan, dtype=cupy.float32)
    try:
        op.run(cupy.asarray(B), out, algorithm=alg)
    except RuntimeError as err:  # an algorithm cuSPARSE refuses for this layout must say so, not compute garbage
        pytest.skip(f"cuSPARSE refused {alg} for N={N}: {err}")
    ref = csr_spmm(A, B)
    C = cupy.asnumpy(out)
    assert np.linalg.norm(C - ref) / np.linalg.norm(ref) < FP32_RTOL


@pytest.mark.parametrize("alg", list(ALGORITHMS))
def test_accumulate_adds_to_out(alg):
    """accumulate=True runs with beta = 1 (ALG3 after its beta = 0 preprocessing too): out += A @ B."""
    A = _matrix(5)
    op = CusparseSpmm(A)
    rng = np.random.default_rng(3)
    B = rng.standard_normal((A.shape[1], 32)).astype(np.float32)
    C0 = rng.standard_normal((A.shape[0], 32)).astype(np.float32)
    out = cupy.asarray(C0)
    try:
        op.run(cupy.asarray(B), out, algorithm=alg, accumulate=True)
    except RuntimeError as err:
        pytest.skip(f"cuSPARSE refused {alg}: {err}")
    ref = C0 + csr_spmm(A, B)
    assert np.linalg.norm(cupy.asnumpy(out) - ref) / np.linalg.norm(ref) < FP32_RTOL
    empty = CusparseSpmm(sp.csr_array(A.shape, dtype=np.float32))
    out = cupy.asarray(C0)
    empty.run(cupy.asarray(B), out, accumulate=True)  # nothing to add: out stays
    assert cupy.array_equal(out, cupy.asarray(C0))


def test_tune_keeps_fastest_and_reuses_descriptors():
    A = _matrix(3, (5000, 4000), 0.002)
    op = CusparseSpmm(A)
    B1 = cupy.asarray(np.random.default_rng(2).standard_normal((4000, 64)).astype(np.float32))
    info = op.tune(B1, repeats=5, warmup=2)
    assert info["best"] == min(info["ms"], key=info["ms"].get)
    B2 = B1 * 2  # a new pointer: descriptors are re-pointed, not rebuilt
    C = cupy.asnumpy(op.run(B2))
    ref = csr_spmm(A, cupy.asnumpy(B2))
    assert np.linalg.norm(C - ref) / np.linalg.norm(ref) < FP32_RTOL


def test_empty_matrix():
    op = CusparseSpmm(sp.csr_array((10, 5), dtype=np.float32))
    out = cupy.full((10, 3), np.nan, dtype=cupy.float32)
    op.run(cupy.ones((5, 3), dtype=cupy.float32), out)
    assert cupy.all(out == 0)


# torch 2.11 warns on every CSR tensor it builds ("Sparse CSR tensor support is in beta state"); not ours to fix.
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state:UserWarning")
def test_torch_cross_check():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    A = _matrix(4)
    B = np.random.default_rng(5).standard_normal((A.shape[1], 32)).astype(np.float32)
    with torch.sparse.check_sparse_tensor_invariants(True):  # opting in explicitly silences torch's UserWarning
        At = torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(np.int64)),
                                     torch.from_numpy(A.indices.astype(np.int64)), torch.from_numpy(A.data),
                                     size=A.shape, device="cuda")
    Ct = (At @ torch.from_numpy(B).cuda()).cpu().numpy()
    C = cupy.asnumpy(CusparseSpmm(A).run(cupy.asarray(B)))
    assert np.linalg.norm(C - Ct) / np.linalg.norm(Ct) < FP32_RTOL
