// C = A @ B for a sparse A (M x K) in CVSE (V x 1 column vectors, V in {2, 4, 8, 16}) and dense row-major B
// (K x N): C[V*i + v][n] = sum over vectors b of vector row i of data[b][v] * B[indices[b]][n], FP32 accumulation;
// C in float32 or in the 16-bit input type. SSpMM (TPDS'25) sections III-IV on mma.sync:
//
// Transpose Mapping Scheme: C^T = B^T A^T, so the mma's m16 runs over 16 columns of C and its n8 over the V rows
// of a vector row (V <= 8: one n8 tile, lanes g >= V give zero columns; V = 16: two n8 tiles sharing one A
// fragment); the mma's k runs over KS consecutive vectors of the vector row (KS = 16 f16/bf16, 8 tf32).
// Register Shuffle Method: lane (g = lane/4, q = lane%4) loads 8 consecutive columns n0 + 8g .. 8g+7 of the B rows
// of its k slots (f16: slots 2q, 2q+1, 2q+8, 2q+9, one 16-byte load each; tf32: slots q, q+4, two 16-byte loads
// each). mma instance i (0..3) maps its row g to column n0 + 8g + 2i and row g + 8 to n0 + 8g + 2i + 1, so
// "Shuffle In" is register renaming: a = {prmt 0x5410 / 0x7632 of word i of rows (2q, 2q+1), the same of rows
// (2q+8, 2q+9)}. "Shuffle Out": after the 4 instances lane (g, q) holds rows v = 2q, 2q+1 (+8 for the second n8
// tile) x the 8 consecutive columns n0 + 8g .. 8g+7 of C: one 16-byte (16-bit C) or two float4 stores per row.
//
// Launch mapping (kernels/formats/cvse/launch.py): grid = (n_vec_rows, column chunks); blockDim.x = 32 x W (W <= max_warps);
//   1 block = one vector row x W*64 columns; warp w = columns n0 = (blockIdx.y W + w) 64 .. +63.
// Pipeline (why: the previous kernel, one 16-vector step per barrier with its index/value stage loaded through
// registers, ran at ~3.5 TB/s of B traffic on the H200 at V = 8, 50 %, N = 256: each warp waited for the stage's
// global load, then for 4 B loads, then the barrier, about two memory latencies per 16 vectors with ~16 warps per
// SM; these changes raise the loads in flight per warp and take the index loads off the critical path):
// - a stage = SV = KS x STEPS vectors of the vector row: indices [SV] int32, values [SV][V] (LHS tile reused by
//   the W warps: paper's step 1), copied global -> shared by cp.async (no register round trip, zero-filled past the
//   row's end) into a ring of STAGES buffers, STAGES - 1 stages ahead of the one being computed: one wait and one
//   __syncthreads per stage (STEPS x fewer barriers), the index fetch overlaps the B loads and mmas of earlier stages.
// - a warp issues all STEPS x 4 16-byte B loads of a stage (f16: 4 slots per step per lane; tf32: 2 slots x 2) before
//   its first mma, so STEPS x 2 KB of B per warp are in flight instead of 2 KB (VectorSparse: "call all the load
//   instructions, then the mmas").
// Each C element has one writer and a fixed summation order (steps in vector order): deterministic, no atomics.
// Input contract (checked by the launcher): vec_ptr int64 [n_vec_rows + 1]; indices int32 [max(n_vectors, 1)];
// data [max(n_vectors, 1)][V] float32 already rounded to TF32 (kernels.launch.tf32_round), or raw 16-bit values
// (bfloat16 as bits), 16-byte aligned (cp.async copies min(V x elem bytes, 16) bytes per vector); B [K, N], C [M, N]
// row-major; FLAG_VEC only when N % 8 == 0 and B, C are 16-byte aligned. k slots past a vector row's end read no B
// row (zeros). Rows >= M and columns >= N of C are never written; every other element is (zeros for an empty vector
// row). Indexing int64.
#include "cvse_common.cuh"

template <int KIND> struct Step { static constexpr int KS = KIND == TF32 ? 8 : 16; };  // vectors per mma k
template <int KIND> struct Stage {
  static constexpr int SV = Step<KIND>::KS * CVSE_STEPS_PER_STAGE;  // vectors per stage
  static constexpr int EB = KIND == TF32 ? 4 : 2;                    // bytes per value
};

// Start the cp.async copies of vectors [v0, v0 + SV) of the vector row (those < v_end; zeros past it) into one
// stage: values [SV][V] as min(V EB, 16)-byte pieces (vector b's values start at b V EB: aligned to the piece),
// indices [SV] as 4-byte pieces (v0 is arbitrary). The caller commits the group.
template <int KIND, int V>
__device__ __forceinline__ void load_stage(int* s_idx, unsigned* s_val, const int* __restrict__ indices,
                                           const void* __restrict__ data, i64 v0, i64 v_end) {
  constexpr int SV = Stage<KIND>::SV, VB = V * Stage<KIND>::EB;  // VB: bytes per vector
  constexpr int CB = VB < 16 ? VB : 16, CPV = VB / CB;             // bytes per copy, copies per vector
  for (int t = threadIdx.x; t < SV * (CPV + 1); t += blockDim.x) {
    if (t < SV * CPV) {
      const int b = t / CPV, c = t % CPV;
      const bool ok = v0 + b < v_end;
      cp_async<CB>((char*)s_val + b * VB + c * CB, (const char*)data + (ok ? (v0 + b) * VB + c * CB : 0), ok);
    } else {
      const int b = t - SV * CPV;
      const bool ok = v0 + b < v_end;
      cp_async<4>(s_idx + b, indices + (ok ? v0 + b : 0), ok);
    }
  }
}

