// SDDMM on a CVSE pattern S (M x K, V x 1 vectors, V in {2, 4, 8, 16}): out[b][v] = data[b][v] *
// sum_k A[V*i + v][k] * B[indices[b]][k] for vector b of vector row i, i.e. ((A @ B^T) (.) S) at S's vectors;
// A [M, Kd], B [K, Kd] row-major, FP16/BF16 (m16n8k16) or TF32 (m16n8k8) products, FP32 sums, out float32.
// (VectorSparse, SC'21 section 5: the V x 1 grain lets one vector's V outputs share the B row they read.)
//
// Transpose mapping (as cvse_spmm.cu): D^T = B_sel A_rows^T, the mma's m16 runs over 16 vectors of one vector row
// (B rows gathered by their indices), its n8 over the vector row's V rows of A (V = 16: two n8 tiles sharing the
// A fragment), its k over Kd. Both operands read the reduction dimension in the same permuted order, so every
// lane loads contiguous 16-byte pieces: lane (g = lane/4, q = lane%4) of a 32-feature chunk k0 (f16) loads features
// k0 + 8q .. 8q+7 of B rows of vectors g and g + 8 and of A row 8h + g; mma s (0, 1) takes its k slots 2q, 2q+1 from
// features 8q + 4s, +1 and slots 2q+8, 2q+9 from 8q + 4s + 2, +3, i.e. words 2s and 2s + 1 of each 16-byte piece.
// TF32 (16-feature chunks): features k0 + 4q .. 4q+3; mma s takes slot q from feature 4q + 2s and slot q + 4 from
// 4q + 2s + 1. Over q the slots of one mma cover 16 (8) distinct features, and the two mma the whole chunk.
//
// Launch mapping (kernels/launch_cvse.py): grid = (n_vec_rows, chunks); blockDim.x = 32 x W; warp w of block
// (i, y) takes the 16-vector groups y W + w, + gridDim.y W, ... of vector row i. Lane (g, q) writes out[b][v] for
// b = group vectors g and g + 8, v = 8h + 2q, +1 (< V), as float2. One writer per output, fixed order: deterministic.
// Input contract (checked by the launcher): vec_ptr int64 [n_vec_rows + 1]; indices int32; data [n_vectors][V]
// float32 / raw 16-bit (bfloat16 bits) S values; A, B in the precision's dtype (float32 for TF32, rounded here by
// cvt.rna); FLAG_VEC only when Kd % 8 == 0 (16-bit) / Kd % 4 == 0 (float32) and A, B are 16-byte aligned.
// Rows >= M of A are never read (zeros); out [n_vectors][V] float32, every element written. Indexing int64.
#include "cvse_common.cuh"

// Per-lane piece of one row: 8 halves (f16/bf16) or 4 floats (tf32) from column k of `row` (null: zeros).
template <int KIND, bool FAST>
__device__ __forceinline__ uint4 piece(const void* __restrict__ base, i64 row, i64 Kd, i64 k, bool valid) {
  if (!valid) return make_uint4(0u, 0u, 0u, 0u);
  if constexpr (KIND == TF32) {
    const float4 x = load4_f32<FAST>((const float*)base + row * Kd + k, (int)max((i64)0, min((i64)4, Kd - k)));
    return make_uint4(to_tf32(x.x), to_tf32(x.y), to_tf32(x.z), to_tf32(x.w));
  } else {
    return load8_u16<FAST>((const u16*)base + row * Kd + k, (int)max((i64)0, min((i64)8, Kd - k)));
  }
}

template <int KIND, int V, bool FAST>
__device__ __forceinline__ void group_dots(float (&acc)[V == 16 ? 2 : 1][4], const void* __restrict__ A,
                                           const void* __restrict__ B, i64 Kd, i64 c_lo, i64 c_hi, bool ok_lo,
                                           bool ok_hi, const i64 (&arow)[V == 16 ? 2 : 1],
                                           const bool (&ok_a)[V == 16 ? 2 : 1]) {
  constexpr int NH = V == 16 ? 2 : 1;
  constexpr int CHUNK = KIND == TF32 ? 16 : 32;  // features per loop step (4 lanes x one 16-byte piece)
  constexpr int PER = KIND == TF32 ? 4 : 8;      // features per piece
  const int q = (threadIdx.x & 31) & 3;
  for (i64 k0 = 0; k0 < Kd; k0 += CHUNK) {
    const i64 k = k0 + PER * q;
    const bool in = FAST ? k < Kd : true;  // FAST: Kd % PER == 0, so a piece is wholly inside or outside
    const uint4 blo = piece<KIND, FAST>(B, c_lo, Kd, k, ok_lo && in);  // B row of vector g
    const uint4 bhi = piece<KIND, FAST>(B, c_hi, Kd, k, ok_hi && in);  // B row of vector g + 8
    uint4 a[NH];                                                        // A row 8h + g of the vector row
#pragma unroll
    for (int h = 0; h < NH; ++h) a[h] = piece<KIND, FAST>(A, arow[h], Kd, k, ok_a[h] && in);
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const unsigned fa[4] = {word(blo, 2 * s), word(bhi, 2 * s), word(blo, 2 * s + 1), word(bhi, 2 * s + 1)};
#pragma unroll
      for (int h = 0; h < NH; ++h) mma<KIND>(acc[h], fa, word(a[h], 2 * s), word(a[h], 2 * s + 1));
    }
  }
}

