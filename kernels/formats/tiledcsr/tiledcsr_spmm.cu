// C = A @ B for a sparse A (M x K) in Tiled-CSR (Xue et al., ICCD'23: per 16-row group the all-zero columns are
// deleted and the rest cut into 16 x w tiles stored CSR-like) and dense row-major B (K x N):
//   C[16g + r][n] = sum over tiles t of group g, entries p of row r of t: data[p] * B[tile_cols[t][idx[p]]][n],
// FP32 accumulation; w = 8 for TF32 (mma.m16n8k8), 16 for FP16/BF16 (mma.m16n8k16); C float32 or 16-bit.
// Row pieces (kernels/formats/tiledcsr/launch.py `pieces`): piece s = tiles piece_ptr[s] .. piece_ptr[s + 1] - 1 of one
// group. piece_dst[s] = g >= 0: the piece is all of group g, its sum is C rows 16g .. 16g + 15; piece_dst[s] < 0:
// a piece of a split group, its sum goes to workspace tile ~piece_dst[s] (W rows 16 slot .. + 15, float32, no
// FLAG_ADD), and tiledcsr_fixup writes C[16 fix_group[f] + r][n] = (C +) sum over slots s = fix_ptr[f] ..
// fix_ptr[f + 1] - 1 in order of W[16 s + r][n] (so a hub group's tiles are walked by several blocks at once).
//
// Launch mapping (kernels/formats/tiledcsr/launch.py, the paper's 3D-grid tiling): grid = (column chunks per band,
//   piece slots, column bands); blockDim.x = 32 x slices. Column chunk = chunk0 + blockIdx.z x gridDim.x +
//   blockIdx.x; 1 warp = one piece x 64 columns n0 .. n0 + 63 (8 n8 tiles, the register remapping of
//   half_acc.cuh: tile column j of mma tile u is C column n0 + 8j + u); lane l = 4g + q owns C rows g and g + 8.
//   A block walks the pieces blockIdx.y, + gridDim.y, ... as one stream of chunks (<= TCSR_CHUNK consecutive
//   tiles of one piece; an empty group is one empty piece and one empty chunk). Block order is x fastest, then y, then z: with
//   bands > 1 the blocks resident at one time share one band of B (K x band columns, sized to stay in L2) across
//   many row groups and each A tile across the chunks of the band, instead of streaming all of B per row group
//   (the paper's Fig. 7). Two entries per precision: <name> (vec: every warp's 64 columns inside N, FLAG_VEC set;
//   16-byte B loads and C stores) and <name>_edge (element loads and checked stores, any N and alignment; the
//   launcher gives it the partial last column chunk, or every chunk without FLAG_VEC).
// Pipeline, one barrier per chunk, three fragment stages (tiledcsr_tile.cuh's layout): in step i the block zeroes
//   stage (i + 2) % 3 (last read in step i - 1) and scatters chunk i + 1's CSR entries into stage (i + 1) % 3
//   (zeroed in step i - 1), while every warp multiplies chunk i from stage i % 3 (scattered in step i - 1). A
//   warp issues half the B loads of chunk i's first tile before its share of the scatter, so they are in flight
//   during it, then per group of TCSR_UNROLL tiles (1 in the edge kernels) the B loads and the next group's column
//   ids before the mmas, each mma taking its A fragment with one 16-byte shared load.
// Adaptive memory access modes (the paper's section IV-A: the access path of each operand follows its reuse). A
//   tile's entries are reused by every warp of the block: the block reads each tile's CSR from global memory once,
//   cooperatively, and turns it into mma fragments in shared memory, from which each warp takes its fragment with
//   one 16-byte load (the paper copies the LHS into shared memory for this reuse; we copy it already decoded).
//   A B row slice is read by one warp only: B goes straight from global memory into the mma fragments, by 16-byte
//   vector loads where the warp's 64 columns lie inside N and FLAG_VEC holds, element by element otherwise. The
//   previous version switched per tile between staging a tile's raw CSR bytes in shared memory and every lane
//   decoding it from global memory; both had every lane scan two CSR rows per tile behind a serial load chain and
//   a barrier per tile, which is what this design removes.
// Input contract (checked by the launcher): piece_ptr, tile_ptr int64; piece_dst int32; tile_cols int32 [n_tiles][w] (-1 padding,
//   slot 0 never padding); tile_indptr [n_tiles][17] uint8 (TF32) or uint16 (16-bit); tile_indices uint8 [nnz]
//   (< w, distinct within a tile row); data [nnz] (TF32 values already rounded, kernels.launch.tf32_round; 16-bit
//   raw, bfloat16 as bits). No byte past any array's end is read. B and C row-major; FLAG_VEC only when N % 8 == 0
//   (16-bit) or N % 4 == 0 (TF32) and B, C are 16-byte aligned; the vec entries also need it. Rows >= M and
//   columns >= N of C are never written; every other element is, by one warp (or one fixup thread), after the
//   fixed-order sum over its group's tiles (of a split group: over each piece's tiles, then over the pieces): no
//   atomics, bitwise repeatable for any grid, chunk size, unroll, row slots or warp count given the same pieces.
//   W: float32 [16 x slots][N], 16-byte aligned.
// Compile-time constants: kernels/formats/tiledcsr/launch.py TiledConfig.defines(); these defaults equal TiledConfig's.
#ifndef TCSR_MAX_WARPS
#define TCSR_MAX_WARPS 8
#define TCSR_CHUNK 16
#define TCSR_UNROLL 2
#define TCSR_MIN_BLOCKS_PER_SM 2
#endif
static_assert(TCSR_MAX_WARPS >= 1 && TCSR_MAX_WARPS <= 8, "TiledConfig.max_warps must be 1..8");
static_assert(TCSR_CHUNK >= 2 && TCSR_CHUNK <= 16, "TiledConfig.chunk_tiles must be 2..16 (3 stages of 512 B each)");
static_assert(TCSR_UNROLL >= 1 && TCSR_UNROLL <= 4, "TiledConfig.unroll must be 1..4");

