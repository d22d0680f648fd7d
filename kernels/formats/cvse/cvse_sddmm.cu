// SDDMM on a CVSE pattern S (M x K, V x 1 vectors, V in {2, 4, 8, 16}): out[b][v] = data[b][v] *
// sum_k A[V*i + v][k] * B[indices[b]][k] for vector b of vector row i, i.e. ((A @ B^T) (.) S) at S's vectors;
// A [M, Kd], B [K, Kd] row-major, FP16/BF16 (m16n8k16) or TF32 (m16n8k8) products, FP32 sums, out float32.
// (VectorSparse, SC'21 section 6.4: a warp tile of TileN = 32 vectors x V rows of A, K walked in 64-feature steps.)
//
// Transpose mapping (as cvse_spmm.cu): D^T = B_sel A_rows^T, the mma's m16 runs over 16 vectors of one vector row
// (B rows gathered by their indices), its n8 over the vector row's V rows of A (V = 16: two n8 tiles sharing the
// mma A fragment of B rows), its k over Kd. Both operands read the reduction dimension in the same permuted order,
// so every lane loads contiguous 16-byte pieces: lane (g = lane/4, q = lane%4) of a 32-feature chunk k0 (f16)
// loads features k0 + 8q .. 8q+7 of B rows of vectors g and g + 8 and of A row 8h + g; mma s (0, 1) takes its
// k slots 2q, 2q+1 from features 8q + 4s, +1 and slots 2q+8, 2q+9 from 8q + 4s + 2, +3, i.e. words 2s and 2s + 1
// of each 16-byte piece. TF32 (16-feature chunks): features k0 + 4q .. 4q+3; mma s takes slot q from feature
// 4q + 2s and slot q + 4 from 4q + 2s + 1. Over q the slots of one mma cover 16 (8) distinct features, and the
// two mma the whole chunk.
//
// Warp tile: G = CVSE_SDDMM_GROUPS consecutive 16-vector groups (G = 2: the paper's TileN = 32) share each A piece
// (loaded, and for TF32 rounded, once per warp for G groups instead of once per group: 1/(2G + 1) of the loads at
// V <= 8 instead of 1/3). One step = U chunks: every lane issues all U x (2G + NH) 16-byte loads of the step before
// its first mma (U = CVSE_SDDMM_LOADS / (2G + NH): 4 chunks at G = 2, V <= 8, i.e. TF32 64 features = 256 bytes
// per row per step, 20 loads in flight per lane where the one-chunk loop had 3 and waited one memory latency per
// chunk: TF32 at Kd = 256 took 16 round trips per group, now 4). The raw bits are loaded first and rounded
// (cvt.rna) only at their mma, so no conversion sits between two loads. Chunks wholly past Kd are skipped
// (warp-uniform), so each output sees the mma sequence chunk 0, 1, ... (s = 0, 1) of the one-chunk loop: the same
// fp32 sums in the same order for every G and U.
//
// Launch mapping (kernels/formats/cvse/launch.py sddmm_grid): grid = (n_vec_rows, chunks); blockDim.x = 32 x W; warp w of
// block (i, y) takes the 16G-vector tiles t = y W + w, + gridDim.y W, ... of vector row i. Lane (g, q) writes
// out[b][v] for b = tile vectors 16j + g and 16j + g + 8 (j < G), v = 8h + 2q, +1 (< V), as float2. One writer
// per output, fixed order: deterministic. The "_s" entries (one more argument, dest) write the two values to
// out[dest[b V + v]] and out[dest[b V + v + 1]] instead, S's CSR order (dest: int32 [n_vectors V], -1 at a padding
// zero, which is not written): out is then float32 [nnz], each element written once (every CSR nonzero sits in
// one vector slot), and the result needs no gather pass. Entries of their own: the pointer kept live in the plain
// kernel cost the TF32 V = 2 one an 8-byte spill on sm_80 (128 registers).
// Input contract (checked by the launcher): vec_ptr int64 [n_vec_rows + 1]; indices int32; data [n_vectors][V]
// float32 / raw 16-bit (bfloat16 bits) S values; A, B in the precision's dtype (float32 for TF32, rounded here by
// cvt.rna); FLAG_VEC only when Kd % 8 == 0 (16-bit) / Kd % 4 == 0 (float32) and A, B are 16-byte aligned.
// Rows >= M of A are never read (zeros); out [n_vectors][V] float32, every element written ("_s": out [nnz], dest
// 8-byte aligned). Indexing int64.
#include "cvse_common.cuh"

