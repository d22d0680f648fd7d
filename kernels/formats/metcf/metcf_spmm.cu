// C = A @ B for a sparse A (M x K) in ME-TCF and dense row-major B (K x N) and C (M x N), fp32 in and out,
// TF32 Tensor Core products with fp32 accumulation (DTC-SpMM, ASPLOS'24, sections 4.4 and 4.5.1).
//
// Kernels:
//   metcf_spmm_window   1 block = CFG_WINDOWS_PER_BLOCK consecutive 16-row windows x a column chunk (blockIdx.y);
//                       1 warp = one window x 32 columns (4 register-remapped n8 tiles); lane l owns rows l/4
//                       and l/4+8. Warps of neighbouring windows share an SM, so B rows that consecutive
//                       (reordered) windows have in common are served from L1.
//                       Every window's block writes its 16 x chunk slice of C (zeros for an empty window).
//   metcf_spmm_balanced strict balance: 1 block = work item i = global TC blocks
//                       [i*BPI, min((i+1)*BPI, n_blocks)) (BPI = CFG_BLOCKS_PER_ITEM, kernels.formats.metcf.
//                       balanced_items), which may span several windows. A window lying inside one item is
//                       written to C directly; a window cut by an item boundary writes its partial sum to
//                       workspace slot part_ptr[w] + (i - row_window_offset[w] / BPI) (16 x N floats each).
//   metcf_spmm_split    1 block = one window x a column chunk, ksplit warps per column slice sharing the window's
//                       TC blocks, summed by a fixed tree in shared memory (small matrices, hub windows).
//   metcf_combine       1 block = one window that no single item owns (split or empty); C rows = sum of its
//                       workspace slots in slot order (zeros for none): fixed order, no atomics, so two calls
//                       give bit-identical C.
// Input contract: see metcf_tile.cuh; item_window and part_ptr as built by kernels/launch.py (int64).
// All offsets and C/B indexing are int64 (rows x N beyond 2^31 is safe).
#include "metcf_tile.cuh"
#include "metcf_regs.cuh"  // the register pipeline (CFG_A_REGS)

#if !CFG_A_REGS  // v0 only
// The A-tile pipeline shared by both SpMM kernels: for each TC block b in [b_begin, b_end) (uniform across the
// thread block): acc += tile(b) x B-slice, then after(b, acc). Stage k % CFG_TILE_STAGES holds block
// b_begin + k; block b+1 is fetched with cp.async while block b's B loads and mma run. A stage is zeroed two
// iterations after its last read, so one barrier per block orders: zero -> barrier -> cp.async -> wait ->
// barrier -> read, and every read of a stage before its next zeroing. With CFG_PREFETCH_B the B fragments of
// block b+1 are loaded (column ids straight from global memory) before block b's mma; off by default: 5-10%
// slower on H100, where the kernel is bound by its B-gather bytes, not latency (docs/kernels-notes.md, v1).
template <class After>
__device__ __forceinline__ void tile_pipeline(TileStages& s, i64 b_begin, i64 b_end, const i64* __restrict__ tc_offset,
                                              const unsigned char* __restrict__ tc_local_id,
                                              const float* __restrict__ data, const int* __restrict__ a_to_b,
                                              const float* __restrict__ B, i64 N, i64 n0, bool active, bool vec,
                                              Acc& acc, After after) {
  if (b_begin >= b_end) return;
  const int lane = threadIdx.x & 31, q = lane & 3;
  const i64 n_lane = n0 + 4 * (lane >> 2);  // first of this lane's 4 B/C columns in each remapped tile
  zero_tile(s, 0);
  __syncthreads();
  fetch_tile_async(s, 0, b_begin, tc_offset, tc_local_id, data, a_to_b);
  float b_lo[4], b_hi[4];  // [t]: B[col[q]][n_lane + t], B[col[q + 4]][n_lane + t] of the block computed next
#if CFG_PREFETCH_B
  if (active) load_b_block(b_lo, b_hi, B, a_to_b, b_begin, q, N, n_lane, vec);
#endif
  int cur = 0;
  for (i64 b = b_begin; b < b_end; ++b) {
    const int nxt = (cur + 1 == CFG_TILE_STAGES) ? 0 : cur + 1;
    const bool has_next = b + 1 < b_end;
    if (has_next) zero_tile(s, nxt);  // last read CFG_TILE_STAGES - 1 >= 2 iterations ago, before a barrier
    cp_async_wait<0>();
    __syncthreads();  // stage cur landed for all threads; stage nxt zeroed by all threads
    if (has_next) fetch_tile_async(s, nxt, b + 1, tc_offset, tc_local_id, data, a_to_b);
    if (active) {
#if CFG_PREFETCH_B
      float c_lo[4], c_hi[4];  // [t]: this block's B rows, loaded one iteration ago
#pragma unroll
      for (int t = 0; t < 4; ++t) { c_lo[t] = b_lo[t]; c_hi[t] = b_hi[t]; }
      if (has_next) load_b_block(b_lo, b_hi, B, a_to_b, b + 1, q, N, n_lane, vec);  // in flight during the mma
      warp_tile_mma(acc[0], s, cur, c_lo, c_hi, lane);
#else
      load_b4(b_lo, B, s.col[cur][q], N, n_lane, vec);
      load_b4(b_hi, B, s.col[cur][q + 4], N, n_lane, vec);
      warp_tile_mma(acc[0], s, cur, b_lo, b_hi, lane);
#endif
    }
    after(b, acc);
    cur = nxt;
  }
}
#endif

