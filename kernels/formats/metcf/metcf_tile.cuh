// Shared pieces of the ME-TCF SpMM kernels: one 16x8 sparse A tile times 8 x 32 (or 64: CFG_WARP_SLICES) columns
// of B per warp with TF32 mma.sync.m16n8k8, B straight into registers. A reaches the mma fragment one of three
// ways (KernelConfig): v6 (default) a dense fragment array, one float4 per lane; v2 a per-block bitmap with
// popcount addressing into data; v0 tiles staged through shared memory with cp.async (one barrier per block).
//
// Register remapping (DTC-SpMM section 4.4.1): a warp owns 32 columns n0..n0+31 of B and C as four n8 tiles;
// column j (0..7) of tile t is the actual column n0 + 4*j + t. The mma B fragment of lane (g = lane/4,
// q = lane%4) is rows q and q+4, column j = g of each tile, i.e. B[k][n0+4g+t] for t = 0..3: one float4
// per B row. Its C fragment is rows g and g+8, tile columns 2q and 2q+1 = actual columns n0+8q+t and
// n0+8q+4+t: 8 contiguous columns per row, written as two float4.
//
// Input contract (checked by kernels/launch.py): docs/CONTRACTS.md ME-TCF arrays with row_window_offset and
// tc_offset as int64, sparse_a_to_b as int32 (-1 = padding), tc_local_id uint8 (r*8+c), data float32, and the
// launcher's bitmap or fragments + column pairs (docs/CONTRACTS.md, "Device-side arrays");
// B row-major [K, N] float32, C row-major [M, N] float32; vec != 0 only when N % 4 == 0 and B, C are
// 16-byte aligned. A non-finite value in a referenced row of B reaches all 16 rows of its window (a dense
// 16x8 tile multiplies it by the tile's zeros); padding slots (-1) never read B (the dense column pairs hold the
// block's first column there instead: a referenced row, times A's zeros).
#pragma once

#if !defined(CFG_WINDOW_ROWS) || !defined(CFG_BLOCK_COLS) || !defined(CFG_WARP_COLS) || \
    !defined(CFG_MAX_WARPS) || !defined(CFG_TILE_STAGES) || !defined(CFG_BLOCKS_PER_ITEM) || \
    !defined(CFG_COMBINE_THREADS) || !defined(CFG_PREFETCH_B) || !defined(CFG_MIN_BLOCKS_PER_SM) || \
    !defined(CFG_A_REGS) || !defined(CFG_UNROLL) || !defined(CFG_WINDOWS_PER_BLOCK) || \
    !defined(CFG_BALANCED_MIN_BLOCKS_PER_SM) || !defined(CFG_WARP_SLICES) || !defined(CFG_A_DENSE) || \
    !defined(CFG_SPLIT_MAX_WARPS)
#error "compile with the -D options of kernels/formats/metcf/config.py (KernelConfig.defines())"
#endif
static_assert(CFG_WINDOW_ROWS == 16, "mma.m16n8k8 needs 16-row windows (KernelConfig.window_rows)");
static_assert(CFG_BLOCK_COLS == 8, "mma.m16n8k8 needs 8-column TC blocks (KernelConfig.block_cols)");
static_assert(CFG_WARP_COLS == 32, "the float4 register remapping covers 4 n8 tiles = 32 columns per warp");
static_assert(CFG_MAX_WARPS >= 1 && CFG_MAX_WARPS <= 32, "KernelConfig.max_warps must be 1..32");
static_assert(CFG_TILE_STAGES >= 3, "one barrier per TC block needs >= 3 tile buffers (KernelConfig)");
static_assert(CFG_BLOCKS_PER_ITEM >= 1, "KernelConfig.blocks_per_item must be >= 1");
static_assert(CFG_PREFETCH_B == 0 || CFG_PREFETCH_B == 1, "KernelConfig.prefetch_b is a bool");
static_assert(CFG_A_REGS == 0 || CFG_A_REGS == 1, "KernelConfig.a_regs is a bool");
static_assert(CFG_WINDOWS_PER_BLOCK >= 1 && CFG_WINDOWS_PER_BLOCK <= CFG_MAX_WARPS,
              "KernelConfig.windows_per_block must be 1..max_warps");
static_assert(CFG_A_REGS || CFG_WINDOWS_PER_BLOCK == 1, "several windows per block need the barrier-free v2");
static_assert(CFG_BALANCED_MIN_BLOCKS_PER_SM >= 1 && CFG_BALANCED_MIN_BLOCKS_PER_SM * CFG_MAX_WARPS <= 64,
              "KernelConfig.balanced_min_blocks_per_sm x max_warps must fit 64 warps per SM");
