"""kernels.formats.structure: the statistics the format ranking reads, by column markers and by sorting, exact
against a brute-force count (Python sets per window) on small matrices that hit the remainders, against kernels.formats.metrics.tc_stats (an
independent counter) on a larger one, and sampled within a stated tolerance, deterministically."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats.metrics import tc_stats
from kernels.formats import structure as structure_module
from kernels.formats import structure_counts as counts_module
from kernels.formats.structure import BLOCK_WIDTHS, VECTOR_ROWS, structure, window_stats


@pytest.fixture(params=["markers", "sorting"], autouse=True)
def method(request, monkeypatch):
    """Every test on both counting methods (kernels.formats.structure_counts): the column markers where the
    columns are few enough (all matrices here), and the sort forced."""
    if request.param == "sorting":
        monkeypatch.setattr(counts_module, "MARKER_SLACK", -(1 << 62))
    structure_module.forget()
    return request.param


def brute(A) -> dict:
    """Every statistic by Python sets over the stored (row, col) pairs."""
    A = sp.coo_array(A)
    pairs = list(zip(A.row.tolist(), A.col.tolist()))
    out = {}
    for V in VECTOR_ROWS:
        groups: dict = {}
        for r, c in pairs:
            groups.setdefault(r // V, set()).add(c)
        out[("v", V)] = sum(map(len, groups.values())) if V > 1 else len(pairs)
        out[("vmax", V)] = max(map(len, groups.values()), default=0) if V > 1 else \
            int(np.bincount(A.row).max(initial=0))  # stored entries per row, duplicates included
    windows: dict = {}
    for r, c in pairs:
        windows.setdefault(r // 16, set()).add(c)
    for w in BLOCK_WIDTHS:
        tc = [math.ceil(len(cols) / w) for cols in windows.values()]
        out[("tc", w)], out[("tcmax", w)] = sum(tc), max(tc, default=0)
        blocks = {(r // 16, c // w) for r, c in pairs}
        per_row = [sum(1 for b in blocks if b[0] == i) for i in {b[0] for b in blocks}]
        out[("bcsr", w)], out[("bcsrmax", w)] = len(blocks), max(per_row, default=0)
    return out


def check_exact(A) -> None:
    s, b = structure(A, sample_nnz=None), brute(A)
    assert s.exact and s.windows_sampled == s.n_windows == -(-A.shape[0] // 16)
    for V in VECTOR_ROWS:
        assert (s.vectors[V], s.vectors_max[V]) == (b[("v", V)], b[("vmax", V)]), V
    for w in BLOCK_WIDTHS:
        assert (s.tc_blocks[w], s.tc_blocks_max[w]) == (b[("tc", w)], b[("tcmax", w)]), w
        assert (s.bcsr_blocks[w], s.bcsr_blocks_max[w]) == (b[("bcsr", w)], b[("bcsrmax", w)]), w
    lengths = np.bincount(sp.coo_array(A).row, minlength=A.shape[0])
    assert s.nnz == A.nnz and s.nonempty_rows == int(np.count_nonzero(lengths))
    assert s.row_nnz_max == int(lengths.max(initial=0)) and s.shape == A.shape


@pytest.mark.parametrize("shape, density, seed", [((7, 333), 0.3, 0), ((37, 29), 0.2, 1), ((100, 7), 0.5, 2),
                                                  ((16, 16), 1.0, 3), ((129, 1000), 0.01, 4)])
def test_exact_against_brute_force(shape, density, seed):
    check_exact(sp.random(*shape, density=density, format="csr", random_state=seed, dtype=np.float32))


def test_empty_rows_matrices_and_a_hub_row():
    A = sp.random(70, 90, density=0.1, format="lil", random_state=5)
    A[16:40] = 0  # windows 1 and 2 empty
    A[50, :] = 1.0  # one row wider than any tile
    check_exact(sp.csr_array(A))
    for shape in ((0, 5), (5, 0), (40, 40)):  # no rows, no columns, no entries
        s = structure(sp.csr_array(shape, dtype=np.float32))
        assert s.nnz == 0 and s.tc_blocks == {w: 0.0 for w in BLOCK_WIDTHS} and s.vectors_max[16] == 0


def test_unsorted_indices_duplicates_and_explicit_zeros_count_as_stored():
    #   row 0: cols 5, 1, 5 (a duplicate), row 3: col 2 holding an explicit 0
    A = sp.csr_array((np.array([1.0, 2.0, 3.0, 0.0]), np.array([5, 1, 5, 2]), np.array([0, 3, 3, 3, 4])),
                     shape=(4, 8))
    s = structure(A)
    assert s.nnz == 4 and s.vectors[16] == 3 and s.vectors[2] == 3 and s.tc_blocks[8] == 1
    check_exact(A)


def test_other_sparse_types_and_bad_input():
    A = sp.random(40, 30, density=0.2, format="coo", random_state=6)
    assert _same(structure(A), structure(sp.csr_matrix(A)))
    with pytest.raises(TypeError, match="needs a SciPy sparse matrix, got ndarray"):
        structure(np.eye(3))
    with pytest.raises(ValueError, match="sample_nnz is 0, expected a positive count or None"):
        structure(sp.eye(3, format="csr"), sample_nnz=0)


def test_agrees_with_the_reordering_counter():
    from tasks.fetch.generators import generate

    A = sp.csr_array(generate("rmat", "scale=12&edge_factor=8&seed=3"))
    s = structure(A, sample_nnz=None)
    for w in BLOCK_WIDTHS:
        ref = tc_stats(A, width=w)
        assert (s.tc_blocks[w], s.bcsr_blocks[w]) == (ref["n_tc_blocks"], ref["bcsr_blocks"])
        assert s.tc_blocks_max[w] == ref["blocks_per_window_max"]
        assert s.mean_nnz_tc(w) == pytest.approx(ref["mean_nnz_tc"])


def _same(a, b) -> bool:
    return dataclasses.replace(a, seconds=0.0) == dataclasses.replace(b, seconds=0.0)


def test_sampled_statistics_are_deterministic_and_close():
    from tasks.fetch.generators import generate

    A = sp.csr_array(generate("rmat", "scale=15&edge_factor=12&seed=2"))  # ~390K nnz, power-law hub rows
    exact = structure(A, sample_nnz=None)
    sampled = structure(A, sample_nnz=1 << 16, seed=7)
    assert not sampled.exact and sampled.windows_sampled < exact.n_windows // 4
    assert _same(sampled, structure(A, sample_nnz=1 << 16, seed=7))  # seeded: the same windows, the same numbers
    assert not _same(sampled, structure(A, sample_nnz=1 << 16, seed=8))
    # tolerance: 3 % on every total (measured here: < 1 % at a 1/6 sample; 10M nnz graphs at 256K: < 1 %)
    for name in ("vectors", "tc_blocks", "bcsr_blocks"):
        for key, value in getattr(exact, name).items():
            assert getattr(sampled, name)[key] == pytest.approx(value, rel=0.03), (name, key)
    # the hub windows are always sampled: the maxima are the whole matrix's
    assert sampled.vectors_max == exact.vectors_max and sampled.tc_blocks_max == exact.tc_blocks_max
    assert (sampled.row_nnz_max, sampled.nonempty_rows) == (exact.row_nnz_max, exact.nonempty_rows)  # exact always


def test_the_same_arrays_are_counted_once_and_anything_else_afresh():
    """format="auto" ranks with structure(A), then its hybrid candidate splits A with window_stats(A): one count."""
    A = sp.csr_array(sp.random(300, 200, density=0.05, format="csr", random_state=5, dtype=np.float32))
    first = structure(A, sample_nnz=None)
    assert window_stats(A) is first.windows and window_stats(sp.csr_array(A)) is first.windows  # same arrays
    B = A.copy()
    B.indices[:] = B.indices // 4  # other columns (neighbours merged), same shape and nnz
    other = window_stats(B)
    assert other is not first.windows
    assert any(not np.array_equal(c, first.windows.counts[k]) for k, c in other.counts.items())
    check_exact(B)
    key = structure_module._arrays_key(B, B.indptr, B.indices)
    assert structure_module._Last.get(key) is not None
    del B, other
    import gc

    gc.collect()
    assert structure_module._Last.get(key) is None  # arrays gone: their addresses may hold another matrix
    window_stats(A)
    structure_module.forget()  # what plan_time.py does before each plan
    assert window_stats(A) is not first.windows


def test_sampled_windows_carry_the_exact_counts_of_those_windows():
    """The sampled count gathers the picked windows' nonzeros; every window's count reads A's runs in place."""
    from tasks.fetch.generators import generate

    A = sp.csr_array(generate("rmat", "scale=13&edge_factor=8&seed=3"))
    every = window_stats(A)
    sampled = structure(A, sample_nnz=1 << 13, seed=1).windows
    assert not sampled.exact and 0 < sampled.index.size < every.n_windows
    for key, counts in sampled.counts.items():
        assert np.array_equal(counts, every.counts[key][sampled.index]), key


