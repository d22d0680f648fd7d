"""Every registered format's `ShardOps` (kernels/formats/shard.py), per precision, on the NumPy twins. No Dask.

    A: 333 x 333 (21 windows, the last 13 rows), 3% dense, plus one dense row (a hub wider than any tile) and two
    empty windows; reordered by a random perm where the test says so. P = 1, 2, 3 and 25 (> 21 windows: empty
    shards).

For each format and precision: the shards' products (take, then the columns renamed to the halo) are the whole
product's rows; the store's window-range read of a shard equals its take; renaming the columns out of order (the
resident exchange's order under a reordering) keeps the product; the own/halo split's parts sum to the shard.
The products are float64 twins of the same stored values, so they agree to rounding of the sums (1e-10).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats import REGISTRY, get
from kernels.precision import precision
from storage import BlockStore
from tasks.distribute.formats import shard_ops, sharded_formats
from tasks.distribute.plan import exchange_lists, make_plan, persist_plan, shard_of

FORMATS = sorted(REGISTRY)
DTYPES = ["float32", "float16", "bfloat16"]
N = 5


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(11)
    n = 333
    A = sp.random(n, n, density=0.03, random_state=12, format="lil", dtype=np.float32)
    A[40, :] = rng.standard_normal(n).astype(np.float32)  # a hub row: every column in its window
    A[64:96, :] = 0  # windows 4 and 5 empty
    A = sp.csr_array(A.tocsr())
    A.sum_duplicates()
    return A, rng.permutation(n), rng.standard_normal((n, N))


def converted(A, fmt, dtype, perm=None):
    return get(fmt).convert(sp.csr_array(A[perm] if perm is not None else A), precision(dtype))


def product(S, B):
    fmt = get(S.format_name)
    return fmt.reference_spmm(S, B)


def test_every_registered_format_shards():
    assert sharded_formats() == FORMATS
    for name in FORMATS:
        assert shard_ops(name).name == name
        assert get(name).layout.rows_per_group == 16  # window-range storage: a shard is one read


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_parts", [1, 2, 3, 25])
def test_shard_products_are_the_whole_product(case, fmt, dtype, n_parts):
    A, perm, B = case
    M = converted(A, fmt, dtype, perm)
    ops = shard_ops(M)
    plan = make_plan(M, n_parts, perm=perm)
    whole = product(M, B)
    C = np.zeros_like(whole)
    assert int(plan.block_ptr[-1]) == M.n_blocks and int(plan.nnz_ptr[-1]) == int(ops.items(M, [M.n_blocks])[0])
    for k in range(n_parts):
        S = shard_of(M, plan, k)
        assert S.shape == (int(plan.n_rows[k]), A.shape[1]) and S.n_blocks == int(plan.n_blocks[k])
        cols = plan.halo_cols[k]
        np.testing.assert_array_equal(ops.halo(S, 0, S.n_blocks), cols)
        R = ops.remap(S, cols, np.arange(cols.shape[0]), cols.shape[0])
        assert R.shape == (S.shape[0], cols.shape[0])
        C[plan.row_start[k]:plan.row_stop[k]] = product(R, B[cols]) if cols.size else 0.0
    np.testing.assert_allclose(C, whole, rtol=1e-10, atol=1e-10)
    assert np.abs(whole).max() > 0


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_store_window_range_read_equals_take(case, fmt, dtype, tmp_path):
    A, perm, B = case
    M = converted(A, fmt, dtype, perm)
    plan = make_plan(M, 3, perm=perm)
    mstore = BlockStore(tmp_path).matrix("m")
    persist_plan(M, plan, mstore, "k")
    for k in range(3):
        S = get(fmt).from_arrays(mstore.read_format(fmt, "k", int(plan.partptr[k]), int(plan.partptr[k + 1])))
        T = shard_of(M, plan, k)
        assert type(S) is type(T) and S.shape == T.shape
        for f in dataclasses.fields(T):
            if f.name != "shape":
                a, b = getattr(S, f.name), getattr(T, f.name)
                assert a.dtype == b.dtype, f.name
                np.testing.assert_array_equal(a, b, err_msg=f.name)
        if hasattr(S, "validate"):
            S.validate(full=True)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_out_of_order_rename_keeps_the_product(case, fmt, dtype):
    """The resident layout under a reordering renames columns out of order (`exchange_lists`); formats that take
    any order read the extended B directly, and Tiled-CSR and CVSE stay canonical."""
    A, perm, B = case
    M = converted(A, fmt, dtype, perm)
    ops = shard_ops(M)
    plan = make_plan(M, 3, perm=perm)
    parts = [B[plan.shard_rows(k)] for k in range(3)]
    for k in range(3):
        lay = exchange_lists(plan, k)
        ext = np.full((lay["n_ext"], N), np.nan)
        ext[lay["own_offset"]:lay["own_offset"] + plan.n_rows[k]] = parts[k]
        for p, idx, start in lay["recv"]:
            ext[start:start + len(idx)] = parts[p][idx]
        S, cols = shard_of(M, plan, k), plan.halo_cols[k]
        assert not np.all(np.diff(lay["ext_index"]) > 0)  # the case is out of order
        if not ops.any_order:  # BCSR: positions in the sorted halo only (its actor gathers B into that order)
            with pytest.raises(ValueError):
                ops.remap(S, cols, lay["ext_index"], lay["n_ext"])
            continue
        R = ops.remap(S, cols, lay["ext_index"], lay["n_ext"])
        assert R.shape == (S.shape[0], lay["n_ext"]) and R.n_blocks == S.n_blocks
        want = product(ops.remap(S, cols, np.arange(cols.shape[0]), cols.shape[0]), B[cols])
        np.testing.assert_allclose(product(R, ext), want, rtol=1e-10, atol=1e-10)
        if fmt in ("tiledcsr", "cvse"):  # re-sorted: canonical again
            R.validate(full=True)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_split_parts_sum_to_the_shard(case, fmt, dtype, seed):
    A, perm, B = case
    M = converted(A, fmt, dtype, perm)
    ops = shard_ops(M)
    plan = make_plan(M, 2, perm=perm)
    keep = np.random.default_rng(seed).random(A.shape[1]) < 0.4
    for k in range(2):
        S = shard_of(M, plan, k)
        own, rem = (ops.split(S, m, precision(dtype)) for m in (keep, ~keep))
        for part, mask in ((own, keep), (rem, ~keep)):
            assert part.shape == S.shape
            csr = sp.csr_array(get(fmt).to_csr(part))
            assert np.all(mask[csr.indices[csr.data != 0]])  # (BCSR's halo is whole block columns)
            if hasattr(part, "validate"):
                part.validate(full=True)
        np.testing.assert_allclose(product(own, B) + product(rem, B), product(S, B), rtol=1e-10, atol=1e-10)
        assert ops.split(S, np.zeros(A.shape[1], bool), precision(dtype)).n_blocks == 0


def test_slot_halo_and_relabel_keep_padding_out_and_in():
    """slot_halo ignores padding (-1) and finds the last column; relabel keeps -1 and the slots' shape, int64."""
    from kernels.formats.shard import relabel, slot_halo

    slots = np.array([[4, -1], [0, 4], [-1, -1], [9, 2]], dtype=np.int32)
    halo = slot_halo(10, slots)
    assert halo.dtype == np.int64 and halo.tolist() == [0, 2, 4, 9]
    assert slot_halo(10, np.full((2, 8), -1, np.int32)).size == 0
    out = relabel(slots, 10, halo, np.arange(halo.size))
    assert out.dtype == np.int64 and out.shape == slots.shape
    assert out.tolist() == [[2, -1], [0, 2], [-1, -1], [3, 1]]
