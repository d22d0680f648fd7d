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
// Register remapping (DTC-SpMM section 4.4.1, widened to 16-bit values): kernels/cuda/half_acc.cuh, which holds the
// accumulator, the per-block mma and the C store that Tiled-CSR's 16-bit kernel shares.
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

#include "half_acc.cuh"  // tc_ops.cuh; FLAG_OUT16, HALF_ACC_REGS, HalfAcc, mma_block, half_zero, half_store

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

// The window thread block x takes: walk[x] (windows launched by block count, most first, so that the longest do
// not start in the last wave: launch_half.window_walk), or x where walk is null. Which window a block takes
// changes no bit of C.
__device__ __forceinline__ i64 walked_window(const int* __restrict__ walk) {
  return walk ? (i64)__ldg(walk + blockIdx.x) : (i64)blockIdx.x;
}

// Window kernel body: warp -> (window walked_window(walk), 64-column slice blockIdx.y x slices + warp).
template <int KIND>
__device__ __forceinline__ void half_window(const i64* __restrict__ row_window_offset, const uint4* __restrict__ frag,
                                            const int4* __restrict__ cols, const u16* __restrict__ B,
                                            void* __restrict__ C, i64 M, i64 N, int flags,
                                            const int* __restrict__ walk) {
  const int warp = threadIdx.x >> 5, slices = (int)(blockDim.x >> 5);
  const i64 w = walked_window(walk), n0 = ((i64)blockIdx.y * slices + warp) * CFG_HALF_WARP_COLS;
  if (n0 >= N) return;  // no barrier in this kernel
  const bool fast = (flags & FLAG_VEC) && n0 + CFG_HALF_WARP_COLS <= N;
  HalfAcc acc;
  half_zero(acc);
  half_run<KIND>(acc, row_window_offset[w], row_window_offset[w + 1], frag, cols, B, N, n0, fast);
  const i64 row0 = w * 16;
  half_store<KIND>(C, acc, row0, (int)min((i64)16, M - row0), N, n0, fast, flags);
}

// Split-K body (window walked_window(walk)): blockDim.x = 32 x slices x ksplit (ksplit a power of two); warp =
// k x slices + slice takes blocks [rb + len k / ksplit, rb + len (k+1) / ksplit) of the window; at tree step h
// (ksplit/2 .. 1) warps h..2h-1 hand their sums to warps 0..h-1 through red ((ksplit/2) x slices slots of [32
// regs][32 lanes] floats, dynamic shared memory: conflict-free). The shares and the tree depend only on the block
// count and ksplit: bitwise repeatable.
template <int KIND>
__device__ __forceinline__ void half_split(const i64* __restrict__ row_window_offset, const uint4* __restrict__ frag,
                                           const int4* __restrict__ cols, const u16* __restrict__ B,
                                           void* __restrict__ C, i64 M, i64 N, int flags, int ksplit,
                                           const int* __restrict__ walk, float* __restrict__ red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int slices = (int)(blockDim.x >> 5) / ksplit, slice = warp % slices, k = warp / slices;
  const i64 w = walked_window(walk), n0 = ((i64)blockIdx.y * slices + slice) * CFG_HALF_WARP_COLS;
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
