"""A NumPy simulation of kernels/cuda/tiledcsr_spmm.cu, lane by lane, before any GPU runs it: the grid of the
launcher (3D tiling, bands, spare chunks), the shared-memory staging of a tile's bytes as 4-byte words (offsets
begin % 4), the per-lane A-fragment decode from the tile's CSR, the B loads with padding substitution and the
byte-permute pairing (16-bit) or two-row loads (TF32), the mma fragment layouts of the PTX ISA, and the remapped
C store of half_store. The mma itself is assembled from the ISA's documented fragment layouts, independent of the
kernel's decode rules, so a wrong register or column choice shows as a wrong C."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernel_cases import random_csr
from kernels import launch_tiledcsr as lt
from kernels.formats import get
from kernels.formats.tiledcsr import TiledCSR
from kernels.precision import precision

STAGE_OFF = (0, 528, 800)  # DATA_OFF, IDX_OFF, RP_OFF of the .cu


def tile_bytes(t, p0, p1, vb, rb):
    return (p0 * vb, p0, t * 17 * rb), (p1 * vb, p1, (t + 1) * 17 * rb)


def stage_tile(t, p0, p1, srcs, vb, rb):
    """The block's cp.async word copies into one 848-byte stage (the .cu's stage_tile)."""
    st = np.full(848, 0xEE, dtype=np.uint8)  # garbage where nothing is copied
    b0, b1 = tile_bytes(t, p0, p1, vb, rb)
    for s in range(3):
        w0, w1 = b0[s] >> 2, (b1[s] + 3) >> 2
        st[STAGE_OFF[s]:STAGE_OFF[s] + 4 * (w1 - w0)] = srcs[s][4 * w0:4 * w1]  # reads padding past the end
    return st


def decode(vals: bytes, idx: bytes, rp: bytes, rb: int, lane: int, tf32: bool):
    """The .cu's decode: this lane's 4 A registers (uint32) from a tile's CSR bytes."""
    g, q = lane >> 2, lane & 3
    rp_at = (lambda r: rp[r]) if rb == 1 else (lambda r: int.from_bytes(rp[2 * r:2 * r + 2], "little"))
    a = [0, 0, 0, 0]
    for h in range(2):
        for p in range(rp_at(g + 8 * h), rp_at(g + 8 * h + 1)):
            c = idx[p]
            if tf32:
                if (c & 3) != q:
                    continue
                v, reg = int.from_bytes(vals[4 * p:4 * p + 4], "little"), h + 2 * (c >> 2)
            else:
                if ((c >> 1) & 3) != q:
                    continue
                v, reg = int.from_bytes(vals[2 * p:2 * p + 2], "little") << (16 * (c & 1)), h + 2 * (c >> 3)
            a[reg] |= v
    return a