// Raw bits of one lane's piece of a row: 8 halves (f16/bf16) or 4 floats (tf32) at row[k], k < Kd (zeros when
// !valid; the checked path zero-fills past Kd element by element). Not yet rounded: see operand().
template <int KIND, bool FAST>
__device__ __forceinline__ uint4 load_piece(const void* __restrict__ row, i64 Kd, i64 k, bool valid) {
  if (!valid) return make_uint4(0u, 0u, 0u, 0u);
  if constexpr (KIND == TF32) {
    if constexpr (FAST) return __ldg(reinterpret_cast<const uint4*>((const float*)row + k));
    const float4 x = load4_f32<false>((const float*)row + k, (int)max((i64)0, min((i64)4, Kd - k)));
    return make_uint4(__float_as_uint(x.x), __float_as_uint(x.y), __float_as_uint(x.z), __float_as_uint(x.w));
  } else {
    return load8_u16<FAST>((const u16*)row + k, (int)max((i64)0, min((i64)8, Kd - k)));
  }
}
// Word i of a piece as an mma operand: TF32 rounds (cvt.rna, ties away from zero), 16-bit pairs pass through.
template <int KIND>
__device__ __forceinline__ unsigned operand(const uint4& p, int i) {
  if constexpr (KIND == TF32) return to_tf32(__uint_as_float(word(p, i)));
  else return word(p, i);
}

template <int KIND, int V>
struct SddmmShape {
  static constexpr int NH = V == 16 ? 2 : 1;                // n8 tiles (A fragments) per vector row
  static constexpr int G = CVSE_SDDMM_GROUPS;               // 16-vector groups per warp tile
  static constexpr int NB = 2 * G;                          // B pieces per chunk: vectors g, g + 8 of each group
  static constexpr int U = CVSE_SDDMM_LOADS / (NB + NH);    // chunks per step of the 16-byte path (>= 1)
  static constexpr int CHUNK = KIND == TF32 ? 16 : 32;      // features per chunk (4 lanes x one 16-byte piece)
  static constexpr int PER = KIND == TF32 ? 4 : 8;          // features per piece
  static_assert(U >= 1, "CVSE_SDDMM_LOADS must cover one chunk's 2G + NH pieces");
};

