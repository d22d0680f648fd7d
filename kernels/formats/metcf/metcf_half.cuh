// C = A @ B for a sparse A (M x K) in 16-wide ME-TCF and dense row-major B (K x N), FP16 or BF16 inputs, FP32
// accumulation, C in float32 or in the input's 16-bit type: mma.sync.m16n8k16 on 16 x 16 TC blocks (DTC-SpMM
// section 4.4 with k16 blocks). One source for both types (template KIND: tc_ops.cuh's F16 or BF16); raw values are
// unsigned short, pairs are packed in 32-bit words (lower index in the low half), so no cuda_fp16.h / cuda_bf16.h
// is needed.
//
// Launch mapping (extern "C" entries at the end of metcf_spmm.cu; kernels/formats/metcf/launch_half.py):
//   window  1 block = one 16-row window x a column chunk (blockIdx.y); 1 warp = the window x 64 columns
//           n0..n0+63 (blockDim.x = 32 x slices); lane (g = lane/4, q = lane%4) owns rows g and g+8.
//   split   1 block = one window x a column chunk; ksplit warps per 64-column slice take contiguous equal shares of
//           the window's TC blocks and are summed by a fixed binary tree in shared memory (no atomics).
// Register remapping (DTC-SpMM section 4.4.1, widened to 16-bit values): the warp's 64 columns are 8 n8 tiles;
// column j (0..7) of tile t is the actual column n0 + 8j + t. The mma B fragment of lane (g, q) is column j = g,
// k rows 2q, 2q+1, 2q+8, 2q+9 of each tile, i.e. B[col[k]][n0 + 8g + t] for t = 0..7: ONE 16-byte vector per B row,
// four per block, whose halves are paired by prmt into the 8 tiles' f16x2 fragments. The C fragment of tile t is
// rows g, g+8 x tile columns 2q, 2q+1 = actual columns n0+16q+t and n0+16q+8+t: 16 contiguous columns per row,
// stored as 4 float4 (float32 C) or 2 16-byte vectors (16-bit C).
//
// Input contract (checked by kernels/formats/metcf/launch_half.py): row_window_offset int64 [ceil(M/16) + 1]; frag [n_blocks][32
// lanes][8] 16-bit values = every 16x16 block in m16n8k16 A-fragment order (lane = 4g + q: (g, 2q..2q+1),
// (g+8, 2q..2q+1), (g, 2q+8..2q+9), (g+8, 2q+8..2q+9), zeros where A has none); cols int32 [n_blocks][4 q][4] =
// sparse_a_to_b[b][2q, 2q+1, 2q+8, 2q+9] with padding replaced by the block's first column (A is zero there, so
// the loads need no padding test; a non-finite value in a referenced row of B reaches its whole window). B [K, N]
// and C [M, N] row-major; FLAG_VEC only when N % 8 == 0 and B, C are 16-byte aligned. Rows >= M and columns >= N
// of C are never written; every other element is (zeros for a window without blocks). Offsets and indexing int64.
#pragma once

#if !defined(CFG_HALF_WARP_COLS) || !defined(CFG_HALF_UNROLL) || !defined(CFG_HALF_MIN_BLOCKS_PER_SM) || \
    !defined(CFG_MAX_WARPS) || !defined(CFG_SPLIT_MAX_WARPS)
#error "compile with the -D options of kernels/formats/metcf/config.py (KernelConfig.defines())"
#endif
#if !defined(FLAG_VEC) || !defined(FLAG_ADD)
#error "include metcf_half.cuh after metcf_spmm.cu's FLAG_VEC / FLAG_ADD"
#endif
static_assert(CFG_HALF_WARP_COLS == 64, "the 16-byte register remapping covers 8 n8 tiles = 64 columns per warp "
                                        "(KernelConfig.half_warp_cols)");
static_assert(CFG_HALF_UNROLL >= 1 && CFG_HALF_UNROLL <= 4, "KernelConfig.half_unroll must be 1..4");
static_assert(CFG_HALF_MIN_BLOCKS_PER_SM >= 1 && CFG_HALF_MIN_BLOCKS_PER_SM * CFG_MAX_WARPS <= 64,
              "KernelConfig.half_min_blocks_per_sm x max_warps must fit 64 warps per SM");

#include "tc_ops.cuh"  // i64, u16, Kind, mma, to_f32, from_f32, pack2, word, load8_u16
#define FLAG_OUT16 4  // C is in the 16-bit input type (else float32); kernels/formats/metcf/launch_half.py sets it
#define HALF_ACC_REGS 32  // floats of one lane's accumulator: [8 tiles][4 mma D registers]
typedef float HalfAcc[8][4];  // [n8 tile t][mma D register]: rows g, g+8 x remapped columns (above)

