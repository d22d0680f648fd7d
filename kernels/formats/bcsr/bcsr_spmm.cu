// C = A @ B for a sparse A (M x K) in BCSR (SMaT, SC'24: dense 16 x w blocks on a fixed grid, w = 8 for TF32,
// 16 for FP16/BF16) and dense row-major B (K x N): C[16i + r][n] = sum over blocks b of block row i, c < w of
// data[b][r][c] * B[w * indices[b] + c][n], FP32 accumulation; C in float32 or in the 16-bit input type.
//
// Launch mapping (kernels/formats/bcsr/launch.py): grid = (block rows, column chunks); blockDim.x = 32 x slices x ksplit.
//   1 warp = one block row x 64 columns (8 n8 tiles: 16 x 64 of C) x a contiguous 1/ksplit share of the block
//   row's blocks (SMaT's Algorithm 1 with a warp covering 8 mma tiles instead of one). Per block the warp copies
//   A's 512 bytes and B's w x 64 slice into its own shared-memory stage with cp.async (the next block's copy runs
//   while this one multiplies: 2 stages), reads them with ldmatrix, and issues 8 mma.sync. Lane l = 4g + q owns
//   C rows g and g + 8. ksplit > 1 (skewed or few block rows): the warps of one 64-column slice sum their
//   accumulators by a fixed order in shared memory (part 0 adds parts 1, 2, ... in turn): no atomics, so two
//   calls give bit-identical C.
// Input contract (checked by the launcher): indptr int64 [ceil(M/16) + 1]; indices int32 [n_blocks] (block
// columns, ascending per block row); data [n_blocks][16][w] row-major, 512 bytes per block, TF32 values already
// rounded (kernels.launch.tf32_round), 16-bit values raw (bfloat16 as bits); B and C row-major, 16-byte aligned
// when FLAG_VEC (set only when N % 8 == 0 for 16-bit, N % 4 == 0 for TF32). Rows >= K of B are never read (zero
// filled), rows >= M and columns >= N of C never written; every other element of C is. Indexing int64.
// Compile-time constants: kernels/formats/bcsr/launch.py BcsrConfig.defines() passes them. kernels/compile_check.py
// compiles every .cu with kernels/formats/metcf/config.py's options only, so these defaults equal BcsrConfig's.
#ifndef BCSR_WARP_COLS
#define BCSR_WARP_COLS 64
#define BCSR_MAX_WARPS 8
#define BCSR_MIN_BLOCKS_PER_SM 2
#endif
static_assert(BCSR_WARP_COLS == 64, "a warp's 64 columns are the 8 n8 tiles of the shared-memory B layout");
static_assert(BCSR_MAX_WARPS >= 1 && BCSR_MAX_WARPS <= 8, "BcsrConfig.max_warps x 5632 B must fit 48 KB");

#include "tc_ops.cuh"  // i64, u16, Kind, mma, to_tf32, to_f32, from_f32, smem_u32, ldmatrix_x4, cp_async
#define FLAG_VEC 1    // cp.async 16-byte B chunks and paired C stores (see the contract)
#define FLAG_ADD 2    // C += A @ B (added in fp32, rounded once)
#define FLAG_OUT16 4  // C in the 16-bit input type (else float32)
#define A_BYTES 512        // one block: 16 x 16 halves or 16 x 8 floats
#define B_BYTES 2304       // B slice: 16 rows x 64 halves (2048 B) or 8 rows x 72 floats (64 + 8 padding)
#define STAGE_BYTES (A_BYTES + B_BYTES)
#define WARP_SMEM (2 * STAGE_BYTES)  // two stages per warp; also holds the 32 x 32 floats of a split partial sum
#define TF32_ROW 72                  // floats per TF32 B row in shared memory: 64 + 8 (conflict-free b0/b1 loads)
static_assert(WARP_SMEM >= 32 * 32 * 4, "a warp's stages must hold its accumulators for the split reduction");

// A block in shared memory: 32 chunks of 16 bytes, row r (0..15) half c (0..1) at chunk 2r + (c ^ (r / 4 % 2)),
// so the 8 row addresses of one ldmatrix phase hit 8 distinct 16-byte bank groups.
__device__ __forceinline__ int a_chunk(int r, int c) { return 2 * r + (c ^ ((r >> 2) & 1)); }
// 16-bit B slice: 16 rows x 8 chunks (8 columns each); chunk c of row k at k * 8 + (c ^ (k % 8)).
__device__ __forceinline__ int b_chunk(int k, int c) { return 8 * k + (c ^ (k & 7)); }

