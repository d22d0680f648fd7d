// cvse_spmm.cu's tiled kernel (16-bit A and B; what it computes, its mapping and contract below): included at the
// end of cvse_spmm.cu (after cvse_common.cuh, whose helpers it uses), not compiled on its own.
#pragma once

// Tiled kernel (16-bit): B's chunk rows staged once per thread block, reused by all its vector rows.
// The per-vector kernel (cvse_spmm.cu) reads one B row slice from L2 per vector: at 80 % sparsity (V = 8,
// N = 256) that is ~215 MB of L2 reads per call, slower than dense GEMM. VectorSparse's block-sparse reuse instead: a thread block owns
// R = warps x RW vector rows and 64 CH columns; it walks K in chunks of BK rows, copying B[chunk, columns] into shared
// memory (cp.async, STAGES-deep ring) once, and every warp gathers its vectors' B rows from there; L2 traffic for B
// drops to (n_vec_rows / R) copies of B. Same Transpose Mapping as above (B^T is the mma's A operand, the vectors'
// values its B operand), gathered from shared memory by ldmatrix instead of from global by the Register Shuffle.
// Layout (kernels/formats/cvse/tiles.py): vectors cut into segments (chunk t, vector row i), chunk-major, each cut
// into groups of 16 slots: 16 slot rows (position in the chunk order; BK + z for an empty slot) then the lanes' mma B
// fragments. A stage = [B tile: BK + 8 rows x 8 CH 16-byte pieces, row r's piece c at c ^ (r & 7), rows BK .. BK + 7
// zeros (what empty slots read, one per bucket r & 7)][P: group_ptr of the block's R + 1 row boundaries (sm_80)][the
// block's groups of the chunk, <= gcap (the launcher's stage_groups)]. sm_80: all by cp.async; sm_90: B tile and
// groups by two cp.async.bulk from a chunk-major copy of B (cvse_b_tiles) and the layout, completing an mbarrier.
// Gather by ldmatrix (the LDS.128 + byte-permute gather took ~60 instructions per group, this ~23; measured in
// docs/kernels-notes.md "Session 10", with where the time goes now): slot k's B row
// piece (8 columns) is row k of an 8 x 8 matrix whose transpose is the m16n8k16 A fragment, so one
// ldmatrix.x4.trans (lane l gives the row address of slot (l & 7) + 8 (l >> 4), piece 2 m + ((l >> 3) & 1)) loads
// the A operand of 16 columns x 16 slots: 4 per 64 columns, no shuffle. Each 8-lane phase reads 8 slots at one
// logical piece: free of bank conflicts when their r & 7 differ, which the layout's slot order makes so wherever a
// bucket has no more vectors than its segment has 8-slot halves.
// Launch mapping: grid = (ceil(N / 64 CH), ceil(n_vec_rows / R)); blockDim.x = 32 x warps (warps <= 16); dynamic
// shared memory = 8 T (chunk bounds) + 8 STAGES (mbarriers), each 16-aligned, + STAGES x stage bytes
// (launch_cvse.tiled_smem). Warp w owns vector rows i0 + w RW .. + RW - 1 and all 64 CH columns; lane (g, q) of
// m16n8 tile m accumulates columns 16 m + g, + 8 of a 64-column half x vector members 8 h + 2 q, + 1. Input
// contract (checked by the launcher):
// FLAG_VEC (N % 8 == 0, B and C 16-byte aligned); B [K, N] 16-bit on sm_80, on sm_90 its cvse_b_tiles_c{CH} copy;
// group_ptr int32 [T n_vec_rows + 1] (T = ceil(K / BK)), tiles 16-byte aligned; rows int32 [T BK]: the B row
// at each chunk position (cvse_tiles.chunk_order, K: none; sm_80 reads it, sm_90's copy is in its order already).
// Each C element has one writer and a fixed summation order (chunks in order, groups in layout order):
// deterministic. Rows >= M and columns >= N of C are never written; every other element is (zeros for an empty
// vector row).
template <int V> struct Tiled {
  static constexpr int NH = V == 16 ? 2 : 1;   // n8 tiles over V
  static constexpr int RW = V == 16 ? 1 : 2;   // vector rows per warp (16 rows of C per warp at V = 8, 16)
  static constexpr int WORDS = 16 + 64 * NH;   // 32-bit words per group (cvse_tiles.group_words)
};

