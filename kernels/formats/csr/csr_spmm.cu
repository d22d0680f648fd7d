// C = A @ B for a sparse A (M x K) in CSR and dense row-major B (K x N) on CUDA cores, FP32 FMAs in a fixed order:
// the deterministic fallback where Tensor Core blocks stay nearly empty (power-law graphs in any order, tiny
// matrices), standing in for cuSPARSE's CSR SpMM, whose results differ bitwise from call to call (issue 17).
//   C[r][n] = sum over p in [indptr[r], indptr[r+1]) of data[p] * B[indices[p]][n]   (in increasing p)
// A row is cut into segments of at most seg_len nonzeros (kernels/formats/csr/launch.py, `segments`): a short row
// is one segment, written straight to C; a long row's segments write partial rows to a workspace W, and they are
// added in segment order into C: by csr_rows itself (the last segment of the row to finish, counted in
// pieces_done) or, after the 16-bit mappings, by csr_fixup. Each element of C and W has one writer, and the order of
// every sum depends only on A: bitwise repeatable (the only atomics count pieces; no value is added atomically).
//
// Launch mapping (kernels/formats/csr/launch.py): csr_rows: blockDim.x = 32 x CSR_WARPS; warp w of the grid takes
//   segment blockIdx.x x CSR_WARPS + w and the 128 columns n0 = blockIdx.y x 128 .. +127, lane l columns
//   n0 + 4l .. n0 + 4l + 3 (one 16-byte float4 / 8-byte 4 x 16-bit load of B per nonzero). The warp reads 32
//   (column, value) pairs at once, coalesced, and broadcasts them by shuffle; U nonzeros' B loads are in flight
//   before their FMAs. csr_rows_wide (16-bit B, N % 8 == 0; the launcher picks it): lane l of half-warp h takes
//   columns n0 + 8 (l % 16) .. + 7 (one 16-byte load of 8 values) of the nonzeros at even (h = 0) / odd (h = 1)
//   positions of the segment, U / 2 of them in flight per lane; at the end the lower half adds the upper half's
//   sums (a fixed order) and writes. Twice the bytes per load and two nonzeros per warp instruction: 1.65-1.81x
//   the 4-values-per-lane mapping on graphs (H200, docs/kernels-notes.md, "Session 23"). csr_rows_pair (16-bit
//   B, N % 8 == 0, the same columns per lane): each half-warp its own segment, 2 x CSR_WARPS segments a block,
//   except the walk's tail of short segments (from tail0), CSR_TAIL_GROUP a half-warp in the first warps; the
//   operator times it against csr_rows_wide for each N (launch.py, `CsrRows.tune`). The f32h instances of both:
//   float32 A over B's per-call 16-bit copy (csr_pack_b, csr_pack.cuh), A's value times the copy's scale of its row.
//   csr_fixup: warp w takes long row blockIdx.x x CSR_WARPS + w, the same columns as csr_rows (after the 16-bit
//   mappings; after csr_rows only the rows a hybrid copies into C, kernels.hybrid).
// Input contract (checked by the launcher): seg_ptr int64 [S + 1] (segment s = nonzeros seg_ptr[s] ..
//   seg_ptr[s+1] - 1, increasing, seg_ptr[S] = nnz), seg_row int32 [S] (every row of A has >= 1 segment, so
//   its row of C is written: zeros for an empty row; the row of C may be mapped, kernels.hybrid's CUDA-core
//   part writing only its rows), seg_slot int32 [S] (-1: write C; else its row of W);
//   csr_rows only: slot_long int32 [n_slots] (the long row of each W row), pieces_done int32 [long rows x
//   gridDim.y], zero before the first call (csr_rows leaves it zero);
//   fix_row int32 [R], fix_ptr int32 [R + 1] (the W rows of long row i are fix_ptr[i] .. fix_ptr[i+1] - 1, in
//   segment order); indices int32 [nnz]; data [nnz] in B's type (float32, float16, or bfloat16 bits; f32h:
//   float32, B the 16-bit copy, bscale float32 [K]); W float32 [n_slots x N]. FLAG_VEC only when N % 4 == 0 and
//   B, C are 16-byte aligned (8-byte for 16-bit). C float32 or (FLAG_OUT16) B's 16-bit type; FLAG_ADD: C += A @ B,
//   added in fp32 and rounded once.
#ifndef CSR_WARPS
#define CSR_WARPS 2
#define CSR_UNROLL 4
#define CSR_TAIL_GROUP 8
#define CSR_PACK_ROWS 2
#endif
static_assert(CSR_WARPS >= 1 && CSR_WARPS <= 32, "CsrConfig.warps must be 1..32");
static_assert(CSR_UNROLL == 1 || CSR_UNROLL == 2 || CSR_UNROLL == 4 || CSR_UNROLL == 8, "CsrConfig.unroll: 1/2/4/8");
static_assert(CSR_TAIL_GROUP >= 1 && CSR_TAIL_GROUP <= 64, "CsrConfig.tail_group must be 1..64");
static_assert(CSR_PACK_ROWS >= 1 && CSR_PACK_ROWS <= 8, "CsrConfig.pack_rows must be 1..8");