// acc[t] += A (16x16) x Bt_t for the 8 remapped tiles; r[k] = this lane's 8 values of B rows col[2q], col[2q+1],
// col[2q+8], col[2q+9]. Tile t takes value t of each row: word t/2, low half for even t, high half for odd t.
// prmt plain equivalent: __byte_perm(x, y, 0x5410) = (y << 16) | (x & 0xffff); 0x7632: (y & 0xffff0000) | (x >> 16).
template <int KIND>
__device__ __forceinline__ void mma_block(HalfAcc& acc, const uint4& a, const uint4 (&r)[4]) {
#pragma unroll
  for (int t = 0; t < 8; ++t) {
    const unsigned sel = (t & 1) ? 0x7632u : 0x5410u;
    const unsigned b0 = __byte_perm(word(r[0], t >> 1), word(r[1], t >> 1), sel);
    const unsigned b1 = __byte_perm(word(r[2], t >> 1), word(r[3], t >> 1), sel);
    mma<KIND>(acc[t], a, b0, b1);
  }
}

// One warp walks blocks [b_begin, b_end) for its 64 columns from n0, in groups of U (CFG_HALF_UNROLL on the FAST
// path; 1 on the checked one, whose 32 scalar loads per block would otherwise spill): a group's loads (1 A + 4 B
// 16-byte vectors per block) are issued before its first mma, the next group's column ids meanwhile.
template <int KIND, bool FAST>
__device__ __forceinline__ void half_blocks(HalfAcc& acc, i64 b_begin, i64 b_end, const uint4* __restrict__ frag,
                                            const int4* __restrict__ cols, const u16* __restrict__ B, i64 N, i64 n0) {
  constexpr int U = FAST ? CFG_HALF_UNROLL : 1;
  const int lane = threadIdx.x & 31;
  const i64 n_lane = n0 + 8 * (lane >> 2);  // first of this lane's 8 B columns
  const int avail = (int)max((i64)0, min((i64)8, N - n_lane));
  int4 c[U];  // [u]: B rows of block b0 + u (col[2q], col[2q+1], col[2q+8], col[2q+9])
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (b_begin + u < b_end) c[u] = __ldg(cols + (b_begin + u) * 4 + (lane & 3));
  for (i64 b0 = b_begin; b0 < b_end; b0 += U) {
    uint4 a[U], r[U][4];  // [u]: A fragment; [u][k]: B row k's 8 values
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (b0 + u < b_end) {  // uniform across the warp
        a[u] = __ldg(frag + (b0 + u) * 32 + lane);
        r[u][0] = load8_u16<FAST>(B + (i64)c[u].x * N + n_lane, avail);
        r[u][1] = load8_u16<FAST>(B + (i64)c[u].y * N + n_lane, avail);
        r[u][2] = load8_u16<FAST>(B + (i64)c[u].z * N + n_lane, avail);
        r[u][3] = load8_u16<FAST>(B + (i64)c[u].w * N + n_lane, avail);
      }
    }
    const i64 nb = b0 + U;
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (nb + u < b_end) c[u] = __ldg(cols + (nb + u) * 4 + (lane & 3));
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (b0 + u < b_end) mma_block<KIND>(acc, a[u], r[u]);
  }
}

// FAST (16-byte loads, no column checks) when the warp's 64 columns lie inside N and FLAG_VEC holds: warp-uniform,
// decided once; the checked path otherwise (N % 8 != 0, unaligned B or C, the last column chunk).
template <int KIND>
__device__ __forceinline__ void half_run(HalfAcc& acc, i64 b_begin, i64 b_end, const uint4* __restrict__ frag,
                                         const int4* __restrict__ cols, const u16* __restrict__ B, i64 N, i64 n0,
                                         bool fast) {
  if (fast) half_blocks<KIND, true>(acc, b_begin, b_end, frag, cols, B, N, n0);
  else half_blocks<KIND, false>(acc, b_begin, b_end, frag, cols, B, N, n0);
}