// acc[hh][m][h] += one group (16 slots) x B tile: r = the row the lane addresses (its slot's; a zero row if empty), b =
// the group's B fragments (vector values), tile = the B tile's shared address.
template <int KIND, int V, int CH>
__device__ __forceinline__ void tiled_group(float (&acc)[CH][4][Tiled<V>::NH][4], int r,
                                            const unsigned (&b)[Tiled<V>::NH][2], unsigned tile, int lane) {
  constexpr int NH = Tiled<V>::NH, PR = 8 * CH;
  const unsigned row = tile + r * (PR * 16);
  const int x = ((lane >> 3) & 1) ^ (r & 7);  // piece 2 m + mh of the row at (2 m + mh) ^ (r & 7) = 2 m ^ x
#pragma unroll
  for (int hh = 0; hh < CH; ++hh)
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      unsigned a[4];
      ldmatrix_x4_trans(a, row + 16 * ((8 * hh + 2 * m) ^ x));
#pragma unroll
      for (int h = 0; h < NH; ++h) mma<KIND>(acc[hh][m][h], a, b[h][0], b[h][1]);
    }
}

// The group's slot row for this lane's ldmatrix row (slot k = (lane & 7) + 8 (lane >> 4) at word 4 q + j with
// q = (k & 7) / 2, j = (k & 1) + 2 (k >> 3): cvse_tiles' word order) and its B fragments.
__device__ __forceinline__ int group_row(const unsigned* grp, int rw) { return (int)grp[rw]; }
template <int V>
__device__ __forceinline__ void group_frag(unsigned (&b)[Tiled<V>::NH][2], const unsigned* grp, int lane) {
  if constexpr (Tiled<V>::NH == 2) {
    const uint4 w = *(const uint4*)(grp + 16 + 4 * lane);
    b[0][0] = w.x; b[0][1] = w.y; b[Tiled<V>::NH - 1][0] = w.z; b[Tiled<V>::NH - 1][1] = w.w;
  } else {
    const uint2 w = *(const uint2*)(grp + 16 + 2 * lane);
    b[0][0] = w.x; b[0][1] = w.y;
  }
}

// C rows i V + 8 h + 2 q + p, columns nb + 16 m + g (+ 8) from acc[m][h] (D registers 2 e + p, e = 0, 1).
template <int KIND, int V>
__device__ __forceinline__ void tiled_store(const float (&acc)[4][Tiled<V>::NH][4], void* __restrict__ C, i64 row0,
                                            i64 M, i64 N, i64 nb, int lane, int flags) {
  const int g = lane >> 2, q = lane & 3;
  const bool add = flags & FLAG_ADD, out16 = flags & FLAG_OUT16;
#pragma unroll
  for (int h = 0; h < Tiled<V>::NH; ++h)
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const int v = 8 * h + 2 * q + p;
      const i64 row = row0 + v;
      if (v >= V || row >= M) continue;
#pragma unroll
      for (int m = 0; m < 4; ++m)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const i64 n = nb + 16 * m + 8 * e + g;  // N % 8 == 0: the 8 lanes g of a piece are all in or all out
          if (n < N) store1<KIND>(C, row * N + n, acc[m][h][2 * e + p], add, out16);
        }
    }
}