// acc[h][i] += the stage's `count` (<= SV) vectors x B for the warp's 64 columns (n_lane = n0 + 8g; avail columns
// inside N). Slot k of step u is vector u KS + k of the stage; slots >= count load no B row and hold zero values.
template <int KIND, int V, bool FAST>
__device__ __forceinline__ void stage_mma(float (&acc)[V == 16 ? 2 : 1][4][4], const int* s_idx,
                                          const unsigned* s_val, int count, const void* __restrict__ B, i64 N,
                                          i64 n_lane, int avail) {
  constexpr int NH = V == 16 ? 2 : 1, KS = Step<KIND>::KS, U = CVSE_STEPS_PER_STAGE;  // NH: n8 tiles over V
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  if constexpr (KIND == TF32) {
    const float* Bf = (const float*)B;
    float4 r[U][2][2];  // [step u][slot q, q + 4][columns 8g + 4hh .. +3]: every B load of the stage first
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int k = u * KS + q + 4 * j;
        const bool ok = k < count;
        const int c = ok ? s_idx[k] : 0;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
          r[u][j][hh] = ok ? load4_f32<FAST>(Bf + (i64)c * N + n_lane + 4 * hh, avail - 4 * hh)
                           : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      unsigned b[NH][2];  // Bt[q][v], Bt[q + 4][v] with v = 8h + g: the vectors' values (already TF32; 0 past count)
#pragma unroll
      for (int h = 0; h < NH; ++h) {
        const int v = 8 * h + g;
        b[h][0] = v < V ? s_val[(u * KS + q) * V + v] : 0u;
        b[h][1] = v < V ? s_val[(u * KS + q + 4) * V + v] : 0u;
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // rows g, g + 8 of instance i = columns 8g + 2i, 8g + 2i + 1
        const int hh = i >> 1, e = 2 * (i & 1);  // columns 8g + 2i, +1 = elements e, e + 1 of piece hh
        const unsigned a[4] = {to_tf32(f4(r[u][0][hh], e)), to_tf32(f4(r[u][0][hh], e + 1)),
                               to_tf32(f4(r[u][1][hh], e)), to_tf32(f4(r[u][1][hh], e + 1))};
#pragma unroll
        for (int h = 0; h < NH; ++h) mma<KIND>(acc[h][i], a, b[h][0], b[h][1]);
      }
    }
  } else {
    const u16* Bh = (const u16*)B;
    const u16* sv = (const u16*)s_val;
    uint4 r[U][4];  // [step u][slot 2q, 2q + 1, 2q + 8, 2q + 9]: 8 values each, columns 8g .. 8g + 7
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int2 lo = *(const int2*)(s_idx + u * KS + 2 * q), hi = *(const int2*)(s_idx + u * KS + 2 * q + 8);
      const int c[4] = {lo.x, lo.y, hi.x, hi.y};  // one 8-byte shared load per slot pair
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const bool ok = u * KS + 2 * q + (j & 1) + 8 * (j >> 1) < count;
        r[u][j] = ok ? load8_u16<FAST>(Bh + (i64)c[j] * N + n_lane, avail) : make_uint4(0u, 0u, 0u, 0u);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const u16* su = sv + u * KS * V;
      unsigned b[NH][2];  // Bt[2q..2q+1][v], Bt[2q+8..2q+9][v], v = 8h + g (0 past count: zero-filled stage)
#pragma unroll
      for (int h = 0; h < NH; ++h) {
        const int v = 8 * h + g;
        b[h][0] = v < V ? (unsigned)su[2 * q * V + v] | ((unsigned)su[(2 * q + 1) * V + v] << 16) : 0u;
        b[h][1] = v < V ? (unsigned)su[(2 * q + 8) * V + v] | ((unsigned)su[(2 * q + 9) * V + v] << 16) : 0u;
      }
      // Shuffle In, plain equivalent: __byte_perm(x, y, 0x5410) = (y << 16) | (x & 0xffff) (element 2i of both
      // rows), 0x7632 = (y & 0xffff0000) | (x >> 16) (element 2i + 1 of both rows)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const unsigned a[4] = {__byte_perm(word(r[u][0], i), word(r[u][1], i), 0x5410),
                               __byte_perm(word(r[u][0], i), word(r[u][1], i), 0x7632),
                               __byte_perm(word(r[u][2], i), word(r[u][3], i), 0x5410),
                               __byte_perm(word(r[u][2], i), word(r[u][3], i), 0x7632)};
