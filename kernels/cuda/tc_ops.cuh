// Tensor Core and 16-bit helpers of every kernel, the precision a template `int KIND` (bcsr_spmm.cu,
// cvse_common.cuh, csr_spmm.cu, metcf_half.cuh, metcf_tile.cuh, tiledcsr_tile.cuh): one definition of the mma, the
// TF32 rounding (ties away; ME-TCF's TF32 path keeps its own, metcf_tile.cuh's round_tf32), the 16-bit conversions,
// the 8-value B row load, ldmatrix and cp.async.
#pragma once
typedef long long i64;
typedef unsigned short u16;

enum Kind { TF32 = 0, F32 = TF32, F16 = 1, BF16 = 2 };  // F32: float32 on CUDA cores (csr_spmm.cu), TF32's slot

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

// The same with A as one 16-byte register quad (a.x .. a.w = a[0] .. a[3]).
template <int KIND>
__device__ __forceinline__ void mma(float (&d)[4], const uint4& a, unsigned b0, unsigned b1) {
  const unsigned r[4] = {a.x, a.y, a.z, a.w};
  mma<KIND>(d, r, b0, b1);
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

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
// cp.async (sm_80+), plain equivalent: for i < BYTES: dst[i] = valid ? src[i] : 0, done asynchronously; the bytes
// are this thread's to read after cp_async_wait<n> (all but its n most recent committed groups landed), everyone's
// after a __syncthreads that follows the wait. BYTES in {4, 8, 16}, dst (shared) and src (global) aligned to BYTES;
// !valid reads nothing. L2_ONLY (.cg, 16 bytes only): the copy does not allocate in L1 (.ca: it does).
template <int BYTES, bool L2_ONLY = false>
__device__ __forceinline__ void cp_async(void* dst, const void* src, bool valid = true) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  static_assert(!L2_ONLY || BYTES == 16, "cp.async.cg copies 16 bytes");
  if constexpr (L2_ONLY) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(valid ? 16 : 0) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_u32(dst)), "l"(src), "n"(BYTES),
                 "r"(valid ? BYTES : 0) : "memory");
  }
}
// Close the group of this thread's cp.async copies issued so far.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory"); }
// Plain equivalent: r[m] = the 32-bit word lane l holds of 8 x 8 b16 matrix m (rows at the addresses of lanes
// 8m..8m+7): row l / 4, b16 columns 2 (l % 4), +1; with .trans, column l / 4, rows 2 (l % 4), +1.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {  // addr: a shared address
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
  ldmatrix_x4_trans(r, smem_u32(p));
}

