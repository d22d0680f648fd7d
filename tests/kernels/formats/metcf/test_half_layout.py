"""CPU tests of the FP16 / BF16 kernels' host side (kernels/formats/metcf/launch_half.py): bfloat16 rounding, the A-fragment and
column-id layout (NumPy twin of the device builder), and a NumPy simulation of one warp of metcf_half.cuh (register
remapping, prmt pairing, m16n8k16 fragments, accumulator stores) against the dense product."""
from __future__ import annotations

import numpy as np
import pytest

from kernels.formats.metcf import launch_half as lh
from kernels.formats.metcf.container import csr_to_metcf
from kernel_cases import BASE_CASES, random_csr


def test_bf16_rounds_to_nearest_even_and_keeps_nan():
    x = np.array([1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 1.0 + 2 ** -8 + 2 ** -20, -2.5, 0.0, -0.0, np.inf, -np.inf,
                  3.4e38, np.nan, 1e-40], dtype=np.float32)
    #        tie -> even (1.0) | tie -> even (1 + 2^-6) | above the tie -> up | exact | signed zero kept
    want = [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC020, 0x0000, 0x8000, 0x7F80, 0xFF80, 0x7F80]
    bits = lh.to_bf16_bits(x)
    assert bits.dtype == np.uint16
    assert [int(b) for b in bits[:10]] == want
    assert np.isnan(lh.from_bf16_bits(bits[10:11])).all()  # NaN stays NaN
    assert int(bits[11]) == 0x0001  # subnormal 1e-40 = 0x000116C2: low half below the tie, rounds down


def test_bf16_round_trip_is_exact_on_bf16_values():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 1 << 16, 5000, dtype=np.uint16)
    vals = lh.from_bf16_bits(bits)
    finite = np.isfinite(vals)
    assert np.array_equal(lh.to_bf16_bits(vals)[finite], bits[finite])
    # and the rounding error of random float32 values is at most half an ulp (2^-8 relative)
    x = rng.standard_normal(5000).astype(np.float32)
    err = np.abs(lh.from_bf16_bits(lh.to_bf16_bits(x)) - x) / np.abs(x)
    assert err.max() <= 2.0 ** -8


