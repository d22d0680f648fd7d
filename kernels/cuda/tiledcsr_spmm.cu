// C = A @ B for a sparse A (M x K) in Tiled-CSR (Xue et al., ICCD'23: per 16-row group the all-zero columns are
// deleted and the rest cut into 16 x w tiles stored CSR-like) and dense row-major B (K x N):
//   C[16g + r][n] = sum over tiles t of group g, entries p of row r of t: data[p] * B[tile_cols[t][idx[p]]][n],
// FP32 accumulation; w = 8 for TF32 (mma.m16n8k8), 16 for FP16/BF16 (mma.m16n8k16); C float32 or 16-bit.
//
// Launch mapping (kernels/launch_tiledcsr.py, the paper's 3D-grid tiling): grid = (column chunks per band,
//   row-group slots, column bands); blockDim.x = 32 x slices. Column chunk = blockIdx.z x gridDim.x + blockIdx.x;
//   1 warp = one row group x 64 columns n0 .. n0 + 63 (8 n8 tiles, the register remapping of metcf_half.cuh:
//   tile column j of mma tile u is C column n0 + 8j + u); lane l = 4g + q owns C rows g and g + 8. Blocks walk the
//   row groups blockIdx.y, + gridDim.y, ... Block order is x fastest, then y, then z: with bands > 1 the blocks
//   resident at one time share one band of B (K x band columns, sized to stay in L2) across many row groups and
//   each A tile across the chunks of the band, instead of streaming all of B per row group (the paper's Fig. 7).
// Adaptive memory access modes (the paper's section IV-A), per tile, block-uniform: a tile's CSR (values, column
//   slots, row pointers) is reused by every warp of the block that has columns (active_warps). When
//   active_warps >= 2 and the tile holds >= TCSR_STAGE_MIN_NNZ entries, the block copies its bytes once into shared
//   memory with cp.async (4-byte words, double-buffered: the next tile's copy runs while this one multiplies) and
//   every warp decodes its A fragment there; otherwise (one warp per block, or a tile too small to be worth a
//   barrier) each warp decodes straight from global memory. B (low reuse: each B row slice is read by one warp per
//   tile) always goes straight from global memory into the mma fragments (16-byte loads, byte-permute pairing).
// Input contract (checked by the launcher): group_ptr, tile_ptr int64; tile_cols int32 [n_tiles][w] (-1 padding,
//   slot 0 never padding); tile_indptr [n_tiles][17] uint8 (TF32) or uint16 (16-bit); tile_indices uint8 [nnz];
//   data [nnz] (TF32 values already rounded, kernels.launch.tf32_round; 16-bit raw, bfloat16 as bits); every one
//   of the four per-tile / per-nonzero arrays padded with >= 4 readable bytes past its end (the word copies round
//   out). B and C row-major; FLAG_VEC only when N % 8 == 0 (16-bit) or N % 4 == 0 (TF32) and B, C are 16-byte
//   aligned. Rows >= M and columns >= N of C are never written; every other element is, by one warp: no atomics.
// Compile-time constants: kernels/launch_tiledcsr.py TiledConfig.defines() (with kernels/config.py's, which
// metcf_half.cuh checks); kernels/compile_check.py passes only config.py's, so these defaults equal TiledConfig's.
#ifndef TCSR_MAX_WARPS
#define TCSR_MAX_WARPS 8
#define TCSR_STAGE_MIN_NNZ 16
#define TCSR_MIN_BLOCKS_PER_SM 2
#endif
static_assert(TCSR_MAX_WARPS >= 1 && TCSR_MAX_WARPS <= 8, "TiledConfig.max_warps must be 1..8");
static_assert(TCSR_STAGE_MIN_NNZ >= 1, "TiledConfig.stage_min_nnz must be >= 1");

#define FLAG_VEC 1  // 16-byte B loads and C stores (see the contract)
#define FLAG_ADD 2  // C += A @ B (added in fp32, rounded once)
#include "metcf_half.cuh"  // FLAG_OUT16, HalfAcc, mma_16816, load_row8, mma_block, half_zero, half_store
static_assert(CFG_HALF_WARP_COLS == 64, "a warp covers 64 columns: the 8 remapped n8 tiles of half_store");

typedef unsigned char u8;
enum Kind { TF32 = 0, F16 = 1, BF16 = 2 };
template <int KIND> struct Traits;  // W: tile width (the mma's k); VB: bytes per value; RP: local row pointer type
template <> struct Traits<TF32> { static constexpr int W = 8, VB = 4; typedef u8 RP; };
template <> struct Traits<F16> { static constexpr int W = 16, VB = 2; typedef u16 RP; };
template <> struct Traits<BF16> : Traits<F16> {};

