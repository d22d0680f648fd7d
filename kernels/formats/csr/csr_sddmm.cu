// SDDMM on a CSR pattern S (M x K) on CUDA cores: out[p] = s[p] * sum_k A[rows[p]][k] * B[indices[p]][k] for every
// stored nonzero p of S, in S's CSR order; A [M, Kd], B [K, Kd] row-major in the precision's type (float32 rounded
// to TF32 here, or raw float16 / bfloat16 bits), products exact in fp32, fp32 sums, out float32.
// Why beside the CVSE Tensor Core kernel (kernels/formats/cvse/cvse_sddmm.cu): that kernel computes whole V-row
// vectors, so its work is its padding; on graphs whose 8-row vectors are 13-16 % full (R-MAT, SBM, social) it ran
// 1.2-1.8x slower than cuSPARSE's per-nonzero kernel at Kd = 64 (H100, benchmarks/results/sddmm-*-2026-11-27.json).
// This one does one dot product per nonzero and reads the 16-bit inputs as they are (cuSPARSE reads float32).
//
// Launch mapping (kernels/formats/csr/sddmm.py): blockDim.x = 32 x CSR_SDDMM_WARPS; a team of T lanes (T a
// template parameter, 1..32, from Kd: enough 16-byte pieces per lane for a row) computes one nonzero; a warp
// holds 32 / T teams and takes the CSR_SDDMM_STEPS x 32 / T consecutive nonzeros of chunk c = blockIdx.x x WARPS
// + warp, team e the nonzeros e, e + 32 / T, ... of it. Lane t of a team reads pieces t, t + T, ... of both rows
// (16 bytes: 8 half values or 4 floats), its fp32 partial sum in piece order, then the team adds the lanes' sums by
// __shfl_xor in a fixed tree: one writer per output, the same order on every call (bitwise repeatable, no atomics).
// Input contract (checked by the launcher): rows int32 [nnz] (the row of each nonzero), indices int32 [nnz]; s
// float32 [nnz] read only with FLAG_SCALE (else S's values are all one); A, B C-contiguous; FLAG_VEC only when Kd % PER == 0 and A, B are 16-byte
// aligned (else element loads, zeros past Kd). out float32 [nnz], every element written. Indexing int64.
#ifndef CSR_SDDMM_WARPS
#define CSR_SDDMM_WARPS 4
#define CSR_SDDMM_STEPS 4
#endif
static_assert(CSR_SDDMM_WARPS >= 1 && CSR_SDDMM_WARPS <= 32, "CsrSddmmConfig.warps must be 1..32");
static_assert(CSR_SDDMM_STEPS >= 1, "CsrSddmmConfig.steps must be positive");

#include "tc_ops.cuh"  // i64, u16, Kind, to_tf32, to_f32
#define FLAG_VEC 1
#define FLAG_SCALE 2

// Sum over one 16-byte piece at feature k of a and b's rows: 4 TF32-rounded floats or 8 16-bit values, products
// added in feature order; `avail` features of it inside Kd (the element path; the vector path has all).
template <int KIND, bool VEC>
__device__ __forceinline__ float piece_dot(const void* __restrict__ a, const void* __restrict__ b, i64 k, int avail) {
  float acc = 0.f;
  if constexpr (KIND == TF32) {
    const float* x = static_cast<const float*>(a) + k;
    const float* y = static_cast<const float*>(b) + k;
    float4 u, v;
    if constexpr (VEC) {
      u = __ldg(reinterpret_cast<const float4*>(x)), v = __ldg(reinterpret_cast<const float4*>(y));
    } else {  // avail >= 1
      u = make_float4(__ldg(x), avail > 1 ? __ldg(x + 1) : 0.f, avail > 2 ? __ldg(x + 2) : 0.f,
                      avail > 3 ? __ldg(x + 3) : 0.f);
      v = make_float4(__ldg(y), avail > 1 ? __ldg(y + 1) : 0.f, avail > 2 ? __ldg(y + 2) : 0.f,
                      avail > 3 ? __ldg(y + 3) : 0.f);
    }
    // TF32 x TF32 is exact in fp32: each fma rounds only the sum
    acc = fmaf(__uint_as_float(to_tf32(u.x)), __uint_as_float(to_tf32(v.x)), acc);
    acc = fmaf(__uint_as_float(to_tf32(u.y)), __uint_as_float(to_tf32(v.y)), acc);
    acc = fmaf(__uint_as_float(to_tf32(u.z)), __uint_as_float(to_tf32(v.z)), acc);
    acc = fmaf(__uint_as_float(to_tf32(u.w)), __uint_as_float(to_tf32(v.w)), acc);
  } else {
    const u16* x = static_cast<const u16*>(a) + k;
    const u16* y = static_cast<const u16*>(b) + k;
    unsigned xw[4], yw[4];
    if constexpr (VEC) {
      const uint4 u = __ldg(reinterpret_cast<const uint4*>(x)), v = __ldg(reinterpret_cast<const uint4*>(y));
      xw[0] = u.x, xw[1] = u.y, xw[2] = u.z, xw[3] = u.w, yw[0] = v.x, yw[1] = v.y, yw[2] = v.z, yw[3] = v.w;
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        xw[i] = (2 * i < avail ? (unsigned)__ldg(x + 2 * i) : 0u) |
                (2 * i + 1 < avail ? (unsigned)__ldg(x + 2 * i + 1) << 16 : 0u);
        yw[i] = (2 * i < avail ? (unsigned)__ldg(y + 2 * i) : 0u) |
                (2 * i + 1 < avail ? (unsigned)__ldg(y + 2 * i + 1) << 16 : 0u);
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // 16-bit x 16-bit is exact in fp32
      acc = fmaf(to_f32<KIND>((u16)(xw[i] & 0xffffu)), to_f32<KIND>((u16)(yw[i] & 0xffffu)), acc);
      acc = fmaf(to_f32<KIND>((u16)(xw[i] >> 16)), to_f32<KIND>((u16)(yw[i] >> 16)), acc);
    }
  }
  return acc;
}

