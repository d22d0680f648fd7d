"""The CSR format (kernels/formats/csr/): conversion and its inverse, row-block concatenation, the float64 twin,
the store round trip through its layout (non-empty rows as tiles, grouped by 16-row window), O(1) and O(nnz) validation, and the CPU
plan by name. Its sharding runs in tests/kernels/test_shard.py with every registered format's."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernel_cases import BASE_CASES, random_csr
from kernels.formats import get
from kernels.formats.csr.container import CSR, csr_concat, csr_from_arrays, csr_spmm, csr_stats, to_scipy
from kernels.precision import precision
from kernels.spmm import SpmmPlan
from storage import BlockStore

FMT = get("csr")


@pytest.mark.parametrize("name", sorted(BASE_CASES))
def test_convert_and_back_is_the_canonical_matrix(name):
    A = sp.csr_array(BASE_CASES[name]()).astype(np.float32)
    X = FMT.convert(A, precision("float32"))
    X.validate(full=True)
    assert X.format_name == "csr" and X.nnz == A.nnz
    np.testing.assert_array_equal(to_scipy(X).toarray(), A.toarray())


def test_bfloat16_values_stay_bits_and_the_twin_widens_them():
    A = random_csr((40, 30), 200, seed=2).astype(np.float32)
    p = precision("bfloat16")
    X = FMT.convert(A, p)
    assert X.data.dtype == np.uint16
    B = np.random.default_rng(1).standard_normal((30, 3))
    np.testing.assert_allclose(csr_spmm(X, B), sp.csr_array(p.rounded(A.toarray())) @ B, rtol=1e-12)


def test_row_blocks_concatenate_to_the_whole():
    A = random_csr((70, 50), 600, seed=4).astype(np.float32)
    p = precision("float32")
    whole = FMT.convert(A, p)
    pieces = [FMT.convert(A[r0:r1], p) for r0, r1 in ((0, 32), (32, 48), (48, 70))]
    X = csr_concat(pieces)
    for name in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(X, name), getattr(whole, name))
    with pytest.raises(ValueError, match="expected a multiple of 16"):
        csr_concat([FMT.convert(A[:20], p), FMT.convert(A[20:], p)])


def test_the_store_keeps_non_empty_rows_as_tiles(tmp_path):
    A = random_csr((53, 41), 300, seed=5).astype(np.float32).tolil()
    A[17, :] = 0  # an empty row is not stored
    A = sp.csr_array(A)
    A.eliminate_zeros()
    X = FMT.convert(A, precision("float32"))
    nonempty = np.diff(A.indptr) > 0
    np.testing.assert_array_equal(X.window_ptr, [0, *np.cumsum([nonempty[r:r + 16].sum() for r in (0, 16, 32, 48)])])
    np.testing.assert_array_equal(X.rows(), np.flatnonzero(nonempty))
    store = BlockStore(tmp_path).matrix("m")
    store.write_format("csr", "none-float32", X, {"perm_key": "none"}, window_ranges=[0, 2, 4])
    np.testing.assert_array_equal(to_scipy(csr_from_arrays(store.read_format("csr", "none-float32"))).toarray(),
                                  A.toarray())
    part = csr_from_arrays(store.read_format("csr", "none-float32", 1, 3))  # rows 16 .. 47
    np.testing.assert_array_equal(to_scipy(part).toarray(), A[16:48].toarray())


def test_validate_names_the_observed_and_expected():
    X = FMT.convert(random_csr((20, 10), 50, seed=6), precision("float32"))
    with pytest.raises(ValueError, match="window_ptr has 1 entries ending at 0, expected ceil\\(M / 16\\) \\+ 1 = 3"):
        CSR(X.shape, X.window_ptr[:1], X.row_in_window, X.indptr, X.indices, X.data).validate()
    with pytest.raises(ValueError, match=f"indptr has {X.n_blocks} entries"):
        CSR(X.shape, X.window_ptr, X.row_in_window, X.indptr[:-1], X.indices, X.data).validate()
    bad = X.indices.copy()
    bad[0] = 10
    with pytest.raises(ValueError, match="outside 0 .. 9"):
        CSR(X.shape, X.window_ptr, X.row_in_window, X.indptr, bad, X.data).validate(full=True)


def test_the_cpu_plan_runs_it_by_name_and_stats_count_rows():
    A = random_csr((45, 33), 250, seed=7).astype(np.float32)
    B = np.random.default_rng(2).standard_normal((33, 6)).astype(np.float32)
    plan = SpmmPlan(A, device="cpu", format="csr")
    assert plan.choice["format"] == "csr"
    np.testing.assert_allclose(plan.run(B), A @ B, rtol=1e-5, atol=1e-5)
    st = csr_stats(FMT.convert(A, precision("float32")))
    assert st["nnz"] == A.nnz and st["row_nnz_max"] == int(np.diff(A.indptr).max())