#define ROWS 16
#define RP_LEN (ROWS + 1)
// One stage: a tile's bytes rounded out to 4-byte words. data <= 512 B -> <= 129 words; indices <= 256 B -> <= 65
// words; row pointers <= 34 B -> <= 10 words.
#define DATA_OFF 0
#define IDX_OFF 528
#define RP_OFF 800
#define STAGE_BYTES 848
static_assert(16 * 16 * 2 + 4 <= IDX_OFF && IDX_OFF + 256 + 4 <= RP_OFF && RP_OFF + 2 * RP_LEN + 4 <= STAGE_BYTES,
              "stage sections must hold a full tile's words");

__device__ __forceinline__ unsigned tcsr_smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
// Plain equivalent: *(unsigned*)dst = *(const unsigned*)src, asynchronously (cp.async.ca, 4 bytes).
__device__ __forceinline__ void tcsr_cp4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(tcsr_smem(dst)), "l"(src));
}
// Plain equivalents: close this thread's group of copies; wait until at most N groups are in flight.
__device__ __forceinline__ void tcsr_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void tcsr_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Plain equivalent (D 16 x 8, A 16 x 8, Bt 8 x 8): D[i][j] += sum_k A[i][k] Bt[k][j] in TF32 products, fp32 sums;
// a = {A[g][q], A[g+8][q], A[g][q+4], A[g+8][q+4]}, b0 = Bt[q][g], b1 = Bt[q+4][g].
__device__ __forceinline__ void mma_1688(float (&d)[4], const uint4& a, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}
// Plain equivalent: x rounded to TF32 (10 mantissa bits), ties away from zero.
__device__ __forceinline__ unsigned tcsr_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// Byte ranges of tile t's three pieces in global memory: [begin, end) of data, tile_indices, tile_indptr.
template <int KIND>
__device__ __forceinline__ void tile_bytes(i64 t, i64 p0, i64 p1, i64 (&b0)[3], i64 (&b1)[3]) {
  constexpr int VB = Traits<KIND>::VB, RB = (int)sizeof(typename Traits<KIND>::RP);
  b0[0] = p0 * VB, b1[0] = p1 * VB;
  b0[1] = p0, b1[1] = p1;
  b0[2] = t * RP_LEN * RB, b1[2] = (t + 1) * RP_LEN * RB;
}

// The whole block copies tile t's words into stage st (section s at its offset + (begin % 4) bytes).
template <int KIND>
__device__ __forceinline__ void stage_tile(char* st, i64 t, i64 p0, i64 p1, const char* __restrict__ data,
                                           const u8* __restrict__ idx, const char* __restrict__ rp) {
  i64 b0[3], b1[3];
  tile_bytes<KIND>(t, p0, p1, b0, b1);
  const char* src[3] = {data, (const char*)idx, rp};
  const int off[3] = {DATA_OFF, IDX_OFF, RP_OFF};
#pragma unroll
  for (int s = 0; s < 3; ++s) {
    const i64 w0 = b0[s] >> 2, nw = ((b1[s] + 3) >> 2) - w0;
    for (int i = threadIdx.x; i < nw; i += blockDim.x) tcsr_cp4(st + off[s] + 4 * i, src[s] + 4 * (w0 + i));
  }
}

// This lane's A fragment of one tile from its CSR (vals, idx, rp point at the tile's entry 0 / row pointer 0, in
// global or shared memory). Lane (g, q) scans rows g and g + 8 and keeps the columns it owns: TF32 q and q + 4
// (register h + 2 (c / 4)); 16-bit 2q, 2q+1, 2q+8, 2q+9 (register h + 2 (c / 8), high half for odd c).
template <int KIND>
__device__ __forceinline__ uint4 decode(const char* vals, const u8* idx, const typename Traits<KIND>::RP* rp,
                                        int lane) {
  const int g = lane >> 2, q = lane & 3;
  unsigned a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int lo = rp[g + 8 * h], hi = rp[g + 8 * h + 1];
    for (int p = lo; p < hi; ++p) {
      const int c = idx[p];
      unsigned v;
      int reg;
      if constexpr (KIND == TF32) {
        if ((c & 3) != q) continue;
        v = *(const unsigned*)(vals + 4 * p), reg = h + 2 * (c >> 2);
      } else {
        if (((c >> 1) & 3) != q) continue;
        v = (unsigned)*(const u16*)(vals + 2 * p) << (16 * (c & 1)), reg = h + 2 * (c >> 3);
      }
      a0 |= reg == 0 ? v : 0u, a1 |= reg == 1 ? v : 0u, a2 |= reg == 2 ? v : 0u, a3 |= reg == 3 ? v : 0u;
    }
  }
  return make_uint4(a0, a1, a2, a3);
}

