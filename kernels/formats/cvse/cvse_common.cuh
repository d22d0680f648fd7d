// Shared pieces of the CVSE kernels (cvse_spmm.cu, cvse_sddmm.cu): types, flags, compile-time constants, the mma
// wrappers (FP16/BF16 m16n8k16, TF32 m16n8k8) and the 16/32-bit conversions. Raw 16-bit values are unsigned short,
// pairs packed in 32-bit words (lower index in the low half), so no cuda_fp16.h / cuda_bf16.h is needed.
// Compile-time constants come from kernels/formats/cvse/launch.py CvseConfig.defines(); kernels/compile_check.py compiles
// every .cu with kernels/formats/metcf/config.py's options only, so these defaults equal CvseConfig's.
#pragma once

#ifndef CVSE_WARP_COLS
#define CVSE_WARP_COLS 64
#define CVSE_MAX_WARPS 4
#define CVSE_MIN_BLOCKS_PER_SM 4
#define CVSE_STEPS_PER_STAGE 2
#define CVSE_STAGES 3
#define CVSE_SDDMM_GROUPS 2
#define CVSE_SDDMM_LOADS 20
#define CVSE_TILE_BK 256
#define CVSE_TILE_STAGES 2
#endif
static_assert(CVSE_WARP_COLS == 64, "a lane's 8 consecutive columns x 8 lane groups = 64 columns per warp "
                                    "(CvseConfig.warp_cols): the Register Shuffle layout");
static_assert(CVSE_MAX_WARPS >= 1 && CVSE_MAX_WARPS <= 16, "CvseConfig.max_warps must be 1..16");
static_assert(CVSE_MIN_BLOCKS_PER_SM >= 1 && CVSE_MIN_BLOCKS_PER_SM * CVSE_MAX_WARPS <= 64,
              "CvseConfig.min_blocks_per_sm x max_warps must fit 64 warps per SM");
static_assert(CVSE_STEPS_PER_STAGE >= 1 && CVSE_STEPS_PER_STAGE <= 4,
              "CvseConfig.steps_per_stage must be 1..4 (each step holds 16 more B registers per lane)");
static_assert(CVSE_STAGES >= 2 && CVSE_STAGES <= 4, "CvseConfig.stages must be 2..4 (cp.async ring of stages)");
static_assert(CVSE_SDDMM_GROUPS >= 1 && CVSE_SDDMM_GROUPS <= 4,
              "CvseConfig.sddmm_groups must be 1..4 (16-vector groups per warp sharing one A fragment)");
static_assert(CVSE_SDDMM_LOADS >= 2 * CVSE_SDDMM_GROUPS + 2 && CVSE_SDDMM_LOADS <= 32,
              "CvseConfig.sddmm_loads must be 2 x sddmm_groups + 2 .. 32 (16-byte loads in flight per lane, "
              "4 registers each)");
static_assert(CVSE_TILE_BK % 8 == 0 && CVSE_TILE_BK >= 16 && CVSE_TILE_BK <= 512,
              "CvseConfig.tile_bk must be a multiple of 8 in 16..512 (the tiled kernel's bank order uses r & 7)");
static_assert(CVSE_TILE_STAGES >= 2 && CVSE_TILE_STAGES <= 6, "CvseConfig.tile_stages must be 2..6");

#include "tc_ops.cuh"  // i64, u16, Kind, mma, to_tf32, to_f32, from_f32, pack2, word, load8_u16, cp_async
#define FLAG_VEC 1    // 16-byte loads of B / A rows and 16-byte C stores (see each kernel's contract)
#define FLAG_ADD 2    // C += A @ B (added in fp32, rounded once)
#define FLAG_OUT16 4  // C in the 16-bit input type (else float32)



// 4 consecutive floats row[0..3]: FAST one 16-byte load; else element by element, zeros past `avail`.
template <bool FAST>
__device__ __forceinline__ float4 load4_f32(const float* __restrict__ row, int avail) {
  if constexpr (FAST) {
    return __ldg(reinterpret_cast<const float4*>(row));
  } else {
    return make_float4(avail > 0 ? __ldg(row) : 0.f, avail > 1 ? __ldg(row + 1) : 0.f,
                       avail > 2 ? __ldg(row + 2) : 0.f, avail > 3 ? __ldg(row + 3) : 0.f);
  }
}
__device__ __forceinline__ float f4(const float4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
