// Per-tile pieces of tiledcsr_spmm.cu (Tiled-CSR, ICCD'23): the block-wide scatter of a chunk of tiles from their
// CSR into shared memory in mma A-fragment order, the B-row loads of one tile for one lane, and one tile's mma.
//
// A fragment buffer, one per chunk stage: uint4 [TCSR_CHUNK tiles][32 lanes] (512 B per tile, both tile widths):
// word j of lane l = 4g + q of tile u is the mma A register j of that lane (tc_ops.cuh's mma<KIND>). Element
// (r, c) of a 16 x w tile, g = r % 8, h = r / 8:
//   16-bit (16 x 16, m16n8k16): lane 4g + (c / 2) % 4, register h + 2 (c / 8), half c % 2 (low half = even c)
//   TF32   (16 x 8,  m16n8k8):  lane 4g + c % 4,       register h + 2 (c / 4)
// Every slot without a stored entry is zero: the stage is zeroed (16-byte stores) one chunk before its scatter.
// Scatter mapping: thread i takes the (tile, row) pairs i, i + blockDim.x, ... of the chunk, i.e. one tile row's
// contiguous entries each. Each slot has at most one writer (a tile's entries are distinct (r, c)), so no order
// among threads matters and the fragments do not depend on the block size.
#pragma once

#if !defined(TCSR_CHUNK) || !defined(TCSR_UNROLL)
#error "include tiledcsr_tile.cuh from tiledcsr_spmm.cu (TCSR_CHUNK, TCSR_UNROLL from TiledConfig.defines())"
#endif

typedef unsigned char u8;
template <int KIND> struct Traits;  // W: tile width (the mma's k); VB: bytes per value; RP: local row pointer type
template <> struct Traits<TF32> { static constexpr int W = 8, VB = 4; typedef u8 RP; };
template <> struct Traits<F16> { static constexpr int W = 16, VB = 2; typedef u16 RP; };
template <> struct Traits<BF16> : Traits<F16> {};

#define ROWS 16
#define RP_LEN (ROWS + 1)
#define FRAG_LANES 32  // uint4 per tile in a fragment stage
constexpr int SCATTER_STEP = 4;  // entries of a tile row whose loads a scatter thread issues before their stores

// Byte offset of tile element (r, c) inside its 512-byte fragment (the layout above).
template <int KIND>
__device__ __forceinline__ int frag_byte(int r, int c) {
  if constexpr (KIND == TF32) return ((4 * (r & 7) + (c & 3)) * 4 + (r >> 3) + 2 * (c >> 2)) * 4;
  else return ((4 * (r & 7) + ((c >> 1) & 3)) * 4 + (r >> 3) + 2 * (c >> 3)) * 4 + 2 * (c & 1);
}

// The whole block zeroes one fragment stage (16-byte stores, conflict-free).
__device__ __forceinline__ void zero_stage(uint4* st) {
  for (int i = threadIdx.x; i < TCSR_CHUNK * FRAG_LANES; i += blockDim.x) st[i] = make_uint4(0u, 0u, 0u, 0u);
}

// The whole block writes the entries of tiles t0 .. t0 + nt - 1 (nt <= TCSR_CHUNK) into the zeroed stage st:
// thread i takes (tile, row) pairs i, i + blockDim.x, ... (pair = 16 x tile + row), i.e. one tile row's contiguous
// entries each, SCATTER_STEP of them per step (index and value loads before the stores).
template <int KIND>
__device__ __forceinline__ void scatter_chunk(uint4* st, i64 t0, int nt, const i64* __restrict__ tile_ptr,
                                              const typename Traits<KIND>::RP* __restrict__ rp,
                                              const u8* __restrict__ idx, const char* __restrict__ data) {
  constexpr int VB = Traits<KIND>::VB;
#pragma unroll 1
  for (int pair = threadIdx.x; pair < nt * ROWS; pair += blockDim.x) {
    const int tl = pair / ROWS, r = pair % ROWS;
    const i64 t = t0 + tl, base = __ldg(tile_ptr + t);
    const int lo = __ldg(rp + t * RP_LEN + r), hi = __ldg(rp + t * RP_LEN + r + 1);
    char* frag = reinterpret_cast<char*>(st + tl * FRAG_LANES);
    for (int p = lo; p < hi; p += SCATTER_STEP) {
      unsigned c[SCATTER_STEP], v[SCATTER_STEP];  // [j]: compressed column and raw value bits of entry p + j
#pragma unroll
      for (int j = 0; j < SCATTER_STEP; ++j) {
        if (p + j < hi) {
          c[j] = __ldg(idx + base + p + j);
          if constexpr (VB == 4) v[j] = __ldg(reinterpret_cast<const unsigned*>(data) + base + p + j);
          else v[j] = __ldg(reinterpret_cast<const u16*>(data) + base + p + j);
        }
      }
#pragma unroll
      for (int j = 0; j < SCATTER_STEP; ++j) {
        if (p + j < hi) {
          char* dst = frag + frag_byte<KIND>(r, (int)c[j]);
          if constexpr (VB == 4) *reinterpret_cast<unsigned*>(dst) = v[j];
          else *reinterpret_cast<u16*>(dst) = (u16)v[j];
        }
      }
    }
  }
}