def test_counting_window_chunks_on_threads_gives_the_one_thread_counts(monkeypatch):
    """From PARALLEL_NNZ (sorting) or MARKER_PARALLEL_NNZ (markers) nonzeros the windows are counted in chunks on a
    thread pool, each chunk into its own windows' slots: the same counts as one thread, sampled or not, a hub row
    included."""
    from tasks.fetch.generators import generate

    A = sp.csr_array(generate("rmat", "scale=12&edge_factor=8&seed=5"))  # hub rows
    one = {s: structure(A, sample_nnz=s) for s in (None, 1 << 13)}
    monkeypatch.setattr(counts_module, "PARALLEL_NNZ", 64)
    monkeypatch.setattr(counts_module, "MARKER_PARALLEL_NNZ", 64)
    monkeypatch.setattr(counts_module, "usable_cpus", lambda: 3)
    structure_module.forget()
    for s, expect in one.items():
        got = structure(A, sample_nnz=s)
        assert _same(got, expect) and got.windows.index.size == expect.windows.index.size
        for key, counts in expect.windows.counts.items():
            assert np.array_equal(got.windows.counts[key], counts), (s, key)


def test_one_thread_per_parallel_nnz_at_most(monkeypatch, method):
    """The pool gets one thread per PARALLEL_NNZ nonzeros sorted (MARKER_PARALLEL_NNZ counted by markers), at most
    the usable CPUs."""
    from tasks.fetch.generators import generate

    A = sp.csr_array(generate("rmat", "scale=10&edge_factor=8&seed=5"))
    pools = []
    real_pool = counts_module.pool
    monkeypatch.setattr(counts_module, "pool", lambda name, n: pools.append(n) or real_pool(name, n))
    monkeypatch.setattr(counts_module, "usable_cpus", lambda: 16)
    for per_thread, expect in ((-(-A.nnz // 3), 3), (64, 16)):
        monkeypatch.setattr(counts_module, "PARALLEL_NNZ", per_thread)
        monkeypatch.setattr(counts_module, "MARKER_PARALLEL_NNZ", per_thread)
        structure_module.forget()
        structure(A, sample_nnz=None)
        assert pools[-1] == expect, (per_thread, pools)
    monkeypatch.setattr(counts_module, "PARALLEL_NNZ", 1 << 40)  # each method reads its own constant
    monkeypatch.setattr(counts_module, "MARKER_PARALLEL_NNZ", 64)
    structure_module.forget()
    pools.clear()
    structure(A, sample_nnz=None)
    assert pools == ([16] if method == "markers" else []), pools


def test_markers_and_sorting_count_the_same(method):
    """Both methods on the same windows (every window, a sample, a hub row, duplicates, a wide matrix), each
    count array equal."""
    if method == "sorting":
        pytest.skip("compares both methods itself")
    from tasks.fetch.generators import generate

    A = sp.csr_array(generate("rmat", "scale=11&edge_factor=8&seed=2"))
    wide = sp.random(50, 5000, density=0.02, format="csr", random_state=1)
    dup = sp.csr_array((np.ones(6), np.array([3, 3, 1, 7, 7, 7]), np.array([0, 2, 3, 6])), shape=(3, 9))
    for M in (A, wide, dup):
        n_rows, n_cols = M.shape
        indptr = np.asarray(M.indptr, dtype=np.int64)
        for windows in (np.arange(-(-n_rows // 16)), np.arange(-(-n_rows // 16))[::3]):
            got = counts_module.marker_counts(indptr, M.indices, n_rows, n_cols, windows)
            want = counts_module.sorted_counts(indptr, M.indices, n_rows, n_cols, windows)
            assert got.keys() == want.keys()
            for key in want:
                assert np.array_equal(got[key], want[key]), key


def test_every_windows_rows_without_a_search():
    """_window_rows of every window (no search) equals the general path's on a subset of all windows."""
    for n_rows in (0, 1, 15, 16, 17, 100):
        every = np.arange(-(-n_rows // 16), dtype=np.int64)
        fast = counts_module._window_rows(every, n_rows)
        rows = (every[:, None] * 16 + np.arange(16, dtype=np.int64)).ravel()
        rows = rows[rows < n_rows]
        local = np.searchsorted(every, rows // 16)
        want = (rows, local, np.searchsorted(local, np.arange(every.size + 1)))
        for got, exp in zip(fast, want):
            assert np.array_equal(got, exp), n_rows