// Copy block b (A) and its B slice (rows k0 .. k0 + w - 1, columns n0 .. n0 + 63) into stage st.
template <int KIND>
__device__ __forceinline__ void load_stage(char* st, const char* __restrict__ data, const int* __restrict__ indices,
                                           const void* __restrict__ B, i64 b, i64 K, i64 N, i64 n0, bool vec) {
  const int lane = threadIdx.x & 31;
  constexpr int W = KIND == TF32 ? 8 : 16;
  cp_async<16, true>(st + 16 * a_chunk(lane >> 1, lane & 1), data + b * A_BYTES + 16 * lane, true);
  const i64 k0 = (i64)indices[b] * W;
  char* bs = st + A_BYTES;
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // 128 chunks of 16 bytes per slice, 4 per lane
    const int idx = lane + 32 * i;
    if constexpr (KIND == TF32) {
      const int k = idx >> 4, c = idx & 15;  // [8 rows][16 chunks of 4 floats]
      const i64 row = k0 + k, col = n0 + 4 * c;
      float* dst = (float*)bs + k * TF32_ROW + 4 * c;
      const float* src = (const float*)B + row * N + col;
      if (vec) {
        cp_async<16, true>(dst, row < K && col < N ? (const void*)src : B, row < K && col < N);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) dst[j] = row < K && col + j < N ? src[j] : 0.f;
      }
    } else {
      const int k = idx >> 3, c = idx & 7;  // [16 rows][8 chunks of 8 halves]
      const i64 row = k0 + k, col = n0 + 8 * c;
      u16* dst = (u16*)bs + 8 * b_chunk(k, c);
      const u16* src = (const u16*)B + row * N + col;
      if (vec) {
        cp_async<16, true>(dst, row < K && col < N ? (const void*)src : B, row < K && col < N);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) dst[j] = row < K && col + j < N ? src[j] : (u16)0;
      }
    }
  }
  cp_async_commit();
}

// acc[t] += A block x B slice tile t (t = 0..7: columns n0 + 8t .. n0 + 8t + 7) from stage st.
template <int KIND>
__device__ __forceinline__ void mma_stage(float (&acc)[8][4], const char* st) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3, m = lane >> 3;
  unsigned a[4];  // A fragment: matrices (rows 0-7, half 0), (rows 8-15, half 0), (rows 0-7, half 1), (8-15, 1)
  ldmatrix_x4(a, st + 16 * a_chunk((lane & 7) + 8 * (m & 1), m >> 1));
  const char* bs = st + A_BYTES;
  if constexpr (KIND == TF32) {
    const float* bf = (const float*)bs;
#pragma unroll
    for (int t = 0; t < 8; ++t)  // b0 = Bt[q][g], b1 = Bt[q + 4][g]
      mma<KIND>(acc[t], a, to_tf32(bf[q * TF32_ROW + 8 * t + g]), to_tf32(bf[(q + 4) * TF32_ROW + 8 * t + g]));
  } else {
#pragma unroll
    for (int t = 0; t < 8; t += 2) {  // .trans of (k 0-7, tile t), (k 8-15, t), (k 0-7, t + 1), (k 8-15, t + 1)
      unsigned b[4];
      ldmatrix_x4_trans(b, bs + 16 * b_chunk((lane & 7) + 8 * (m & 1), t + (m >> 1)));
      mma<KIND>(acc[t], a, b[0], b[1]);
      mma<KIND>(acc[t + 1], a, b[2], b[3]);
    }
  }
}

template <int KIND>
__device__ __forceinline__ void store_c(const float (&acc)[8][4], void* __restrict__ C, i64 row0, i64 M, i64 N,
                                        i64 n0, int flags) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const bool vec = flags & FLAG_VEC, add = flags & FLAG_ADD, out16 = flags & FLAG_OUT16;
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // rows g (d0, d1) and g + 8 (d2, d3)
    const i64 row = row0 + g + 8 * h;
    if (row >= M) continue;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const i64 col = n0 + 8 * t + 2 * q;
      float v0 = acc[t][2 * h], v1 = acc[t][2 * h + 1];
      if (out16) {
        u16* c = (u16*)C + row * N + col;
        if (vec && col < N) {  // N even: both or neither of the pair are inside
          unsigned old = add ? *(const unsigned*)c : 0u;
          if (add) { v0 += to_f32<KIND>((u16)(old & 0xFFFF)); v1 += to_f32<KIND>((u16)(old >> 16)); }
          *(unsigned*)c = (unsigned)from_f32<KIND>(v0) | ((unsigned)from_f32<KIND>(v1) << 16);
        } else {
          if (col < N) c[0] = from_f32<KIND>(v0 + (add ? to_f32<KIND>(c[0]) : 0.f));
          if (col + 1 < N) c[1] = from_f32<KIND>(v1 + (add ? to_f32<KIND>(c[1]) : 0.f));
        }
      } else {
        float* c = (float*)C + row * N + col;
        if (vec && col < N) {
          float2 o = add ? *(const float2*)c : make_float2(0.f, 0.f);
          *(float2*)c = make_float2(o.x + v0, o.y + v1);
        } else {
          if (col < N) c[0] = (add ? c[0] : 0.f) + v0;
          if (col + 1 < N) c[1] = (add ? c[1] : 0.f) + v1;
        }
      }
    }
  }
}

