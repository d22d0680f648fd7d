"""Tiled-CSR (ICCD'23): `container` (arrays, conversion through ME-TCF's, NumPy twin), `launch` (launchers),
`plugin` (device operator, ShardOps and `FORMAT`), the kernel `tiledcsr_spmm.cu` with `tiledcsr_tile.cuh`
(it includes ME-TCF's `metcf_half.cuh`, whose 16-bit fragments its tiles share).
"""
from kernels.formats.tiledcsr.plugin import FORMAT

__all__ = ["FORMAT"]