// acc[j][h] += (B rows of group j) (A rows 8h..8h+7)^T over all of Kd, for this lane's fragment slots.
// The checked path (FAST false: Kd % PER != 0 or unaligned, element loads) steps one chunk at a time: it is the
// rare case, and its scalar loads would otherwise set the register count of the whole kernel.
template <int KIND, int V, bool FAST>
__device__ __forceinline__ void tile_dots(float (&acc)[CVSE_SDDMM_GROUPS][V == 16 ? 2 : 1][4], i64 Kd,
                                          const void* const (&brow)[2 * CVSE_SDDMM_GROUPS],
                                          const bool (&ok_b)[2 * CVSE_SDDMM_GROUPS],
                                          const void* const (&arow)[V == 16 ? 2 : 1],
                                          const bool (&ok_a)[V == 16 ? 2 : 1]) {
  using S = SddmmShape<KIND, V>;
  constexpr int U = FAST ? S::U : 1;
  const int q = (threadIdx.x & 31) & 3;
  for (i64 k0 = 0; k0 < Kd; k0 += U * S::CHUNK) {
    uint4 b[U][S::NB];  // [chunk u][2j + e]: piece of the B row of vector 16j + g + 8e
    uint4 a[U][S::NH];  // [chunk u][h]: piece of A row V*i + 8h + g
#pragma unroll
    for (int u = 0; u < U; ++u) {  // every load of the step first (plain loop: load all, then compute)
      const i64 k = k0 + u * S::CHUNK + S::PER * q;
      const bool in = FAST ? k < Kd : true;  // FAST: Kd % PER == 0, a piece is wholly inside or outside;
#pragma unroll                                // else load_piece zero-fills past Kd element by element
      for (int j = 0; j < S::NB; ++j) b[u][j] = load_piece<KIND, FAST>(brow[j], Kd, k, ok_b[j] && in);
#pragma unroll
      for (int h = 0; h < S::NH; ++h) a[u][h] = load_piece<KIND, FAST>(arow[h], Kd, k, ok_a[h] && in);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (k0 + u * S::CHUNK >= Kd) break;  // warp-uniform: chunks past Kd are zeros; skipping keeps the mma order
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        unsigned fb[S::NH][2];  // the A rows' k slots of mma s (the mma's B operand), rounded once for G groups
#pragma unroll
        for (int h = 0; h < S::NH; ++h) {
          fb[h][0] = operand<KIND>(a[u][h], 2 * s);
          fb[h][1] = operand<KIND>(a[u][h], 2 * s + 1);
        }
#pragma unroll
        for (int j = 0; j < S::G; ++j) {
          const unsigned fa[4] = {operand<KIND>(b[u][2 * j], 2 * s), operand<KIND>(b[u][2 * j + 1], 2 * s),
                                  operand<KIND>(b[u][2 * j], 2 * s + 1), operand<KIND>(b[u][2 * j + 1], 2 * s + 1)};
#pragma unroll
          for (int h = 0; h < S::NH; ++h) mma<KIND>(acc[j][h], fa, fb[h][0], fb[h][1]);
        }
      }
    }
  }
}

template <int KIND, int V, bool SCATTER>
__device__ __forceinline__ void cvse_sddmm(const i64* __restrict__ vec_ptr, const int* __restrict__ indices,
                                           const void* __restrict__ data, const void* __restrict__ A,
                                           const void* __restrict__ B, float* __restrict__ out, i64 M, i64 Kd,
                                           int flags, const int* __restrict__ dest) {
  using S = SddmmShape<KIND, V>;
  constexpr int NH = S::NH, G = S::G;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int warps = blockDim.x >> 5;
  const i64 i = blockIdx.x, vb = vec_ptr[i], ve = vec_ptr[i + 1];
  const size_t elem = KIND == TF32 ? 4 : 2;  // bytes per A / B element
  const void* arow[NH];                      // A rows of this lane's n8 column(s): V*i + 8h + g (A when unused)
  bool ok_a[NH];
#pragma unroll
  for (int h = 0; h < NH; ++h) {
    const i64 r = i * V + 8 * h + g;
    ok_a[h] = 8 * h + g < V && r < M;
    arow[h] = (const char*)A + (ok_a[h] ? r * Kd : 0) * elem;
  }
  for (i64 t = (i64)blockIdx.y * warps + warp; vb + 16 * G * t < ve; t += (i64)gridDim.y * warps) {
    const i64 base = vb + 16 * G * t + g;  // vector 16j + 8e of the tile for this lane is base + 16j + 8e
    const void* brow[2 * G];  // slot j: group j/2, vector g + 8 (j % 2); its B row (B when past the row)
    bool ok_b[2 * G];
#pragma unroll
    for (int j = 0; j < 2 * G; ++j) {
      ok_b[j] = base + 8 * j < ve;
      brow[j] = (const char*)B + (ok_b[j] ? (i64)__ldg(indices + base + 8 * j) * Kd : 0) * elem;
    }
    float acc[G][NH][4];  // [group j][n8 tile h]: D = {(vector g, v 2q), (g, 2q+1), (g + 8, 2q), (g + 8, 2q + 1)}
#pragma unroll
    for (int j = 0; j < G; ++j)
#pragma unroll
      for (int h = 0; h < NH; ++h) acc[j][h][0] = acc[j][h][1] = acc[j][h][2] = acc[j][h][3] = 0.f;
    if (flags & FLAG_VEC) tile_dots<KIND, V, true>(acc, Kd, brow, ok_b, arow, ok_a);
    else tile_dots<KIND, V, false>(acc, Kd, brow, ok_b, arow, ok_a);
#pragma unroll
    for (int j = 0; j < 2 * G; ++j) {  // slot j = group j/2, e = j % 2: D registers 2e, 2e + 1
      const i64 b = base + 8 * j;
      if (!ok_b[j]) continue;
#pragma unroll
      for (int h = 0; h < NH; ++h) {
        const int v = 8 * h + 2 * q, e = j & 1;
        if (v >= V) continue;  // V even: v < V implies v + 1 < V
        float s0, s1;          // S values data[b][v], data[b][v + 1]
        if constexpr (KIND == TF32) {
          s0 = __ldg((const float*)data + b * V + v), s1 = __ldg((const float*)data + b * V + v + 1);
        } else {
          s0 = to_f32<KIND>(__ldg((const u16*)data + b * V + v));
          s1 = to_f32<KIND>(__ldg((const u16*)data + b * V + v + 1));
        }
        const float x0 = acc[j >> 1][h][2 * e] * s0, x1 = acc[j >> 1][h][2 * e + 1] * s1;
        if constexpr (SCATTER) {  // b V + v even: an 8-byte aligned pair of dest
          const int2 d = __ldg(reinterpret_cast<const int2*>(dest + b * V + v));
          if (d.x >= 0) out[d.x] = x0;
          if (d.y >= 0) out[d.y] = x1;
        } else {
          *(float2*)(out + b * V + v) = make_float2(x0, x1);
        }
      }
    }
  }
}

