"""A NumPy simulation of kernels/formats/cvse/cvse_spmm.cu and cvse_sddmm.cu, lane by lane, before any GPU runs them: the
launcher's grids (kernels.formats.cvse.launch.spmm_grid / sddmm_grid), the SpMM's cp.async ring of shared-memory stages
of SV = KS x steps_per_stage vectors (zero-filled past a vector row; slots past its end load no B row), the
per-lane B loads of the Transpose Mapping Scheme, the Register Shuffle In (prmt pairs, 16-bit) or direct TF32
registers, the A-side value fragments per n8 tile (V = 16: two), the Shuffle
Out store, and the SDDMM's permuted-k 16-byte pieces. The mma itself is assembled from the PTX ISA's documented
fragment layouts, independent of the kernels' mapping, so a wrong register, slot or column shows as a wrong C."""
from __future__ import annotations

import numpy as np
import pytest

from kernel_cases import byte_perm, mma_isa, random_csr
from kernels.formats.cvse import launch as lc
from kernels.formats.cvse.container import CVSE, csr_to_cvse, cvse_sddmm, cvse_spmm
from kernels.precision import precision


def device_bits(x: np.ndarray, name: str) -> np.ndarray:
    """What the kernel reads: uint16 bits (16-bit) or uint32 bits of TF32-rounded floats."""
    p = precision(name)
    if name == "float32":
        return p.rounded(x).astype(np.float32).view(np.uint32)
    return np.ascontiguousarray(p.to_storage(np.asarray(x, dtype=np.float32))).view(np.uint16)


def to_f_of(name: str):
    p = precision(name)
    if name == "float32":
        return lambda bits: float(np.uint32(bits).view(np.float32))
    return lambda bits: float(p.to_float32(np.array([bits], dtype=np.uint16).view(p.storage_dtype))[0])


