"""A NumPy simulation of kernels/formats/tiledcsr/tiledcsr_spmm.cu, lane by lane, before any GPU runs it: the launcher's
launches (vec kernel on full column chunks, edge kernel on the rest; 3D tiling, bands, spare chunks, row slots), a
block's stream of chunks over its row groups, the three fragment stages (zeroed one step ahead, scattered from the
tiles' CSR by (tile, row) threads, read as one 16-byte word per lane), the B loads with padding substitution and
the byte-permute pairing (16-bit) or two-row loads (TF32), the mma fragment layouts of the PTX ISA, and the
remapped C store of half_store. The mma itself is assembled from the ISA's documented fragment layouts,
independent of the kernel's scatter rule, so a wrong fragment slot or column choice shows as a wrong C."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernel_cases import byte_perm, mma_isa, random_csr
from kernels.formats.tiledcsr import launch as lt
from kernels.formats import get
from kernels.formats.tiledcsr.container import TiledCSR
from kernels.precision import precision

FRAG_BYTES = 512  # one tile's fragments: 32 lanes x 4 registers x 4 bytes


def frag_byte(r: int, c: int, tf32: bool) -> int:
    """The .cu's frag_byte: where tile element (r, c) sits in its 512-byte fragment."""
    if tf32:
        return ((4 * (r & 7) + (c & 3)) * 4 + (r >> 3) + 2 * (c >> 2)) * 4
    return ((4 * (r & 7) + ((c >> 1) & 3)) * 4 + (r >> 3) + 2 * (c >> 3)) * 4 + 2 * (c & 1)


def scatter_chunk(st: np.ndarray, t0: int, nt: int, X: TiledCSR, vals: np.ndarray, nthreads: int, vb: int):
    """The .cu's scatter_chunk into the uint8 stage st: thread i takes (tile, row) pairs i, i + nthreads, ..."""
    tp, ip = X.tile_ptr.astype(np.int64), X.tile_indptr.astype(np.int64)
    for tid in range(nthreads):
        for pair in range(tid, nt * 16, nthreads):
            tl, r = divmod(pair, 16)
            t = t0 + tl
            for p in range(tp[t] + ip[t, r], tp[t] + ip[t, r + 1]):
                at = tl * FRAG_BYTES + frag_byte(r, int(X.tile_indices[p]), vb == 4)
                st[at:at + vb] = vals[vb * p:vb * p + vb]


def lane_words(st: np.ndarray, tl: int, lane: int) -> list[int]:
    """The 16-byte shared load of one lane: its 4 A registers (uint32) of tile tl of the stage."""
    at = tl * FRAG_BYTES + 16 * lane
    return [int(x) for x in st[at:at + 16].view(np.uint32)]


def block_chunks(piece_ptr: np.ndarray, by: int, gy: int, T: int):
    """A block's stream: (piece, t0, nt, last) for its pieces by, by + gy, ..., in chunks of T tiles."""
    gp = piece_ptr.astype(np.int64)
    for g in range(by, gp.shape[0] - 1, gy):
        t0, end = int(gp[g]), int(gp[g + 1])
        while True:
            nt = min(T, end - t0)
            yield g, t0, nt, t0 + nt == end
            t0 += nt
            if t0 == end:
                break


