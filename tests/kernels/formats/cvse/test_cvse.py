"""CVSE (VectorSparse / SSpMM): index maps, round trips per V on edge cases, row-block conversion + concat,
validation, the NumPy SpMM and SDDMM twins, stats, Sparse Vector Compression, the store round trip and the CPU
plan."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernel_cases import BASE_CASES, as_float32, check_cpu_plan, int64_columns, random_csr
from kernels.formats import get
from kernels.formats.cvse.container import (CVSE, VECTORS, csr_to_cvse, cvse_concat, cvse_from_arrays, cvse_sddmm, cvse_spmm,
                                  cvse_stats, cvse_to_csr)
from kernels.formats.cvse import svc
from kernels.formats.cvse.svc import WORK_SLACK, choose, compress, vector_counts
from storage.indexing import index_dtype
from kernels.precision import precision


CASES = {**{k: v for k, v in BASE_CASES.items() if k != "explicit_zeros"},
         "zero_rows": lambda: sp.csr_array((0, 5)),
         "int64_columns": int64_columns,
         "int64_indices_small": lambda: random_csr((300, 200), 2000, seed=7, index_dtype=np.int64)}


def test_tiny_arrays():
    # A (5 x 6), V = 2: vector rows {0, 1}, {2, 3}, {4, pad}
    #   . 1 . . 2 .        vector row 0: columns 1 (1, 3), 4 (2, 0)
    #   . 3 . . . .
    #   . . . . . .        vector row 1: empty
    #   . . . . . .
    #   4 . . . . 5        vector row 2: columns 0 (4, pad 0), 5 (5, pad 0)
    A = sp.csr_array(np.array([[0, 1, 0, 0, 2, 0], [0, 3, 0, 0, 0, 0], [0] * 6, [0] * 6, [4, 0, 0, 0, 0, 5]],
                              dtype=np.float32))
    X = csr_to_cvse(A, vector=2)
    assert X.vec_ptr.tolist() == [0, 2, 2, 4]
    assert X.indices.tolist() == [1, 4, 0, 5]
    assert X.data.tolist() == [[1, 3], [2, 0], [4, 0], [5, 0]]
    assert X.vec_row.tolist() == [0, 0, 2, 2] and X.window_ptr.tolist() == [0, 4]
    X.validate(full=True)


@pytest.mark.parametrize("V", VECTORS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip(name, V):
    A = as_float32(CASES[name]())
    X = csr_to_cvse(A, vector=V)
    X.validate(full=True)
    back = cvse_to_csr(X)
    assert back.shape == A.shape and (back != A).nnz == 0
    assert back.indices.dtype == index_dtype(max(A.shape), A.nnz)  # canonical, whatever the input carried
    assert X.nnz == A.nnz


@pytest.mark.parametrize("V", VECTORS)
def test_forward_map_elementwise(V):
    A = as_float32(random_csr((37, 45), 400, seed=11))  # 37 rows: the last vector row is partial for V > 1
    X = csr_to_cvse(A, vector=V)
    coo = A.tocoo()
    vr = X.vec_row_of()
    for r, c, x in zip(coo.row, coo.col, coo.data):
        i, v = r // V, r % V
        lo, hi = int(X.vec_ptr[i]), int(X.vec_ptr[i + 1])
        b = lo + int(np.searchsorted(X.indices[lo:hi], c))
        assert X.indices[b] == c and vr[b] == i and X.data[b, v] == x
    # vectors count = distinct (vector row, column) pairs
    assert X.n_vectors == len({(r // V, c) for r, c in zip(coo.row, coo.col)})


@pytest.mark.parametrize("dtype", [np.float64, np.int8, np.int32])
@pytest.mark.parametrize("V", VECTORS)
def test_conversion_against_brute_force_per_value_dtype(V, dtype):
    # 23 x 30 with explicit zeros (they make vectors) and unsorted rows; values cast to float32 as NumPy casts them
    rng = np.random.default_rng(V)
    D = np.where(rng.random((23, 30)) < 0.15, rng.normal(size=(23, 30)) * 1e3, 0).astype(dtype)
    mask = D != 0
    mask[3, 7] = mask[20, 0] = True  # stored zeros
    A = sp.csr_matrix((D[mask], np.nonzero(mask)[1], np.r_[0, np.cumsum(mask.sum(1))]), shape=D.shape)
    lo, hi = A.indptr[0], A.indptr[1]
    assert hi - lo >= 2
    A.indices[lo:hi], A.data[lo:hi] = A.indices[lo:hi][::-1].copy(), A.data[lo:hi][::-1].copy()  # row 0 unsorted
    X = csr_to_cvse(A, vector=V)
    ptr, cols, vals = [0], [], []
    for i in range(-(-23 // V)):
        rows = range(i * V, min(23, i * V + V))
        for c in sorted({int(c) for r in rows for c in np.nonzero(mask[r])[0]}):
            cols.append(c)
            vals.append([np.float32(D[r, c]) if r < 23 else 0 for r in range(i * V, i * V + V)])
        ptr.append(len(cols))
    assert X.vec_ptr.tolist() == ptr and X.indices.tolist() == cols
    np.testing.assert_array_equal(X.data, np.array(vals, dtype=np.float32).reshape(-1, V))


@pytest.mark.parametrize("V", VECTORS)
def test_empty_vector_rows_and_padding(V):
    A = as_float32(BASE_CASES["empty_windows"]())  # rows 16..47 empty: whole vector rows without vectors
    X = csr_to_cvse(A, vector=V)
    per = np.diff(X.vec_ptr.astype(np.int64))
    assert not per[16 // V:48 // V].any()
    assert X.data.shape == (X.n_vectors, V)
    assert cvse_stats(X)["padding"] == X.n_vectors * V - A.nnz


def test_k_not_multiple_of_v_and_partial_last_vector_row():
    A = as_float32(random_csr((7, 333), 333, seed=0))  # 7 rows: V = 4 and 8 pad the last vector row
    for V in (4, 8, 16):
        X = csr_to_cvse(A, vector=V)
        vr = X.vec_row_of()
        rows = V * vr[:, None] + np.arange(V)
        assert not X.data[rows >= 7].any()
        X.validate(full=True)
    bad = csr_to_cvse(A, vector=8)
    bad.data[-1, 7] = 1.0
    with pytest.raises(ValueError, match="v = 7, row 7 >= M = 7"):
        bad.validate(full=True)


def test_int64_sizes():
    X = csr_to_cvse(int64_columns(), vector=4)
    assert X.indices.dtype == np.int64 and X.vec_ptr.dtype == np.int32
    X.validate(full=True)
    assert cvse_to_csr(X).indices.dtype == np.int64
    Y = csr_to_cvse(random_csr((50, 40), 300, seed=3), vector=8)
    back = cvse_from_arrays({"window_ptr": Y.window_ptr.astype(np.int64), "vec_row": Y.vec_row,
                             "indices": Y.indices.astype(np.int64), "values": Y.values,
                             "value_offset": Y.value_offset.astype(np.int64), "shape": Y.shape})
    assert back.vec_ptr.dtype == np.int32 and back.indices.dtype == np.int32
    np.testing.assert_array_equal(back.data, Y.data)
    with pytest.raises(ValueError, match="vec_ptr has dtype int64, expected int32"):
        CVSE(Y.shape, Y.vec_ptr.astype(np.int64), Y.indices, Y.data).validate()


@pytest.mark.parametrize("V", VECTORS)
@pytest.mark.parametrize("cuts", [[0, 16, 48, 100], [0, 100], [0, 96, 100]])
def test_row_blocks_then_concat_equal_one_conversion(V, cuts):
    A = as_float32(BASE_CASES["empty_windows"]())
    whole = csr_to_cvse(A, vector=V)
    cat = cvse_concat([csr_to_cvse(A[a:b], vector=V) for a, b in zip(cuts[:-1], cuts[1:])])
    assert cat.shape == whole.shape
    for field in ("vec_ptr", "indices", "data"):
        assert np.array_equal(getattr(cat, field), getattr(whole, field)), field
        assert getattr(cat, field).dtype == getattr(whole, field).dtype, field
    if V > 2:
        with pytest.raises(ValueError, match=f"multiple of V = {V}"):
            cvse_concat([csr_to_cvse(A[:10], vector=V), csr_to_cvse(A[10:], vector=V)])


def test_validate_messages():
    X = csr_to_cvse(as_float32(random_csr((40, 30), 300, seed=4)), vector=4)
    with pytest.raises(ValueError, match=r"vec_ptr has shape \(5,\), expected"):
        CVSE(X.shape, X.vec_ptr[:5], X.indices, X.data).validate()
    with pytest.raises(ValueError, match="V in"):
        CVSE(X.shape, X.vec_ptr, X.indices, np.zeros((X.n_vectors, 3), np.float32)).validate()
    idx = X.indices.copy()
    idx[1], idx[0] = idx[0], idx[1]
    with pytest.raises(ValueError, match="not strictly increasing in vector row 0"):
        CVSE(X.shape, X.vec_ptr, idx, X.data).validate(full=True)
    idx = X.indices.copy()
    idx[-1] = 30
    with pytest.raises(ValueError, match="column 30, expected 0..K - 1 = 0..29"):
        CVSE(X.shape, X.vec_ptr, idx, X.data).validate(full=True)
    with pytest.raises(ValueError, match="vector length V is 3"):
        csr_to_cvse(random_csr((4, 4), 4, seed=0), vector=3)


@pytest.mark.parametrize("V", VECTORS)
@pytest.mark.parametrize("name", ["7x333", "1000x37", "37x5000", "empty_windows", "nnz0", "hub_row"])
def test_spmm_twin_equals_scipy(name, V):
    A = as_float32(CASES[name]())
    B = np.random.default_rng(2).standard_normal((A.shape[1], 13))
    exact = A.astype(np.float64) @ B
    C = cvse_spmm(csr_to_cvse(A, vector=V), B)
    assert C.shape == exact.shape
    np.testing.assert_allclose(C, exact, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cvse_spmm(csr_to_cvse(A, vector=V), B[:, 0]), exact[:, 0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("V", VECTORS)
def test_sddmm_twin_equals_dense_masked_product(V):
    S = as_float32(random_csr((37, 45), 300, seed=9))
    rng = np.random.default_rng(5)
    A, B = rng.standard_normal((37, 21)), rng.standard_normal((45, 21))
    X = csr_to_cvse(S, vector=V)
    out = cvse_sddmm(X, A, B)
    dense = (A @ B.T) * S.toarray()  # (A B^T) (.) S
    back = cvse_to_csr(CVSE(X.shape, X.vec_ptr, X.indices, out.astype(np.float64)))
    np.testing.assert_allclose(back.toarray(), dense, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="expected"):
        cvse_sddmm(X, A[:, :5], B)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_plugin_conversion_and_twin_per_precision(dtype):
    p = precision(dtype)
    A = as_float32(random_csr((70, 90), 900, seed=5))
    X = get("cvse").convert(A, p)
    assert X.vector == 8 and X.data.dtype == p.storage_dtype
    B = np.random.default_rng(2).standard_normal((90, 8))
    exact = A.astype(np.float64) @ B
    C = get("cvse").reference_spmm(X, B)
    assert np.linalg.norm(C - exact) / np.linalg.norm(exact) < p.tolerance
    back = get("cvse").to_csr(X)
    np.testing.assert_array_equal(back.toarray(), p.to_float32(p.to_storage(A.toarray())))  # the stored values


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_store_round_trip(tmp_path, dtype):
    from storage import BlockStore

    p = precision(dtype)
    A = as_float32(BASE_CASES["empty_windows"]())  # 100 rows: 7 windows, windows 1 and 2 empty
    ms = BlockStore(tmp_path).matrix("gen.test")
    for V in (2, 16):
        X = get("cvse").convert(A, p, vector=V)
        ms.write_format("cvse", f"k-{dtype}-{V}", X, {"dtype": dtype}, window_ranges=[0, 2, 7])
        back = get("cvse").from_arrays(ms.read_format("cvse", f"k-{dtype}-{V}"))
        for field in ("vec_ptr", "indices", "data"):
            assert np.array_equal(getattr(back, field), getattr(X, field)), field
            assert getattr(back, field).dtype == getattr(X, field).dtype, field
        assert back.shape == X.shape and back.vector == V
        part = get("cvse").from_arrays(ms.read_format("cvse", f"k-{dtype}-{V}", 3, 7))  # rows 48..99
        assert part.shape == (52, A.shape[1])
        np.testing.assert_array_equal(cvse_to_csr(part).toarray(), cvse_to_csr(X).toarray()[48:])
    empty = get("cvse").convert(sp.csr_array((30, 20), dtype=np.float32), p)
    ms.write_format("cvse", f"e-{dtype}", empty, {"dtype": dtype})
    back = get("cvse").from_arrays(ms.read_format("cvse", f"e-{dtype}"))
    assert back.n_vectors == 0 and back.data.dtype == p.storage_dtype and back.shape == (30, 20)


def test_stats_and_paper_equation_1():
    # one dense 16 x 4 block and one lone entry: V = 8 keeps 2 x 4 full vectors + 1 vector with 1 value
    D = np.zeros((24, 10), dtype=np.float32)
    D[:16, 2:6] = 1.0
    D[20, 9] = 2.0
    X = csr_to_cvse(sp.csr_array(D), vector=8)
    s = cvse_stats(X)
    assert s["n_vectors"] == 9 and s["padding"] == 9 * 8 - 65
    assert s["new_sparsity"] == pytest.approx(1 - 65 / 72)
    assert s["density_improvement"] == pytest.approx(240 / 72)  # M K / (V n_vectors), SSpMM eq. (1)
    assert s["new_sparsity"] < 1 - 1 / 8  # every vector holds a nonzero


def test_svc_counts_and_padding():
    A = as_float32(random_csr((200, 300), 3000, seed=12))
    counts = vector_counts(A, VECTORS)
    for V in VECTORS:
        assert counts[V] == csr_to_cvse(A, vector=V).n_vectors
    X, rep = compress(A, vectors=VECTORS)
    assert rep["vector"] == X.vector
    for V, c in rep["candidates"].items():
        assert c["padding"] == V * counts[V] - A.nnz
        assert 0 <= c["new_sparsity"] < 1 - 1 / V
    assert rep["padding"] == cvse_stats(X)["padding"]


@pytest.mark.parametrize("vectors", [VECTORS, (16, 8), (4,), (2, 16), (8, 8, 16)])
def test_vector_counts_by_markers_match_sorting_and_the_conversion(vectors, monkeypatch):
    """vector_counts' marker pass (a V and a multiple of it in one pass) against the sorted count and against the
    CVSE the conversion builds: a rectangular matrix with empty rows, unsorted column indices and duplicates
    (counted once), rows not a multiple of V; the sorted path where the markers do not fit."""
    keep = np.ones(203, dtype=np.float32)
    keep[40:56] = 0  # empty rows
    A = sp.csr_array(sp.diags_array(keep) @ as_float32(random_csr((203, 300), 3000, seed=5)))
    A.eliminate_zeros()
    A.indices[A.indptr[7]:A.indptr[8]] = A.indices[A.indptr[7]:A.indptr[8]][::-1].copy()  # an unsorted row
    A.has_sorted_indices = False
    assert A.indptr[56] == A.indptr[40] and A.indptr[8] - A.indptr[7] > 1
    dup = sp.csr_array((np.r_[A.data, 1.0], np.r_[A.indices, A.indices[0]],
                        np.r_[A.indptr[:1], A.indptr[1:] + 1]), shape=A.shape)  # row 0 holds a column twice
    for M in (A, dup):
        got = svc.vector_counts(M, vectors)
        assert list(got) == list(dict.fromkeys(vectors))
        assert got == {V: svc._sorted_vector_count(M, V) for V in vectors}
        assert got == {V: csr_to_cvse(sp.csr_array(M.copy(), copy=True), vector=V).n_vectors for V in vectors}
    monkeypatch.setattr(svc, "markers_fit", lambda shape, nnz: False)
    assert svc.vector_counts(A, vectors) == {V: svc._sorted_vector_count(A, V) for V in vectors}


@pytest.mark.parametrize("vectors", [VECTORS, (16, 8), (4,)])
def test_vector_counts_take_the_plans_kept_window_counts(vectors, monkeypatch):
    """After an `auto` plan's statistics counted every window of A's arrays (`structure.kept_windows`), the vector
    counts are their sums, the same numbers as counting again (empty rows, rows not a multiple of 16, a duplicate),
    and nothing is counted; other arrays (a copy) are counted as before."""
    from kernels.formats import structure

    keep = np.ones(203, dtype=np.float32)
    keep[40:56] = 0
    A = sp.csr_array(sp.diags_array(keep) @ as_float32(random_csr((203, 300), 3000, seed=6)))
    A.eliminate_zeros()
    dup = sp.csr_array((np.r_[A.data, 1.0], np.r_[A.indices, A.indices[0]],
                        np.r_[A.indptr[:1], A.indptr[1:] + 1]), shape=A.shape)
    for M in (A, dup):
        want = {V: svc._sorted_vector_count(M, V) for V in vectors}
        structure.forget()
        structure.structure(M)
        with monkeypatch.context() as m:
            m.setattr(svc, "window_counts", None)  # counting again would fail
            m.setattr(svc, "_sorted_vector_count", None)
            assert svc.vector_counts(M, vectors) == want
        copy = sp.csr_array(M, copy=True)
        assert structure.kept_windows(copy) is None
        assert svc.vector_counts(copy, vectors) == want
    structure.forget()


def test_scatter_map_inverts_the_gather_positions(monkeypatch):
    """The SDDMM kernel's scatter map: each CSR position's vector slot holds that position, padding slots -1; past
    int32 positions, None (the route then gathers)."""
    from kernels.formats.cvse import launch as lc
    from kernels.formats.cvse.sddmm import gather_positions

    S = sp.csr_array(as_float32(random_csr((45, 37), 300, seed=7)))
    for V in VECTORS:
        X = csr_to_cvse(S, vector=V)
        gather = gather_positions(X, S)
        dest = lc.scatter_map(gather, X.n_vectors * V)
        assert dest.dtype == np.int32 and dest.shape == (X.n_vectors * V,)
        assert np.array_equal(dest[gather], np.arange(S.nnz))
        assert (dest >= 0).sum() == S.nnz and (dest[dest < 0] == -1).all()
    monkeypatch.setattr(lc, "INT32_MAX", S.nnz - 1)
    assert lc.scatter_map(gather, X.n_vectors * V) is None


def test_svc_rule_least_work_with_slack():
    shape = (1024, 1024)
    # equal densities (V = 16's work 1.07x V = 8's, within WORK_SLACK): the larger V, for parallelism
    V, why = choose(524288, shape, {8: 60000, 16: 32000})
    assert V == 16 and f"within {WORK_SLACK}x" in why
    # V = 16 keeps 0.89 of V = 8's vectors -> 1.77x the mma work: V = 8
    V, why = choose(52429, shape, {8: 44000, 16: 39000})
    assert V == 8 and "least mma work" in why and "16: 1.77x" in why
    # structured at V = 16 (every vector full): equal work per value, the tie goes to 16
    V, _ = choose(52480, shape, {8: 6560, 16: 3280})
    assert V == 16
    # V <= 8 costs one n8 column per vector: V = 4 never beats V = 8 on work, so V = 8 (or 16 within the slack)
    V, _ = choose(4000, shape, {4: 1000, 8: 900, 16: 500})
    assert V == 16  # work {4: 1000, 8: 900, 16: 1000}: 16 is 1.11x the least
    V, _ = choose(4000, shape, {2: 2000, 4: 1000, 8: 1000})
    assert V == 8
    # the slack boundary itself: exactly WORK_SLACK x the least still takes the larger V
    assert choose(1000, shape, {8: 100, 16: int(100 * WORK_SLACK / 2)})[0] == 16
    assert choose(1000, shape, {8: 100, 16: int(100 * WORK_SLACK / 2) + 1})[0] == 8
    assert choose(0, shape, {8: 0, 16: 0})[0] == 16


@pytest.mark.parametrize("sparsity", [0.5, 0.7, 0.8, 0.98])
@pytest.mark.parametrize("V", [8, 16])
def test_svc_keeps_the_pruning_vector(V, sparsity):
    """A DNN-style weight magnitude-pruned at V x 1 (gen:dlmc) gets its own V: V = 16 pads a V = 8-pruned weight by
    33-49 %, 1.5-2x V = 8's mma work, beyond WORK_SLACK; a V = 16-pruned one has full
    vectors at both V and the tie goes to 16."""
    from tasks.fetch.generators import generate

    A = generate("dlmc", f"rows=256&cols=384&sparsity={sparsity}&vector={V}&seed=3")
    X, rep = compress(A)
    assert rep["vector"] == X.vector == V, rep["reason"]
    assert rep["padding"] == 0
    if V == 8:
        assert "least mma work" in rep["reason"] and rep["candidates"][16]["padding"] > 0


@pytest.mark.parametrize("sparsity", [0.5, 0.7, 0.8, 0.9, 0.98])
def test_svc_unstructured_follows_the_rule(sparsity):
    """A uniform random matrix: V = 16's work over V = 8's is about 1 + s^8, so V = 16 up to s ~ 0.915 and V = 8
    above (near the paper's split at 0.9, by our measured slack); the reason names the rule that decided."""
    A = random_csr((512, 512), int((1 - sparsity) * 512 * 512), seed=1)
    X, rep = compress(A)
    counts = {V: c["n_vectors"] for V, c in rep["candidates"].items()}
    ratio = 2 * counts[16] / counts[8]
    assert ratio == pytest.approx(1 + sparsity ** 8, rel=0.02)
    if ratio <= WORK_SLACK:
        assert X.vector == 16 and f"within {WORK_SLACK}x" in rep["reason"] and "parallelism" in rep["reason"]
    else:
        assert X.vector == 8 and "least mma work" in rep["reason"]
    assert X.vector == (16 if sparsity <= 0.9 else 8)
    assert rep["candidates"][16]["padding"] >= rep["candidates"][8]["padding"]
    X2, rep2 = compress(A, vector=4)
    assert X2.vector == 4 and rep2["reason"] == "given"


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cpu_plan_runs_cvse(dtype):
    check_cpu_plan("cvse", dtype, vector=4)
