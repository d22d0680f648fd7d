// The ME-TCF register pipeline (CFG_A_REGS: versions v2 and v6): A's fragments loaded straight into registers,
// B's rows with them, a block's mma issued without shared memory or barriers. Needs metcf_tile.cuh's config checks,
// Acc and store helpers first; metcf_spmm.cu includes the two in that order.
#pragma once

#include "metcf_tile.cuh"

// ---- A fragments straight into registers (CFG_A_REGS, version v2, docs/kernels-notes.md) -----------------------
// Per TC block, a 128-bit occupancy bitmap (uint4 {w0, w1, w2, w3}; bit p % 32 of word p / 32 is set when the
// block holds local id p = r * 8 + c). Canonical ME-TCF keeps a block's nonzeros sorted by local id, so the
// nonzero with local id p sits at data[tc_offset[b] + popc(bits below p)]: every lane finds its four A-fragment
// elements with popcounts, without shared memory or barriers. Lane (g, q) needs (g, q), (g + 8, q), (g, q + 4),
// (g + 8, q + 4): ids 8g + q (+ 4) in word g / 4 and 64 + 8g + q (+ 4) in word 2 + g / 4, bits 8 (g % 4) + q (+ 4).

// What a lane needs of one block before it can issue the block's loads: its two B rows, its two bitmap words
// and where those words' nonzeros start in data. Padding (col -1) and blocks past the end (m_* = 0) load nothing.
#if CFG_A_DENSE
// Dense fragments (CFG_A_DENSE, version v6): the launcher stores every TC block as its 128 values in mma fragment
// order, frag[b][lane][k] (zeros where A has none), so a lane reads its A fragment with one float4 load and needs
// no bitmap, offset or popcount: 4 load instructions per block and warp instead of 10, for 512 bytes of A per
// block (kernels/launch.py fragments()).
struct BlockMeta {
  int col_lo, col_hi;  // sparse_a_to_b[b][q], sparse_a_to_b[b][q + 4]
  i64 b;               // the block, -1 past the end
};

// a_to_b here is the launcher's column pairs: [b][q] = (sparse_a_to_b[b][q], sparse_a_to_b[b][q + 4]), one
// 8-byte load per lane.
__device__ __forceinline__ void load_meta(BlockMeta& m, i64 b, bool valid, const i64* __restrict__,
                                          const uint4* __restrict__, const int* __restrict__ a_to_b) {
  const int2 c = valid ? __ldg(reinterpret_cast<const int2*>(a_to_b) + b * 4 + (threadIdx.x & 3)) : make_int2(-1, -1);
  m.b = valid ? b : -1;
  m.col_lo = c.x;
  m.col_hi = c.y;
}
#else
struct BlockMeta {
  int col_lo, col_hi;   // sparse_a_to_b[b][q], sparse_a_to_b[b][q + 4]
  unsigned m_lo, m_hi;  // bitmap words holding rows g and g + 8
  i64 base_lo, base_hi; // data index of the first nonzero of word m_lo / m_hi
};

__device__ __forceinline__ void load_meta(BlockMeta& m, i64 b, bool valid, const i64* __restrict__ tc_offset,
                                          const uint4* __restrict__ bitmap, const int* __restrict__ a_to_b) {
  if (!valid) {
    m.col_lo = m.col_hi = -1;
    m.m_lo = m.m_hi = 0u;
    m.base_lo = m.base_hi = 0;
    return;
  }
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  m.col_lo = __ldg(a_to_b + b * CFG_BLOCK_COLS + q);
  m.col_hi = __ldg(a_to_b + b * CFG_BLOCK_COLS + q + 4);
  const uint4 w = __ldg(bitmap + b);
  const i64 off = __ldg(tc_offset + b);
  const bool upper = g >= 4;  // rows 4..7 (and 12..15) live in the second word of each half
  const int c0 = __popc(w.x), c01 = c0 + __popc(w.y), c012 = c01 + __popc(w.z);
  m.m_lo = upper ? w.y : w.x;
  m.m_hi = upper ? w.w : w.z;
  m.base_lo = off + (upper ? c0 : 0);
  m.base_hi = off + (upper ? c012 : c01);
}
#endif

// A value of this lane's fragment: the nonzero at bit `bit` of word m (0 when the slot is empty).
__device__ __forceinline__ float a_value(const float* __restrict__ data, unsigned m, i64 base, int bit) {
  return ((m >> bit) & 1u) ? __ldg(data + base + __popc(m & ((1u << bit) - 1u))) : 0.0f;
}