def byte_perm(x, y, sel):
    pool = x | (y << 32)
    return sum(((pool >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i) for i in range(4))


def mma_isa(a_regs, b_regs, tf32: bool, to_f):
    """D (16 x 8) = A Bt from the 32 lanes' registers, laid out as the PTX ISA documents m16n8k8 .tf32 / m16n8k16."""
    k = 8 if tf32 else 16
    A, Bt = np.zeros((16, k)), np.zeros((k, 8))
    for lane in range(32):
        g, q = lane >> 2, lane & 3
        if tf32:  # a0 (g, q), a1 (g+8, q), a2 (g, q+4), a3 (g+8, q+4); b0 (q, g), b1 (q+4, g)
            for i, (r, c) in enumerate([(g, q), (g + 8, q), (g, q + 4), (g + 8, q + 4)]):
                A[r, c] = to_f(a_regs[lane][i])
            Bt[q, g], Bt[q + 4, g] = to_f(b_regs[lane][0]), to_f(b_regs[lane][1])
        else:  # ai = pairs (row, 2q + {0, 1} (+8)), low half = lower k; b0 = Bt[2q..2q+1][g], b1 = Bt[2q+8..+9][g]
            for i, (r, c) in enumerate([(g, 2 * q), (g + 8, 2 * q), (g, 2 * q + 8), (g + 8, 2 * q + 8)]):
                A[r, c], A[r, c + 1] = to_f(a_regs[lane][i] & 0xFFFF), to_f(a_regs[lane][i] >> 16)
            for j, kk in enumerate([2 * q, 2 * q + 8]):
                Bt[kk, g], Bt[kk + 1, g] = to_f(b_regs[lane][j] & 0xFFFF), to_f(b_regs[lane][j] >> 16)
    D = A @ Bt
    return [[D[lane >> 2, 2 * (lane & 3)], D[lane >> 2, 2 * (lane & 3) + 1], D[(lane >> 2) + 8, 2 * (lane & 3)],
             D[(lane >> 2) + 8, 2 * (lane & 3) + 1]] for lane in range(32)]


def simulate(X: TiledCSR, Bs: np.ndarray, name: str, bands: int, stage_min: int = 16):
    """C (float64) and per-element write counts from the simulated launch of every block, warp and lane."""
    p = precision(name)
    tf32 = name == "float32"
    vb, rb = (4, 1) if tf32 else (2, 2)
    vals_src = np.concatenate([np.ascontiguousarray(
        p.rounded(p.to_float32(X.data)).astype(np.float32) if tf32 else X.data).view(np.uint8), np.zeros(16, np.uint8)])
    idx_src = np.concatenate([X.tile_indices, np.zeros(16, np.uint8)])
    rp_src = np.concatenate([np.ascontiguousarray(X.tile_indptr).view(np.uint8).reshape(-1), np.zeros(16, np.uint8)])
    if tf32:
        def to_f(bits):
            return float(np.uint32(bits).view(np.float32))
        Bbits = p.rounded(Bs).astype(np.float32).view(np.uint32)  # what cvt.rna.tf32 gives
    else:
        def to_f(bits):
            return float(p.to_float32(np.array([bits], dtype=np.uint16).view(p.storage_dtype))[0])
        Bbits = Bs.view(np.uint16)
    M, _ = X.shape
    N = Bs.shape[1]
    C, writes = np.zeros((M, N)), np.zeros((M, N), dtype=int)
    grid, block = lt.launch_grid(X.n_groups, N, bands)
    slices = block[0] // 32
    tc = X.tile_cols.astype(np.int64)
    gp, tp = X.group_ptr.astype(np.int64), X.tile_ptr.astype(np.int64)
    for bz in range(grid[2]):
        for bx in range(grid[0]):
            chunk_n0 = (bz * grid[0] + bx) * slices * 64
            if chunk_n0 >= N:
                continue
            active_warps = min(slices, (N - chunk_n0 + 63) // 64)
            for by in range(grid[1]):
                for g in range(by, X.n_groups, grid[1]):
                    acc = np.zeros((slices, 32, 8, 4))
                    for t in range(gp[g], gp[g + 1]):
                        p0, p1 = tp[t], tp[t + 1]
                        staged = active_warps >= 2 and p1 - p0 >= stage_min
                        b0, _ = tile_bytes(t, p0, p1, vb, rb)
                        if staged:
                            st = stage_tile(t, p0, p1, (vals_src, idx_src, rp_src), vb, rb).tobytes()
                            src = [st[STAGE_OFF[s] + (b0[s] & 3):] for s in range(3)]
                        else:
                            src = [vals_src[b0[0]:].tobytes(), idx_src[b0[1]:].tobytes(), rp_src[b0[2]:].tobytes()]
                        a_regs = [decode(*src, rb, lane, tf32) for lane in range(32)]
                        for w in range(active_warps):
                            n0 = chunk_n0 + 64 * w
                            b_regs = [[[0, 0] for _ in range(32)] for _ in range(8)]  # [mma tile u][lane]
                            for lane in range(32):
                                q, n_lane = lane & 3, n0 + 8 * (lane >> 2)
                                slots = [q, q + 4] if tf32 else [2 * q, 2 * q + 1, 2 * q + 8, 2 * q + 9]
                                col = [tc[t, s] if tc[t, s] >= 0 else tc[t, 0] for s in slots]
                                rows = [[int(Bbits[c, n_lane + u]) if n_lane + u < N else 0 for u in range(8)]
                                        for c in col]
                                for u in range(8):
                                    if tf32:
                                        b_regs[u][lane] = [rows[0][u], rows[1][u]]
                                    else:  # mma_block: words t/2 of the 4 rows, prmt 0x5410 (even) / 0x7632 (odd)
                                        wd = [rows[k][2 * (u >> 1)] | (rows[k][2 * (u >> 1) + 1] << 16)
                                              for k in range(4)]
                                        sel = 0x7632 if u & 1 else 0x5410
                                        b_regs[u][lane] = [byte_perm(wd[0], wd[1], sel), byte_perm(wd[2], wd[3], sel)]
                            for u in range(8):
                                acc[w, :, u] += np.array(mma_isa(a_regs, b_regs[u], tf32, to_f))
                    for w in range(active_warps):  # half_store: v[e] = acc[e % 8][2h + e // 8] -> column n0+16q+e
                        n0 = chunk_n0 + 64 * w
                        for lane in range(32):
                            gg, q = lane >> 2, lane & 3
                            for h in range(2):
                                row = 16 * g + gg + 8 * h
                                for e in range(16):
                                    col = n0 + 16 * q + e
                                    if row < M and col < N:
                                        C[row, col] = acc[w, lane, e & 7, 2 * h + (e >> 3)]
                                        writes[row, col] += 1
    return C, writes


def case_matrix(kind: str):
    if kind == "rect":  # 37 rows (group 2 partial), 45 columns (not a multiple of 8 or 16), dense-ish tiles
        return random_csr((37, 45), 700, seed=3)
    A = random_csr((40, 23), 300, seed=4).tolil()  # group 1 (rows 16..31) empty, a hub row, tiny tiles
    A[16:32] = 0
    A[35, :] = 1.25
    return sp.csr_array(A)


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("kind, N, bands", [("rect", 131, 2), ("rect", 64, 1), ("sparse", 200, 3), ("sparse", 7, 1)])
def test_simulated_warps_match_the_float64_product(name, kind, N, bands):
    p = precision(name)
    A = sp.csr_array(case_matrix(kind), dtype=np.float32)
    X = get("tiledcsr").convert(A, p)
    rng = np.random.default_rng(7)
    Bs = p.to_storage(rng.standard_normal((A.shape[1], N)).astype(np.float32))
    exact = get("tiledcsr").reference_spmm(X, p.to_float32(Bs))  # 16-bit A and B are exact in float64
    if name == "float32":  # the kernel multiplies TF32-rounded A and B
        Xr = TiledCSR(X.shape, X.group_ptr, X.tile_ptr, X.tile_cols, X.tile_indptr, X.tile_indices,
                      p.rounded(X.data).astype(np.float32))
        exact = get("tiledcsr").reference_spmm(Xr, p.rounded(Bs))
    C, writes = simulate(X, Bs, name, bands, stage_min=4 if kind == "rect" else 16)
    assert np.all(writes == 1), "every C element has exactly one writer"
    np.testing.assert_allclose(C, exact, rtol=1e-12, atol=1e-12)


def test_stage_offsets_cover_every_tile_byte():
    # a tile at every alignment of its data / indices / row pointers decodes the same from the stage as from global
    A = sp.csr_array(random_csr((64, 40), 900, seed=9), dtype=np.float32)
    for name, vb, rb in (("float16", 2, 2), ("float32", 4, 1)):
        X = get("tiledcsr").convert(A, precision(name))
        srcs = (np.concatenate([np.ascontiguousarray(X.data).view(np.uint8), np.zeros(16, np.uint8)]),
                np.concatenate([X.tile_indices, np.zeros(16, np.uint8)]),
                np.concatenate([X.tile_indptr.view(np.uint8).reshape(-1), np.zeros(16, np.uint8)]))
        seen = set()
        for t in range(X.n_tiles):
            p0, p1 = int(X.tile_ptr[t]), int(X.tile_ptr[t + 1])
            b0, _ = tile_bytes(t, p0, p1, vb, rb)
            seen.add(tuple(b & 3 for b in b0))
            st = stage_tile(t, p0, p1, srcs, vb, rb).tobytes()
            smem = [st[STAGE_OFF[s] + (b0[s] & 3):] for s in range(3)]
            glob = [srcs[s][b0[s]:].tobytes() for s in range(3)]
            for lane in range(32):
                assert decode(*smem, rb, lane, name == "float32") == decode(*glob, rb, lane, name == "float32")
        assert len(seen) >= 4  # several misalignments were exercised


def test_grid_bands_and_launch_grid():
    assert lt.grid_shape(7) == (1, 1) and lt.grid_shape(1000) == (8, 2) and lt.grid_shape(512) == (8, 1)
    # small launch or B inside L2: 2D grid
    assert lt.grid_bands(10, 10**6, 1024, 2, 132, 50 << 20) == 1
    assert lt.grid_bands(10**5, 1000, 1024, 2, 132, 50 << 20) == 1
    # B = 4M x 4096 halves (32 GiB): bands of <= 25 MiB, at most one per chunk (8 chunks of 512 columns)
    assert lt.grid_bands(10**5, 4 * 10**6, 4096, 2, 132, 50 << 20) == 8
    b = lt.grid_bands(10**5, 20_000, 4096, 2, 132, 50 << 20)  # 160 MiB of B: 25 MiB bands -> 8 bands of 1 chunk
    assert 1 < b <= 8
    grid, block = lt.launch_grid(10**6, 1000, 2)
    assert grid == (1, 65535, 2) and block == (256,)
    grid, _ = lt.launch_grid(5, 1000, 1)
    assert grid == (2, 5, 1)
