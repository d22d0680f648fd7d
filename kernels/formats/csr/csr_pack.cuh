// csr_spmm.cu's csr_pack_b, B's per-call 16-bit copy for float32 A (see below and csr_spmm.cu's header): included by
// csr_spmm.cu after the f32h entries that read the copy and its shared helpers (pack2, from_f32, FLAG_*, CSR_*
// constants), not compiled on its own.
#pragma once

// B's per-call 16-bit copy for float32 A (the f32h entries read it): Bh[k] = float16(B[k] x 2^shift_k) and
// bscale[k] = 2^-shift_k, shift_k putting row k's largest finite magnitude m_k in [2^14, 2^15) (clamped to
// [-113, 126], so both powers are normal floats; 0 for a row of zeros): float16's 11 significant bits, TF32's, for
// every value of the row down to m_k 2^-28 (then float16's subnormals: absolute error <= m_k 2^-39), infinities
// and NaNs carried; float32 subnormals read as zeros of their sign (denormals are flushed here: a row of them came
// back zero on the H200, tests/kernels/formats/csr/test_gpu_csr_rows.py). The row kernel multiplies A's float32
// value by bscale[k] (exact while the product stays in float32's normal range) and the 16-bit value widened to
// fp32: a product a_ik b_kj differs from fp32's by b_kj's rounding, except where a_ik x m_k itself leaves float32's
// range. A warp takes `rows` rows (CSR_PACK_ROWS where N <= 128, else one; blockDim.x / 32 warps a block, launch.py's
// PACK_WARPS, at most 8), lane l columns 4l + 128 i;
// FLAG_VEC: N % 4 == 0 and B 16-byte aligned (Bh, allocated by the launcher, is then 8-byte aligned).
__device__ __forceinline__ float finite_abs(float x) {  // |x|, or 0 for an infinity or NaN
  const float a = fabsf(x);
  return a <= 3.402823466e38f ? a : 0.f;
}

__device__ __forceinline__ float max_abs4(const float4& x) {  // the largest finite |x.?|
  return fmaxf(fmaxf(finite_abs(x.x), finite_abs(x.y)), fmaxf(finite_abs(x.z), finite_abs(x.w)));
}

// Row k's factor 2^shift for its largest finite magnitude m (the header's shift); lane 0 writes 2^-shift to bscale[k].
__device__ __forceinline__ float row_scale(float m, float* __restrict__ bscale, i64 k, int lane) {
  const int shift = m > 0.f ? min(126, max(-113, 14 - ilogbf(m))) : 0;
  if (lane == 0) bscale[k] = __int_as_float((127 - shift) << 23);
  return __int_as_float((127 + shift) << 23);
}

__device__ __forceinline__ uint2 scaled4(const float4& x, float up) {  // 4 values x up as float16, in column order
  return make_uint2(pack2<F16>(x.x * up, x.y * up), pack2<F16>(x.z * up, x.w * up));
}

// One row k of B, any N: its largest finite magnitude (lane l's columns 4l + 128 i), then the row scaled.
__device__ __forceinline__ void pack_row(const float* __restrict__ B, u16* __restrict__ Bh, float* __restrict__ bscale,
                                         i64 k, i64 N, bool vec, int lane) {
  const float* row = B + k * N;
  u16* out = Bh + k * N;
  float m = 0.f;
  if (vec) {
    for (i64 n = 4 * lane; n < N; n += 128) m = fmaxf(m, max_abs4(__ldg(reinterpret_cast<const float4*>(row + n))));
  } else {
    for (i64 n = lane; n < N; n += 32) m = fmaxf(m, finite_abs(__ldg(row + n)));
  }
#pragma unroll
  for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  const float up = row_scale(m, bscale, k, lane);
  if (vec) {
    for (i64 n = 4 * lane; n < N; n += 128)  // the row again, from L1
      *reinterpret_cast<uint2*>(out + n) = scaled4(__ldg(reinterpret_cast<const float4*>(row + n)), up);
  } else {
    for (i64 n = lane; n < N; n += 32) out[n] = from_f32<F16>(__ldg(row + n) * up);
  }
}

// R rows k0 .. k0 + R - 1 of B (those below K) where N <= 128 and FLAG_VEC: lane l holds columns 4l .. 4l + 3 of
// each in registers, the R loads issued before any is used (one row a warp left one 512-byte load in flight and
// moved 3.1-3.3 TB/s at N = 128 on the H200, against 3.8-4.0 at N = 256: docs/kernels-notes.md, "Session 36").
template <int R>
__device__ __forceinline__ void pack_short(const float* __restrict__ B, u16* __restrict__ Bh,
                                           float* __restrict__ bscale, i64 k0, i64 K, i64 N, int lane) {
  const bool mine = 4 * lane < N;
  float4 x[R];
  float m[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    x[r] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (mine && k0 + r < K) x[r] = __ldg(reinterpret_cast<const float4*>(B + (k0 + r) * N + 4 * lane));
  }
#pragma unroll
  for (int r = 0; r < R; ++r) m[r] = max_abs4(x[r]);
#pragma unroll
  for (int o = 16; o; o >>= 1) {
#pragma unroll
    for (int r = 0; r < R; ++r) m[r] = fmaxf(m[r], __shfl_xor_sync(0xffffffffu, m[r], o));
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (k0 + r >= K) break;  // warp-uniform
    const float up = row_scale(m[r], bscale, k0 + r, lane);
    if (mine) *reinterpret_cast<uint2*>(Bh + (k0 + r) * N + 4 * lane) = scaled4(x[r], up);
  }
}

// Warp w of the grid converts rows w x rows .. w x rows + rows - 1 (the launcher's rows: CSR_PACK_ROWS where
// N <= 128, else 1).
extern "C" __global__ void __launch_bounds__(256)
    csr_pack_b(const float* __restrict__ B, u16* __restrict__ Bh, float* __restrict__ bscale, i64 K, i64 N,
               int flags, int rows) {
  const int lane = threadIdx.x & 31;
  const i64 k0 = ((i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * rows;
  if (k0 >= K) return;  // warp-uniform
  const bool vec = (flags & FLAG_VEC) != 0;
  if (rows == CSR_PACK_ROWS && vec && N <= 128) {
    pack_short<CSR_PACK_ROWS>(B, Bh, bscale, k0, K, N, lane);
  } else {
    for (int r = 0; r < rows && k0 + r < K; ++r) pack_row(B, Bh, bscale, k0 + r, N, vec, lane);
  }
}