template <int KIND>
__device__ __forceinline__ void bcsr_spmm(const i64* __restrict__ indptr, const int* __restrict__ indices,
                                          const char* __restrict__ data, const void* __restrict__ B,
                                          void* __restrict__ C, i64 M, i64 K, i64 N, int flags, int ksplit) {
  extern __shared__ __align__(16) char smem[];  // [warps][2 stages][A_BYTES + B_BYTES]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int slices = blockDim.x / (32 * ksplit), slice = warp % slices, part = warp / slices;
  const i64 bi = blockIdx.x, n0 = ((i64)blockIdx.y * slices + slice) * BCSR_WARP_COLS;
  const i64 b_row = indptr[bi], n_row = indptr[bi + 1] - b_row;
  const i64 lo = b_row + n_row * part / ksplit, hi = b_row + n_row * (part + 1) / ksplit;
  const bool vec = flags & FLAG_VEC;
  char* ws = smem + warp * WARP_SMEM;
  float acc[8][4];  // [n8 tile t][mma D register]: rows g, g + 8 x columns n0 + 8t + 2q, +1
#pragma unroll
  for (int t = 0; t < 8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
  if (n0 < N && lo < hi) {
    load_stage<KIND>(ws, data, indices, B, lo, K, N, n0, vec);
    for (i64 b = lo; b < hi; ++b) {
      char* st = ws + ((b - lo) & 1) * STAGE_BYTES;
      if (b + 1 < hi) {  // the other stage was last read in the previous iteration, before its __syncwarp
        load_stage<KIND>(ws + ((b + 1 - lo) & 1) * STAGE_BYTES, data, indices, B, b + 1, K, N, n0, vec);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncwarp();  // every lane's copies (and the non-vec stores) of stage st are visible
      mma_stage<KIND>(acc, st);
      __syncwarp();  // all lanes done reading st before it is refilled
    }
  }
  if (ksplit > 1) {  // fixed-order sum of the parts of each slice, in the warps' own stage memory
    __syncthreads();
    float* red = (float*)ws;  // [32 registers][32 lanes]
    if (part > 0) {
#pragma unroll
      for (int t = 0; t < 8; ++t)
#pragma unroll
        for (int r = 0; r < 4; ++r) red[(4 * t + r) * 32 + lane] = acc[t][r];
    }
    __syncthreads();
    if (part > 0) return;
    for (int p = 1; p < ksplit; ++p) {
      const float* other = (const float*)(smem + (p * slices + slice) * WARP_SMEM);
#pragma unroll
      for (int t = 0; t < 8; ++t)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[t][r] += other[(4 * t + r) * 32 + lane];
    }
  }
  if (n0 < N) store_c<KIND>(acc, C, 16 * bi, M, N, n0, flags);
}

#define BCSR_ENTRY(NAME, KIND)                                                                                     \
  extern "C" __global__ void __launch_bounds__(32 * BCSR_MAX_WARPS, BCSR_MIN_BLOCKS_PER_SM)                      \
      NAME(const i64* __restrict__ indptr, const int* __restrict__ indices, const char* __restrict__ data,         \
           const void* __restrict__ B, void* __restrict__ C, i64 M, i64 K, i64 N, int flags, int ksplit) {          \
    bcsr_spmm<KIND>(indptr, indices, data, B, C, M, K, N, flags, ksplit);                                          \
  }
BCSR_ENTRY(bcsr_spmm_tf32, TF32)
BCSR_ENTRY(bcsr_spmm_f16, F16)
BCSR_ENTRY(bcsr_spmm_bf16, BF16)
