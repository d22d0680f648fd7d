"""kernels.cpu_simd's register tiles inside kernels.cpu_spmm: every N (tile widths 128 ... 4, the overlapping
remainder tile, the plain loop below 4 columns) gives C bitwise equal to float32 sums in nonzero order."""
from __future__ import annotations

import numba
import numpy as np
import pytest
import scipy.sparse as sp

from kernels.cpu_simd import vaxpy, vstore, vzero
from kernels.cpu_spmm import CpuCsr


def _in_order(A, B):
    """C[i] = ((0 + a0 * B[j0]) + a1 * B[j1]) + ... in float32, one rounding per multiply and per add."""
    C = np.zeros((A.shape[0], B.shape[1]), dtype=np.float32)
    for i in range(A.shape[0]):
        for p in range(A.indptr[i], A.indptr[i + 1]):
            C[i] = C[i] + np.float32(A.data[p]) * B[A.indices[p]]
    return C


@pytest.mark.parametrize("N", [1, 3, 4, 5, 7, 8, 12, 15, 16, 17, 31, 40, 64, 100, 129, 200, 256])
def test_every_width_bitwise_equal_to_ordered_sums(N):
    # 37 rows x 29 columns, 300 nonzeros (row lengths 0 .. ~20), values and B random float32
    rng = np.random.default_rng(N)
    A = sp.random_array((37, 29), density=300 / (37 * 29), format="csr", dtype=np.float32, rng=rng)
    A.sort_indices()
    B = rng.standard_normal((29, N), dtype=np.float32)
    np.testing.assert_array_equal(CpuCsr(A, threads=1).run(B), _in_order(A, B))


def test_vector_primitives_one_row():
    @numba.njit
    def axpy_row(B, C, a):
        s = vzero(16)
        s = vaxpy(s, a, B, 1, 2)  # s = a * B[1, 2:18]
        s = vaxpy(s, a, B, 0, 0)  # s += a * B[0, 0:16]
        vstore(C, 0, 4, s)  # C[0, 4:20] = s

    B = np.arange(40, dtype=np.float32).reshape(2, 20)
    C = np.zeros((1, 24), dtype=np.float32)
    axpy_row(B, C, np.float32(0.5))
    expect = np.zeros(24, dtype=np.float32)
    expect[4:20] = 0.5 * B[1, 2:18] + 0.5 * B[0, :16]
    np.testing.assert_array_equal(C[0], expect)


@pytest.mark.parametrize("N", [16, 32])
def test_misaligned_b_copied_once_into_a_kept_buffer(N):
    # B 16 bytes past a 64-byte boundary (as NumPy's large arrays start): run copies it into an aligned buffer,
    # which it keeps for the next call; C is the same bits as from an aligned B
    rng = np.random.default_rng(7)
    A = sp.random_array((50, 40), density=0.2, format="csr", dtype=np.float32, rng=rng)  # 400 nnz >= 2 per column
    raw = np.empty(40 * N * 4 + 128, dtype=np.uint8)
    off = -raw.ctypes.data % 64 + 16
    B = raw[off:off + 40 * N * 4].view(np.float32).reshape(40, N)
    B[...] = rng.standard_normal((40, N), dtype=np.float32)
    assert B.ctypes.data % 64 == 16
    op = CpuCsr(A, threads=1)
    C = op.run(B)
    kept = op._spare[0]
    np.testing.assert_array_equal(C, _in_order(A, B))
    np.testing.assert_array_equal(op.run(B), C)
    assert len(op._spare) == 1 and op._spare[0] is kept  # reused, not a new one per call