def simulate(X: TiledCSR, Bs: np.ndarray, name: str, bands: int, config=lt.TILED_CONFIG, *, vec: bool = True,
             row_slots=None, piece_tiles=None):
    """C (float64) and per-element write counts from the simulated launches of every block, warp and lane: the
    main kernels over the row pieces (``piece_tiles`` None: lt.auto_piece_tiles), then the fixup of split groups
    (float32 partials in the workspace W, each element written once, summed in piece order)."""
    p = precision(name)
    tf32 = name == "float32"
    vb = 4 if tf32 else 2
    vals = np.ascontiguousarray(p.rounded(p.to_float32(X.data)).astype(np.float32) if tf32 else X.data).view(np.uint8)
    if tf32:
        def to_f(bits):
            return float(np.uint32(bits).view(np.float32))
        Bbits = p.rounded(Bs).astype(np.float32).view(np.uint32)  # what cvt.rna.tf32 gives
    else:
        def to_f(bits):
            return float(p.to_float32(np.array([bits], dtype=np.uint16).view(p.storage_dtype))[0])
        Bbits = Bs.view(np.uint16)
    M, _ = X.shape
    N, T = Bs.shape[1], config.chunk_tiles
    C, writes = np.zeros((M, N)), np.zeros((M, N), dtype=int)
    pc = lt.pieces(X.group_ptr, lt.auto_piece_tiles(X.group_ptr) if piece_tiles is None else piece_tiles)
    W, w_writes = np.full((16 * pc.n_slots, N), np.nan), np.zeros((16 * pc.n_slots, N), dtype=int)
    tc = X.tile_cols.astype(np.int64)
    for edge, chunk0, grid, block in lt.launches(pc.n_pieces, N, vec, bands, config, row_slots=row_slots):
        slices = block[0] // 32
        for bz in range(grid[2]):
            for bx in range(grid[0]):
                chunk_n0 = (chunk0 + bz * grid[0] + bx) * slices * 64
                if chunk_n0 >= N or (not edge and chunk_n0 + slices * 64 > N):
                    continue  # the kernel's uniform early exit
                for by in range(min(grid[1], pc.n_pieces)):
                    stage = [np.full(T * FRAG_BYTES, 0xEE, dtype=np.uint8) for _ in range(3)]  # garbage
                    stage[0][:] = 0
                    stage[1][:] = 0
                    stream = list(block_chunks(pc.piece_ptr, by, grid[1], T))
                    scatter_chunk(stage[0], stream[0][1], stream[0][2], X, vals, block[0], vb)
                    acc = np.zeros((slices, 32, 8, 4))
                    for i, (g, t0, nt, last) in enumerate(stream):
                        s = i % 3
                        stage[(s + 2) % 3][:] = 0
                        if i + 1 < len(stream):
                            scatter_chunk(stage[(s + 1) % 3], stream[i + 1][1], stream[i + 1][2], X, vals, block[0],
                                          vb)
                        for tl in range(nt):
                            t = t0 + tl
                            a_regs = [lane_words(stage[s], tl, lane) for lane in range(32)]
                            for w in range(slices):
                                n0 = chunk_n0 + 64 * w
                                b_regs = [[[0, 0] for _ in range(32)] for _ in range(8)]  # [mma tile u][lane]
                                for lane in range(32):
                                    q, n_lane = lane & 3, n0 + 8 * (lane >> 2)
                                    assert edge or n_lane + 8 <= N, "a vec kernel's 16-byte load past N"
                                    slots = [q, q + 4] if tf32 else [2 * q, 2 * q + 1, 2 * q + 8, 2 * q + 9]
                                    col = [tc[t, sl] if tc[t, sl] >= 0 else tc[t, 0] for sl in slots]
                                    rows = [[int(Bbits[c, n_lane + u]) if n_lane + u < N else 0 for u in range(8)]
                                            for c in col]
                                    for u in range(8):
                                        if tf32:
                                            b_regs[u][lane] = [rows[0][u], rows[1][u]]
                                        else:  # mma_block: words u/2 of the 4 rows, prmt 0x5410 / 0x7632
                                            wd = [rows[k][2 * (u >> 1)] | (rows[k][2 * (u >> 1) + 1] << 16)
                                                  for k in range(4)]
                                            sel = 0x7632 if u & 1 else 0x5410
                                            b_regs[u][lane] = [byte_perm(wd[0], wd[1], sel),
                                                               byte_perm(wd[2], wd[3], sel)]
                                for u in range(8):
                                    acc[w, :, u] += np.array(mma_isa(a_regs, b_regs[u], tf32, to_f))
                        if not last:
                            continue
                        dst = int(pc.piece_dst[g])  # >= 0: the group, into C; < 0: ~slot, W (float32, 16 rows)
                        out, out_writes, row0, rows = ((C, writes, 16 * dst, M - 16 * dst) if dst >= 0 else
                                                       (W, w_writes, 16 * ~dst, 16))
                        for w in range(slices):  # half_store: v[e] = acc[e % 8][2h + e // 8] -> column n0+16q+e
                            n0 = chunk_n0 + 64 * w
                            for lane in range(32):
                                gg, q = lane >> 2, lane & 3
                                for h in range(2):
                                    for e in range(16):
                                        col = n0 + 16 * q + e
                                        if gg + 8 * h < rows and col < N:
                                            out[row0 + gg + 8 * h, col] = acc[w, lane, e & 7, 2 * h + (e >> 3)]
                                            out_writes[row0 + gg + 8 * h, col] += 1
                        acc[:] = 0
    assert np.all(w_writes == 1), "every workspace element has exactly one writer"
    for f, grp in enumerate(pc.fix_group):  # tiledcsr_fixup: per column thread, rows < M, slots in piece order
        row0 = 16 * int(grp)  # (float64 here, like acc: the simulation checks slots and indices, not fp32 rounding)
        for r in range(min(16, M - row0)):
            v = W[16 * int(pc.fix_ptr[f]) + r].copy()
            for s in range(int(pc.fix_ptr[f]) + 1, int(pc.fix_ptr[f + 1])):
                v = v + W[16 * s + r]
            C[row0 + r] = v
            writes[row0 + r] += 1
    return C, writes


