"""CVSE (VectorSparse SC'21, SSpMM TPDS'25): `container` (arrays, conversion, SpMM and SDDMM twins), `svc`
(Sparse Vector Compression), `tiles` (the tiled kernel's group layout), `launch` (launchers), `sddmm` (its SDDMM
route), `plugin` (device operator, ShardOps and `FORMAT`), the kernels `cvse_spmm.cu` (its tiled kernel in
`cvse_tiled.cuh`) and `cvse_sddmm.cu`, with `cvse_common.cuh`.
"""
from kernels.formats.cvse.plugin import FORMAT

__all__ = ["FORMAT"]