#if __CUDA_ARCH__ >= 900  // mbarrier transaction counts and cp.async.bulk: sm_90
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  asm volatile("{\n.reg .pred p;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra WAIT;\n}\n"
               ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
#endif

template <int KIND, int V, int CH>
__device__ __forceinline__ void cvse_spmm_tiled(const int* __restrict__ P, const unsigned* __restrict__ tiles,
                                                const int* __restrict__ rows, const u16* __restrict__ B,
                                                void* __restrict__ C, i64 M, i64 N, i64 K, i64 Mv, int gcap,
                                                int flags) {
  constexpr int BK = CVSE_TILE_BK, S = CVSE_TILE_STAGES, RW = Tiled<V>::RW, NH = Tiled<V>::NH;
  constexpr int WORDS = Tiled<V>::WORDS, PR = 8 * CH;  // PR: 16-byte pieces per B tile row
  constexpr int BAR_BYTES = (S * 8 + 15) / 16 * 16;     // the stages' mbarriers (used on sm_90)
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, R = (blockDim.x >> 5) * RW;
  const i64 i0 = (i64)blockIdx.y * R, i1 = min(i0 + R, Mv), n0 = (i64)blockIdx.x * 64 * CH;
  const int T = (int)((K + BK - 1) / BK);
  // launch_cvse.tiled_smem: [bounds: T x (first, end) group of the block's rows per chunk][mbarriers][S stages], a
  // stage = [B tile (BK + 8 rows)][group_ptr slice: R + 1 (sm_80)][groups]
  const int bnd_bytes = (T * 8 + 15) & ~15, p_bytes = ((R + 1) * 4 + 15) & ~15;
  const int tile_bytes = (BK + 8) * PR * 16, stage_bytes = tile_bytes + p_bytes + gcap * WORDS * 4;
  int2* bnd = (int2*)smem;
  unsigned char* stages = smem + bnd_bytes + BAR_BYTES;
  // Why the bounds first: a chunk's group copy needs its bounds before it can be issued; fetched per chunk from
  // global they put one L2 latency in every chunk's period (~1 us per 64 K rows on the H200, whatever the work)
  for (int t = threadIdx.x; t < T; t += blockDim.x) bnd[t] = make_int2(__ldg(P + t * Mv + i0), __ldg(P + t * Mv + i1));
  for (int x = threadIdx.x; x < S * 8 * PR; x += blockDim.x)  // the zero rows (never a copy target)
    ((uint4*)(stages + x / (8 * PR) * stage_bytes))[BK * PR + x % (8 * PR)] = make_uint4(0u, 0u, 0u, 0u);
  float acc[RW][CH][4][NH][4];
#pragma unroll
  for (int w = 0; w < RW; ++w)
#pragma unroll
    for (int hh = 0; hh < CH; ++hh)
#pragma unroll
      for (int m = 0; m < 4; ++m)
#pragma unroll
        for (int h = 0; h < NH; ++h)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[w][hh][m][h][e] = 0.f;
  const int k = (lane & 7) + 8 * (lane >> 4);                 // the slot whose row this lane addresses
  const int rw = 4 * ((k & 7) >> 1) + (k & 1) + 2 * (k >> 3);  // its slot-row word
  // The warp's groups of stage st: pb = group_ptr at its vector rows .. + RW, p0 = at the block's first
  auto compute = [&](int st, const int (&pb)[RW + 1], int p0) {
    const unsigned char* base = stages + st * stage_bytes;
    const unsigned tile = smem_u32(base);
    const unsigned* a = (const unsigned*)(base + tile_bytes + p_bytes);
#pragma unroll
    for (int w = 0; w < RW; ++w) {
      const int g0 = pb[w] - p0, g1 = pb[w + 1] - p0;
      if (g0 >= g1) continue;
      int r = group_row(a + g0 * WORDS, rw);  // one group ahead: its row and fragments load under the mmas
      unsigned b[NH][2];
      group_frag<V>(b, a + g0 * WORDS, lane);
#pragma unroll 2
      for (int G = g0; G < g1; ++G) {
        const unsigned* nxt = a + min(G + 1, g1 - 1) * WORDS;
        const int rn = group_row(nxt, rw);
        unsigned bn[NH][2];
        group_frag<V>(bn, nxt, lane);
        tiled_group<KIND, V, CH>(acc[w], r, b, tile, lane);
        r = rn;
#pragma unroll
        for (int h = 0; h < NH; ++h) b[h][0] = bn[h][0], b[h][1] = bn[h][1];
      }
    }
  };
#if __CUDA_ARCH__ >= 900
  // sm_90: B is Bc (cvse_b_tiles' chunk-major copy, already in the stage's layout). Thread 0 fills stage s with
  // chunk t by two bulk copies (B tile, the block's contiguous groups) that complete stage s's mbarrier by bytes;
  // the warps read their group_ptr bounds from global one chunk ahead. Why: issuing ~3000 16-byte cp.async per
  // chunk kept the computing warps from computing (docs/kernels-notes.md, "Session 10").
  const unsigned bars = smem_u32(smem + bnd_bytes);
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) mbar_init(bars + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const i64 NT = (N + 64 * CH - 1) / (64 * CH);
  auto issue = [&](int s, int t) {
    const unsigned base = smem_u32(stages + s * stage_bytes), bar = bars + 8 * s;
    const int2 lh = bnd[t];
    const unsigned tb = BK * PR * 16, gb = (lh.y - lh.x) * WORDS * 4;
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the warps' reads of the buffer before it
    mbar_expect_tx(bar, tb + gb);
    bulk_copy(base, (const char*)B + ((i64)t * NT + blockIdx.x) * tb, tb, bar);
    if (gb) bulk_copy(base + tile_bytes + p_bytes, tiles + (i64)lh.x * WORDS, gb, bar);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < S - 1 && s < T; ++s) issue(s, s);
  }
  auto bounds = [&](int t, int (&pb)[RW + 1]) {
#pragma unroll
    for (int w = 0; w <= RW; ++w) pb[w] = __ldg(P + t * Mv + min(i0 + warp * RW + w, i1));
  };
  int pb[RW + 1], pn[RW + 1];
  bounds(0, pb);
  for (int t = 0, st = 0, nst = S - 1; t < T; ++t) {  // every thread reaches every barrier
    __syncthreads();  // the buffer of chunk t - 1 read by every warp
    if (threadIdx.x == 0 && t + S - 1 < T) issue(nst, t + S - 1);
    nst = nst + 1 == S ? 0 : nst + 1;
    if (t + 1 < T) bounds(t + 1, pn);
    mbar_wait(bars + 8 * st, (t / S) & 1);  // stage st's (t / S)-th fill landed
    compute(st, pb, bnd[t].x);
    st = st + 1 == S ? 0 : st + 1;
#pragma unroll
    for (int w = 0; w <= RW; ++w) pb[w] = pn[w];
  }
#else
  __syncthreads();
  // sm_80: every thread copies by cp.async: B piece c = tid % PR of positions tid / PR + j blockDim / PR (B row
  // rows[t BK + position]), the group_ptr slice and every blockDim-th 16-byte piece of the block's groups
  auto load = [&](int s, int t) {
    unsigned char* base = stages + s * stage_bytes;
    const int c = threadIdx.x % PR, r0 = threadIdx.x / PR, RS = blockDim.x / PR;
    const bool col_ok = n0 + 8 * c < N;  // N % 8 == 0: a piece is all inside or all outside
    for (int r = r0; r < BK; r += RS) {  // position r holds B row rows[t BK + r] (K: none, zeros)
      const i64 k = __ldg(rows + (i64)t * BK + r);
      const bool ok = col_ok && k < K;
      cp_async<16>(base + 16 * (r * PR + (c ^ (r & 7))), B + (ok ? k * N + n0 + 8 * c : 0), ok);
    }
    int* p = (int*)(base + tile_bytes);
    for (int x = threadIdx.x; x <= R; x += blockDim.x) cp_async<4>(p + x, P + t * Mv + min(i0 + x, i1), true);
    const int2 lh = bnd[t];
    const int pieces = (lh.y - lh.x) * (WORDS / 4);
    const uint4* g_src = (const uint4*)(tiles + (i64)lh.x * WORDS) + threadIdx.x;
    uint4* g_dst = (uint4*)(base + tile_bytes + p_bytes) + threadIdx.x;
    for (int x = threadIdx.x; x < pieces; x += blockDim.x, g_src += blockDim.x, g_dst += blockDim.x)
      cp_async<16>(g_dst, g_src, true);
  };
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {  // prologue: chunks 0 .. S - 2 in flight (empty groups keep the count)
    if (s < T) load(s, s);
    cp_async_commit();
  }
  for (int t = 0, st = 0, nst = S - 1; t < T; ++t) {  // every thread reaches every barrier
    cp_async_wait<S - 2>();
    __syncthreads();  // chunk t visible to all; the buffer of chunk t - 1 read by every warp
    if (t + S - 1 < T) load(nst, t + S - 1);
    cp_async_commit();
    nst = nst + 1 == S ? 0 : nst + 1;
    const int* p = (const int*)(stages + st * stage_bytes + tile_bytes);
    int pb[RW + 1];
#pragma unroll
    for (int w = 0; w <= RW; ++w) pb[w] = p[warp * RW + w];
    compute(st, pb, p[0]);
    st = st + 1 == S ? 0 : st + 1;
  }
#endif
#pragma unroll
  for (int w = 0; w < RW; ++w) {
    const i64 i = i0 + warp * RW + w;
    if (i >= Mv) continue;
#pragma unroll
    for (int hh = 0; hh < CH; ++hh)
      if (n0 + 64 * hh < N) tiled_store<KIND, V>(acc[w][hh], C, i * V, M, N, n0 + 64 * hh, lane, flags);
  }
}