// Both SpMM kernels run their blocks [b_begin, b_end) through one of the two pipelines (KernelConfig.a_regs):
// v2 (default) reg_pipeline, A fragments into registers (from the bitmap and data, or with a_dense from the
// launcher's dense fragment array, the column pairs then coming in the bitmap argument), no shared memory; v0
// tile_pipeline, A tiles through shared memory. Expects tc_offset, tc_local_id, bitmap, data, a_to_b, B, N, n0, vec_ok and acc
// in scope.
#if CFG_A_REGS
#define RUN_PIPELINE(b_begin, b_end, after)                                                                      \
  reg_pipeline((b_begin), (b_end), tc_offset, bitmap, CFG_A_DENSE ? frag : data,                               \
               CFG_A_DENSE ? reinterpret_cast<const int*>(bitmap) : a_to_b, B, N, n0, vec_ok != 0, acc, after)
#else
#define RUN_PIPELINE(b_begin, b_end, after)                                                                   \
  do {                                                                                                        \
    __shared__ TileStages s;                                                                                  \
    tile_pipeline(s, (b_begin), (b_end), tc_offset, tc_local_id, data, a_to_b, B, N, n0, n0 < N,              \
                  vec_ok != 0 && n0 + CFG_WARP_COLS <= N, acc, after);                                        \
  } while (0)
#endif

// The SpMM kernels' `flags` argument (kernels/launch.py builds it): FLAG_VEC, B and C rows may be read and written
// as float4 (N % 4 == 0, 16-byte aligned); FLAG_ADD, C += A B instead of C = A B (split A, deterministic: each C
// element is read and written by one thread, once).
#define FLAG_VEC 1
#define FLAG_ADD 2

struct NoFlush {
  __device__ void operator()(i64, Acc&) const {}
};