template <int KIND, int T>
__device__ __forceinline__ void csr_sddmm(const int* __restrict__ rows, const int* __restrict__ indices,
                                          const float* __restrict__ s, const void* __restrict__ A,
                                          const void* __restrict__ B, float* __restrict__ out, i64 nnz, i64 Kd,
                                          int flags) {
  static_assert(T == 1 || T == 2 || T == 4 || T == 8 || T == 16 || T == 32, "team size: a power of two <= 32");
  constexpr int TEAMS = 32 / T, PER = KIND == TF32 ? 4 : 8;  // nonzeros per warp step, features per piece
  constexpr size_t ELEM = KIND == TF32 ? 4 : 2;
  const int lane = threadIdx.x & 31, team = lane / T, t = lane % T;
  const i64 chunk = (i64)blockIdx.x * CSR_SDDMM_WARPS + (threadIdx.x >> 5);
  const i64 p0 = chunk * (CSR_SDDMM_STEPS * TEAMS);
  const bool vec = flags & FLAG_VEC, scale = flags & FLAG_SCALE;
#pragma unroll 1
  for (int step = 0; step < CSR_SDDMM_STEPS; ++step) {
    const i64 p = p0 + (i64)step * TEAMS + team;
    if (p0 + (i64)step * TEAMS >= nnz) break;  // warp-uniform: the shuffles below need every lane
    const bool live = p < nnz;
    const char* a = static_cast<const char*>(A) + (live ? (i64)__ldg(rows + p) * Kd * ELEM : 0);
    const char* b = static_cast<const char*>(B) + (live ? (i64)__ldg(indices + p) * Kd * ELEM : 0);
    float acc = 0.f;
    if (live) {
      // not unrolled: ptxas (CUDA 13, sm_90) spilled 8 bytes in the float32 kernels with the loop unrolled; a
      // lane's loop runs Kd / (T PER) <= 2 times up to Kd = 256 (T = 32) and rarely more
      if (vec) {
#pragma unroll 1
        for (i64 k = (i64)t * PER; k < Kd; k += (i64)T * PER) acc += piece_dot<KIND, true>(a, b, k, PER);
      } else {
#pragma unroll 1
        for (i64 k = (i64)t * PER; k < Kd; k += (i64)T * PER)
          acc += piece_dot<KIND, false>(a, b, k, (int)min((i64)PER, Kd - k));
      }
    }
#pragma unroll
    for (int m = T / 2; m >= 1; m /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, m);  // fixed tree, team-local
    if (live && t == 0) out[p] = scale ? acc * __ldg(s + p) : acc;
  }
}

#define CSR_SDDMM_ENTRY(NAME, KIND, T)                                                                            \
  extern "C" __global__ void __launch_bounds__(32 * CSR_SDDMM_WARPS)                                              \
      NAME(const int* __restrict__ rows, const int* __restrict__ indices, const float* __restrict__ s,             \
           const void* __restrict__ A, const void* __restrict__ B, float* __restrict__ out, i64 nnz, i64 Kd,       \
           int flags) {                                                                                            \
    csr_sddmm<KIND, T>(rows, indices, s, A, B, out, nnz, Kd, flags);                                               \
  }
#define CSR_SDDMM_ALL_T(PREFIX, KIND)                                                                             \
  CSR_SDDMM_ENTRY(PREFIX##_t1, KIND, 1)                                                                           \
  CSR_SDDMM_ENTRY(PREFIX##_t2, KIND, 2)                                                                           \
  CSR_SDDMM_ENTRY(PREFIX##_t4, KIND, 4)                                                                           \
  CSR_SDDMM_ENTRY(PREFIX##_t8, KIND, 8)                                                                           \
  CSR_SDDMM_ENTRY(PREFIX##_t16, KIND, 16)                                                                         \
  CSR_SDDMM_ENTRY(PREFIX##_t32, KIND, 32)
CSR_SDDMM_ALL_T(csr_sddmm_f32, TF32)
CSR_SDDMM_ALL_T(csr_sddmm_f16, F16)
CSR_SDDMM_ALL_T(csr_sddmm_bf16, BF16)