#define CVSE_SDDMM_ENTRY(NAME, KIND, V)                                                                           \
  extern "C" __global__ void __launch_bounds__(32 * CVSE_MAX_WARPS, CVSE_MIN_BLOCKS_PER_SM)                       \
      NAME(const i64* __restrict__ vec_ptr, const int* __restrict__ indices, const void* __restrict__ data,       \
           const void* __restrict__ A, const void* __restrict__ B, float* __restrict__ out, i64 M, i64 Kd,        \
           int flags) {                                                                                           \
    cvse_sddmm<KIND, V, false>(vec_ptr, indices, data, A, B, out, M, Kd, flags, nullptr);                         \
  }                                                                                                               \
  extern "C" __global__ void __launch_bounds__(32 * CVSE_MAX_WARPS, CVSE_MIN_BLOCKS_PER_SM)                       \
      NAME##_s(const i64* __restrict__ vec_ptr, const int* __restrict__ indices, const void* __restrict__ data,   \
               const void* __restrict__ A, const void* __restrict__ B, float* __restrict__ out, i64 M, i64 Kd,    \
               int flags, const int* __restrict__ dest) {                                                         \
    cvse_sddmm<KIND, V, true>(vec_ptr, indices, data, A, B, out, M, Kd, flags, dest);                             \
  }
#define CVSE_SDDMM_ALL_V(PREFIX, KIND)                                                                            \
  CVSE_SDDMM_ENTRY(PREFIX##_v2, KIND, 2)                                                                          \
  CVSE_SDDMM_ENTRY(PREFIX##_v4, KIND, 4)                                                                          \
  CVSE_SDDMM_ENTRY(PREFIX##_v8, KIND, 8)                                                                          \
  CVSE_SDDMM_ENTRY(PREFIX##_v16, KIND, 16)
CVSE_SDDMM_ALL_V(cvse_sddmm_tf32, TF32)
CVSE_SDDMM_ALL_V(cvse_sddmm_f16, F16)
CVSE_SDDMM_ALL_V(cvse_sddmm_bf16, BF16)