extern "C" __global__ void __launch_bounds__(CFG_MAX_WARPS * 32, CFG_MIN_BLOCKS_PER_SM)
    metcf_spmm_window(const i64* __restrict__ row_window_offset, const i64* __restrict__ tc_offset,
                      const unsigned char* __restrict__ tc_local_id, const uint4* __restrict__ bitmap,
                      const float* __restrict__ frag, const float* __restrict__ data, const int* __restrict__ a_to_b,
                      const float* __restrict__ B,
                      float* __restrict__ C, i64 M, i64 N, int flags) {
  // Warp -> (window, column slice of WARP_N = 32 x CFG_WARP_SLICES): a block holds CFG_WINDOWS_PER_BLOCK
  // consecutive windows x `slices` consecutive slices (blockDim.x = 32 x CFG_WINDOWS_PER_BLOCK x slices, set by
  // kernels/launch.py).
  const int vec_ok = flags & FLAG_VEC;
  const bool add = (flags & FLAG_ADD) != 0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int slices = (int)(blockDim.x >> 5) / CFG_WINDOWS_PER_BLOCK;
  const i64 w = (i64)blockIdx.x * CFG_WINDOWS_PER_BLOCK + warp / slices;
  if (w * CFG_WINDOW_ROWS >= M) return;  // only with CFG_WINDOWS_PER_BLOCK > 1 (no barrier below: v2 only)
  const i64 n0 = ((i64)blockIdx.y * slices + warp % slices) * WARP_N;  // this warp's first column
  Acc acc;  // [slice][n8 tile t][mma D register]: rows g, g+8 x remapped columns (see metcf_tile.cuh)
  zero_acc(acc);
  RUN_PIPELINE(row_window_offset[w], row_window_offset[w + 1], NoFlush());
  const i64 row0 = w * CFG_WINDOW_ROWS;
  store_accs(C + row0 * N, acc, (int)min((i64)CFG_WINDOW_ROWS, M - row0), N, n0, vec_ok != 0, add, lane);
}

#if CFG_A_REGS
#define ACC_REGS (CFG_WARP_SLICES * 16)  // floats of one lane's Acc

// Copy / add one lane's accumulator to or from a shared-memory slot of 32 x ACC_REGS floats ([reg][lane]: the
// 32 lanes of one register hit 32 consecutive words, no bank conflicts).
__device__ __forceinline__ void acc_to_smem(float* __restrict__ slot, const Acc& acc, int lane) {
#pragma unroll
  for (int s = 0; s < CFG_WARP_SLICES; ++s)
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
      for (int r = 0; r < 4; ++r) slot[((s * 4 + t) * 4 + r) * 32 + lane] = acc[s][t][r];
}
__device__ __forceinline__ void acc_add_smem(Acc& acc, const float* __restrict__ slot, int lane) {
#pragma unroll
  for (int s = 0; s < CFG_WARP_SLICES; ++s)
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[s][t][r] += slot[((s * 4 + t) * 4 + r) * 32 + lane];
}

// Split-K window kernel: 1 block = one window x a column chunk, like metcf_spmm_window with one window per block,
// but each column slice gets `ksplit` warps (a power of two, blockDim.x = 32 x slices x ksplit) that take
// contiguous equal shares of the window's TC blocks; their accumulators are then summed by a fixed binary tree in
// shared memory (dynamic, (ksplit / 2) x slices x 32 x ACC_REGS floats), and warp k = 0 of each slice stores.
// For small matrices (fewer windows than the GPU has warp slots) and windows of many blocks (hubs): ksplit times
// the warps on the same work, no workspace and no second pass. Deterministic: the shares and the tree depend only
// on the window's block count and ksplit, so two calls give bit-identical C.
extern "C" __global__ void __launch_bounds__(CFG_SPLIT_MAX_WARPS * 32, 1)
    metcf_spmm_split(const i64* __restrict__ row_window_offset, const i64* __restrict__ tc_offset,
                     const unsigned char* __restrict__ tc_local_id, const uint4* __restrict__ bitmap,
                     const float* __restrict__ frag, const float* __restrict__ data, const int* __restrict__ a_to_b,
                     const float* __restrict__ B, float* __restrict__ C, i64 M, i64 N, int flags, int ksplit) {
  extern __shared__ float red[];
  const int vec_ok = flags & FLAG_VEC;
  const bool add = (flags & FLAG_ADD) != 0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int slices = (int)(blockDim.x >> 5) / ksplit;
  const int slice = warp % slices, k = warp / slices;
  const i64 w = blockIdx.x;
  const i64 n0 = ((i64)blockIdx.y * slices + slice) * WARP_N;
  const i64 rb = row_window_offset[w], len = row_window_offset[w + 1] - rb;
  Acc acc;
  zero_acc(acc);
  RUN_PIPELINE(rb + len * k / ksplit, rb + len * (k + 1) / ksplit, NoFlush());
  // Tree: at step h (ksplit/2, ..., 1), warps h..2h-1 hand their sums to warps 0..h-1 (slot (k - h) x slices +
  // slice). No warp leaves before the last barrier.
  for (int h = ksplit >> 1; h >= 1; h >>= 1) {
    if (k >= h && k < 2 * h) acc_to_smem(red + ((i64)(k - h) * slices + slice) * 32 * ACC_REGS, acc, lane);
    __syncthreads();
    if (k < h) acc_add_smem(acc, red + ((i64)k * slices + slice) * 32 * ACC_REGS, lane);
    __syncthreads();
  }
  if (k == 0) {
    const i64 row0 = w * CFG_WINDOW_ROWS;
    store_accs(C + row0 * N, acc, (int)min((i64)CFG_WINDOW_ROWS, M - row0), N, n0, vec_ok != 0, add, lane);
  }
}
#endif