static_assert(CFG_WARP_SLICES == 1 || CFG_WARP_SLICES == 2, "KernelConfig.warp_slices must be 1 or 2");
static_assert(CFG_A_REGS || CFG_WARP_SLICES == 1, "two column slices per warp need the register pipeline (v2)");
static_assert(CFG_A_DENSE == 0 || (CFG_A_DENSE == 1 && CFG_A_REGS), "KernelConfig.a_dense needs a_regs");
static_assert(CFG_SPLIT_MAX_WARPS >= 1 && CFG_SPLIT_MAX_WARPS <= 32, "KernelConfig.split_max_warps must be 1..32");
static_assert(CFG_UNROLL >= 1 && CFG_UNROLL <= 8, "KernelConfig.unroll must be 1..8");
static_assert(CFG_MIN_BLOCKS_PER_SM >= 1 && CFG_MIN_BLOCKS_PER_SM * CFG_MAX_WARPS <= 64,
              "KernelConfig.min_blocks_per_sm x max_warps must fit 64 warps per SM");

#include "tc_ops.cuh"  // i64, Kind, mma, cp_async
#define TILE_ELEMS (CFG_WINDOW_ROWS * CFG_BLOCK_COLS)  // 128 slots of one 16x8 TC block
#define WARP_N (CFG_WARP_COLS * CFG_WARP_SLICES)      // columns of B and C one warp covers
typedef float Acc[CFG_WARP_SLICES][4][4];  // [32-column slice][n8 tile t][mma D register] of one warp

// Slot (r, c) of a 16x8 tile lives at (c/4)*64 + r*4 + c%4, so the mma A fragment register k of lane l is
// element k*32 + l: conflict-free shared loads (row-major r*8+c would put lanes g and g+4 on one bank).
__device__ __forceinline__ int tile_slot(int local_id) {
  const int r = local_id >> 3, c = local_id & 7;
  return ((c >> 2) << 6) + (r << 2) + (c & 3);
}

struct TileStages {
  float a[CFG_TILE_STAGES][TILE_ELEMS];     // [stage][128]: permuted 16x8 A tile (tile_slot), zero-filled
  int col[CFG_TILE_STAGES][CFG_BLOCK_COLS];  // [stage][8]: sparse_a_to_b row of the block, -1 = padding
                                             // (filled only without CFG_PREFETCH_B)
};

// Plain equivalent: x with its mantissa rounded to 10 bits, as a bit pattern. sm_90: round to nearest even, one
// instruction (F2FP.TF32); sm_80 has only ties-away (cvt.rna: an infinity test and an add per value). Not
// tc_ops.cuh's to_tf32, which is ties-away everywhere: ME-TCF's TF32 rounding is this one.
__device__ __forceinline__ unsigned round_tf32(float x) {
  unsigned r;
#if __CUDA_ARCH__ >= 900
  asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
#else
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
#endif
  return r;
}

__device__ __forceinline__ void zero_tile(TileStages& s, int stage) {
  for (int i = threadIdx.x; i < TILE_ELEMS; i += blockDim.x) s.a[stage][i] = 0.0f;
}

// All threads: scatter block b's nonzeros into the (already zeroed) stage, plus its 8 column ids; async.
__device__ __forceinline__ void fetch_tile_async(TileStages& s, int stage, i64 b, const i64* __restrict__ tc_offset,
                                                 const unsigned char* __restrict__ tc_local_id,
                                                 const float* __restrict__ data, const int* __restrict__ a_to_b) {
  const i64 begin = tc_offset[b], end = tc_offset[b + 1];
  for (i64 i = begin + threadIdx.x; i < end; i += blockDim.x)
    cp_async<4>(&s.a[stage][tile_slot(tc_local_id[i])], data + i);
#if !CFG_PREFETCH_B
  if (threadIdx.x < CFG_BLOCK_COLS) cp_async<4>(&s.col[stage][threadIdx.x], a_to_b + b * CFG_BLOCK_COLS + threadIdx.x);
#endif
  cp_async_commit();
}

