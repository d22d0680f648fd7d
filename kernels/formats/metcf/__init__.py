"""ME-TCF (DTC-SpMM, ASPLOS'24, section 4.2): `container` (arrays, CPU conversion), `gpu` (GPU conversion),
`reference` (NumPy twin), `shard` (ShardOps), `config` (compile-time constants), `selector` (cost model),
`launch` (TF32 launchers) and `launch_half` (FP16/BF16), `plugin` (device operator and `FORMAT`), the kernels
`metcf_spmm.cu`, `metcf_tile.cuh`, `metcf_regs.cuh`, `metcf_half.cuh`.
"""
from kernels.formats.metcf.plugin import FORMAT

__all__ = ["FORMAT"]