extern "C" __global__ void __launch_bounds__(CFG_MAX_WARPS * 32, CFG_BALANCED_MIN_BLOCKS_PER_SM)
    metcf_spmm_balanced(const i64* __restrict__ row_window_offset, const i64* __restrict__ tc_offset,
                        const unsigned char* __restrict__ tc_local_id, const uint4* __restrict__ bitmap,
                        const float* __restrict__ frag, const float* __restrict__ data,
                        const int* __restrict__ a_to_b, const i64* __restrict__ item_window,
                        const i64* __restrict__ part_ptr, const float* __restrict__ B, float* __restrict__ C,
                        float* __restrict__ workspace, i64 M, i64 N, i64 n_blocks, int flags) {
  const int vec_ok = flags & FLAG_VEC;
  const bool add = (flags & FLAG_ADD) != 0;  // applies to C only; workspace slots are always overwritten
  const i64 item = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const i64 n0 = ((i64)blockIdx.y * (blockDim.x >> 5) + warp) * WARP_N;
  const i64 b_begin = item * CFG_BLOCKS_PER_ITEM;
  const i64 b_end = min(b_begin + (i64)CFG_BLOCKS_PER_ITEM, n_blocks);
  i64 w = item_window[item];  // window of block b_begin
  i64 w_begin = row_window_offset[w], w_end = row_window_offset[w + 1];
  Acc acc;  // as in metcf_spmm_window
  zero_acc(acc);
  auto flush = [&](i64 b, Acc& a) {
    if (b + 1 != w_end && b + 1 != b_end) return;  // window w continues inside this item
    if (w_begin >= b_begin && w_end <= b_end) {  // the whole window is in this item: write C
      const i64 row0 = w * CFG_WINDOW_ROWS;
      store_accs(C + row0 * N, a, (int)min((i64)CFG_WINDOW_ROWS, M - row0), N, n0, vec_ok != 0, add, lane);
    } else {  // a piece of a split window: its workspace slot, summed later by metcf_combine
      const i64 slot = part_ptr[w] + (item - w_begin / CFG_BLOCKS_PER_ITEM);
      store_accs(workspace + slot * CFG_WINDOW_ROWS * N, a, CFG_WINDOW_ROWS, N, n0, vec_ok != 0, false, lane);
    }
    zero_acc(a);
    if (b + 1 < b_end) {  // advance to the window of block b + 1, skipping windows without blocks
      do { ++w; } while (row_window_offset[w + 1] <= b + 1);
      w_begin = row_window_offset[w];
      w_end = row_window_offset[w + 1];
    }
  };
  RUN_PIPELINE(b_begin, b_end, flush);
}