// One B row segment: v[t] = B[col][n + t] for t = 0..3, zeros for padding (col < 0) or past N.
__device__ __forceinline__ void load_b4(float (&v)[4], const float* __restrict__ B, int col, i64 n_cols_b, i64 n,
                                        bool vec) {
  if (col < 0) {
    v[0] = v[1] = v[2] = v[3] = 0.0f;
  } else if (vec) {
    const float4 x = __ldg(reinterpret_cast<const float4*>(B + (i64)col * n_cols_b + n));
    v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
  } else {
#pragma unroll
    for (int t = 0; t < 4; ++t) v[t] = (n + t < n_cols_b) ? __ldg(B + (i64)col * n_cols_b + n + t) : 0.0f;
  }
}

// One warp's B fragments of block b, column ids read from global memory (no shared-memory round trip, so
// they can be issued one block ahead): lo[t] = B[a_to_b[b][q]][n + t], hi[t] = B[a_to_b[b][q+4]][n + t].
__device__ __forceinline__ void load_b_block(float (&lo)[4], float (&hi)[4], const float* __restrict__ B,
                                             const int* __restrict__ a_to_b, i64 b, int q, i64 N, i64 n, bool vec) {
  const int c_lo = __ldg(a_to_b + b * CFG_BLOCK_COLS + q), c_hi = __ldg(a_to_b + b * CFG_BLOCK_COLS + q + 4);
  load_b4(lo, B, c_lo, N, n, vec);
  load_b4(hi, B, c_hi, N, n, vec);
}

// One warp, one TC block: acc[t] += A_tile (16x8) x Bt_t (8x8) for the 4 remapped n8 tiles, where
// Bt_t[k][j] = B[col[k]][n0 + 4j + t]; b_lo/b_hi are this lane's rows q and q+4 of the four Bt_t.
__device__ __forceinline__ void warp_tile_mma(float (&acc)[4][4], const TileStages& s, int stage,
                                              const float (&b_lo)[4], const float (&b_hi)[4], int lane) {
  unsigned a[4];  // mma A fragment: tile rows g, g+8 x columns q, q+4 (see tile_slot)
#pragma unroll
  for (int k = 0; k < 4; ++k) a[k] = round_tf32(s.a[stage][k * 32 + lane]);
#pragma unroll
  for (int t = 0; t < 4; ++t) mma<TF32>(acc[t], a, round_tf32(b_lo[t]), round_tf32(b_hi[t]));
}

// Write a warp's 16x32 accumulator (remapped) to dst rows 0..rows-1 (row stride N), columns n0..n0+31 (< N).
// add: dst += the accumulator (C = C + A B for a caller that splits A's columns), else dst = the accumulator.
__device__ __forceinline__ void store_acc(float* __restrict__ dst, const float (&acc)[4][4], int rows, i64 N,
                                          i64 n0, bool vec, bool add, int lane) {
  const int g = lane >> 2, q = lane & 3;
  const i64 n = n0 + 8 * q;
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // h = 0: row g (acc[t][0], acc[t][1]); h = 1: row g + 8 (acc[t][2], acc[t][3])
    const int r = g + 8 * h;
    if (r >= rows) continue;
    float* row = dst + (i64)r * N;
    if (vec) {
      float4 lo = make_float4(acc[0][2 * h], acc[1][2 * h], acc[2][2 * h], acc[3][2 * h]);
      float4 hi = make_float4(acc[0][2 * h + 1], acc[1][2 * h + 1], acc[2][2 * h + 1], acc[3][2 * h + 1]);
      if (add) {
        const float4 o = *reinterpret_cast<const float4*>(row + n), p = *reinterpret_cast<const float4*>(row + n + 4);
        lo = make_float4(o.x + lo.x, o.y + lo.y, o.z + lo.z, o.w + lo.w);
        hi = make_float4(p.x + hi.x, p.y + hi.y, p.z + hi.z, p.w + hi.w);
      }
      *reinterpret_cast<float4*>(row + n) = lo;
      *reinterpret_cast<float4*>(row + n + 4) = hi;
    } else {
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        if (n + t < N) row[n + t] = add ? row[n + t] + acc[t][2 * h] : acc[t][2 * h];
        if (n + 4 + t < N) row[n + 4 + t] = add ? row[n + 4 + t] + acc[t][2 * h + 1] : acc[t][2 * h + 1];
      }
    }
  }
}

__device__ __forceinline__ void zero_acc(Acc& acc) {
#pragma unroll
  for (int s = 0; s < CFG_WARP_SLICES; ++s)
#pragma unroll
    for (int t = 0; t < 4; ++t) acc[s][t][0] = acc[s][t][1] = acc[s][t][2] = acc[s][t][3] = 0.0f;
}