// acc[u] += A tile x B rows of its columns, columns n0 + 8j + u (16-bit: 4 B rows per lane, 16 bytes each).
template <bool IS_BF16>
__device__ __forceinline__ void tile_mma_half(HalfAcc& acc, const uint4& a, const int* __restrict__ tc, i64 t,
                                              const u16* __restrict__ B, i64 N, i64 n0, bool fast, int lane) {
  const int q = lane & 3, first = __ldg(tc + 16 * t);
  const int2 lo = __ldg(reinterpret_cast<const int2*>(tc + 16 * t) + q);      // slots 2q, 2q + 1
  const int2 hi = __ldg(reinterpret_cast<const int2*>(tc + 16 * t + 8) + q);  // slots 2q + 8, 2q + 9
  const int col[4] = {lo.x < 0 ? first : lo.x, lo.y < 0 ? first : lo.y, hi.x < 0 ? first : hi.x,
                      hi.y < 0 ? first : hi.y};  // padding -> the first column (A is zero there)
  const i64 n_lane = n0 + 8 * (lane >> 2);
  const int avail = (int)max((i64)0, min((i64)8, N - n_lane));
  uint4 r[4];  // [k]: 8 values of B row col[k] from column n_lane
#pragma unroll
  for (int k = 0; k < 4; ++k) r[k] = fast ? load_row8<true>(B, col[k], N, n_lane, 8)
                                          : load_row8<false>(B, col[k], N, n_lane, avail);
  mma_block<IS_BF16>(acc, a, r);
}

// TF32: 2 B rows per lane (slots q, q + 4), 8 floats each; b0 / b1 of mma tile u = value u of each row.
__device__ __forceinline__ void tile_mma_tf32(HalfAcc& acc, const uint4& a, const int* __restrict__ tc, i64 t,
                                              const float* __restrict__ B, i64 N, i64 n0, bool fast, int lane) {
  const int q = lane & 3, first = __ldg(tc + 8 * t);
  const int c0 = __ldg(tc + 8 * t + q), c1 = __ldg(tc + 8 * t + q + 4);
  const float* r0 = B + (i64)(c0 < 0 ? first : c0) * N;
  const float* r1 = B + (i64)(c1 < 0 ? first : c1) * N;
  const i64 n_lane = n0 + 8 * (lane >> 2);
  float x0[8], x1[8];  // [u]: B[col][n_lane + u]
  if (fast) {
    const float4 u0 = __ldg(reinterpret_cast<const float4*>(r0 + n_lane));
    const float4 u1 = __ldg(reinterpret_cast<const float4*>(r0 + n_lane + 4));
    const float4 v0 = __ldg(reinterpret_cast<const float4*>(r1 + n_lane));
    const float4 v1 = __ldg(reinterpret_cast<const float4*>(r1 + n_lane + 4));
    x0[0] = u0.x, x0[1] = u0.y, x0[2] = u0.z, x0[3] = u0.w, x0[4] = u1.x, x0[5] = u1.y, x0[6] = u1.z, x0[7] = u1.w;
    x1[0] = v0.x, x1[1] = v0.y, x1[2] = v0.z, x1[3] = v0.w, x1[4] = v1.x, x1[5] = v1.y, x1[6] = v1.z, x1[7] = v1.w;
  } else {
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      x0[u] = n_lane + u < N ? __ldg(r0 + n_lane + u) : 0.f;
      x1[u] = n_lane + u < N ? __ldg(r1 + n_lane + u) : 0.f;
    }
  }
#pragma unroll
  for (int u = 0; u < 8; ++u) mma_1688(acc[u], a, tcsr_tf32(x0[u]), tcsr_tf32(x1[u]));
}