#pragma unroll
        for (int h = 0; h < NH; ++h) mma<KIND>(acc[h][i], a, b[h][0], b[h][1]);
      }
    }
  }
}

// C[at] = x (+ C[at] when add): 16-bit in the input type (out16) or float; added in fp32, rounded once.
template <int KIND>
__device__ __forceinline__ void store1(void* __restrict__ C, i64 at, float x, bool add, bool out16) {
  if (out16) {
    u16* c = (u16*)C + at;
    *c = from_f32<KIND>(x + (add ? to_f32<KIND>(*c) : 0.f));
  } else {
    float* c = (float*)C + at;
    *c = (add ? *c : 0.f) + x;
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
      if (fast && out16) {
        u16* c = (u16*)C + row * N + n_lane;
        uint4 o = add ? *(const uint4*)c : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
        for (int w = 0; w < 4 && add; ++w) {
          x[2 * w] += to_f32<KIND>((u16)(word(o, w) & 0xffffu));
          x[2 * w + 1] += to_f32<KIND>((u16)(word(o, w) >> 16));
        }
        *(uint4*)c = make_uint4(pack2<KIND>(x[0], x[1]), pack2<KIND>(x[2], x[3]), pack2<KIND>(x[4], x[5]),
                                pack2<KIND>(x[6], x[7]));
      } else if (fast) {
        float* c = (float*)C + row * N + n_lane;
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          float4 o = add ? *(const float4*)(c + 4 * k) : make_float4(0.f, 0.f, 0.f, 0.f);
          *(float4*)(c + 4 * k) = make_float4(o.x + x[4 * k], o.y + x[4 * k + 1], o.z + x[4 * k + 2],
                                              o.w + x[4 * k + 3]);
        }
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (n_lane + e < N) store1<KIND>(C, row * N + n_lane + e, x[e], add, out16);
      }
    }
  }
}

template <int KIND, int V>
__device__ __forceinline__ void cvse_spmm(const i64* __restrict__ vec_ptr, const int* __restrict__ indices,
                                          const void* __restrict__ data, const void* __restrict__ B,
                                          void* __restrict__ C, i64 M, i64 N, int flags) {
  constexpr int SV = Stage<KIND>::SV, S = CVSE_STAGES;
  constexpr int WORDS = SV * V * Stage<KIND>::EB / 4;  // 32-bit words of one stage's values
  __shared__ __align__(16) int s_idx[S][SV];            // [stage][slot]: the vector's column (0 past the row)
  __shared__ __align__(16) unsigned s_val[S][WORDS];    // [stage][slot][v]: 32-bit (tf32) or 16-bit values
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const i64 i = blockIdx.x, n0 = ((i64)blockIdx.y * warps + warp) * CVSE_WARP_COLS;
  const i64 n_lane = n0 + 8 * (lane >> 2);
  const int avail = (int)max((i64)0, min((i64)8, N - n_lane));
  const bool fast = (flags & FLAG_VEC) && n0 + CVSE_WARP_COLS <= N;  // warp-uniform
  const i64 vb = vec_ptr[i], ve = vec_ptr[i + 1];
  const i64 stages = (ve - vb + SV - 1) / SV;
  float acc[V == 16 ? 2 : 1][4][4];  // [n8 tile h][instance i][D register]: columns 8g + 2i (+1) x rows 8h + 2q (+1)
#pragma unroll
  for (int h = 0; h < (V == 16 ? 2 : 1); ++h)
#pragma unroll
    for (int k = 0; k < 4; ++k) acc[h][k][0] = acc[h][k][1] = acc[h][k][2] = acc[h][k][3] = 0.f;
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {  // prologue: stages 0 .. S - 2 in flight (empty groups keep the count)
    if (s < stages) load_stage<KIND, V>(s_idx[s], s_val[s], indices, data, vb + (i64)s * SV, ve);
    cp_async_commit();
  }
  for (i64 s = 0; s < stages; ++s) {  // every thread reaches every barrier (warps past N only help loading)
    cp_async_wait<S - 2>();  // this thread's copies of stage s landed (groups 0 .. s of the s + S - 1 committed)
    __syncthreads();         // everyone's copies of stage s visible; stage s - 1's buffer read by every warp
    const i64 nx = s + S - 1;  // refill the buffer stage s - 1 used
    if (nx < stages) load_stage<KIND, V>(s_idx[nx % S], s_val[nx % S], indices, data, vb + nx * SV, ve);
    cp_async_commit();
    const int st = (int)(s % S), count = (int)min((i64)SV, ve - vb - s * SV);
    if (n0 < N) {
      if (fast) stage_mma<KIND, V, true>(acc, s_idx[st], s_val[st], count, B, N, n_lane, avail);
      else stage_mma<KIND, V, false>(acc, s_idx[st], s_val[st], count, B, N, n_lane, avail);
    }
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

#include "cvse_tiled.cuh"  // the tiled kernel (16-bit): B's chunk rows staged once per thread block