def case_matrix(kind: str):
    if kind == "rect":  # 37 rows (group 2 partial), 45 columns (not a multiple of 8 or 16), dense-ish tiles
        return random_csr((37, 45), 700, seed=3)
    if kind == "long":  # 70 rows: groups of 10+ tiles, group 2 (rows 32..47) empty, group 4 partial (6 rows)
        A = random_csr((70, 400), 2400, seed=5).tolil()
        A[32:48] = 0
        return sp.csr_array(A)
    A = random_csr((40, 23), 300, seed=4).tolil()  # group 1 (rows 16..31) empty, a hub row, tiny tiles
    A[16:32] = 0
    A[35, :] = 1.25
    return sp.csr_array(A)


def exact_product(X: TiledCSR, Bs: np.ndarray, name: str) -> np.ndarray:
    p = precision(name)
    if name == "float32":  # the kernel multiplies TF32-rounded A and B
        Xr = TiledCSR(X.shape, X.group_ptr, X.tile_ptr, X.tile_cols, X.tile_indptr, X.tile_indices,
                      p.rounded(X.data).astype(np.float32))
        return get("tiledcsr").reference_spmm(Xr, p.rounded(Bs))
    return get("tiledcsr").reference_spmm(X, p.to_float32(Bs))  # 16-bit A and B are exact in float64


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("kind, N, bands, vec", [("rect", 131, 2, False), ("rect", 64, 1, True),
                                                 ("sparse", 200, 3, True), ("sparse", 7, 1, False),
                                                 ("rect", 136, 1, True)])
def test_simulated_warps_match_the_float64_product(name, kind, N, bands, vec):
    # N = 136 with FLAG_VEC: the vec kernel on the first 128 columns, the edge kernel on the last 8
    p = precision(name)
    A = sp.csr_array(case_matrix(kind), dtype=np.float32)
    X = get("tiledcsr").convert(A, p)
    Bs = p.to_storage(np.random.default_rng(7).standard_normal((A.shape[1], N)).astype(np.float32))
    C, writes = simulate(X, Bs, name, bands, vec=vec)
    assert np.all(writes == 1), "every C element has exactly one writer"
    np.testing.assert_allclose(C, exact_product(X, Bs, name), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["float32", "float16"])