#include "tc_ops.cuh"  // i64, u16, Kind (F32 = float32 here), to_f32, from_f32
#define FLAG_VEC 1
#define FLAG_ADD 2
#define FLAG_OUT16 4
#define COLS 128  // columns of one warp: 4 per lane

__device__ __forceinline__ float comp(const float4& a, int i) {  // a's component i (i a compile-time constant)
  return i == 0 ? a.x : i == 1 ? a.y : i == 2 ? a.z : a.w;
}

// This lane's 4 values of row `col` of B from column n (avail of them inside N; the rest read as 0).
template <int KIND>
__device__ __forceinline__ float4 load_b(const void* __restrict__ B, i64 col, i64 N, i64 n, bool vec, int avail) {
  if constexpr (KIND == F32) {
    const float* row = static_cast<const float*>(B) + col * N + n;
    if (vec) return __ldg(reinterpret_cast<const float4*>(row));
    return make_float4(__ldg(row), avail > 1 ? __ldg(row + 1) : 0.f, avail > 2 ? __ldg(row + 2) : 0.f,
                       avail > 3 ? __ldg(row + 3) : 0.f);  // avail >= 1 here
  } else {
    const u16* row = static_cast<const u16*>(B) + col * N + n;
    uint2 w;
    if (vec) w = __ldg(reinterpret_cast<const uint2*>(row));
    else w = make_uint2((unsigned)__ldg(row) | (avail > 1 ? (unsigned)__ldg(row + 1) << 16 : 0u),
                        (avail > 2 ? (unsigned)__ldg(row + 2) : 0u) | (avail > 3 ? (unsigned)__ldg(row + 3) << 16 : 0u));
    return make_float4(to_f32<KIND>((u16)(w.x & 0xffffu)), to_f32<KIND>((u16)(w.x >> 16)),
                       to_f32<KIND>((u16)(w.y & 0xffffu)), to_f32<KIND>((u16)(w.y >> 16)));
  }
}

template <int KIND>
__device__ __forceinline__ float value_of(const void* __restrict__ data, i64 p) {
  if constexpr (KIND == F32) return __ldg(static_cast<const float*>(data) + p);
  else return to_f32<KIND>(__ldg(static_cast<const u16*>(data) + p));
}

// Write (FLAG_ADD: add to) this lane's 4 columns of C row `row` from n.
template <int KIND>
__device__ __forceinline__ void store_c(void* __restrict__ C, i64 row, i64 N, i64 n, float4 acc, bool vec, int avail,
                                        int flags) {
  if (!(flags & FLAG_OUT16) || KIND == F32) {
    float* out = static_cast<float*>(C) + row * N + n;
    if (vec) {
      float4* p = reinterpret_cast<float4*>(out);
      if (flags & FLAG_ADD) {
        const float4 o = *p;
        acc.x += o.x, acc.y += o.y, acc.z += o.z, acc.w += o.w;
      }
      *p = acc;
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (i < avail) out[i] = (flags & FLAG_ADD) ? out[i] + comp(acc, i) : comp(acc, i);
    }
  } else {
    u16* out = static_cast<u16*>(C) + row * N + n;
    if (vec) {
      uint2* p = reinterpret_cast<uint2*>(out);
      if (flags & FLAG_ADD) {
        const uint2 o = *p;
        acc.x += to_f32<KIND>((u16)(o.x & 0xffffu)), acc.y += to_f32<KIND>((u16)(o.x >> 16));
        acc.z += to_f32<KIND>((u16)(o.y & 0xffffu)), acc.w += to_f32<KIND>((u16)(o.y >> 16));
      }
      *p = make_uint2((unsigned)from_f32<KIND>(acc.x) | ((unsigned)from_f32<KIND>(acc.y) << 16),
                      (unsigned)from_f32<KIND>(acc.z) | ((unsigned)from_f32<KIND>(acc.w) << 16));
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (i < avail) out[i] = from_f32<KIND>((flags & FLAG_ADD) ? to_f32<KIND>(out[i]) + comp(acc, i) : comp(acc, i));
    }
  }
}