// Write a warp's WARP_N columns from n0 (slice s = columns n0 + 32 s .. + 31, skipped past N), rows 0..rows-1.
__device__ __forceinline__ void store_accs(float* __restrict__ dst, const Acc& acc, int rows, i64 N, i64 n0,
                                           bool vec_ok, bool add, int lane) {
#pragma unroll
  for (int s = 0; s < CFG_WARP_SLICES; ++s) {
    const i64 n = n0 + (i64)s * CFG_WARP_COLS;
    if (n < N) store_acc(dst, acc[s], rows, N, n, vec_ok && n + CFG_WARP_COLS <= N, add, lane);
  }
}

// ---- A fragments straight into registers (CFG_A_REGS, version v2, docs/kernels-notes.md) -----------------------
// Per TC block, a 128-bit occupancy bitmap (uint4 {w0, w1, w2, w3}; bit p % 32 of word p / 32 is set when the
// block holds local id p = r * 8 + c). Canonical ME-TCF keeps a block's nonzeros sorted by local id, so the
// nonzero with local id p sits at data[tc_offset[b] + popc(bits below p)]: every lane finds its four A-fragment
// elements with popcounts, without shared memory or barriers. Lane (g, q) needs (g, q), (g + 8, q), (g, q + 4),
// (g + 8, q + 4): ids 8g + q (+ 4) in word g / 4 and 64 + 8g + q (+ 4) in word 2 + g / 4, bits 8 (g % 4) + q (+ 4).

// What a lane needs of one block before it can issue the block's loads: its two B rows, its two bitmap words
// and where those words' nonzeros start in data. Padding (col -1) and blocks past the end (m_* = 0) load nothing.
#if CFG_A_DENSE
// Dense fragments (CFG_A_DENSE, version v6): the launcher stores every TC block as its 128 values in mma fragment
// order, frag[b][lane][k] (zeros where A has none), so a lane reads its A fragment with one float4 load and needs
// no bitmap, offset or popcount: 4 load instructions per block and warp instead of 10, for 512 bytes of A per
// block (kernels/launch.py fragments()).
struct BlockMeta {
  int col_lo, col_hi;  // sparse_a_to_b[b][q], sparse_a_to_b[b][q + 4]
  i64 b;               // the block, -1 past the end
};

// a_to_b here is the launcher's column pairs: [b][q] = (sparse_a_to_b[b][q], sparse_a_to_b[b][q + 4]), one
// 8-byte load per lane.
__device__ __forceinline__ void load_meta(BlockMeta& m, i64 b, bool valid, const i64* __restrict__,
                                          const uint4* __restrict__, const int* __restrict__ a_to_b) {
  const int2 c = valid ? __ldg(reinterpret_cast<const int2*>(a_to_b) + b * 4 + (threadIdx.x & 3)) : make_int2(-1, -1);
  m.b = valid ? b : -1;
  m.col_lo = c.x;
  m.col_hi = c.y;
}
#else
struct BlockMeta {
  int col_lo, col_hi;   // sparse_a_to_b[b][q], sparse_a_to_b[b][q + 4]
  unsigned m_lo, m_hi;  // bitmap words holding rows g and g + 8
  i64 base_lo, base_hi; // data index of the first nonzero of word m_lo / m_hi
};

__device__ __forceinline__ void load_meta(BlockMeta& m, i64 b, bool valid, const i64* __restrict__ tc_offset,
                                          const uint4* __restrict__ bitmap, const int* __restrict__ a_to_b) {
  if (!valid) {
    m.col_lo = m.col_hi = -1;
    m.m_lo = m.m_hi = 0u;
    m.base_lo = m.base_hi = 0;
    return;
  }
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  m.col_lo = __ldg(a_to_b + b * CFG_BLOCK_COLS + q);
  m.col_hi = __ldg(a_to_b + b * CFG_BLOCK_COLS + q + 4);
  const uint4 w = __ldg(bitmap + b);
  const i64 off = __ldg(tc_offset + b);
  const bool upper = g >= 4;  // rows 4..7 (and 12..15) live in the second word of each half
  const int c0 = __popc(w.x), c01 = c0 + __popc(w.y), c012 = c01 + __popc(w.z);
  m.m_lo = upper ? w.y : w.x;
  m.m_hi = upper ? w.w : w.z;
  m.base_lo = off + (upper ? c0 : 0);
  m.base_hi = off + (upper ? c012 : c01);
}
#endif