__device__ __forceinline__ void half_zero(HalfAcc& acc) {
#pragma unroll
  for (int t = 0; t < 8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
}

// Write (FLAG_ADD: add to) C rows row0 + g, row0 + g + 8 (< row0 + rows), columns n0 + 16q .. +15 (< N). With
// FLAG_ADD the old value is read once, added in fp32 and rounded once; each element has one writer.
template <int KIND>
__device__ __forceinline__ void half_store(void* __restrict__ C, const HalfAcc& acc, i64 row0, int rows, i64 N,
                                           i64 n0, bool vec, int flags) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const i64 n = n0 + 16 * q;
  const bool add = (flags & FLAG_ADD) != 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // h = 0: row g (D registers 0, 1); h = 1: row g + 8 (D registers 2, 3)
    if (g + 8 * h >= rows) continue;
    float v[16];  // v[e] = C[row][n + e]: e < 8 from register 2h of tile e, e >= 8 from register 2h+1 of tile e-8
#pragma unroll
    for (int e = 0; e < 16; ++e) v[e] = acc[e & 7][2 * h + (e >> 3)];
    const i64 off = (row0 + g + 8 * h) * N + n;
    if (flags & FLAG_OUT16) {
      u16* out = static_cast<u16*>(C) + off;
      if (vec) {
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          uint4* p = reinterpret_cast<uint4*>(out + 8 * k);
          if (add) {
            const uint4 o = *p;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              v[8 * k + 2 * i] += to_f32<KIND>((u16)(word(o, i) & 0xffffu));
              v[8 * k + 2 * i + 1] += to_f32<KIND>((u16)(word(o, i) >> 16));
            }
          }
          *p = make_uint4(pack2<KIND>(v[8 * k], v[8 * k + 1]), pack2<KIND>(v[8 * k + 2], v[8 * k + 3]),
                          pack2<KIND>(v[8 * k + 4], v[8 * k + 5]), pack2<KIND>(v[8 * k + 6], v[8 * k + 7]));
        }
      } else {
#pragma unroll
        for (int e = 0; e < 16; ++e)
          if (n + e < N) out[e] = from_f32<KIND>(add ? v[e] + to_f32<KIND>(out[e]) : v[e]);
      }
    } else {
      float* out = static_cast<float*>(C) + off;
      if (vec) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          float4* p = reinterpret_cast<float4*>(out + 4 * k);
          float4 x = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
          if (add) {
            const float4 o = *p;
            x = make_float4(o.x + x.x, o.y + x.y, o.z + x.z, o.w + x.w);
          }
          *p = x;
        }
      } else {
#pragma unroll
        for (int e = 0; e < 16; ++e)
          if (n + e < N) out[e] = add ? out[e] + v[e] : v[e];
      }
    }
  }
}

// Window kernel body: warp -> (window blockIdx.x, 64-column slice blockIdx.y x slices + warp).
template <int KIND>
__device__ __forceinline__ void half_window(const i64* __restrict__ row_window_offset, const uint4* __restrict__ frag,
                                            const int4* __restrict__ cols, const u16* __restrict__ B,
                                            void* __restrict__ C, i64 M, i64 N, int flags) {
  const int warp = threadIdx.x >> 5, slices = (int)(blockDim.x >> 5);
  const i64 w = blockIdx.x, n0 = ((i64)blockIdx.y * slices + warp) * CFG_HALF_WARP_COLS;
  if (n0 >= N) return;  // no barrier in this kernel
  const bool fast = (flags & FLAG_VEC) && n0 + CFG_HALF_WARP_COLS <= N;
  HalfAcc acc;
  half_zero(acc);
  half_run<KIND>(acc, row_window_offset[w], row_window_offset[w + 1], frag, cols, B, N, n0, fast);
  const i64 row0 = w * 16;
  half_store<KIND>(C, acc, row0, (int)min((i64)16, M - row0), N, n0, fast, flags);
}

// Split-K body: blockDim.x = 32 x slices x ksplit (ksplit a power of two); warp = k x slices + slice takes blocks
// [rb + len k / ksplit, rb + len (k+1) / ksplit) of the window; at tree step h (ksplit/2 .. 1) warps h..2h-1 hand
// their sums to warps 0..h-1 through red ((ksplit/2) x slices slots of [32 regs][32 lanes] floats, dynamic shared
// memory: conflict-free). The shares and the tree depend only on the block count and ksplit: bitwise repeatable.
template <int KIND>
__device__ __forceinline__ void half_split(const i64* __restrict__ row_window_offset, const uint4* __restrict__ frag,
                                           const int4* __restrict__ cols, const u16* __restrict__ B,
                                           void* __restrict__ C, i64 M, i64 N, int flags, int ksplit,
                                           float* __restrict__ red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int slices = (int)(blockDim.x >> 5) / ksplit, slice = warp % slices, k = warp / slices;
  const i64 w = blockIdx.x, n0 = ((i64)blockIdx.y * slices + slice) * CFG_HALF_WARP_COLS;
  const bool active = n0 < N, fast = (flags & FLAG_VEC) && n0 + CFG_HALF_WARP_COLS <= N;
  const i64 rb = row_window_offset[w], len = row_window_offset[w + 1] - rb;
  HalfAcc acc;
  half_zero(acc);
  if (active) half_run<KIND>(acc, rb + len * k / ksplit, rb + len * (k + 1) / ksplit, frag, cols, B, N, n0, fast);
  for (int h = ksplit >> 1; h >= 1; h >>= 1) {  // every warp reaches every barrier
    float* slot = red + ((i64)(k >= h ? k - h : k) * slices + slice) * 32 * HALF_ACC_REGS;
    if (k >= h && k < 2 * h) {
#pragma unroll
      for (int i = 0; i < HALF_ACC_REGS; ++i) slot[i * 32 + lane] = acc[i >> 2][i & 3];
    }
    __syncthreads();
    if (k < h) {
#pragma unroll
      for (int i = 0; i < HALF_ACC_REGS; ++i) acc[i >> 2][i & 3] += slot[i * 32 + lane];
    }
    __syncthreads();
  }
  const i64 row0 = w * 16;
  if (k == 0 && active) half_store<KIND>(C, acc, row0, (int)min((i64)16, M - row0), N, n0, fast, flags);
}