// This lane's B rows of tile t (padding slots -> the tile's first column, where A is zero):
// 16-bit: slots 2q, 2q+1, 2q+8, 2q+9 (x, y, z, w); TF32: slots q, q + 4 (x, y).
template <int KIND>
__device__ __forceinline__ int4 load_cols(const int* __restrict__ tc, i64 t, int lane) {
  const int q = lane & 3;
  if constexpr (KIND == TF32) {
    const int first = __ldg(tc + 8 * t), c0 = __ldg(tc + 8 * t + q), c1 = __ldg(tc + 8 * t + q + 4);
    return make_int4(c0 < 0 ? first : c0, c1 < 0 ? first : c1, 0, 0);
  } else {
    const int first = __ldg(tc + 16 * t);
    const int2 lo = __ldg(reinterpret_cast<const int2*>(tc + 16 * t) + q);      // slots 2q, 2q + 1
    const int2 hi = __ldg(reinterpret_cast<const int2*>(tc + 16 * t + 8) + q);  // slots 2q + 8, 2q + 9
    return make_int4(lo.x < 0 ? first : lo.x, lo.y < 0 ? first : lo.y, hi.x < 0 ? first : hi.x,
                     hi.y < 0 ? first : hi.y);
  }
}

// r = this lane's B values for one tile, columns n_lane .. n_lane + 7 (avail = clamp(N - n_lane, 0, 8) inside N):
// 16-bit: r[k] = 8 values of B row c[k] (tc_ops.cuh's load8_u16); TF32: r[0..1] = 8 floats of row c.x,
// r[2..3] of row c.y. FAST: 16-byte loads (the warp's 64 columns inside N, FLAG_VEC); else element loads, zeros
// past N. Half H (0 or 1) loads r[2H], r[2H + 1] only.
template <int KIND, bool FAST, int H>
__device__ __forceinline__ void load_b_half(uint4 (&r)[4], const int4& c, const void* __restrict__ B, i64 N,
                                            i64 n_lane, int avail) {
  if constexpr (KIND == TF32) {
    const unsigned* row = static_cast<const unsigned*>(B) + (i64)(H ? c.y : c.x) * N + n_lane;
    if constexpr (FAST) {
      r[2 * H] = __ldg(reinterpret_cast<const uint4*>(row));
      r[2 * H + 1] = __ldg(reinterpret_cast<const uint4*>(row) + 1);
    } else {
      unsigned x[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) x[u] = u < avail ? __ldg(row + u) : 0u;
      r[2 * H] = make_uint4(x[0], x[1], x[2], x[3]), r[2 * H + 1] = make_uint4(x[4], x[5], x[6], x[7]);
    }
  } else {
    const u16* B16 = static_cast<const u16*>(B);
    r[2 * H] = load8_u16<FAST>(B16 + (i64)(H ? c.z : c.x) * N + n_lane, avail);
    r[2 * H + 1] = load8_u16<FAST>(B16 + (i64)(H ? c.w : c.y) * N + n_lane, avail);
  }
}
template <int KIND, bool FAST>
__device__ __forceinline__ void load_b(uint4 (&r)[4], const int4& c, const void* __restrict__ B, i64 N, i64 n_lane,
                                       int avail) {
  load_b_half<KIND, FAST, 0>(r, c, B, N, n_lane, avail);
  load_b_half<KIND, FAST, 1>(r, c, B, N, n_lane, avail);
}

// acc[u] += A tile x B tile u (u = 0..7: columns n0 + 8j + u, the remapping of half_acc.cuh).
// TF32: b0 / b1 of mma tile u = value u of the lane's two B rows, rounded to TF32.
template <int KIND>
__device__ __forceinline__ void tile_mma(HalfAcc& acc, const uint4& a, const uint4 (&r)[4]) {
  if constexpr (KIND == TF32) {
#pragma unroll
    for (int u = 0; u < 8; ++u)
      mma<TF32>(acc[u], a, to_tf32(__uint_as_float(word(r[u >> 2], u & 3))),
                to_tf32(__uint_as_float(word(r[2 + (u >> 2)], u & 3))));
  } else {
    mma_block<KIND>(acc, a, r);
  }
}
