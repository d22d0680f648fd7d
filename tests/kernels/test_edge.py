"""kernels/edge.py on the CPU: spmm_values' work list (`row_items`) covers every edge once, in order, in items of at
most `chunk` edges, and the two-pass sum it drives (items, then the split rows' partials in slot order), replayed in
NumPy here, is A_v @ X. The kernels themselves run in tests/gnn/test_gpu_layers.py."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernels import edge


def pattern(seed=0):
    """Rows of 0, 1, chunk - 1, chunk, chunk + 1, 3 chunk + 2 edges (chunk 4) and random ones."""
    rng = np.random.default_rng(seed)
    counts = np.concatenate([[0, 1, 3, 4, 5, 14, 0], rng.integers(0, 9, 20)])
    indptr = np.concatenate(([0], np.cumsum(counts)))
    indices = np.concatenate([np.sort(rng.choice(30, c, replace=False)) for c in counts]).astype(np.int64)
    return indptr, indices


def test_row_items_cover_each_edge_once_in_order_in_chunks():
    indptr, _ = pattern()
    it = edge.row_items(indptr, chunk=4)
    n_rows = len(indptr) - 1
    counts = np.diff(indptr)
    want_items = np.maximum(1, -(-counts // 4))
    assert np.array_equal(np.bincount(it["item_row"], minlength=n_rows), want_items)
    assert np.all(np.diff(it["item_row"]) >= 0)  # rows in order, each row's items together
    ends = np.minimum(it["item_begin"] + 4, indptr[it["item_row"] + 1])
    covered = np.concatenate([np.arange(b, e) for b, e in zip(it["item_begin"], ends)])
    assert np.array_equal(covered, np.arange(indptr[-1]))  # every edge once, in CSR order
    split = want_items > 1
    assert np.array_equal(it["split_row"], np.flatnonzero(split))
    assert np.array_equal(np.diff(it["split_slot"]), want_items[split])
    slots = it["item_slot"]
    assert np.all(slots[~split[it["item_row"]]] == -1)
    assert np.array_equal(slots[split[it["item_row"]]], np.arange(it["split_slot"][-1]))


@pytest.mark.parametrize("transpose", [False, True])
def test_the_two_pass_sum_the_items_drive_is_a_v_times_x(transpose):
    indptr, indices = pattern(1)
    n_rows = len(indptr) - 1
    A = sp.csr_array((np.ones(len(indices)), indices, indptr), shape=(n_rows, 30))
    rng = np.random.default_rng(2)
    values = rng.standard_normal(A.nnz)
    if transpose:  # A.T's rows reading A's values through order_t, as gnn.gpu calls it
        from gnn.reference import transpose_order

        indptr, indices, order = transpose_order(A.indptr, A.indices, A.shape)
        vals = values[order]
        want = sp.csr_array((values, A.indices, A.indptr), shape=A.shape).T @ (X := rng.standard_normal((n_rows, 5)))
    else:
        vals = values
        want = sp.csr_array((values, A.indices, A.indptr), shape=A.shape) @ (X := rng.standard_normal((30, 5)))
    it = edge.row_items(indptr, chunk=4)
    out = np.full(want.shape, np.nan)
    partial = np.full((it["split_slot"][-1], 5), np.nan)
    for row, begin, slot in zip(it["item_row"], it["item_begin"], it["item_slot"]):
        end = min(begin + 4, indptr[row + 1])
        acc = vals[begin:end] @ X[indices[begin:end]] if end > begin else np.zeros(5)
        (out if slot < 0 else partial)[row if slot < 0 else slot] = acc
    for r, row in enumerate(it["split_row"]):
        out[row] = partial[it["split_slot"][r]:it["split_slot"][r + 1]].sum(axis=0)
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)


def test_row_items_of_no_rows_and_a_bad_chunk():
    it = edge.row_items(np.zeros(1, np.int64))
    assert all(len(it[k]) == 0 for k in ("item_row", "item_begin", "item_slot", "split_row"))
    assert list(it["split_slot"]) == [0]
    with pytest.raises(ValueError, match="chunk must be >= 1"):
        edge.row_items(np.array([0, 3]), chunk=0)


@pytest.mark.parametrize("n", [0, 1, 15, 32, 40])
def test_the_launch_slots_are_addressed_one_after_another(n):
    """kernels.launch.slot_addresses (what Bound.add and kernels.edge's per-call launches hand cuLaunchKernel): slot
    i of the packed arguments at its 8 * i bytes, also past the precomputed offsets; a float as its float32 bits."""
    from kernels import launch

    vals = np.arange(n, dtype=np.uint64)
    assert launch.slot_addresses(vals).tolist() == [vals.ctypes.data + 8 * i for i in range(n)]
    assert launch.float_bits(0.2) == int(np.float32(0.2).view(np.uint32)) and launch.float_bits(-1.0) == 0xBF800000