#define FLAG_VEC 1  // 16-byte B loads and C stores (see the contract)
#define FLAG_ADD 2  // C += A @ B (added in fp32, rounded once)
#include "half_acc.cuh"  // tc_ops.cuh; FLAG_OUT16, HALF_WARP_COLS, HalfAcc, mma_block, half_zero, half_store
#include "tiledcsr_tile.cuh"  // Traits, fragment stages, scatter_chunk, load_cols, load_b, tile_mma

// One chunk of the block's stream: tiles [t0, t0 + nt) of piece g, followed by `rest` more tiles of that piece
// (rest == 0: the piece's last chunk; K <= INT32_MAX columns keep a piece's tile count in int). g >= n_groups (the
// piece count): past the stream's end (nt = 0).
struct Chunk {
  i64 g, t0;
  int nt, rest;
};
__device__ __forceinline__ Chunk group_chunk(const i64* __restrict__ group_ptr, i64 g, i64 n_groups) {
  if (g >= n_groups) return Chunk{g, 0, 0, 0};
  const i64 t0 = group_ptr[g];
  const int len = (int)(group_ptr[g + 1] - t0), nt = min(len, TCSR_CHUNK);
  return Chunk{g, t0, nt, len - nt};
}
__device__ __forceinline__ Chunk next_chunk(const Chunk& c, const i64* __restrict__ group_ptr, i64 n_groups) {
  if (c.rest > 0) {
    const int nt = min(c.rest, TCSR_CHUNK);
    return Chunk{c.g, c.t0 + c.nt, nt, c.rest - nt};
  }
  return group_chunk(group_ptr, c.g + gridDim.y, n_groups);
}

