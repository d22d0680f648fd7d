// One warp's share of C = A @ B with mma.sync.m16n8k16 for the 16-bit kernels of two formats, ME-TCF
// (kernels/formats/metcf/metcf_half.cuh) and Tiled-CSR (kernels/formats/tiledcsr/tiledcsr_spmm.cu), whose 16 x 16
// blocks are the same tiles: acc (16 rows x 64 columns, FP32) += A block (16 x 16) x B rows (16 x 64) per block
// (`mma_block`), then C (float32, or the input's 16-bit type with FLAG_OUT16) = or += acc (`half_store`).
// FP16 or BF16 inputs (template KIND: tc_ops.cuh's F16 or BF16), raw values unsigned short.
//
// Launch mapping (each includer's kernels): 1 warp = 16 rows x HALF_WARP_COLS = 64 columns n0..n0+63; lane l =
// 4g + q owns rows g and g+8.
// Register remapping (DTC-SpMM section 4.4.1, widened to 16-bit values): the warp's 64 columns are 8 n8 tiles;
// column j (0..7) of tile t is the actual column n0 + 8j + t. The mma B fragment of lane (g, q) is column j = g,
// k rows 2q, 2q+1, 2q+8, 2q+9 of each tile, i.e. B[col[k]][n0 + 8g + t] for t = 0..7: ONE 16-byte vector per B row,
// four per block, whose halves are paired by prmt into the 8 tiles' f16x2 fragments. The C fragment of tile t is
// rows g, g+8 x tile columns 2q, 2q+1 = actual columns n0+16q+t and n0+16q+8+t: 16 contiguous columns per row,
// stored as 4 float4 (float32 C) or 2 16-byte vectors (16-bit C).
//
// Input contract: the includer defines FLAG_ADD (C += A @ B) first; B fragments are passed in as four 16-byte
// vectors of 8 values per lane (r[k] = B row k of the block's fragment rows 2q, 2q+1, 2q+8, 2q+9, columns
// n0 + 8g .. n0 + 8g + 7); half_store writes rows < row0 + rows and columns < N only.
#pragma once

#if !defined(FLAG_ADD)
#error "define FLAG_ADD (C += A @ B) before including half_acc.cuh"
#endif

#include "tc_ops.cuh"  // i64, u16, Kind, mma, to_f32, from_f32, pack2, word, load8_u16
#define FLAG_OUT16 4  // C is in the 16-bit input type (else float32); the launchers set it
#define HALF_WARP_COLS 64  // columns of C per warp: the 8 n8 tiles of the remapping (above)
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