// A value of this lane's fragment: the nonzero at bit `bit` of word m (0 when the slot is empty).
__device__ __forceinline__ float a_value(const float* __restrict__ data, unsigned m, i64 base, int bit) {
  return ((m >> bit) & 1u) ? __ldg(data + base + __popc(m & ((1u << bit) - 1u))) : 0.0f;
}

// Where a warp's slice s of WARP_N columns from n0 lies: lane's first column n_lane, inside N (active), float4
// path (vec). Computed once per kernel, outside the block loop.
struct Slices {
  i64 n_lane[CFG_WARP_SLICES];
  bool active[CFG_WARP_SLICES], vec[CFG_WARP_SLICES];
};

__device__ __forceinline__ Slices warp_slices(i64 n0, i64 N, bool vec_ok) {
  Slices sl;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int s = 0; s < CFG_WARP_SLICES; ++s) {
    const i64 n = n0 + (i64)s * CFG_WARP_COLS;
    sl.n_lane[s] = n + 4 * (lane >> 2);
    sl.active[s] = n < N;
    sl.vec[s] = vec_ok && n + CFG_WARP_COLS <= N;
  }
  return sl;
}

// FAST path of one B row (every slice inside N and float4-aligned): row pointer with one 32-bit x 32-bit wide
// multiply-add and no branch, so a group's loads issue back to back. The dense-fragment column pairs never hold
// padding (kernels/launch.py col_pairs repeats the block's first column, whose A entries are zeros there), so
// col < 0 only marks a block past the end, whose loads are never multiplied: it reads row 0 instead. The bitmap
// pipeline reads sparse_a_to_b, padding included: there a select (not a multiply by A's zero, which would let a
// non-finite B[0] through) gives the zeros.
__device__ __forceinline__ void load_row_fast(float (&v)[CFG_WARP_SLICES][4], const float* __restrict__ B_lane,
                                              int col, unsigned n32) {
  const float* row = B_lane + (unsigned long long)(unsigned)max(col, 0) * n32;
#pragma unroll
  for (int s = 0; s < CFG_WARP_SLICES; ++s) {
    const float4 x = __ldg(reinterpret_cast<const float4*>(row + s * CFG_WARP_COLS));
#if CFG_A_DENSE
    v[s][0] = x.x; v[s][1] = x.y; v[s][2] = x.z; v[s][3] = x.w;
#else
    const bool pad = col < 0;
    v[s][0] = pad ? 0.0f : x.x; v[s][1] = pad ? 0.0f : x.y; v[s][2] = pad ? 0.0f : x.z; v[s][3] = pad ? 0.0f : x.w;
#endif
  }
}

// Issue one block's loads: a = the mma A fragment {A[g][q], A[g+8][q], A[g][q+4], A[g+8][q+4]}, lo[s]/hi[s] =
// B rows col_lo/col_hi at this lane's 4 columns of slice s (left unset for inactive slices: never multiplied).
// FAST: every slice active and float4 (the warp-uniform common case, chosen once per kernel by reg_pipeline).
template <bool FAST>
__device__ __forceinline__ void load_block(float (&a)[4], float (&lo)[CFG_WARP_SLICES][4],
                                           float (&hi)[CFG_WARP_SLICES][4], const BlockMeta& m,
                                           const float* __restrict__ data, const float* __restrict__ B, i64 N,
                                           const Slices& sl) {
#if CFG_A_DENSE  // data = the fragment array
  const float4 f = m.b >= 0 ? __ldg(reinterpret_cast<const float4*>(data) + m.b * 32 + (threadIdx.x & 31))
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  a[0] = f.x; a[1] = f.y; a[2] = f.z; a[3] = f.w;
#else
  const int lane = threadIdx.x & 31, bit = 8 * ((lane >> 2) & 3) + (lane & 3);
  a[0] = a_value(data, m.m_lo, m.base_lo, bit);
  a[1] = a_value(data, m.m_hi, m.base_hi, bit);
  a[2] = a_value(data, m.m_lo, m.base_lo, bit + 4);
  a[3] = a_value(data, m.m_hi, m.base_hi, bit + 4);
#endif
  if (FAST) {  // B + n_lane[0]: slice s is 32 s columns further (warp_slices)
    load_row_fast(lo, B + sl.n_lane[0], m.col_lo, (unsigned)N);
    load_row_fast(hi, B + sl.n_lane[0], m.col_hi, (unsigned)N);
  } else {
#pragma unroll
    for (int s = 0; s < CFG_WARP_SLICES; ++s) {
      if (sl.active[s]) {
        load_b4(lo[s], B, m.col_lo, N, sl.n_lane[s], sl.vec[s]);
        load_b4(hi[s], B, m.col_hi, N, sl.n_lane[s], sl.vec[s]);
      }
    }
  }
}

