// C = A @ B for a sparse A (M x K) in CVSE (V x 1 column vectors, V in {2, 4, 8, 16}) and dense row-major B
// (K x N): C[V*i + v][n] = sum over vectors b of vector row i of data[b][v] * B[indices[b]][n], FP32 accumulation;
// C in float32 or in the 16-bit input type. SSpMM (TPDS'25) sections III-IV on mma.sync:
//
// Transpose Mapping Scheme: C^T = B^T A^T, so the mma's m16 runs over 16 columns of C and its n8 over the V rows
// of a vector row (V <= 8: one n8 tile, lanes g >= V give zero columns; V = 16: two n8 tiles sharing one A
// fragment); the mma's k runs over KS consecutive vectors of the vector row (KS = 16 f16/bf16, 8 tf32). So V may be
// 2 or 4 with a k16 instruction: the waste is the unused n8 columns, not a 16-row padding.
// Register Shuffle Method: lane (g = lane/4, q = lane%4) loads 8 consecutive columns n0 + 8g .. 8g+7 of the B rows
// of its k slots (f16: indices of slots 2q, 2q+1, 2q+8, 2q+9, one 16-byte load each; tf32: slots q, q+4, two
// 16-byte loads each). mma instance i (0..3) maps its row g to column n0 + 8g + 2i and row g + 8 to n0 + 8g + 2i + 1,
// so "Shuffle In" is register renaming: a = {prmt 0x5410 / 0x7632 of word i of rows (2q, 2q+1), the same of rows
// (2q+8, 2q+9)}. "Shuffle Out": after the 4 instances lane (g, q) holds rows v = 2q, 2q+1 (+8 for the second n8
// tile) x the 8 consecutive columns n0 + 8g .. 8g+7 of C: one 16-byte (16-bit C) or two float4 stores per row.
//
// Launch mapping (kernels/launch_cvse.py): grid = (n_vec_rows, column chunks); blockDim.x = 32 x W (W <= max_warps);
//   1 block = one vector row x W*64 columns; warp w = columns n0 = (blockIdx.y W + w) 64 .. +63. The block stages
//   the vector row's next KS vectors (indices [KS] int32, values [KS][V]) in shared memory, double-buffered, one
//   __syncthreads per step (the LHS tile is reused by the W warps: paper's step 1). Each C element has one writer
//   and a fixed summation order: deterministic, no atomics.
// Input contract (checked by the launcher): vec_ptr int64 [n_vec_rows + 1]; indices int32 [max(n_vectors, 1)];
// data [max(n_vectors, 1)][V] float32 already rounded to TF32 (kernels.launch.tf32_round), or raw 16-bit values
// (bfloat16 as bits); B [K, N], C [M, N] row-major; FLAG_VEC only when N % 8 == 0 and B, C are 16-byte aligned.
// k slots past a vector row's end read no B row (zeros). Rows >= M and columns >= N of C are never written; every
// other element is (zeros for an empty vector row). Indexing int64.
#include "cvse_common.cuh"

template <int KIND> struct Step { static constexpr int KS = KIND == TF32 ? 8 : 16; };  // vectors per mma k

// Copy vectors [v0, v0 + KS) of the vector row (those < v_end; -1 / zeros past it) into one stage.
template <int KIND, int V>
__device__ __forceinline__ void load_stage(int* s_idx, unsigned* s_val, const int* __restrict__ indices,
                                           const void* __restrict__ data, i64 v0, i64 v_end) {
  constexpr int KS = Step<KIND>::KS;
  for (int t = threadIdx.x; t < KS * V; t += blockDim.x) {  // [KS][V] values, coalesced over (b, v)
    const i64 b = v0 + t / V;
    if constexpr (KIND == TF32) s_val[t] = b < v_end ? __ldg((const unsigned*)data + b * V + t % V) : 0u;
    else ((u16*)s_val)[t] = b < v_end ? __ldg((const u16*)data + b * V + t % V) : (u16)0;
  }
  if (threadIdx.x < KS) s_idx[threadIdx.x] = v0 + threadIdx.x < v_end ? __ldg(indices + v0 + threadIdx.x) : -1;
}

// acc[h][i] += this step's KS vectors x B for the warp's 64 columns (n_lane = n0 + 8g; avail columns inside N).
template <int KIND, int V, bool FAST>
__device__ __forceinline__ void step_mma(float (&acc)[V == 16 ? 2 : 1][4][4], const int* s_idx,
                                         const unsigned* s_val, const void* __restrict__ B, i64 N, i64 n_lane,
                                         int avail) {
  constexpr int NH = V == 16 ? 2 : 1;  // n8 tiles over the vector's V rows
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  if constexpr (KIND == TF32) {
    const float* Bf = (const float*)B;
    float r[2][8];  // [slot q, q + 4][column 8g + e]: the lane's two B rows
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int c = s_idx[q + 4 * j];
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float4 x = c >= 0 ? load4_f32<FAST>(Bf + (i64)c * N + n_lane + 4 * hh, avail - 4 * hh)
                                : make_float4(0.f, 0.f, 0.f, 0.f);
        r[j][4 * hh] = x.x, r[j][4 * hh + 1] = x.y, r[j][4 * hh + 2] = x.z, r[j][4 * hh + 3] = x.w;
      }
    }
    unsigned b[NH][2];  // Bt[q][v], Bt[q + 4][v] with v = 8h + g: the vectors' values (already TF32)
