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