@pytest.mark.parametrize("chunk_tiles, row_slots, max_warps", [(2, 1, 1), (4, 2, 2), (16, None, 8)])
def test_simulated_chunks_and_streams(name, chunk_tiles, row_slots, max_warps):
    """Chunk boundaries inside a row group, groups with more tiles than a chunk, empty groups inside a block's
    stream (row_slots < n_groups: a block walks several groups), one-warp blocks (scatter loops over pairs)."""
    p = precision(name)
    A = sp.csr_array(case_matrix("long"), dtype=np.float32)
    X = get("tiledcsr").convert(A, p)
    assert int(np.diff(X.group_ptr.astype(np.int64)).max()) > chunk_tiles  # a group of several chunks
    Bs = p.to_storage(np.random.default_rng(8).standard_normal((A.shape[1], 72)).astype(np.float32))
    C, writes = simulate(X, Bs, name, 1, lt.TiledConfig(max_warps=max_warps, chunk_tiles=chunk_tiles),
                         row_slots=row_slots)
    assert np.all(writes == 1)
    np.testing.assert_allclose(C, exact_product(X, Bs, name), rtol=1e-12, atol=1e-12)


def hub_matrix():
    """40 rows x 520 columns; row 3 dense, so group 0 (rows 0..15) has 33 tiles of 16 (the last half padding) or 65
    of 8; group 1 (rows 16..31) empty; group 2 (rows 32..39) partial, a few tiles.
        row 3:  ################ ... (520)      group 0: 33 / 65 tiles
        rows 16..31: empty                       group 1: one empty piece
        rows 32..39: sparse                      group 2: 8 rows"""
    A = random_csr((40, 520), 900, seed=9).tolil()
    A[16:32] = 0
    A[3, :] = np.linspace(-1.0, 1.0, 520, dtype=np.float32)
    return sp.csr_array(A)


def test_pieces_cut_groups_in_tile_order():
    # groups of 0, 33, 5, 16, 17 tiles cut at P = 16: the empty group one empty piece, 33 = 16 | 16 | 1 (split at a
    # chunk boundary, a one-tile piece), 16 exactly one piece (written to C), 17 = 16 | 1
    pc = lt.pieces(np.cumsum([0, 0, 33, 5, 16, 17]), 16)
    assert pc.piece_ptr.tolist() == [0, 0, 16, 32, 33, 38, 54, 70, 71]
    assert pc.piece_dst.tolist() == [0, ~0, ~1, ~2, 2, 3, ~3, ~4]
    assert pc.fix_group.tolist() == [1, 4] and pc.fix_ptr.tolist() == [0, 3, 5] and pc.n_slots == 5
    one = lt.pieces(np.array([0, 3, 3, 5]), 10**6)  # nothing split: piece_ptr = group_ptr, every piece writes C
    assert one.piece_ptr.tolist() == [0, 3, 3, 5] and one.piece_dst.tolist() == [0, 1, 2] and one.n_slots == 0
    with pytest.raises(ValueError, match="piece_tiles"):
        lt.pieces(np.array([0, 1]), 0)


def test_auto_piece_tiles_splits_hubs_only():
    uniform = np.arange(0, 1001 * 20, 20)  # 1000 groups of 20 tiles: nothing split
    P = lt.auto_piece_tiles(uniform)
    assert P % lt.PIECE_ALIGN == 0 and P >= lt.PIECE_MIN_TILES and lt.pieces(uniform, P).n_slots == 0
    lens = np.full(1000, 8)
    lens[[5, 700]] = [600, 90]  # two hub groups
    gp = np.concatenate([[0], np.cumsum(lens)])
    pc = lt.pieces(gp, lt.auto_piece_tiles(gp))
    assert pc.fix_group.tolist() == [5, 700]
    assert int(np.diff(pc.piece_ptr).max()) <= lt.auto_piece_tiles(gp) == lt.PIECE_MIN_TILES
    assert lt.auto_piece_tiles(np.zeros(4, np.int64)) == lt.PIECE_MIN_TILES  # nnz = 0


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("piece_tiles, chunk_tiles, row_slots, N", [(16, 16, None, 72), (16, 4, 2, 13),
                                                                    (3, 2, None, 136), (1, 4, 5, 64)])
