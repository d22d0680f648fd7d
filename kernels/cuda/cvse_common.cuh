// Shared pieces of the CVSE kernels (cvse_spmm.cu, cvse_sddmm.cu): types, flags, compile-time constants, the mma
// wrappers (FP16/BF16 m16n8k16, TF32 m16n8k8) and the 16/32-bit conversions. Raw 16-bit values are unsigned short,
// pairs packed in 32-bit words (lower index in the low half), so no cuda_fp16.h / cuda_bf16.h is needed.
// Compile-time constants come from kernels/launch_cvse.py CvseConfig.defines(); kernels/compile_check.py compiles
// every .cu with kernels/config.py's options only, so these defaults equal CvseConfig's.
#pragma once

#ifndef CVSE_WARP_COLS
#define CVSE_WARP_COLS 64
#define CVSE_MAX_WARPS 4
#define CVSE_MIN_BLOCKS_PER_SM 4
#define CVSE_STEPS_PER_STAGE 2
#define CVSE_STAGES 3
#define CVSE_SDDMM_GROUPS 2
#define CVSE_SDDMM_LOADS 20
#endif
static_assert(CVSE_WARP_COLS == 64, "a lane's 8 consecutive columns x 8 lane groups = 64 columns per warp "
                                    "(CvseConfig.warp_cols): the Register Shuffle layout");
static_assert(CVSE_MAX_WARPS >= 1 && CVSE_MAX_WARPS <= 16, "CvseConfig.max_warps must be 1..16");
static_assert(CVSE_MIN_BLOCKS_PER_SM >= 1 && CVSE_MIN_BLOCKS_PER_SM * CVSE_MAX_WARPS <= 64,
              "CvseConfig.min_blocks_per_sm x max_warps must fit 64 warps per SM");
static_assert(CVSE_STEPS_PER_STAGE >= 1 && CVSE_STEPS_PER_STAGE <= 4,
              "CvseConfig.steps_per_stage must be 1..4 (each step holds 16 more B registers per lane)");
static_assert(CVSE_STAGES >= 2 && CVSE_STAGES <= 4, "CvseConfig.stages must be 2..4 (cp.async ring of stages)");
static_assert(CVSE_SDDMM_GROUPS >= 1 && CVSE_SDDMM_GROUPS <= 4,
              "CvseConfig.sddmm_groups must be 1..4 (16-vector groups per warp sharing one A fragment)");
static_assert(CVSE_SDDMM_LOADS >= 2 * CVSE_SDDMM_GROUPS + 2 && CVSE_SDDMM_LOADS <= 32,
              "CvseConfig.sddmm_loads must be 2 x sddmm_groups + 2 .. 32 (16-byte loads in flight per lane, "
              "4 registers each)");

typedef long long i64;
typedef unsigned short u16;
#define FLAG_VEC 1    // 16-byte loads of B / A rows and 16-byte C stores (see each kernel's contract)
#define FLAG_ADD 2    // C += A @ B (added in fp32, rounded once)
#define FLAG_OUT16 4  // C in the 16-bit input type (else float32)

enum Kind { TF32 = 0, F16 = 1, BF16 = 2 };

// Plain equivalent (D 16 x 8, A 16 x k, Bt k x 8; k = 16 for f16/bf16, 8 for tf32):
//   for i < 16, j < 8: D[i][j] += sum_k A[i][k] * Bt[k][j]   (products in the input type, fp32 sums)
// m16n8k16 lane (g = lane/4, q = lane%4): a = {A[g][2q..2q+1], A[g+8][2q..2q+1], A[g][2q+8..9], A[g+8][2q+8..9]},
// b0 = Bt[2q..2q+1][g], b1 = Bt[2q+8..9][g]; m16n8k8: a = {A[g][q], A[g+8][q], A[g][q+4], A[g+8][q+4]},
// b0 = Bt[q][g], b1 = Bt[q+4][g]; both: d = {D[g][2q], D[g][2q+1], D[g+8][2q], D[g+8][2q+1]}.
template <int KIND>
__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (KIND == TF32) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else if constexpr (KIND == BF16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Plain equivalent: x rounded to TF32 (10 mantissa bits), ties away from zero.
__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
// Exact: bf16 is the high half of a float32; f16 by cvt (plain equivalent: (float)__half(u)).
template <int KIND>
__device__ __forceinline__ float to_f32(u16 v) {
  if constexpr (KIND == BF16) return __uint_as_float((unsigned)v << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(v));
  return f;
}
// Plain equivalent: the 16-bit value nearest x (ties to even; NaN stays NaN, overflow gives infinity).
template <int KIND>
__device__ __forceinline__ u16 from_f32(float x) {
  u16 r;
  if constexpr (KIND == BF16) asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(r) : "f"(x));
  else asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(r) : "f"(x));
  return r;
}
// Plain equivalent: (hi rounded) << 16 | (lo rounded), as from_f32, in one instruction.
template <int KIND>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  unsigned r;
  if constexpr (KIND == BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  else asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// cp.async (sm_80+), plain equivalent: for i < BYTES: dst[i] = valid ? src[i] : 0, done asynchronously; the bytes
// are this thread's to read after cp_async_wait<n> (all but its n most recent groups landed), everyone's after a
// __syncthreads that follows the wait. BYTES in {4, 8, 16}, dst and src aligned to BYTES; !valid reads nothing.
template <int BYTES>
__device__ __forceinline__ void cp_async(void* dst, const void* src, bool valid) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async.ca copies 4, 8 or 16 bytes");
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(s), "l"(src), "n"(BYTES),
               "r"(valid ? BYTES : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING)); }

__device__ __forceinline__ unsigned word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// 8 consecutive 16-bit values row[0..7] as one uint4: FAST one 16-byte load; else element by element (any
// alignment), the `avail` = clamp(count, 0, 8) values inside the row, zeros past it.
template <bool FAST>
__device__ __forceinline__ uint4 load8_u16(const u16* __restrict__ row, int avail) {
  if constexpr (FAST) {
    return __ldg(reinterpret_cast<const uint4*>(row));
  } else {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const unsigned lo = 2 * i < avail ? __ldg(row + 2 * i) : 0u;
      const unsigned hi = 2 * i + 1 < avail ? __ldg(row + 2 * i + 1) : 0u;
      w[i] = lo | (hi << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}
// 4 consecutive floats row[0..3]: FAST one 16-byte load; else element by element, zeros past `avail`.
template <bool FAST>
__device__ __forceinline__ float4 load4_f32(const float* __restrict__ row, int avail) {
  if constexpr (FAST) {
    return __ldg(reinterpret_cast<const float4*>(row));
  } else {
    return make_float4(avail > 0 ? __ldg(row) : 0.f, avail > 1 ? __ldg(row + 1) : 0.f,
                       avail > 2 ? __ldg(row + 2) : 0.f, avail > 3 ? __ldg(row + 3) : 0.f);
  }
}
__device__ __forceinline__ float f4(const float4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