// Per warp (FAST: 16-byte B loads, TCSR_UNROLL tiles per group; else element loads, one tile per group: with 2,
// nvcc 13.0 spills 40 B in the 16-bit edge kernels). `cols` holds the B rows of the chunk's first U tiles on entry,
// of the next chunk's first U tiles on exit.
template <int KIND, bool FAST>
struct WarpTiles {
  static constexpr int U = FAST ? TCSR_UNROLL : 1;
  // Half the B loads of the chunk's first tile are in flight during the scatter (all of them: 8 more registers
  // there, and nvcc 13.0 spills 16 B in the 16-bit vec kernels at the 128 of __launch_bounds__).
  static constexpr bool PRE = FAST;
  // pre[0..1] = half the B values of chunk c's first tile: issued before the block's scatter of the next chunk.
  static __device__ __forceinline__ void first_loads(uint4 (&pre)[4], const int4 (&cols)[TCSR_UNROLL],
                                                     const Chunk& c, const void* __restrict__ B, i64 N, i64 n_lane,
                                                     int avail) {
    if (PRE && c.nt > 0) load_b_half<KIND, FAST, 0>(pre, cols[0], B, N, n_lane, avail);
  }
  // acc += tiles c.t0 + i .. + U - 1 (those < c.nt): the B loads (FIRST: tile 0's from pre) and the next group's
  // columns before the mmas. r is local to the group, so no B registers live across groups or the scatter.
  template <bool FIRST>
  static __device__ __forceinline__ void group(HalfAcc& acc, const uint4 (&pre)[4], int4 (&cols)[TCSR_UNROLL],
                                               const uint4* st, const Chunk& c, int i,
                                               const int* __restrict__ tile_cols, const void* __restrict__ B, i64 N,
                                               i64 n_lane, int avail, int lane) {
    uint4 r[U][4];  // [u][k]: B values of tile c.t0 + i + u (load_b)
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (i + u < c.nt) {
        if (PRE && FIRST && u == 0) {
          r[0][0] = pre[0], r[0][1] = pre[1];
          load_b_half<KIND, FAST, 1>(r[0], cols[0], B, N, n_lane, avail);
        } else {
          load_b<KIND, FAST>(r[u], cols[u], B, N, n_lane, avail);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)  // the next group's columns
      if (i + U + u < c.nt) cols[u] = load_cols<KIND>(tile_cols, c.t0 + i + U + u, lane);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i + u < c.nt) tile_mma<KIND>(acc, st[(i + u) * FRAG_LANES + lane], r[u]);  // A: one 16-byte load
  }
  // acc += chunk c's tiles (fragments in stage st) in tile order.
  static __device__ __forceinline__ void multiply(HalfAcc& acc, const uint4 (&pre)[4], int4 (&cols)[TCSR_UNROLL],
                                                  const uint4* st, const Chunk& c, const int* __restrict__ tile_cols,
                                                  const void* __restrict__ B, i64 N, i64 n_lane, int avail,
                                                  int lane) {
    if (c.nt > 0) group<true>(acc, pre, cols, st, c, 0, tile_cols, B, N, n_lane, avail, lane);
#pragma unroll 1
    for (int i = U; i < c.nt; i += U)  // uniform across the warp
      group<false>(acc, pre, cols, st, c, i, tile_cols, B, N, n_lane, avail, lane);
  }
  // cols = the B rows of chunk c's first U tiles.
  static __device__ __forceinline__ void first_cols(int4 (&cols)[TCSR_UNROLL], const Chunk& c,
                                                    const int* __restrict__ tile_cols, int lane) {
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (u < c.nt) cols[u] = load_cols<KIND>(tile_cols, c.t0 + u, lane);
  }
};