#define CVSE_TILED_ENTRY(NAME, KIND, V, CH)                                                                       \
  extern "C" __global__ void __launch_bounds__(512, 1)                                                          \
      NAME(const int* __restrict__ P, const unsigned* __restrict__ tiles, const int* __restrict__ rows,         \
           const u16* __restrict__ B, void* __restrict__ C, i64 M, i64 N, i64 K, i64 Mv, int gcap, int flags) {  \
    cvse_spmm_tiled<KIND, V, CH>(P, tiles, rows, B, C, M, N, K, Mv, gcap, flags);                               \
  }
#define CVSE_TILED_ALL(PREFIX, KIND)                                                                              \
  CVSE_TILED_ENTRY(PREFIX##_v2_c1, KIND, 2, 1) CVSE_TILED_ENTRY(PREFIX##_v2_c2, KIND, 2, 2)                     \
  CVSE_TILED_ENTRY(PREFIX##_v4_c1, KIND, 4, 1) CVSE_TILED_ENTRY(PREFIX##_v4_c2, KIND, 4, 2)                     \
  CVSE_TILED_ENTRY(PREFIX##_v8_c1, KIND, 8, 1) CVSE_TILED_ENTRY(PREFIX##_v8_c2, KIND, 8, 2)                     \
  CVSE_TILED_ENTRY(PREFIX##_v16_c1, KIND, 16, 1) CVSE_TILED_ENTRY(PREFIX##_v16_c2, KIND, 16, 2)
CVSE_TILED_ALL(cvse_spmm_tiled_f16, F16)
CVSE_TILED_ALL(cvse_spmm_tiled_bf16, BF16)

// B [K, N] 16-bit -> Bc [T][ceil(N / 64 CH)][BK][8 CH] 16-byte pieces in the tiled kernel's shared layout: position r
// of chunk t holds B row rows[t BK + r] (cvse_tiles.chunk_order; K: none), its piece c at c ^ (r & 7); zeros past K
// and N. Chunk t of column tile x is one contiguous bulk copy.
template <int CH>
__device__ __forceinline__ void cvse_b_tiles(const u16* __restrict__ B, const int* __restrict__ rows,
                                             uint4* __restrict__ Bc, i64 N, i64 K) {
  constexpr int BK = CVSE_TILE_BK, PR = 8 * CH;
  const i64 NT = (N + 64 * CH - 1) / (64 * CH), total = (K + BK - 1) / BK * NT * BK * PR;
  for (i64 x = (i64)blockIdx.x * blockDim.x + threadIdx.x; x < total; x += (i64)gridDim.x * blockDim.x) {
    const int p = (int)(x % PR), r = (int)(x / PR % BK);
    const i64 nt = x / ((i64)PR * BK) % NT, t = x / ((i64)PR * BK * NT);
    const i64 k = __ldg(rows + t * BK + r), n = nt * 64 * CH + 8 * (p ^ (r & 7));
    Bc[x] = k < K && n < N ? __ldg((const uint4*)(B + k * N + n)) : make_uint4(0u, 0u, 0u, 0u);
  }
}
extern "C" __global__ void cvse_b_tiles_c1(const u16* __restrict__ B, const int* __restrict__ rows,
                                           uint4* __restrict__ Bc, i64 N, i64 K) {
  cvse_b_tiles<1>(B, rows, Bc, N, K);
}
extern "C" __global__ void cvse_b_tiles_c2(const u16* __restrict__ B, const int* __restrict__ rows,
                                           uint4* __restrict__ Bc, i64 N, i64 K) {
  cvse_b_tiles<2>(B, rows, Bc, N, K);
}