__device__ __forceinline__ void fma4(float4& acc, float a, const float4& b) {
  acc.x = fmaf(a, b.x, acc.x), acc.y = fmaf(a, b.y, acc.y), acc.z = fmaf(a, b.z, acc.z), acc.w = fmaf(a, b.w, acc.w);
}

template <int KIND>
__device__ __forceinline__ void csr_rows(const i64* __restrict__ seg_ptr, const int* __restrict__ seg_row,
                                         const int* __restrict__ seg_slot, const int* __restrict__ indices,
                                         const void* __restrict__ data, const void* __restrict__ B,
                                         void* __restrict__ C, float* __restrict__ W, i64 n_segs, i64 N, int flags,
                                         const int* __restrict__ slot_long, const int* __restrict__ fix_row,
                                         const int* __restrict__ fix_ptr, int* __restrict__ pieces_done) {
  const int lane = threadIdx.x & 31;
  const i64 s = (i64)blockIdx.x * CSR_WARPS + (threadIdx.x >> 5);
  if (s >= n_segs) return;  // warp-uniform; no block barriers below
  const i64 n = (i64)blockIdx.y * COLS + 4 * lane;
  const int avail = (int)max((i64)0, min((i64)4, N - n));
  const bool vec = (flags & FLAG_VEC) != 0;
  const i64 lo = seg_ptr[s], hi = seg_ptr[s + 1];
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (i64 base = lo; base < hi; base += 32) {
    const int cnt = (int)min((i64)32, hi - base);
    const int my_col = lane < cnt ? __ldg(indices + base + lane) : 0;
    const float my_val = lane < cnt ? value_of<KIND>(data, base + lane) : 0.f;
    // U loads in flight, then their FMAs in order; past cnt (the last batch) a load is predicated off and its FMA
    // adds 0 x 0, so a row of 1-3 nonzeros (most of an R-MAT's) is one batch, not a chain of dependent loads. With
    // the in-kernel piece sums below, against full batches then one nonzero at a time and csr_fixup: 0.92-1.00x
    // the time on R-MAT scale 16-17, email-Enron and an SBM, 1.00-1.02x on R-MAT scale 20 (H200, float32,
    // benchmarks/csr_rows.py; docs/kernels-notes.md "Session 34"). cnt is warp-uniform: every lane takes part in
    // each shuffle.
    for (int j = 0; j < cnt; j += CSR_UNROLL) {
      float4 b[CSR_UNROLL];
      float a[CSR_UNROLL];
#pragma unroll
      for (int u = 0; u < CSR_UNROLL; ++u) {
        const int k = j + u;
        const int c = __shfl_sync(0xffffffffu, my_col, k & 31);
        const float x = __shfl_sync(0xffffffffu, my_val, k & 31);
        const bool live = avail > 0 && k < cnt;
        a[u] = live ? x : 0.f;
        b[u] = live ? load_b<KIND>(B, c, N, n, vec, avail) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int u = 0; u < CSR_UNROLL; ++u) fma4(acc, a[u], b[u]);
    }
  }
  const int slot = seg_slot[s];  // warp-uniform
  if (slot < 0) {
    if (avail > 0) store_c<KIND>(C, seg_row[s], N, n, acc, vec, avail, flags);
    return;
  }
  float* w = W + (i64)slot * N + n;  // float32 partial row, no FLAG_ADD, no 16-bit rounding
  if (avail > 0) {
    if (vec) *reinterpret_cast<float4*>(w) = acc;
    else {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (i < avail) w[i] = comp(acc, i);
    }
  }
  // A long row's last piece to finish sums its pieces' rows of W in piece order and writes C, where csr_fixup did in
  // a launch of its own after this one: each piece counts itself once its partial is visible device-wide; the one
  // that counts last reads them all (from L2) and resets the count for the next call.
  const int r = slot_long[slot];
  int* done = pieces_done + (i64)r * gridDim.y + blockIdx.y;
  __threadfence();
  __syncwarp();
  int last = 0;
  if (lane == 0) last = atomicAdd(done, 1) == fix_ptr[r + 1] - fix_ptr[r] - 1;
  if (!__shfl_sync(0xffffffffu, last, 0)) return;
  __threadfence();
  if (lane == 0) *done = 0;
  if (avail <= 0) return;
  float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int k = fix_ptr[r]; k < fix_ptr[r + 1]; ++k) {  // piece order: the same sum as csr_fixup's, on every call
    const float* p = W + (i64)k * N + n;
    float4 x;
    if (vec) x = __ldcg(reinterpret_cast<const float4*>(p));
    else x = make_float4(__ldcg(p), avail > 1 ? __ldcg(p + 1) : 0.f, avail > 2 ? __ldcg(p + 2) : 0.f,
                         avail > 3 ? __ldcg(p + 3) : 0.f);
    sum.x += x.x, sum.y += x.y, sum.z += x.z, sum.w += x.w;
  }
  store_c<KIND>(C, fix_row[r], N, n, sum, vec, avail, flags);
}