def _blocks(M):
    """Dense [n_blocks, 16, 16] float64 blocks of a 16-wide METCF, from the format's inverse map."""
    nb = M.n_blocks
    dense = np.zeros((nb, 16, 16))
    block = np.repeat(np.arange(nb), np.diff(M.tc_offset))
    lid = M.tc_local_id.astype(np.int64)
    dense[block, lid // 16, lid % 16] = M.data
    return dense


# PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type", written out independently of the
# launcher's formula: A element i (0..7) of lane (g, q) is row g + 8 * ((i // 2) % 2), column 2q + i % 2 + 8 * (i // 4);
# B element i (0..3) is k row 2q + i % 2 + 8 * (i // 2), column g; C element i (0..3) row g + 8 * (i // 2), column
# 2q + i % 2.
def a_pos(lane, i):
    g, q = divmod(lane, 4)
    return g + 8 * ((i // 2) % 2), 2 * q + i % 2 + 8 * (i // 4)


def b_pos(lane, i):
    g, q = divmod(lane, 4)
    return 2 * q + i % 2 + 8 * (i // 2), g


def c_pos(lane, i):
    g, q = divmod(lane, 4)
    return g + 8 * (i // 2), 2 * q + i % 2


@pytest.mark.parametrize("case", ["7x333", "37x5000", "empty_windows", "explicit_zeros"])
def test_fragments_hold_each_block_in_ptx_order(case):
    A = BASE_CASES[case]()
    M = csr_to_metcf(A, width=16)
    frag, cols = lh.half_layout(M.tc_offset, M.tc_local_id, M.sparse_a_to_b, lh.to_bits16(M.data, "float16"))
    dense = _blocks(M).astype(np.float16)
    assert frag.shape == (max(M.n_blocks, 1), 32, 8) and frag.dtype == np.uint16
    for b in range(M.n_blocks):
        rebuilt = np.zeros((16, 16), dtype=np.float16)
        for lane in range(32):
            for i in range(8):
                rebuilt[a_pos(lane, i)] = frag[b, lane, i].view(np.float16)
        assert np.array_equal(rebuilt, dense[b]), f"block {b}"
    sab = M.sparse_a_to_b
    for b in range(M.n_blocks):
        for q in range(4):
            for j, c in enumerate((2 * q, 2 * q + 1, 2 * q + 8, 2 * q + 9)):
                want = sab[b, c] if sab[b, c] >= 0 else sab[b, 0]  # padding -> the block's first column
                assert cols[b, q, j] == want


def test_layout_of_an_empty_matrix_is_one_zero_block():
    M = csr_to_metcf(BASE_CASES["nnz0"](), width=16)
    frag, cols = lh.half_layout(M.tc_offset, M.tc_local_id, M.sparse_a_to_b, lh.to_bits16(M.data, "bfloat16"))
    assert frag.shape == (1, 32, 8) and not frag.any() and cols.shape == (1, 4, 4)


def simulate_warp(frag, cols, B, blocks, n0, N):
    """C[16, 64] of one warp exactly as metcf_half.cuh computes it (float64 arithmetic), columns n0..n0+63,
    zeros past N: per lane the four B-row vectors B[col][n0+8g .. +7], tile t's fragment pairs values t of rows
    (0, 1) and (2, 3), the warp-wide mma, then the remapped accumulator store."""
    Bp = np.zeros((B.shape[0], max(N, n0 + 64)))
    Bp[:, :N] = B
    acc = np.zeros((32, 8, 4))  # [lane][tile][D register]
    for b in blocks:
        a_lane = frag[b].view(np.float16).astype(np.float64)  # [lane][8]
        b_lane = np.zeros((32, 8, 4))  # [lane][tile][B element]
        for lane in range(32):
            g, q = divmod(lane, 4)
            rows = Bp[cols[b, q], n0 + 8 * g: n0 + 8 * g + 8]  # [4 rows][8 values]: the 16-byte loads
            for t in range(8):  # prmt: b0 = (row0[t], row1[t]), b1 = (row2[t], row3[t])
                b_lane[lane, t] = rows[0, t], rows[1, t], rows[2, t], rows[3, t]
        At = np.zeros((16, 16))
        for lane in range(32):
            for i in range(8):
                At[a_pos(lane, i)] = a_lane[lane, i]
        for t in range(8):
            Bt = np.zeros((16, 8))
            for lane in range(32):
                for i in range(4):
                    Bt[b_pos(lane, i)] = b_lane[lane, t, i]
            D = At @ Bt
            for lane in range(32):
                for i in range(4):
                    acc[lane, t, i] += D[c_pos(lane, i)]
    C = np.zeros((16, 64))
    for lane in range(32):  # half_store: v[e] = acc[e % 8][2h + e // 8] -> row g + 8h, column 16q + e
        g, q = divmod(lane, 4)
        for h in range(2):
            for e in range(16):
                C[g + 8 * h, 16 * q + e] = acc[lane, e % 8, 2 * h + e // 8]
    return C[:, : max(0, min(64, N - n0))]


@pytest.mark.parametrize("N", [5, 64, 72, 128])
def test_simulated_warp_matches_the_dense_product(N):
    # 40 x 70 with 20 nonzeros per row: windows of 4-5 blocks, padding in each window's last block
    rng = np.random.default_rng(N)
    A = random_csr((40, 70), 800, seed=N)
    A.data = A.data.astype(np.float16).astype(np.float64)
    M = csr_to_metcf(A, width=16)
    frag, cols = lh.half_layout(M.tc_offset, M.tc_local_id, M.sparse_a_to_b, lh.to_bits16(M.data, "float16"))
    B = rng.standard_normal((70, N)).astype(np.float16).astype(np.float64)
    want = A.toarray() @ B
    got = np.zeros((48, N))
    for w in range(M.n_windows):
        blocks = range(M.row_window_offset[w], M.row_window_offset[w + 1])
        for n0 in range(0, N, 64):
            tile = simulate_warp(frag, cols, B, blocks, n0, N)
            got[16 * w: 16 * w + 16, n0: n0 + tile.shape[1]] = tile
    np.testing.assert_allclose(got[:40], want, rtol=1e-12, atol=1e-12)


def test_windows_are_walked_by_block_count_most_first_ties_in_order():
    rwo = np.concatenate([[0], np.cumsum([2, 5, 1, 5, 0, 3])])
    walk = lh.window_walk(rwo)
    assert walk.dtype == np.int32 and walk.tolist() == [1, 3, 5, 0, 2, 4]
    assert lh.window_walk(np.array([0, 4, 7, 9, 9])) is None  # already most first: no walk, block x takes window x
    assert lh.window_walk(np.array([0, 3])) is None and lh.window_walk(np.array([0])) is None
    big = np.array([0, 1, 40_001, 40_003])  # past int16 keys: the general sort, the same rule
    assert lh.window_walk(big).tolist() == [1, 2, 0]
    # heavy: only windows of >= heavy x the mean count (16 / 6 = 2.67 blocks; x 1.5 = 4) first, the rest in order
    assert lh.window_walk(rwo, heavy=1.5).tolist() == [1, 3, 0, 2, 4, 5]
    assert lh.window_walk(rwo, heavy=9.0) is None


def test_windows_are_walked_only_where_b_fits_the_l2_share():
    l2 = 50 << 20
    assert lh.walks(100_000, 128, l2) and not lh.walks(100_000, 256, l2)  # 25.6 MB walked, 51.2 MB not
    assert lh.walks(1, 1, 0) is False and lh.walks(0, 128, 0) is True