def simulate_spmm(X: CVSE, B: np.ndarray, name: str):
    """C (float64) and per-element write counts from the simulated launch of every block, warp and lane."""
    tf32, V = name == "float32", X.vector
    KS = lc.VECTORS_PER_STEP[name]
    SV, S = lc.CVSE_CONFIG.vectors_per_stage(name), lc.CVSE_CONFIG.stages  # vectors per stage, ring of stages
    NH = 2 if V == 16 else 1
    to_f = to_f_of(name)
    vals = device_bits(precision(name).to_float32(X.data), name)  # the uploaded data (TF32 rounded)
    Bb = device_bits(B, name)
    M, _ = X.shape
    N = B.shape[1]
    C, writes = np.zeros((M, N)), np.zeros((M, N), dtype=int)
    grid, block = lc.spmm_grid(X.n_vec_rows, N)
    warps = block[0] // 32
    vp = X.vec_ptr.astype(np.int64)

    def load_stage(v0, ve):  # cp.async zero-fills past the row's end: index 0, values 0
        return ([int(X.indices[v0 + k]) if v0 + k < ve else 0 for k in range(SV)],
                [[int(vals[v0 + k, v]) if v0 + k < ve else 0 for v in range(V)] for k in range(SV)])

    def k_step(acc, n0, s_idx, s_val):  # one mma k-step of KS slots (index -1: no B row) for the warp at n0
        a_regs = [[None] * 32 for _ in range(4)]  # [instance i][lane]
        b_regs = [[None] * 32 for _ in range(NH)]  # [n8 tile h][lane]
        for lane in range(32):
            g, q = lane >> 2, lane & 3
            n_lane = n0 + 8 * g
            slots = [q, q + 4] if tf32 else [2 * q, 2 * q + 1, 2 * q + 8, 2 * q + 9]
            rows = [[int(Bb[s_idx[s], n_lane + e]) if s_idx[s] >= 0 and n_lane + e < N else 0
                     for e in range(8)] for s in slots]
            for h in range(NH):
                v = 8 * h + g
                if tf32:
                    b_regs[h][lane] = [s_val[q][v] if v < V else 0, s_val[q + 4][v] if v < V else 0]
                else:
                    b_regs[h][lane] = [s_val[k][v] | (s_val[k + 1][v] << 16) if v < V else 0
                                       for k in (2 * q, 2 * q + 8)]
            for ins in range(4):
                if tf32:
                    a_regs[ins][lane] = [rows[0][2 * ins], rows[0][2 * ins + 1], rows[1][2 * ins],
                                         rows[1][2 * ins + 1]]
                else:
                    wd = [rows[k][2 * ins] | (rows[k][2 * ins + 1] << 16) for k in range(4)]
                    a_regs[ins][lane] = [byte_perm(wd[0], wd[1], 0x5410), byte_perm(wd[0], wd[1], 0x7632),
                                         byte_perm(wd[2], wd[3], 0x5410), byte_perm(wd[2], wd[3], 0x7632)]
        for ins in range(4):
            for h in range(NH):
                D = mma_isa(a_regs[ins], b_regs[h], tf32, to_f)
                for lane in range(32):
                    acc[lane, h, ins] += D[lane]

    for i in range(grid[0]):
        vb, ve = vp[i], vp[i + 1]
        n_stages = -(-(ve - vb) // SV)
        for y in range(grid[1]):
            for w in range(warps):
                n0 = (y * warps + w) * 64
                if n0 >= N:
                    continue
                acc = np.zeros((32, NH, 4, 4))
                ring = [None] * S  # the shared-memory buffers, filled in the kernel's order
                for s in range(min(S - 1, n_stages)):  # prologue
                    ring[s] = (s, *load_stage(vb + s * SV, ve))
                for s in range(n_stages):
                    nx = s + S - 1
                    if nx < n_stages:  # refilled after the barrier, before stage s is read: must not be s's buffer
                        assert nx % S != s % S
                        ring[nx % S] = (nx, *load_stage(vb + nx * SV, ve))
                    tag, st_idx, st_val = ring[s % S]
                    assert tag == s  # the buffer holds stage s
                    count = min(SV, ve - vb - s * SV)
                    for u in range(SV // KS):  # the stage's mma k-steps, in vector order
                        s_idx = [st_idx[u * KS + k] if u * KS + k < count else -1 for k in range(KS)]
                        k_step(acc, n0, s_idx, st_val[u * KS:(u + 1) * KS])
                for lane in range(32):  # Shuffle Out (store_c)
                    g, q = lane >> 2, lane & 3
                    n_lane = n0 + 8 * g
                    for h in range(NH):
                        for p in range(2):
                            v = 8 * h + 2 * q + p
                            row = i * V + v
                            if v >= V or row >= M:
                                continue
                            for e in range(8):
                                if n_lane + e < N:
                                    C[row, n_lane + e] = acc[lane, h, e >> 1, (e & 1) * 2 + p]
                                    writes[row, n_lane + e] += 1
    return C, writes


def rounded_inputs(X: CVSE, B, name):
    p = precision(name)
    Xr = CVSE(X.shape, X.vec_ptr, X.indices, p.rounded(p.to_float32(X.data)))
    return Xr, p.rounded(B)


@pytest.mark.parametrize("N", [64, 70])  # 64: whole warps (FAST path); 70: a partial second warp
@pytest.mark.parametrize("V", [2, 4, 8, 16])
@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
def test_spmm_simulation_equals_float64_product(name, V, N):
    # 37 x 45: 37 rows leave the last vector row partial; rows 8..15 emptied: empty vector rows for V <= 8
    A = random_csr((37, 45), 500, seed=V).tolil()
    A[8:16] = 0
    import scipy.sparse as sp

    A = sp.csr_array(A, dtype=np.float32)
    A.eliminate_zeros()
    X = csr_to_cvse(A, vector=V, to_storage=precision(name).to_storage)
    B = np.random.default_rng(7).standard_normal((45, N)).astype(np.float32)
    C, writes = simulate_spmm(X, B, name)
    assert (writes == 1).all()  # every element of C written exactly once
    Xr, Br = rounded_inputs(X, B, name)
    np.testing.assert_allclose(C, cvse_spmm(Xr, Br), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("V", [2, 16])
@pytest.mark.parametrize("name", ["float32", "float16"])
def test_spmm_simulation_stage_edges(name, V):
    """Vector rows of exactly one stage (SV vectors), one more than a stage, (STAGES + 1) stages + 3 (the cp.async
    ring wraps, the last stage partial) and none, one vector row each."""
    import scipy.sparse as sp

    SV, S = lc.CVSE_CONFIG.vectors_per_stage(name), lc.CVSE_CONFIG.stages
    lengths = [SV, SV + 1, (S + 1) * SV + 3, 0]
    K = max(lengths) + 5
    rng = np.random.default_rng(V)
    D = np.zeros((len(lengths) * V, K), dtype=np.float32)
    for r, n in enumerate(lengths):
        cols = np.sort(rng.choice(K, n, replace=False))
        D[r * V:(r + 1) * V, cols] = rng.standard_normal((V, n))
    D[V - 1] = 0  # one row of a vector row empty: padding inside the vectors
    X = csr_to_cvse(sp.csr_array(D), vector=V, to_storage=precision(name).to_storage)
    assert list(np.diff(X.vec_ptr.astype(np.int64))) == lengths
    B = rng.standard_normal((K, 72)).astype(np.float32)
    C, writes = simulate_spmm(X, B, name)
    assert (writes == 1).all()
    Xr, Br = rounded_inputs(X, B, name)
    np.testing.assert_allclose(C, cvse_spmm(Xr, Br), rtol=1e-12, atol=1e-12)


def simulate_sddmm(X: CVSE, A: np.ndarray, B: np.ndarray, name: str, config: lc.CvseConfig = lc.CVSE_CONFIG):
    """out [n_vectors, V] (float64), write counts and the mma count from the simulated SDDMM launch: warp tiles of
    G = sddmm_groups 16-vector groups sharing the A pieces, K steps of U chunks (all loads of a step, then the
    mmas of the chunks that start inside Kd)."""
    tf32, V = name == "float32", X.vector
    NH, G = (2 if V == 16 else 1), config.sddmm_groups
    to_f = to_f_of(name)
    p = precision(name)
    s_vals = p.to_float32(X.data).astype(np.float64)
    if tf32:
        s_vals = p.rounded(s_vals)  # the uploaded data is TF32-rounded (launch_cvse.upload)
    Ab, Bb = device_bits(A, name), device_bits(B, name)
    M, Kd = A.shape
    per, chunk = (4, 16) if tf32 else (8, 32)
    U = config.sddmm_loads // (2 * G + NH)  # chunks per step (the 16-byte path; the checked path takes 1)
    assert U >= 1
    out, writes = np.full((X.n_vectors, V), np.nan), np.zeros((X.n_vectors, V), dtype=int)
    vp = X.vec_ptr.astype(np.int64)
    grid, block = lc.sddmm_grid(X.n_vec_rows, int(np.diff(vp).max()) if vp.size > 1 else 0, config)
    warps, n_mma = block[0] // 32, 0

    def piece(bits, row, k, ok):
        vals = [int(bits[row, k + j]) if ok and k + j < Kd else 0 for j in range(per)]
        return vals if tf32 else [vals[2 * j] | (vals[2 * j + 1] << 16) for j in range(4)]

    for i in range(grid[0]):
        vb, ve = vp[i], vp[i + 1]
        for y in range(grid[1]):
            for w in range(warps):
                t = y * warps + w
                while vb + 16 * G * t < ve:
                    acc = np.zeros((32, G, NH, 4))
                    for k0 in range(0, Kd, U * chunk):
                        pieces = {}  # (lane, u) -> (B pieces [2G], A pieces [NH]), all loaded before any mma
                        for lane in range(32):
                            g, q = lane >> 2, lane & 3
                            base = vb + 16 * G * t + g
                            for u in range(U):
                                k = k0 + u * chunk + per * q
                                bp = [piece(Bb, X.indices[base + 8 * j] if base + 8 * j < ve else 0, k,
                                            base + 8 * j < ve) for j in range(2 * G)]
                                ap = [piece(Ab, i * V + 8 * h + g, k, 8 * h + g < V and i * V + 8 * h + g < M)
                                      for h in range(NH)]
                                pieces[lane, u] = bp, ap
                        for u in range(U):
                            if k0 + u * chunk >= Kd:
                                break  # the kernel's warp-uniform skip of chunks past Kd
                            for s in range(2):
                                for j in range(G):
                                    a_regs = [None] * 32
                                    b_regs = [[None] * 32 for _ in range(NH)]
                                    for lane in range(32):
                                        bp, ap = pieces[lane, u]
                                        lo, hi = bp[2 * j], bp[2 * j + 1]
                                        a_regs[lane] = [lo[2 * s], hi[2 * s], lo[2 * s + 1], hi[2 * s + 1]]
                                        for h in range(NH):
                                            b_regs[h][lane] = [ap[h][2 * s], ap[h][2 * s + 1]]
                                    for h in range(NH):
                                        D = mma_isa(a_regs, b_regs[h], tf32, to_f)
                                        n_mma += 1
                                        for lane in range(32):
                                            acc[lane, j, h] += D[lane]
                    for lane in range(32):
                        g, q = lane >> 2, lane & 3
                        base = vb + 16 * G * t + g
                        for j in range(2 * G):
                            b, e = base + 8 * j, j & 1
                            if b >= ve:
                                continue
                            for h in range(NH):
                                v = 8 * h + 2 * q
                                if v < V:
                                    out[b, v:v + 2] = acc[lane, j >> 1, h, 2 * e:2 * e + 2] * s_vals[b, v:v + 2]
                                    writes[b, v:v + 2] += 1
                    t += grid[1] * warps
    return out, writes, n_mma


CONFIGS = {"default": lc.CVSE_CONFIG, "one_group": lc.CvseConfig(sddmm_groups=1, sddmm_loads=4),
           "four_groups": lc.CvseConfig(sddmm_groups=4, sddmm_loads=12)}


@pytest.mark.parametrize("cfg", list(CONFIGS))
@pytest.mark.parametrize("Kd", [32, 21, 80])  # 32: whole chunks; 21: a partial piece; 80: a step cut mid-way
@pytest.mark.parametrize("V", [2, 4, 8, 16])
@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
def test_sddmm_simulation_equals_float64_product(name, V, Kd, cfg):
    import scipy.sparse as sp

    S = random_csr((37, 60), 700, seed=V).tolil()
    S[0:16] = 0  # empty vector rows
    S = sp.csr_array(S, dtype=np.float32)
    S.eliminate_zeros()
    X = csr_to_cvse(S, vector=V, to_storage=precision(name).to_storage)
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((37, Kd)).astype(np.float32), rng.standard_normal((60, Kd)).astype(np.float32)
    out, writes, n_mma = simulate_sddmm(X, A, B, name, CONFIGS[cfg])
    assert (writes == 1).all()
    p = precision(name)
    Xr = CVSE(X.shape, X.vec_ptr, X.indices, p.rounded(p.to_float32(X.data)) if name == "float32"
              else p.to_float32(X.data).astype(np.float64))
    np.testing.assert_allclose(out, cvse_sddmm(Xr, p.rounded(A), p.rounded(B)), rtol=1e-12, atol=1e-12)
    # chunks past Kd are skipped: every tile runs exactly ceil(Kd / chunk) x 2 mma per group and n8 tile
    G, NH, chunk = CONFIGS[cfg].sddmm_groups, 2 if V == 16 else 1, 16 if name == "float32" else 32
    tiles = sum(-(-int(n) // (16 * G)) for n in np.diff(X.vec_ptr))
    assert n_mma == tiles * G * NH * 2 * -(-Kd // chunk)


def test_grids():
    assert lc.spmm_grid(10, 70) == ((10, 1), (64,))  # 2 tiles of 64 columns: one block of 2 warps
    assert lc.spmm_grid(10, 1024) == ((10, 4), (128,))
    assert lc.sddmm_grid(5, 300) == ((5, 3), (128,))  # 10 tiles of 32 vectors over 4 warps per block
    assert lc.sddmm_grid(5, 300, lc.CvseConfig(sddmm_groups=1)) == ((5, 5), (128,))  # 19 groups of 16
    assert lc.sddmm_grid(5, 0) == ((5, 1), (32,))


def test_header_defaults_equal_the_config():
    """cvse_*.cu compiled without CvseConfig's -D options (nvcc by hand) takes the header's #ifndef defaults: they
    must be CvseConfig's, or such a compile would vet another kernel than the one launched."""
    import re
    from pathlib import Path

    text = (Path(lc.__file__).parent / "cvse_common.cuh").read_text()
    block = text[text.index("#ifndef CVSE_WARP_COLS"):text.index("#endif")]
    header = dict(re.findall(r"#define (CVSE_\w+) (\d+)", block))
    config = dict(d[2:].split("=") for d in lc.CVSE_CONFIG.defines())
    assert header == config
    assert lc.CVSE_CONFIG.vectors_per_stage("float16") == 16 * lc.CVSE_CONFIG.steps_per_stage