#pragma unroll
    for (int h = 0; h < NH; ++h) {
      const int v = 8 * h + g;
      b[h][0] = v < V ? s_val[q * V + v] : 0u;
      b[h][1] = v < V ? s_val[(q + 4) * V + v] : 0u;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // rows g, g + 8 of instance i = columns 8g + 2i, 8g + 2i + 1
      const unsigned a[4] = {to_tf32(r[0][2 * i]), to_tf32(r[0][2 * i + 1]), to_tf32(r[1][2 * i]),
                             to_tf32(r[1][2 * i + 1])};
#pragma unroll
      for (int h = 0; h < NH; ++h) mma<KIND>(acc[h][i], a, b[h][0], b[h][1]);
    }
  } else {
    const u16* Bh = (const u16*)B;
    const u16* sv = (const u16*)s_val;
    uint4 r[4];  // B rows of slots 2q, 2q + 1, 2q + 8, 2q + 9: 8 values each, columns 8g .. 8g + 7
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = s_idx[2 * q + (j & 1) + 8 * (j >> 1)];
      r[j] = c >= 0 ? load8_u16<FAST>(Bh + (i64)c * N + n_lane, avail) : make_uint4(0u, 0u, 0u, 0u);
    }
    unsigned b[NH][2];  // Bt[2q..2q+1][v], Bt[2q+8..2q+9][v], v = 8h + g
#pragma unroll
    for (int h = 0; h < NH; ++h) {
      const int v = 8 * h + g;
      b[h][0] = v < V ? (unsigned)sv[2 * q * V + v] | ((unsigned)sv[(2 * q + 1) * V + v] << 16) : 0u;
      b[h][1] = v < V ? (unsigned)sv[(2 * q + 8) * V + v] | ((unsigned)sv[(2 * q + 9) * V + v] << 16) : 0u;
    }
    // Shuffle In, plain equivalent: __byte_perm(x, y, 0x5410) = (y << 16) | (x & 0xffff) (element 2i of both rows),
    // 0x7632 = (y & 0xffff0000) | (x >> 16) (element 2i + 1 of both rows)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const unsigned a[4] = {__byte_perm(word(r[0], i), word(r[1], i), 0x5410),
                             __byte_perm(word(r[0], i), word(r[1], i), 0x7632),
                             __byte_perm(word(r[2], i), word(r[3], i), 0x5410),
                             __byte_perm(word(r[2], i), word(r[3], i), 0x7632)};
#pragma unroll
      for (int h = 0; h < NH; ++h) mma<KIND>(acc[h][i], a, b[h][0], b[h][1]);
    }
  }
}

// Shuffle Out: row v = 8h + 2q + p (p = 0, 1) x columns n_lane + e, e = 0..7: D register p of instance e/2 for even
// e, register 2 + p for odd e. FLAG_ADD reads the old value once, adds in fp32 and rounds once.
template <int KIND, int V>
__device__ __forceinline__ void store_c(const float (&acc)[V == 16 ? 2 : 1][4][4], void* __restrict__ C, i64 row0,
                                        i64 M, i64 N, i64 n_lane, bool fast, int flags) {
  constexpr int NH = V == 16 ? 2 : 1;
  const int q = (threadIdx.x & 31) & 3;
  const bool add = flags & FLAG_ADD, out16 = (flags & FLAG_OUT16) && KIND != TF32;
#pragma unroll
  for (int h = 0; h < NH; ++h) {
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const int v = 8 * h + 2 * q + p;
      const i64 row = row0 + v;
      if (v >= V || row >= M) continue;
      float x[8];  // C[row][n_lane + e]
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = acc[h][e >> 1][(e & 1) * 2 + p];
      if (out16) {
        u16* c = (u16*)C + row * N + n_lane;
        if (fast) {
          uint4 o = add ? *(const uint4*)c : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
          for (int w = 0; w < 4 && add; ++w) {
            x[2 * w] += to_f32<KIND>((u16)(word(o, w) & 0xffffu));
            x[2 * w + 1] += to_f32<KIND>((u16)(word(o, w) >> 16));
          }
          *(uint4*)c = make_uint4(pack2<KIND>(x[0], x[1]), pack2<KIND>(x[2], x[3]), pack2<KIND>(x[4], x[5]),
                                  pack2<KIND>(x[6], x[7]));
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e)
            if (n_lane + e < N) c[e] = from_f32<KIND>(x[e] + (add ? to_f32<KIND>(c[e]) : 0.f));
        }
      } else {
        float* c = (float*)C + row * N + n_lane;
        if (fast) {
#pragma unroll
          for (int k = 0; k < 2; ++k) {
            float4 o = add ? *(const float4*)(c + 4 * k) : make_float4(0.f, 0.f, 0.f, 0.f);
            *(float4*)(c + 4 * k) = make_float4(o.x + x[4 * k], o.y + x[4 * k + 1], o.z + x[4 * k + 2],
                                                o.w + x[4 * k + 3]);
          }
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e)
            if (n_lane + e < N) c[e] = (add ? c[e] : 0.f) + x[e];
        }
      }
    }
  }
}

