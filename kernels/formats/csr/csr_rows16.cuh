// csr_spmm.cu's 16-bit mappings, csr_rows_wide and csr_rows_pair (see csr_spmm.cu's header for what they compute,
// their launch mapping and the input contract): included by csr_spmm.cu after its shared helpers (load_b, store_c,
// FLAG_*, CSR_* constants), not compiled on its own.
#pragma once

// Lane += a x this lane's 8 16-bit values of B (one 16-byte word), widened to fp32 in column order.
template <int KIND>
__device__ __forceinline__ void fma8(float* acc, float a, const uint4& w) {
  const unsigned ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc[2 * i] = fmaf(a, to_f32<KIND>((u16)(ws[i] & 0xffffu)), acc[2 * i]);
    acc[2 * i + 1] = fmaf(a, to_f32<KIND>((u16)(ws[i] >> 16)), acc[2 * i + 1]);
  }
}

// This lane's 8 values of row `col` of B from column n: one 16-byte load, or (B not 16-byte aligned) eight.
template <bool VEC>
__device__ __forceinline__ uint4 load_b8(const u16* __restrict__ B, i64 col, i64 N, i64 n) {
  const u16* row = B + col * N + n;
  if constexpr (VEC) {
    return __ldg(reinterpret_cast<const uint4*>(row));
  } else {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = (unsigned)__ldg(row + 2 * i) | (unsigned)__ldg(row + 2 * i + 1) << 16;
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// The 16-bit row kernels' parameters (csr_rows_wide, csr_rows_pair): CSR_ROWS_PARAMS with B as 16-bit words, and
// bscale: with SCALED (float32 A over B's 16-bit copy, csr_pack_b) the copy's scale per row of B, else unused.
#define CSR_WIDE_PARAMS                                                                                           \
  const i64 *__restrict__ seg_ptr, const int *__restrict__ seg_row, const int *__restrict__ seg_slot,            \
      const int *__restrict__ indices, const void *__restrict__ data, const u16 *__restrict__ B,                 \
      void *__restrict__ C, float *__restrict__ W, i64 n_segs, i64 N, int flags, const float *__restrict__ bscale

// A's value at p as the row kernels multiply it: B's type, or (SCALED) float32 times the scale of B's row `col` in
// its 16-bit copy (a power of two: the product is exact unless it leaves float32's range, csr_pack_b's header).
template <int KIND, bool SCALED>
__device__ __forceinline__ float a_value(const void* __restrict__ data, i64 p, int col,
                                         const float* __restrict__ bscale) {
  if constexpr (SCALED) return __ldg(static_cast<const float*>(data) + p) * __ldg(bscale + col);
  else return value_of<KIND>(data, p);
}

// Write a lane's 8 sums (columns n .. n + 7) to C row `row` (slot < 0) or to W row `slot` (float32, unrounded).
template <int KIND, bool VEC>
__device__ __forceinline__ void store8(void* __restrict__ C, float* __restrict__ W, int row, int slot, i64 N, i64 n,
                                       const float* acc, int flags) {
  const float4 lo4 = make_float4(acc[0], acc[1], acc[2], acc[3]), hi4 = make_float4(acc[4], acc[5], acc[6], acc[7]);
  if (slot < 0 && VEC && (flags & (FLAG_OUT16 | FLAG_ADD)) == FLAG_OUT16) {  // the common case: one 16-byte store
    *reinterpret_cast<uint4*>(static_cast<u16*>(C) + (i64)row * N + n) =
        make_uint4(pack2<KIND>(acc[0], acc[1]), pack2<KIND>(acc[2], acc[3]), pack2<KIND>(acc[4], acc[5]),
                   pack2<KIND>(acc[6], acc[7]));
  } else if (slot < 0) {  // two 4-column stores (float32 C, C +=, or C not 16-byte aligned)
    store_c<KIND>(C, row, N, n, lo4, VEC, 4, flags);
    store_c<KIND>(C, row, N, n + 4, hi4, VEC, 4, flags);
  } else {
    float* w = W + (i64)slot * N + n;  // float32 partial row, no FLAG_ADD, no 16-bit rounding
    *reinterpret_cast<float4*>(w) = lo4;
    *reinterpret_cast<float4*>(w + 4) = hi4;
  }
}

// csr_rows for 16-bit B with N % 8 == 0 (the launcher's choice, kept when set_io re-points B and C: FLAG_VEC
// then says whether they are 16-byte aligned): see the header. Its own kernel, so that csr_rows' registers do not
// lower its occupancy (one kernel of both paths ran 1.2x slower on R-MAT, H200); VEC a template parameter, so
// that the loop's loads are not behind a branch.
template <int KIND, bool VEC, bool SCALED>
__device__ __forceinline__ void csr_rows_wide(CSR_WIDE_PARAMS) {
  constexpr int U = CSR_UNROLL > 1 ? CSR_UNROLL / 2 : 1;  // per lane: the same bytes in flight as csr_rows'
  const int lane = threadIdx.x & 31, h = lane >> 4;
  const i64 s = (i64)blockIdx.x * CSR_WARPS + (threadIdx.x >> 5);
  if (s >= n_segs) return;  // no barriers below: a warp may leave early
  const i64 n = (i64)blockIdx.y * COLS + 8 * (lane & 15);
  const bool in = n < N;  // N % 8 == 0: a lane's 8 columns are all inside N or all outside
  const i64 lo = seg_ptr[s], hi = seg_ptr[s + 1];
  const int slot = seg_slot[s], row = seg_row[s];  // read now: their latency hides behind the loop's
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (i64 base = lo; base < hi; base += 32) {
    const int cnt = (int)min((i64)32, hi - base);
    const int my_col = lane < cnt ? __ldg(indices + base + lane) : 0;
    const float my_val = lane < cnt ? a_value<KIND, SCALED>(data, base + lane, my_col, bscale) : 0.f;
    for (int j = 0; j < cnt; j += 2 * U) {  // cnt is warp-uniform: every lane takes part in each shuffle
      uint4 b[U];
      float a[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int k = j + 2 * u + h;  // even positions on the lower half-warp, odd on the upper
        const int c = __shfl_sync(0xffffffffu, my_col, k & 31);
        const float v = __shfl_sync(0xffffffffu, my_val, k & 31);
        const bool live = in && k < cnt;
        a[u] = live ? v : 0.f;
        b[u] = live ? load_b8<VEC>(B, c, N, n) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) fma8<KIND>(acc, a[u], b[u]);
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] += __shfl_down_sync(0xffffffffu, acc[i], 16);  // even sums + odd sums
  if (h || !in) return;
  store8<KIND, VEC>(C, W, row, slot, N, n, acc, flags);
}

// Segment s of the pair mappings on the calling half-warp, lane q: columns n .. n + 8 V - 1 (in: inside N; V 16-byte
// loads per nonzero), U nonzeros' loads in flight; both halves call it together (the shuffles need every lane).
template <int KIND, bool VEC, bool SCALED, int V, int U>
__device__ __forceinline__ void pair_segment(CSR_WIDE_PARAMS, i64 s, int q, i64 n, bool in) {
  const bool has = s < n_segs;  // the upper half of the last warp may have none
  const i64 lo = has ? seg_ptr[s] : 0, len = has ? seg_ptr[s + 1] - lo : 0;
  const int slot = has ? seg_slot[s] : -1, row = has ? seg_row[s] : 0;
  const i64 trips = max(len, (i64)__shfl_xor_sync(0xffffffffu, (long long)len, 16));  // warp-uniform
  float acc[V][8];
#pragma unroll
  for (int v = 0; v < V; ++v)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[v][i] = 0.f;
  for (i64 off = 0; off < trips; off += 16) {
    const int cnt = (int)max((i64)0, min((i64)16, len - off));  // this half's
    const int my_col = q < cnt ? __ldg(indices + lo + off + q) : 0;
    const float my_val = q < cnt ? a_value<KIND, SCALED>(data, lo + off + q, my_col, bscale) : 0.f;
    const int steps = (int)min((i64)16, trips - off);
    for (int j = 0; j < steps; j += U) {
      uint4 b[U][V];
      float a[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int k = j + u;
        const int c = __shfl_sync(0xffffffffu, my_col, k & 15, 16);
        const float x = __shfl_sync(0xffffffffu, my_val, k & 15, 16);
        const bool live = in && k < cnt;
        a[u] = live ? x : 0.f;
#pragma unroll
        for (int v = 0; v < V; ++v) b[u][v] = live ? load_b8<VEC>(B, c, N, n + 8 * v) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int v = 0; v < V; ++v) fma8<KIND>(acc[v], a[u], b[u][v]);
    }
  }
  if (has && in)
#pragma unroll
    for (int v = 0; v < V; ++v) store8<KIND, VEC>(C, W, row, slot, N, n + 8 * v, acc[v], flags);
}

// csr_rows_pair (16-bit B, N % 8 == 0; kernels/formats/csr/launch.py times it against csr_rows_wide per N): a warp
// takes two neighbouring segments, half-warp h the (h + 1)-th, and lane q of a half columns n0 + 8q .. + 7 (one
// 16-byte load per nonzero), the half's nonzeros in order, CSR_UNROLL loads in flight per lane; no cross-half sum.
// The warp loops to the longer half's length (shuffles need every lane), so it pays where paired segments are
// alike: R-MAT after TCA 0.88x csr_rows_wide's time, SBM 0.95-0.97x, email-Enron 1.02-1.03x (H200,
// docs/kernels-notes.md, "Session 27"); 16-bit rows are walked by length (launch.py, HEAVY_HALF), which makes
// neighbouring segments alike: the kept mapping's time R-MAT as given 0.88x, SBM 0.88-0.92x, R-MAT after TCA
// 0.97x, email-Enron 0.97-0.99x ("Session 28"). That walk ends in the short rows (40% of an R-MAT's rows are
// empty), each a warp-half of its own: a warp launched for little more than its row's store. Their segments of
// <= tail_short (2) nonzeros go CSR_TAIL_GROUP (8) a half-warp to the first warps instead (first, so that their
// serial chains of dependent loads do not hold up the kernel's end: last, they cost an SBM with a few such rows up
// to 1.25x): R-MAT 0.93-0.96x the pair kernel's time without it, SBM 1.00-1.01x, email-Enron 0.98-1.02x (one
// process, interleaved; "Session 28").
// pair16 / pair16_deep (N % 16 == 0, N >= 256; the launcher times them against the others there): V = 2, lane q of
// a half columns n0 + 16q .. + 15 (two 16-byte loads per nonzero), 256 columns a half-warp, the same walk, tail
// grouping and sum order per column (C bitwise equal to pair's); U = CSR_UNROLL / 2 (the pair kernel's bytes in
// flight) or CSR_UNROLL. Against the faster of pair and wide (H200, float16, graph replay, N = 256; docs/kernels-
// notes.md "Session 29"): R-MAT 0.93 / 0.97x, SBM 0.92 / 0.95x, email-Enron 1.41 / 0.92x, a larger SBM 1.18 /
// 1.13x (kept: pair): which wins depends on the matrix, so all are timed.
template <int KIND, bool VEC, bool SCALED, int V, int U>
__device__ __forceinline__ void csr_rows_pair(CSR_WIDE_PARAMS, i64 tail0) {
  constexpr int G = CSR_TAIL_GROUP;
  const int lane = threadIdx.x & 31, h = lane >> 4, q = lane & 15;
  const i64 w = (i64)blockIdx.x * CSR_WARPS + (threadIdx.x >> 5);
  const i64 n = (i64)blockIdx.y * (V * COLS) + 8 * V * q;
  const bool in = n < N;  // N % (8 V) == 0: a lane's columns are all inside N or all outside
  // The walk's tail of short segments (from tail0, even: <= tail_short nonzeros, one pass each) goes to the first
  // warps, G consecutive segments a half-warp: fewer warps where a segment is little more than its row's store,
  // and their dependent load chains start first rather than hold up the kernel's end. The warps after them take
  // segments 2v (lower half) and 2v + 1 (upper) of the head.
  const i64 tail_warps = n_segs > tail0 ? (n_segs - tail0 + 2 * G - 1) / (2 * G) : 0;
  if (w >= tail_warps) {
    const i64 s0 = 2 * (w - tail_warps);  // the lower half's; tail0 even: both halves' are in the head or neither
    if (s0 >= tail0) return;  // warp-uniform
    pair_segment<KIND, VEC, SCALED, V, U>(seg_ptr, seg_row, seg_slot, indices, data, B, C, W, n_segs, N, flags,
                                          bscale, s0 + h, q, n, in);
    return;
  }
  const i64 first = tail0 + (2 * w + h) * G;
#pragma unroll 1
  for (int i = 0; i < G; ++i)
    pair_segment<KIND, VEC, SCALED, V, U>(seg_ptr, seg_row, seg_slot, indices, data, B, C, W, n_segs, N, flags,
                                          bscale, first + i, q, n, in);
}