def test_simulated_pieces_and_fixup(name, piece_tiles, chunk_tiles, row_slots, N):
    """The hub group split into pieces (P = 16: at a chunk boundary, a last piece of 1 tile; P = 3 and 1: many
    pieces, every group split), pieces sharing a block's stream (row_slots), vec and edge kernels (N = 136): the
    partials land once each in W, the fixup sums them in piece order into C."""
    p = precision(name)
    A = hub_matrix()
    X = get("tiledcsr").convert(A, p)
    assert int(X.group_ptr[1] - X.group_ptr[0]) == (65 if name == "float32" else 33)
    assert lt.pieces(X.group_ptr, piece_tiles).n_slots > 0
    Bs = p.to_storage(np.random.default_rng(10).standard_normal((A.shape[1], N)).astype(np.float32))
    C, writes = simulate(X, Bs, name, 1, lt.TiledConfig(chunk_tiles=chunk_tiles, max_warps=2), row_slots=row_slots,
                         vec=N % 8 == 0, piece_tiles=piece_tiles)
    assert np.all(writes == 1), "every C element has exactly one writer"
    np.testing.assert_allclose(C, exact_product(X, Bs, name), rtol=1e-12, atol=1e-12)


def test_fragment_layout_is_the_isa_layout():
    # a dense random 16 x w tile scattered into its fragment: lane (g, q)'s registers hold what the PTX ISA puts
    # there for m16n8k16 (pairs, low half = lower k) and m16n8k8
    rng = np.random.default_rng(3)
    for name, w in (("float16", 16), ("float32", 8)):
        p = precision(name)
        A = sp.csr_array(rng.uniform(0.5, 1.5, (16, w)).astype(np.float32))
        X = get("tiledcsr").convert(A, p)
        vals = np.ascontiguousarray(X.data).view(np.uint8)
        st = np.zeros(2 * FRAG_BYTES, dtype=np.uint8)
        scatter_chunk(st, 0, 1, X, vals, 32, 4 if w == 8 else 2)
        dense = X.data.reshape(16, w)  # one tile, (r, c) order
        bits = dense.view(np.uint32) if w == 8 else dense.view(np.uint16).astype(np.uint32)
        for lane in range(32):
            g, q = lane >> 2, lane & 3
            regs = lane_words(st, 0, lane)
            if w == 8:
                want = [bits[g, q], bits[g + 8, q], bits[g, q + 4], bits[g + 8, q + 4]]
            else:
                want = [bits[r, c] | (bits[r, c + 1] << 16)
                        for r, c in ((g, 2 * q), (g + 8, 2 * q), (g, 2 * q + 8), (g + 8, 2 * q + 8))]
            assert regs == [int(x) for x in want], (name, lane)
        assert not st[FRAG_BYTES:].any()  # nothing outside the tile's 512 bytes


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
    assert lt.launch_grid(100, 1000, 1, row_slots=7)[0] == (2, 7, 1)
    with pytest.raises(ValueError, match="row_slots"):
        lt.launch_grid(100, 1000, 1, row_slots=0)


def test_launches_split_vec_and_edge_chunks():
    # N = 1024: two full 512-column chunks, the vec kernel only; without FLAG_VEC the edge kernel takes both
    assert lt.launches(50, 1024, True, 1) == [(False, 0, (2, 50, 1), (256,))]
    assert lt.launches(50, 1024, False, 1) == [(True, 0, (2, 50, 1), (256,))]
    # N = 1000: chunk 0 full (vec), chunk 1 partial (edge, from chunk 1); bands apply to the vec launch
    assert lt.launches(50, 1000, True, 2) == [(False, 0, (1, 50, 1), (256,)), (True, 1, (1, 50, 1), (256,))]
    assert lt.launches(50, 5000, True, 3) == [(False, 0, (3, 50, 3), (256,)), (True, 9, (1, 50, 1), (256,))]
    # N = 136: one block of 3 warps, the last one partial: the edge kernel for the whole chunk
    assert lt.launches(4, 136, True, 1) == [(True, 0, (1, 4, 1), (96,))]
    assert lt.launches(4, 128, True, 1, row_slots=2) == [(False, 0, (1, 2, 1), (64,))]


def test_config_is_checked():
    with pytest.raises(ValueError, match="chunk_tiles"):
        lt.TiledConfig(chunk_tiles=32)
    with pytest.raises(ValueError, match="unroll"):
        lt.TiledConfig(unroll=0)
    assert "-DTCSR_CHUNK=4" in lt.TiledConfig(chunk_tiles=4).defines()