#include "csr_rows16.cuh"  // the 16-bit mappings: csr_rows_wide, csr_rows_pair (and their helpers)

template <int KIND>
__device__ __forceinline__ void csr_fixup(const int* __restrict__ fix_row, const int* __restrict__ fix_ptr,
                                          const float* __restrict__ W, void* __restrict__ C, i64 n_long, i64 N,
                                          int flags) {
  const int lane = threadIdx.x & 31;
  const i64 r = (i64)blockIdx.x * CSR_WARPS + (threadIdx.x >> 5);
  if (r >= n_long) return;
  const i64 n = (i64)blockIdx.y * COLS + 4 * lane;
  const int avail = (int)max((i64)0, min((i64)4, N - n));
  if (avail <= 0) return;
  const bool vec = (flags & FLAG_VEC) != 0;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int k = fix_ptr[r]; k < fix_ptr[r + 1]; ++k) {  // segment order: the same sum on every call
    const float* w = W + (i64)k * N + n;
    float4 x;
    if (vec) x = *reinterpret_cast<const float4*>(w);
    else x = make_float4(w[0], avail > 1 ? w[1] : 0.f, avail > 2 ? w[2] : 0.f, avail > 3 ? w[3] : 0.f);
    acc.x += x.x, acc.y += x.y, acc.z += x.z, acc.w += x.w;
  }
  store_c<KIND>(C, fix_row[r], N, n, acc, vec, avail, flags);
}

// The row kernels' parameters (csr_rows, csr_rows_wide and csr_rows_pair take the same) and their arguments, B as
// the kernel reads it.
#define CSR_ROWS_PARAMS                                                                                           \
  const i64 *__restrict__ seg_ptr, const int *__restrict__ seg_row, const int *__restrict__ seg_slot,            \
      const int *__restrict__ indices, const void *__restrict__ data, const void *__restrict__ B,                \
      void *__restrict__ C, float *__restrict__ W, i64 n_segs, i64 N, int flags
#define CSR_ROWS_ARGS(B_AS) seg_ptr, seg_row, seg_slot, indices, data, B_AS, C, W, n_segs, N, flags
#define CSR_ENTRY(SUFFIX, KIND)                                                                                   \
  extern "C" __global__ void __launch_bounds__(32 * CSR_WARPS)                                                    \
      csr_rows_##SUFFIX(CSR_ROWS_PARAMS, const int* __restrict__ slot_long, const int* __restrict__ fix_row,      \
                        const int* __restrict__ fix_ptr, int* __restrict__ pieces_done) {                        \
    csr_rows<KIND>(CSR_ROWS_ARGS(B), slot_long, fix_row, fix_ptr, pieces_done);                                  \
  }                                                                                                              \
  extern "C" __global__ void __launch_bounds__(32 * CSR_WARPS)                                                    \
      csr_fixup_##SUFFIX(const int* __restrict__ fix_row, const int* __restrict__ fix_ptr,                        \
                         const float* __restrict__ W, void* __restrict__ C, i64 n_long, i64 N, int flags) {      \
    csr_fixup<KIND>(fix_row, fix_ptr, W, C, n_long, N, flags);                                                   \
  }