// The kernel body. FAST (the launcher's vec kernels): every warp's 64 columns lie inside N and FLAG_VEC holds.
// Else (the edge kernels) every warp takes the checked path; warps past N have avail = 0: no B loads, zero
// products, and half_store writes nothing at columns >= N. Two entries rather than a block-uniform branch: one
// function holding both pipelines spills at the 128 registers of __launch_bounds__, each alone does not.
// group_ptr / n_groups below are the pieces' (piece_ptr / n_pieces): the chunk walk is the same.
template <int KIND, bool FAST>
__device__ __forceinline__ void tiledcsr_spmm(const i64* __restrict__ group_ptr, const int* __restrict__ piece_dst,
                                              const i64* __restrict__ tile_ptr,
                                              const int* __restrict__ tile_cols, const char* __restrict__ rp_bytes,
                                              const u8* __restrict__ idx, const char* __restrict__ data,
                                              const void* __restrict__ B, void* __restrict__ C,
                                              float* __restrict__ work, i64 n_groups, i64 M, i64 N, i64 chunk0,
                                              int flags) {
  typedef WarpTiles<KIND, FAST> W;
  __shared__ uint4 stage[3][TCSR_CHUNK * FRAG_LANES];  // [stage][tile of the chunk x 32 lanes]: A fragments
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, slices = (int)(blockDim.x >> 5);
  const i64 chunk_n0 = (chunk0 + (i64)blockIdx.z * gridDim.x + blockIdx.x) * slices * HALF_WARP_COLS;
  Chunk c = group_chunk(group_ptr, blockIdx.y, n_groups);
  // Uniform, before any barrier: a block past N (the last band's spare chunks), or a vec block over the partial
  // last chunk (the edge kernel's, launched apart), or past the row groups.
  if (chunk_n0 >= N || (FAST && chunk_n0 + slices * HALF_WARP_COLS > N) || c.g >= n_groups) return;
  const i64 n0 = chunk_n0 + (i64)warp * HALF_WARP_COLS, n_lane = n0 + 8 * (lane >> 2);
  const int avail = (int)max((i64)0, min((i64)8, N - n_lane));
  const auto* rp = reinterpret_cast<const typename Traits<KIND>::RP*>(rp_bytes);
  int4 cols[TCSR_UNROLL];  // [u]: B rows of the current chunk's tile t0 + u (load_cols)
  uint4 pre[4];  // [0..1]: B values of the current chunk's first tile, loaded during the scatter (first_loads)
  zero_stage(stage[0]);
  zero_stage(stage[1]);
  __syncthreads();  // stages 0 and 1 are zero
  scatter_chunk<KIND>(stage[0], c.t0, c.nt, tile_ptr, rp, idx, data);
  W::first_cols(cols, c, tile_cols, lane);
  __syncthreads();  // stage 0 holds chunk 0
  HalfAcc acc;
  half_zero(acc);
  for (int s = 0;; s = s == 2 ? 0 : s + 1) {  // s = step % 3
    W::first_loads(pre, cols, c, B, N, n_lane, avail);
    zero_stage(stage[s == 0 ? 2 : s - 1]);  // (s + 2) % 3
    {
      const Chunk next = next_chunk(c, group_ptr, n_groups);  // recomputed below: fewer registers in multiply
      if (next.g < n_groups)
        scatter_chunk<KIND>(stage[s == 2 ? 0 : s + 1], next.t0, next.nt, tile_ptr, rp, idx, data);
    }
    W::multiply(acc, pre, cols, stage[s], c, tile_cols, B, N, n_lane, avail, lane);
    if (c.rest == 0) {  // the piece's last chunk: its rows are complete; one half_store call site (registers)
      const int dst = __ldg(piece_dst + c.g);  // >= 0: the group, into C; < 0: ~slot, a float32 tile of W
      const i64 row0 = (i64)(dst >= 0 ? dst : ~dst) * ROWS;
      half_store<KIND>(dst >= 0 ? C : static_cast<void*>(work), acc, row0,
                               dst >= 0 ? (int)min((i64)ROWS, M - row0) : ROWS, N, n0, FAST,
                               dst >= 0 ? flags : flags & FLAG_VEC);
      half_zero(acc);
    }
    const Chunk next = next_chunk(c, group_ptr, n_groups);
    if (next.g >= n_groups) break;  // uniform
    W::first_cols(cols, next, tile_cols, lane);  // in flight across the barrier
    __syncthreads();  // stage (s + 1) % 3 holds the next chunk; nobody reads stage s any more
    c = next;
  }
}