// Where a warp's slice s of WARP_N columns from n0 lies: lane's first column n_lane, inside N (active), float4
// path (vec). Computed once per kernel, outside the block loop.
struct Slices {
  i64 n_lane[CFG_WARP_SLICES];
  bool active[CFG_WARP_SLICES], vec[CFG_WARP_SLICES];
};

__device__ __forceinline__ Slices warp_slices(i64 n0, i64 N, bool vec_ok) {
  Slices sl;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int s = 0; s < CFG_WARP_SLICES; ++s) {
    const i64 n = n0 + (i64)s * CFG_WARP_COLS;
    sl.n_lane[s] = n + 4 * (lane >> 2);
    sl.active[s] = n < N;
    sl.vec[s] = vec_ok && n + CFG_WARP_COLS <= N;
  }
  return sl;
}

// FAST path of one B row (every slice inside N and float4-aligned): row pointer with one 32-bit x 32-bit wide
// multiply-add and no branch, so a group's loads issue back to back. The dense-fragment column pairs never hold
// padding (kernels/launch.py col_pairs repeats the block's first column, whose A entries are zeros there), so
// col < 0 only marks a block past the end, whose loads are never multiplied: it reads row 0 instead. The bitmap
// pipeline reads sparse_a_to_b, padding included: there a select (not a multiply by A's zero, which would let a
// non-finite B[0] through) gives the zeros.
__device__ __forceinline__ void load_row_fast(float (&v)[CFG_WARP_SLICES][4], const float* __restrict__ B_lane,
                                              int col, unsigned n32) {
  const float* row = B_lane + (unsigned long long)(unsigned)max(col, 0) * n32;
#pragma unroll
  for (int s = 0; s < CFG_WARP_SLICES; ++s) {
    const float4 x = __ldg(reinterpret_cast<const float4*>(row + s * CFG_WARP_COLS));
#if CFG_A_DENSE
    v[s][0] = x.x; v[s][1] = x.y; v[s][2] = x.z; v[s][3] = x.w;
#else
    const bool pad = col < 0;
    v[s][0] = pad ? 0.0f : x.x; v[s][1] = pad ? 0.0f : x.y; v[s][2] = pad ? 0.0f : x.z; v[s][3] = pad ? 0.0f : x.w;
#endif
  }
}

// Issue one block's loads: a = the mma A fragment {A[g][q], A[g+8][q], A[g][q+4], A[g+8][q+4]}, lo[s]/hi[s] =
// B rows col_lo/col_hi at this lane's 4 columns of slice s (left unset for inactive slices: never multiplied).
// FAST: every slice active and float4 (the warp-uniform common case, chosen once per kernel by reg_pipeline).
template <bool FAST>
__device__ __forceinline__ void load_block(float (&a)[4], float (&lo)[CFG_WARP_SLICES][4],
                                           float (&hi)[CFG_WARP_SLICES][4], const BlockMeta& m,
                                           const float* __restrict__ data, const float* __restrict__ B, i64 N,
                                           const Slices& sl) {
#if CFG_A_DENSE  // data = the fragment array
  const float4 f = m.b >= 0 ? __ldg(reinterpret_cast<const float4*>(data) + m.b * 32 + (threadIdx.x & 31))
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  a[0] = f.x; a[1] = f.y; a[2] = f.z; a[3] = f.w;
#else
  const int lane = threadIdx.x & 31, bit = 8 * ((lane >> 2) & 3) + (lane & 3);
  a[0] = a_value(data, m.m_lo, m.base_lo, bit);
  a[1] = a_value(data, m.m_hi, m.base_hi, bit);
  a[2] = a_value(data, m.m_lo, m.base_lo, bit + 4);
  a[3] = a_value(data, m.m_hi, m.base_hi, bit + 4);
#endif
  if (FAST) {  // B + n_lane[0]: slice s is 32 s columns further (warp_slices)
    load_row_fast(lo, B + sl.n_lane[0], m.col_lo, (unsigned)N);
    load_row_fast(hi, B + sl.n_lane[0], m.col_hi, (unsigned)N);
  } else {
#pragma unroll
    for (int s = 0; s < CFG_WARP_SLICES; ++s) {
      if (sl.active[s]) {
        load_b4(lo[s], B, m.col_lo, N, sl.n_lane[s], sl.vec[s]);
        load_b4(hi[s], B, m.col_hi, N, sl.n_lane[s], sl.vec[s]);
      }
    }
  }
}