extern "C" __global__ void __launch_bounds__(CFG_COMBINE_THREADS)
    metcf_combine(const i64* __restrict__ windows, const i64* __restrict__ part_ptr,
                  const float* __restrict__ workspace, float* __restrict__ C, i64 M, i64 N, int flags) {
  const i64 w = windows[blockIdx.x];
  const i64 s0 = part_ptr[w], s1 = part_ptr[w + 1];
  const i64 row0 = w * CFG_WINDOW_ROWS;
  const i64 elems = min((i64)CFG_WINDOW_ROWS, M - row0) * N;  // C[row0 + r][n] at offset r * N + n
  const i64 slot_elems = (i64)CFG_WINDOW_ROWS * N;
  for (i64 e = (i64)blockIdx.y * blockDim.x + threadIdx.x; e < elems; e += (i64)gridDim.y * blockDim.x) {
    float sum = 0.0f;
    for (i64 slot = s0; slot < s1; ++slot) sum += workspace[slot * slot_elems + e];  // slot order: fixed
    C[row0 * N + e] = (flags & FLAG_ADD) ? C[row0 * N + e] + sum : sum;
  }
}

// The per-block occupancy bitmaps of the register pipeline (see metcf_regs.cuh): one thread per block ORs the
// bits of its nonzeros' local ids. Sets *bad = 1 when a block's local ids are not strictly increasing (not
// canonical ME-TCF: the popcount addressing would read the wrong values), so the launcher can refuse the input.
extern "C" __global__ void metcf_bitmap(const i64* __restrict__ tc_offset,
                                        const unsigned char* __restrict__ tc_local_id, uint4* __restrict__ bitmap,
                                        int* __restrict__ bad, i64 n_blocks) {
  for (i64 b = (i64)blockIdx.x * blockDim.x + threadIdx.x; b < n_blocks; b += (i64)gridDim.x * blockDim.x) {
    unsigned w0 = 0u, w1 = 0u, w2 = 0u, w3 = 0u;
    int prev = -1;
    for (i64 i = tc_offset[b], end = tc_offset[b + 1]; i < end; ++i) {
      const int p = tc_local_id[i];
      if (p <= prev || p >= TILE_ELEMS) *bad = 1;
      prev = p;
      const unsigned bit = 1u << (p & 31);
      const int word = p >> 5;
      w0 |= word == 0 ? bit : 0u;
      w1 |= word == 1 ? bit : 0u;
      w2 |= word == 2 ? bit : 0u;
      w3 |= word == 3 ? bit : 0u;
    }
    bitmap[b] = make_uint4(w0, w1, w2, w3);
  }
}

// ---- FP16 / BF16 (mma.m16n8k16, 16-wide ME-TCF): bodies, mapping and contract in metcf_half.cuh -----------------
#include "metcf_half.cuh"

#define HALF_WINDOW_ARGS                                                                                        \
  const i64 *__restrict__ row_window_offset, const uint4 *__restrict__ frag, const int4 *__restrict__ cols,    \
      const u16 *__restrict__ B, void *__restrict__ C, i64 M, i64 N, int flags
extern "C" __global__ void __launch_bounds__(CFG_MAX_WARPS * 32, CFG_HALF_MIN_BLOCKS_PER_SM)
    metcf_half_window_f16(HALF_WINDOW_ARGS, const int* __restrict__ walk) {
  half_window<F16>(row_window_offset, frag, cols, B, C, M, N, flags, walk);
}
extern "C" __global__ void __launch_bounds__(CFG_MAX_WARPS * 32, CFG_HALF_MIN_BLOCKS_PER_SM)
    metcf_half_window_bf16(HALF_WINDOW_ARGS, const int* __restrict__ walk) {
  half_window<BF16>(row_window_offset, frag, cols, B, C, M, N, flags, walk);
}
extern "C" __global__ void __launch_bounds__(CFG_SPLIT_MAX_WARPS * 32, 1)
    metcf_half_split_f16(HALF_WINDOW_ARGS, int ksplit, const int* __restrict__ walk) {
  extern __shared__ float red[];
  half_split<F16>(row_window_offset, frag, cols, B, C, M, N, flags, ksplit, walk, red);
}
extern "C" __global__ void __launch_bounds__(CFG_SPLIT_MAX_WARPS * 32, 1)
    metcf_half_split_bf16(HALF_WINDOW_ARGS, int ksplit, const int* __restrict__ walk) {
  extern __shared__ float red[];
  half_split<BF16>(row_window_offset, frag, cols, B, C, M, N, flags, ksplit, walk, red);
}