#define TCSR_ENTRY(NAME, KIND, FAST)                                                                               \
  extern "C" __global__ void __launch_bounds__(32 * TCSR_MAX_WARPS, TCSR_MIN_BLOCKS_PER_SM)                      \
      NAME(const i64* __restrict__ piece_ptr, const int* __restrict__ piece_dst, const i64* __restrict__ tile_ptr, \
           const int* __restrict__ tile_cols, const char* __restrict__ tile_indptr,                                \
           const u8* __restrict__ tile_indices, const char* __restrict__ data, const void* __restrict__ B,         \
           void* __restrict__ C, float* __restrict__ W, i64 n_pieces, i64 M, i64 N, i64 chunk0, int flags) {      \
    tiledcsr_spmm<KIND, FAST>(piece_ptr, piece_dst, tile_ptr, tile_cols, tile_indptr, tile_indices, data, B, C, W, \
                              n_pieces, M, N, chunk0, flags);                                                      \
  }
TCSR_ENTRY(tiledcsr_spmm_tf32, TF32, true)
TCSR_ENTRY(tiledcsr_spmm_f16, F16, true)
TCSR_ENTRY(tiledcsr_spmm_bf16, BF16, true)
TCSR_ENTRY(tiledcsr_spmm_tf32_edge, TF32, false)
TCSR_ENTRY(tiledcsr_spmm_f16_edge, F16, false)
TCSR_ENTRY(tiledcsr_spmm_bf16_edge, BF16, false)

// The fixup of split groups. Launch mapping (launch_tiledcsr.fixup_grid): grid = (column blocks, split-group
// slots); thread = one column n of C, the split groups blockIdx.y, + gridDim.y, ..., rows in a loop. The store is
// half_store's: FLAG_ADD reads the old value once and adds it in fp32, FLAG_OUT16 rounds once; columns >= N and
// rows >= M are never written, and no element of C is written by the main kernels for these groups.
template <int KIND>
__device__ __forceinline__ void tiledcsr_fixup(const float* __restrict__ W, const int* __restrict__ fix_group,
                                               const int* __restrict__ fix_ptr, void* __restrict__ C, i64 n_fix,
                                               i64 M, i64 N, int flags) {
  const i64 n = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  for (i64 f = blockIdx.y; f < n_fix; f += gridDim.y) {
    const i64 row0 = (i64)fix_group[f] * ROWS;
    const int s0 = fix_ptr[f], s1 = fix_ptr[f + 1], rows = (int)min((i64)ROWS, M - row0);
    for (int r = 0; r < rows; ++r) {
      float v = W[((i64)s0 * ROWS + r) * N + n];
      for (int s = s0 + 1; s < s1; ++s) v += W[((i64)s * ROWS + r) * N + n];  // piece order
      const i64 off = (row0 + r) * N + n;
      if (flags & FLAG_OUT16) {
        u16* out = static_cast<u16*>(C) + off;
        *out = from_f32<KIND>((flags & FLAG_ADD) ? v + to_f32<KIND>(*out) : v);
      } else {
        float* out = static_cast<float*>(C) + off;
        *out = (flags & FLAG_ADD) ? v + *out : v;
      }
    }
  }
}
#define TCSR_FIXUP(NAME, KIND)                                                                                     \
  extern "C" __global__ void NAME(const float* __restrict__ W, const int* __restrict__ fix_group,                 \
                                  const int* __restrict__ fix_ptr, void* __restrict__ C, i64 n_fix, i64 M, i64 N,  \
                                  int flags) {                                                                     \
    tiledcsr_fixup<KIND>(W, fix_group, fix_ptr, C, n_fix, M, N, flags);                                            \
  }
TCSR_FIXUP(tiledcsr_fixup_f32, TF32)  // TF32: float32 C only (the launcher refuses a 16-bit C)
TCSR_FIXUP(tiledcsr_fixup_f16, F16)
TCSR_FIXUP(tiledcsr_fixup_bf16, BF16)