// acc[s][t] += A_tile x Bt_t of slice s for the 4 remapped n8 tiles, A fragment in registers (see warp_tile_mma).
template <bool FAST>
__device__ __forceinline__ void reg_tile_mma(Acc& acc, const float (&av)[4], const float (&lo)[CFG_WARP_SLICES][4],
                                             const float (&hi)[CFG_WARP_SLICES][4], const Slices& sl) {
  unsigned a[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)  // dense fragments are stored TF32-rounded already (kernels/launch.py fragments)
    a[k] = CFG_A_DENSE ? __float_as_uint(av[k]) : round_tf32(av[k]);
#pragma unroll
  for (int s = 0; s < CFG_WARP_SLICES; ++s)
    if (FAST || sl.active[s]) {
#pragma unroll
      for (int t = 0; t < 4; ++t) mma<TF32>(acc[s][t], a, round_tf32(lo[s][t]), round_tf32(hi[s][t]));
    }
}

// The barrier-free pipeline (CFG_A_REGS): each warp walks blocks [b_begin, b_end) in groups of CFG_UNROLL for
// its WARP_N columns from n0. A group's loads (2 x CFG_WARP_SLICES x CFG_UNROLL float4 of B, 4 x CFG_UNROLL A
// values) are all issued before its first mma, and the next group's metadata is loaded while they are in flight
// (v0 waited on a barrier, a shared-memory column id and then B, block by block). after(b, acc) runs after
// block b's mma, in block order, exactly as in tile_pipeline.
template <bool FAST, class After>
__device__ __forceinline__ void reg_pipeline_impl(i64 b_begin, i64 b_end, const i64* __restrict__ tc_offset,
                                                  const uint4* __restrict__ bitmap, const float* __restrict__ data,
                                                  const int* __restrict__ a_to_b, const float* __restrict__ B, i64 N,
                                                  const Slices& sl, Acc& acc, After after) {
  BlockMeta meta[CFG_UNROLL];
#pragma unroll
  for (int u = 0; u < CFG_UNROLL; ++u)
    load_meta(meta[u], b_begin + u, b_begin + u < b_end, tc_offset, bitmap, a_to_b);
  for (i64 b0 = b_begin; b0 < b_end; b0 += CFG_UNROLL) {
    float av[CFG_UNROLL][4], lo[CFG_UNROLL][CFG_WARP_SLICES][4], hi[CFG_UNROLL][CFG_WARP_SLICES][4];
#pragma unroll
    for (int u = 0; u < CFG_UNROLL; ++u) load_block<FAST>(av[u], lo[u], hi[u], meta[u], data, B, N, sl);
    const i64 nb = b0 + CFG_UNROLL;  // the next group's metadata, in flight during this group's mma
#pragma unroll
    for (int u = 0; u < CFG_UNROLL; ++u) load_meta(meta[u], nb + u, nb + u < b_end, tc_offset, bitmap, a_to_b);
#pragma unroll
    for (int u = 0; u < CFG_UNROLL; ++u) {
      if (b0 + u < b_end) {  // uniform across the warp
        reg_tile_mma<FAST>(acc, av[u], lo[u], hi[u], sl);
        after(b0 + u, acc);
      }
    }
  }
}

// The pipeline for this warp's columns: FAST (no per-load slice or alignment checks) when every slice lies inside
// N and may use float4, which is warp-uniform and decided once here; the checked path otherwise (N % 4 != 0,
// unaligned B or C, the last column chunk past N).
template <class After>
__device__ __forceinline__ void reg_pipeline(i64 b_begin, i64 b_end, const i64* __restrict__ tc_offset,
                                             const uint4* __restrict__ bitmap, const float* __restrict__ data,
                                             const int* __restrict__ a_to_b, const float* __restrict__ B, i64 N,
                                             i64 n0, bool vec_ok, Acc& acc, After after) {
  const Slices sl = warp_slices(n0, N, vec_ok);
  bool fast = true;
#pragma unroll
  for (int s = 0; s < CFG_WARP_SLICES; ++s) fast = fast && sl.vec[s];
  if (fast)
    reg_pipeline_impl<true>(b_begin, b_end, tc_offset, bitmap, data, a_to_b, B, N, sl, acc, after);
  else
    reg_pipeline_impl<false>(b_begin, b_end, tc_offset, bitmap, data, a_to_b, B, N, sl, acc, after);
}
