"""The tiled CVSE kernel's group layout (kernels/formats/cvse/tiles.py) on the CPU: the product read back from the
layout alone equals the CVSE's for every V, both 16-bit types, chunk widths and edge shapes; groups stay inside
their (chunk, vector row) segment; the bank order (each bucket r & 7 spread over the segment's 8-slot halves, empty
slots on zero rows of buckets their half does not use); the chunk order (a permutation of each chunk's columns that
cuts the phases' bank conflicts); stage_groups against a brute force; bad input."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats.cvse.container import csr_to_cvse, cvse_spmm
from kernels.formats.cvse.tiles import (BUCKETS, HALF, SLOTS, chunk_order, group_words, n_chunks, slot_word,
                                       stage_groups, tile_layout, tiles_spmm)
from kernels.precision import precision
from kernel_cases import random_csr

SHAPES = {"37x45": ((37, 45), 900), "100x50": ((100, 50), 600), "64x300": ((64, 300), 64 * 200),
          "48x1000": ((48, 1000), 48 * 400), "1x7": ((1, 7), 5), "nnz0": ((40, 30), 0)}


def cvse(case, V, name):
    shape, nnz = SHAPES[case]
    A = random_csr(shape, nnz, seed=3) if nnz else sp.csr_array(shape, dtype=np.float32)
    return csr_to_cvse(sp.csr_array(A, dtype=np.float32), vector=V, to_storage=precision(name).to_storage)


@pytest.mark.parametrize("bk", [8, 16, 256])
@pytest.mark.parametrize("name", ["float16", "bfloat16"])
@pytest.mark.parametrize("V", [2, 4, 8, 16])
@pytest.mark.parametrize("case", sorted(SHAPES))
def test_layout_reads_back_the_product(case, V, name, bk):
    X = cvse(case, V, name)
    P, tiles, order = tile_layout(X.vec_ptr, X.indices, X.data, X.shape[1], bk)
    T, Mv = n_chunks(X.shape[1], bk), X.n_vec_rows
    assert P.shape == (T * Mv + 1,) and tiles.shape == (max(int(P[-1]), 1), group_words(V)) and order.shape == (T * bk,)
    B = np.random.default_rng(4).standard_normal((X.shape[1], 11))
    np.testing.assert_allclose(tiles_spmm(P, tiles, order, V, X.shape, B, bk, bf16=name == "bfloat16"),
                               cvse_spmm(X, B), rtol=1e-12, atol=1e-12)
    # every segment gets ceil(its vectors / 16) groups, and its live slots are exactly its vectors
    cols = X.indices.astype(np.int64)
    rows = X.vec_row_of()
    counts = np.bincount((cols // bk) * Mv + rows, minlength=T * Mv)
    np.testing.assert_array_equal(np.diff(P), -(-counts // SLOTS))
    rows = tiles[:int(P[-1]), :16]
    assert int((rows < bk).sum()) == X.n_vectors and int(rows.max(initial=0)) < bk + 8  # empty: a zero row


def halves(tiles, n_groups):
    """[group][half][slot] slot rows, slots 0..7 and 8..15 (the kernel's ldmatrix phases)."""
    return tiles[:n_groups][:, [slot_word(p) for p in range(SLOTS)]].astype(np.int64).reshape(-1, 2, HALF)


@pytest.mark.parametrize("bk", [16, 128])
def test_bank_order_spreads_each_bucket_over_the_halves(bk):
    X = cvse("48x1000", 8, "float16")
    P, tiles, _ = tile_layout(X.vec_ptr, X.indices, X.data, X.shape[1], bk)
    rows = halves(tiles, int(P[-1]))
    repeats = 0
    for g0, g1 in zip(P[:-1], P[1:]):
        h = rows[g0:g1].reshape(-1, HALF)  # the segment's halves
        live, bucket = h < bk, h & 7
        for b in range(8):
            per_half = ((bucket == b) & live).sum(axis=1)
            assert per_half.max(initial=0) <= -(-int(per_half.sum()) // h.shape[0])  # dealt round robin
            repeats += int((per_half > 1).sum())
        for row, lv, bu in zip(h, live, bucket):  # an empty slot's zero row: a bucket no other slot of its half uses
            assert len(set(bu[~lv])) == int((~lv).sum()) and not set(bu[~lv]) & set(bu[lv])
    assert repeats < 0.5 * rows.shape[0] * 2  # most halves are conflict-free at ~27 % density


@pytest.mark.parametrize("R", [1, 3, 16, 100])
def test_stage_groups_is_the_largest_block_chunk(R):
    X = cvse("64x300", 4, "float16")
    P, _, _ = tile_layout(X.vec_ptr, X.indices, X.data, X.shape[1], 16)
    Mv, T = X.n_vec_rows, n_chunks(X.shape[1], 16)
    brute = max(int(P[t * Mv + min(i + R, Mv)] - P[t * Mv + i]) for t in range(T) for i in range(0, Mv, R))
    assert stage_groups(P, Mv, R) == brute


def test_bad_input():
    X = csr_to_cvse(random_csr((16, 16), 40, seed=1), vector=8)  # float32 values
    with pytest.raises(ValueError, match="16-bit"):
        tile_layout(X.vec_ptr, X.indices, X.data, 16)
    X16 = cvse("37x45", 8, "float16")
    with pytest.raises(ValueError, match="multiple of 8"):
        tile_layout(X16.vec_ptr, X16.indices, X16.data, 45, bk=12)


def test_default_chunk_is_the_kernels():
    from kernels.formats.cvse.tiles import TILE_BK
    from kernels.formats.cvse.launch import CVSE_CONFIG

    assert TILE_BK == CVSE_CONFIG.tile_bk  # tile_layout's default bk cuts the chunks the kernel compiles for


def test_tiles_worthwhile_counts_chunks_of_the_given_config():
    import dataclasses

    from kernels.formats.cvse.launch import CVSE_CONFIG, tiles_worthwhile

    A = random_csr((64, 4096), 64 * 40, seed=2)  # 8 vector rows of ~300 vectors (40 nonzeros per row)
    X = csr_to_cvse(sp.csr_array(A, dtype=np.float32), vector=8, to_storage=precision("float16").to_storage)
    per_row = X.n_vectors / X.n_vec_rows
    wide, narrow = (dataclasses.replace(CVSE_CONFIG, tile_bk=bk) for bk in (256, 16))
    assert 4 * n_chunks(4096, 256) <= per_row < 4 * n_chunks(4096, 16)  # 64 <= ~300 < 1024
    assert tiles_worthwhile(X, wide) and not tiles_worthwhile(X, narrow)


def test_column_limit_is_int32():
    from storage.indexing import INT32_MAX
    from kernels.formats.cvse.launch import check_columns

    check_columns(INT32_MAX)
    with pytest.raises(ValueError, match=f"A has {INT32_MAX + 1} columns; the CVSE kernels take at most"):
        check_columns(INT32_MAX + 1)


def phase_reads(P, tiles):
    """Shared-memory reads per ldmatrix phase (8 slots): the most slots of one bucket r & 7 in a half, averaged."""
    h = halves(tiles, int(P[-1])) & (BUCKETS - 1)
    return float(np.mean([np.bincount(x, minlength=BUCKETS).max() for x in h.reshape(-1, HALF)]))


@pytest.mark.parametrize("K, bk", [(1000, 256), (1000, 16), (45, 8)])
def test_chunk_order_is_a_bucket_balanced_permutation_of_each_chunk(K, bk):
    X = cvse("48x1000" if K == 1000 else "37x45", 8, "float16")
    order = chunk_order(X.vec_ptr, X.indices, K, bk)
    T = n_chunks(K, bk)
    for t in range(T):
        got = order[t * bk:(t + 1) * bk]
        real = got[got < K]
        assert sorted(real.tolist()) == list(range(t * bk, min(K, (t + 1) * bk)))  # each column once, in its chunk
        assert ((got == K).sum() == (t + 1) * bk - K if (t + 1) * bk > K else (got < K).all())
    np.testing.assert_array_equal(order, chunk_order(X.vec_ptr, X.indices, K, bk))  # deterministic


def test_chunk_order_cuts_bank_conflicts():
    from kernels.formats.cvse import tiles as cvse_tiles
    from tasks.fetch.generators import generate

    A = generate("dlmc", "rows=512&cols=2048&sparsity=0.8&vector=8&seed=3")  # ~51 vectors per segment
    X = csr_to_cvse(A, vector=8, to_storage=precision("float16").to_storage)
    P, tiles, order = tile_layout(X.vec_ptr, X.indices, X.data, 2048, 256)
    plain = np.arange(order.shape[0])  # column order: what the layout did before chunk_order
    real = cvse_tiles._chunk_order  # what tile_layout calls (chunk_order's body)
    try:
        cvse_tiles._chunk_order = lambda Mv, col, t, seg, K, bk: plain
        P0, tiles0, _ = tile_layout(X.vec_ptr, X.indices, X.data, 2048, 256)
    finally:
        cvse_tiles._chunk_order = real
    np.testing.assert_array_equal(P, P0)  # the same groups; only the slots' rows (and so their buckets) move
    assert phase_reads(P, tiles) < phase_reads(P0, tiles0) - 0.2, (phase_reads(P, tiles), phase_reads(P0, tiles0))
