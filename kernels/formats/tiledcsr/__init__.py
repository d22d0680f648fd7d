"""Tiled-CSR (ICCD'23): `container` (arrays, conversion on the window tiles of kernels.formats.condense, which
ME-TCF shares, NumPy twin), `launch` (launchers), `plugin` (device operator, ShardOps and `FORMAT`), the kernel
`tiledcsr_spmm.cu` with `tiledcsr_tile.cuh` (it includes kernels/cuda/half_acc.cuh, the 16-bit accumulator and C
store that ME-TCF's 16-bit kernels share: the two formats' tiles are the same).
"""
from kernels.formats.tiledcsr.plugin import FORMAT

__all__ = ["FORMAT"]