template <int KIND, int V>
__device__ __forceinline__ void cvse_spmm(const i64* __restrict__ vec_ptr, const int* __restrict__ indices,
                                          const void* __restrict__ data, const void* __restrict__ B,
                                          void* __restrict__ C, i64 M, i64 N, int flags) {
  constexpr int KS = Step<KIND>::KS;
  __shared__ __align__(16) int s_idx[2][KS];           // [stage][k slot]: column of the vector, -1 past the row
  __shared__ __align__(16) unsigned s_val[2][KS * V];  // [stage][k slot][v]: 32-bit (tf32) or 16-bit halves used
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const i64 i = blockIdx.x, n0 = ((i64)blockIdx.y * warps + warp) * CVSE_WARP_COLS;
  const i64 n_lane = n0 + 8 * (lane >> 2);
  const int avail = (int)max((i64)0, min((i64)8, N - n_lane));
  const bool fast = (flags & FLAG_VEC) && n0 + CVSE_WARP_COLS <= N;  // warp-uniform
  const i64 vb = vec_ptr[i], ve = vec_ptr[i + 1];
  const i64 steps = (ve - vb + KS - 1) / KS;
  float acc[V == 16 ? 2 : 1][4][4];  // [n8 tile h][instance i][D register]: columns 8g + 2i (+1) x rows 8h + 2q (+1)
#pragma unroll
  for (int h = 0; h < (V == 16 ? 2 : 1); ++h)
#pragma unroll
    for (int k = 0; k < 4; ++k) acc[h][k][0] = acc[h][k][1] = acc[h][k][2] = acc[h][k][3] = 0.f;
  if (steps > 0) load_stage<KIND, V>(s_idx[0], s_val[0], indices, data, vb, ve);
  __syncthreads();
  for (i64 s = 0; s < steps; ++s) {  // every thread reaches every barrier (warps past N only help loading)
    const int st = (int)(s & 1);
    if (s + 1 < steps) load_stage<KIND, V>(s_idx[st ^ 1], s_val[st ^ 1], indices, data, vb + (s + 1) * KS, ve);
    if (n0 < N) {
      if (fast) step_mma<KIND, V, true>(acc, s_idx[st], s_val[st], B, N, n_lane, avail);
      else step_mma<KIND, V, false>(acc, s_idx[st], s_val[st], B, N, n_lane, avail);
    }
    __syncthreads();  // stage st read by all warps before step s + 2 refills it; stage st ^ 1 complete
  }
  if (n0 < N) store_c<KIND, V>(acc, C, i * V, M, N, n_lane, fast, flags);
}

#define CVSE_SPMM_ENTRY(NAME, KIND, V)                                                                            \
  extern "C" __global__ void __launch_bounds__(32 * CVSE_MAX_WARPS, CVSE_MIN_BLOCKS_PER_SM)                     \
      NAME(const i64* __restrict__ vec_ptr, const int* __restrict__ indices, const void* __restrict__ data,       \
           const void* __restrict__ B, void* __restrict__ C, i64 M, i64 N, int flags) {                           \
    cvse_spmm<KIND, V>(vec_ptr, indices, data, B, C, M, N, flags);                                               \
  }
#define CVSE_SPMM_ALL_V(PREFIX, KIND)                                                                             \
  CVSE_SPMM_ENTRY(PREFIX##_v2, KIND, 2)                                                                           \
  CVSE_SPMM_ENTRY(PREFIX##_v4, KIND, 4)                                                                           \
  CVSE_SPMM_ENTRY(PREFIX##_v8, KIND, 8)                                                                           \
  CVSE_SPMM_ENTRY(PREFIX##_v16, KIND, 16)
CVSE_SPMM_ALL_V(cvse_spmm_tf32, TF32)
CVSE_SPMM_ALL_V(cvse_spmm_f16, F16)
CVSE_SPMM_ALL_V(cvse_spmm_bf16, BF16)