template <int KIND>
__device__ __forceinline__ void tiledcsr_spmm(const i64* __restrict__ group_ptr, const i64* __restrict__ tile_ptr,
                                              const int* __restrict__ tile_cols, const char* __restrict__ rp_bytes,
                                              const u8* __restrict__ idx, const char* __restrict__ data,
                                              const void* __restrict__ B, void* __restrict__ C, i64 n_groups, i64 M,
                                              i64 N, int flags) {
  typedef typename Traits<KIND>::RP RP;
  constexpr int VB = Traits<KIND>::VB;
  __shared__ __align__(16) char stage[2][STAGE_BYTES];  // [buffer][data | indices | row pointers]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, slices = (int)(blockDim.x >> 5);
  const i64 chunk_n0 = ((i64)blockIdx.z * gridDim.x + blockIdx.x) * slices * CFG_HALF_WARP_COLS;
  if (chunk_n0 >= N) return;  // a whole block past N (the last band's spare chunks): uniform, before any barrier
  const i64 n0 = chunk_n0 + (i64)warp * CFG_HALF_WARP_COLS;
  const bool active = n0 < N, fast = (flags & FLAG_VEC) && n0 + CFG_HALF_WARP_COLS <= N;
  const i64 active_warps = min((i64)slices, (N - chunk_n0 + CFG_HALF_WARP_COLS - 1) / CFG_HALF_WARP_COLS);
  const bool may_stage = active_warps >= 2;  // the A reuse inside this block; uniform
  const RP* rp = reinterpret_cast<const RP*>(rp_bytes);
  for (i64 g = blockIdx.y; g < n_groups; g += gridDim.y) {
    HalfAcc acc;
    half_zero(acc);
    const i64 t_lo = group_ptr[g], t_hi = group_ptr[g + 1];
    if (may_stage && t_lo < t_hi) {
      const i64 p0 = tile_ptr[t_lo], p1 = tile_ptr[t_lo + 1];
      if (p1 - p0 >= TCSR_STAGE_MIN_NNZ) stage_tile<KIND>(stage[0], t_lo, p0, p1, data, idx, rp_bytes);
      tcsr_commit();
    }
    for (i64 t = t_lo; t < t_hi; ++t) {
      const i64 p0 = tile_ptr[t], p1 = tile_ptr[t + 1];
      const bool staged = may_stage && p1 - p0 >= TCSR_STAGE_MIN_NNZ;
      char* st = stage[(t - t_lo) & 1];
      if (may_stage) {  // prefetch tile t + 1 into the other buffer, then wait for tile t's copies
        if (t + 1 < t_hi) {
          const i64 q1 = tile_ptr[t + 2];
          if (q1 - p1 >= TCSR_STAGE_MIN_NNZ) stage_tile<KIND>(stage[(t + 1 - t_lo) & 1], t + 1, p1, q1, data, idx,
                                                               rp_bytes);
        }
        tcsr_commit();
        tcsr_wait<1>();
        __syncthreads();  // every thread's words of tile t are in st
      }
      if (active) {
        i64 b0[3], b1[3];
        tile_bytes<KIND>(t, p0, p1, b0, b1);
        const uint4 a = staged ? decode<KIND>(st + DATA_OFF + (b0[0] & 3), (const u8*)(st + IDX_OFF + (b0[1] & 3)),
                                              (const RP*)(st + RP_OFF + (b0[2] & 3)), lane)
                               : decode<KIND>(data + p0 * VB, idx + p0, rp + t * RP_LEN, lane);
        if constexpr (KIND == TF32) tile_mma_tf32(acc, a, tile_cols, t, (const float*)B, N, n0, fast, lane);
        else tile_mma_half<KIND == BF16>(acc, a, tile_cols, t, (const u16*)B, N, n0, fast, lane);
      }
      if (may_stage) __syncthreads();  // st is refilled two tiles later: everyone has decoded it
    }
    if (active) half_store<KIND == BF16>(C, acc, g * ROWS, (int)min((i64)ROWS, M - g * ROWS), N, n0, fast, flags);
  }
}

#define TCSR_ENTRY(NAME, KIND)                                                                                     \
  extern "C" __global__ void __launch_bounds__(32 * TCSR_MAX_WARPS, TCSR_MIN_BLOCKS_PER_SM)                      \
      NAME(const i64* __restrict__ group_ptr, const i64* __restrict__ tile_ptr, const int* __restrict__ tile_cols, \
           const char* __restrict__ tile_indptr, const u8* __restrict__ tile_indices, const char* __restrict__ data, \
           const void* __restrict__ B, void* __restrict__ C, i64 n_groups, i64 M, i64 N, int flags) {              \
    tiledcsr_spmm<KIND>(group_ptr, tile_ptr, tile_cols, tile_indptr, tile_indices, data, B, C, n_groups, M, N,     \
                        flags);                                                                                    \
  }
TCSR_ENTRY(tiledcsr_spmm_tf32, TF32)
TCSR_ENTRY(tiledcsr_spmm_f16, F16)
TCSR_ENTRY(tiledcsr_spmm_bf16, BF16)