CSR_ENTRY(f32, F32)
CSR_ENTRY(f16, F16)
CSR_ENTRY(bf16, BF16)

// The 16-bit mappings: B read as 16-bit words, each kernel instantiated with 16-byte C stores and without
// (FLAG_VEC, the launcher's choice). The f32h entries: float32 A over B's 16-bit copy (csr_pack_b below), its
// per-row scales the kernel's last parameter (CSR_SCALES); the others take none (CSR_UNSCALED).
#define CSR_B16 static_cast<const u16*>(B)
#define CSR_UNSCALED()  // function-like: expanded only where an entry writes EXTRA()
#define CSR_SCALES() , const float* __restrict__ bscale
#define CSR_WIDE_ENTRY(SUFFIX, KIND, SCALED, EXTRA, SCALE)                                                        \
  extern "C" __global__ void __launch_bounds__(32 * CSR_WARPS) csr_rows_wide_##SUFFIX(CSR_ROWS_PARAMS EXTRA()) { \
    if (flags & FLAG_VEC) csr_rows_wide<KIND, true, SCALED>(CSR_ROWS_ARGS(CSR_B16), SCALE);                      \
    else csr_rows_wide<KIND, false, SCALED>(CSR_ROWS_ARGS(CSR_B16), SCALE);                                      \
  }
// A pair mapping's entry: V 16-byte loads a nonzero, U nonzeros in flight; BLOCKS x 32 threads resident an SM at
// least, which caps the registers (pair: 1024 threads, 64 registers, no spills; pair16: 512, up to 128).
#define CSR_PAIR_ENTRY(SUFFIX, KIND, SCALED, EXTRA, SCALE, MAP, V, U, BLOCKS)                                     \
  extern "C" __global__ void __launch_bounds__(32 * CSR_WARPS, (BLOCKS) / CSR_WARPS)                               \
      csr_rows_##MAP##_##SUFFIX(CSR_ROWS_PARAMS, i64 tail0 EXTRA()) {                                            \
    if (flags & FLAG_VEC) csr_rows_pair<KIND, true, SCALED, V, U>(CSR_ROWS_ARGS(CSR_B16), SCALE, tail0);         \
    else csr_rows_pair<KIND, false, SCALED, V, U>(CSR_ROWS_ARGS(CSR_B16), SCALE, tail0);                         \
  }
#define CSR_HALF_UNROLL (CSR_UNROLL > 1 ? CSR_UNROLL / 2 : 1)
// Every 16-bit mapping of one B type: EXTRA the entries' extra parameter, SCALE what they pass as bscale.
#define CSR_MAPS_16(SUFFIX, KIND, SCALED, EXTRA, SCALE)                                                           \
  CSR_WIDE_ENTRY(SUFFIX, KIND, SCALED, EXTRA, SCALE)                                                              \
  CSR_PAIR_ENTRY(SUFFIX, KIND, SCALED, EXTRA, SCALE, pair, 1, CSR_UNROLL, 32)                                     \
  CSR_PAIR_ENTRY(SUFFIX, KIND, SCALED, EXTRA, SCALE, pair16, 2, CSR_HALF_UNROLL, 16)                              \
  CSR_PAIR_ENTRY(SUFFIX, KIND, SCALED, EXTRA, SCALE, pair16_deep, 2, CSR_UNROLL, 16)
CSR_MAPS_16(f16, F16, false, CSR_UNSCALED, nullptr)
CSR_MAPS_16(bf16, BF16, false, CSR_UNSCALED, nullptr)
CSR_MAPS_16(f32h, F16, true, CSR_SCALES, bscale)

#include "csr_pack.cuh"  // csr_pack_b: B's per-call 16-bit copy for float32 A, which the f32h entries read