// acc[s][t] += A_tile x Bt_t of slice s for the 4 remapped n8 tiles, A fragment in registers (see warp_tile_mma).
template <bool FAST>
__device__ __forceinline__ void reg_tile_mma(Acc& acc, const float (&av)[4], const float (&lo)[CFG_WARP_SLICES][4],
                                             const float (&hi)[CFG_WARP_SLICES][4], const Slices& sl) {
  unsigned a[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)  // dense fragments are stored TF32-rounded already (kernels/launch.py fragments)
    a[k] = CFG_A_DENSE ? __float_as_uint(av[k]) : round_tf32(av[k]);
#pragma unroll
  for (int s = 0; s < CFG_WARP_SLICES; ++s)
    if (FAST || sl.active[s]) {
#pragma unroll
      for (int t = 0; t < 4; ++t) mma<TF32>(acc[s][t], a, round_tf32(lo[s][t]), round_tf32(hi[s][t]));
    }
}

// The barrier-free pipeline (CFG_A_REGS): each warp walks blocks [b_begin, b_end) in groups of CFG_UNROLL for
// its WARP_N columns from n0. A group's loads (2 x CFG_WARP_SLICES x CFG_UNROLL float4 of B, 4 x CFG_UNROLL A
// values) are all issued before its first mma, and the next group's metadata is loaded while they are in flight
// (v0 waited on a barrier, a shared-memory column id and then B, block by block). after(b, acc) runs after
// block b's mma, in block order, exactly as in tile_pipeline.
template <bool FAST, class After>
__device__ __forceinline__ void reg_pipeline_impl(i64 b_begin, i64 b_end, const i64* __restrict__ tc_offset,
                                                  const uint4* __restrict__ bitmap, const float* __restrict__ data,
                                                  const int* __restrict__ a_to_b, const float* __restrict__ B, i64 N,
                                                  const Slices& sl, Acc& acc, After after) {
  BlockMeta meta[CFG_UNROLL];
#pragma unroll
  for (int u = 0; u < CFG_UNROLL; ++u)
    load_meta(meta[u], b_begin + u, b_begin + u < b_end, tc_offset, bitmap, a_to_b);
  for (i64 b0 = b_begin; b0 < b_end; b0 += CFG_UNROLL) {
    float av[CFG_UNROLL][4], lo[CFG_UNROLL][CFG_WARP_SLICES][4], hi[CFG_UNROLL][CFG_WARP_SLICES][4];
#pragma unroll
    for (int u = 0; u < CFG_UNROLL; ++u) load_block<FAST>(av[u], lo[u], hi[u], meta[u], data, B, N, sl);
    const i64 nb = b0 + CFG_UNROLL;  // the next group's metadata, in flight during this group's mma
#pragma unroll
    for (int u = 0; u < CFG_UNROLL; ++u) load_meta(meta[u], nb + u, nb + u < b_end, tc_offset, bitmap, a_to_b);
#pragma unroll
    for (int u = 0; u < CFG_UNROLL; ++u) {
      if (b0 + u < b_end) {  // uniform across the warp
        reg_tile_mma<FAST>(acc, av[u], lo[u], hi[u], sl);
        after(b0 + u, acc);
      }
    }
  }
}

// The pipeline for this warp's columns: FAST (no per-load slice or alignment checks) when every slice lies inside
// N and may use float4, which is warp-uniform and decided once here; the checked path otherwise (N % 4 != 0,
// unaligned B or C, the last column chunk past N).
template <class After>
__device__ __forceinline__ void reg_pipeline(i64 b_begin, i64 b_end, const i64* __restrict__ tc_offset,
                                             const uint4* __restrict__ bitmap, const float* __restrict__ data,
                                             const int* __restrict__ a_to_b, const float* __restrict__ B, i64 N,
                                             i64 n0, bool vec_ok, Acc& acc, After after) {
  const Slices sl = warp_slices(n0, N, vec_ok);
  bool fast = true;
#pragma unroll
  for (int s = 0; s < CFG_WARP_SLICES; ++s) fast = fast && sl.vec[s];
  if (fast)
    reg_pipeline_impl<true>(b_begin, b_end, tc_offset, bitmap, data, a_to_b, B, N, sl, acc, after);
  else
    reg_pipeline_impl<false>(b_begin, b_end, tc_offset, bitmap, data, a_to_b, B, N, sl, acc, after);
}