template <int KIND, int V>
__device__ __forceinline__ void cvse_sddmm(const i64* __restrict__ vec_ptr, const int* __restrict__ indices,
                                           const void* __restrict__ data, const void* __restrict__ A,
                                           const void* __restrict__ B, float* __restrict__ out, i64 M, i64 Kd,
                                           int flags) {
  constexpr int NH = V == 16 ? 2 : 1;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int warps = blockDim.x >> 5;
  const i64 i = blockIdx.x, vb = vec_ptr[i], ve = vec_ptr[i + 1];
  i64 arow[NH];  // A rows of this lane's n8 column(s): V*i + 8h + g
  bool ok_a[NH];
#pragma unroll
  for (int h = 0; h < NH; ++h) {
    arow[h] = i * V + 8 * h + g;
    ok_a[h] = 8 * h + g < V && arow[h] < M;
  }
  for (i64 grp = (i64)blockIdx.y * warps + warp; vb + 16 * grp < ve; grp += (i64)gridDim.y * warps) {
    const i64 b_lo = vb + 16 * grp + g, b_hi = b_lo + 8;
    const bool ok_lo = b_lo < ve, ok_hi = b_hi < ve;
    const i64 c_lo = ok_lo ? __ldg(indices + b_lo) : 0, c_hi = ok_hi ? __ldg(indices + b_hi) : 0;
    float acc[NH][4];  // [n8 tile h]: D = {(vector g, v 2q), (g, 2q+1), (g + 8, 2q), (g + 8, 2q + 1)}, v += 8h
#pragma unroll
    for (int h = 0; h < NH; ++h) acc[h][0] = acc[h][1] = acc[h][2] = acc[h][3] = 0.f;
    if (flags & FLAG_VEC) group_dots<KIND, V, true>(acc, A, B, Kd, c_lo, c_hi, ok_lo, ok_hi, arow, ok_a);
    else group_dots<KIND, V, false>(acc, A, B, Kd, c_lo, c_hi, ok_lo, ok_hi, arow, ok_a);
#pragma unroll
    for (int h = 0; h < NH; ++h) {
      const int v = 8 * h + 2 * q;
      if (v >= V) continue;  // V even: v < V implies v + 1 < V
#pragma unroll
      for (int e = 0; e < 2; ++e) {  // e = 0: vector g (D registers 0, 1); e = 1: vector g + 8 (2, 3)
        const i64 b = e ? b_hi : b_lo;
        if (!(e ? ok_hi : ok_lo)) continue;
        float s0, s1;  // S values data[b][v], data[b][v + 1]
        if constexpr (KIND == TF32) {
          s0 = __ldg((const float*)data + b * V + v), s1 = __ldg((const float*)data + b * V + v + 1);
        } else {
          s0 = to_f32<KIND>(__ldg((const u16*)data + b * V + v));
          s1 = to_f32<KIND>(__ldg((const u16*)data + b * V + v + 1));
        }
        *(float2*)(out + b * V + v) = make_float2(acc[h][2 * e] * s0, acc[h][2 * e + 1] * s1);
      }
    }
  }
}

#define CVSE_SDDMM_ENTRY(NAME, KIND, V)                                                                           \
  extern "C" __global__ void __launch_bounds__(32 * CVSE_MAX_WARPS, CVSE_MIN_BLOCKS_PER_SM)                     \
      NAME(const i64* __restrict__ vec_ptr, const int* __restrict__ indices, const void* __restrict__ data,       \
           const void* __restrict__ A, const void* __restrict__ B, float* __restrict__ out, i64 M, i64 Kd,       \
           int flags) {                                                                                            \
    cvse_sddmm<KIND, V>(vec_ptr, indices, data, A, B, out, M, Kd, flags);                                         \
  }
#define CVSE_SDDMM_ALL_V(PREFIX, KIND)                                                                            \
  CVSE_SDDMM_ENTRY(PREFIX##_v2, KIND, 2)                                                                          \
  CVSE_SDDMM_ENTRY(PREFIX##_v4, KIND, 4)                                                                          \
  CVSE_SDDMM_ENTRY(PREFIX##_v8, KIND, 8)                                                                          \
  CVSE_SDDMM_ENTRY(PREFIX##_v16, KIND, 16)
CVSE_SDDMM_ALL_V(cvse_sddmm_tf32, TF32)
CVSE_SDDMM_ALL_V(cvse_sddmm_f16, F16)
CVSE_SDDMM_ALL_V(cvse_sddmm_bf16, BF16)
