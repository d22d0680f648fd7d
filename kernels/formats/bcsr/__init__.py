"""BCSR (SMaT, SC'24): `container` (arrays, conversion, NumPy twin), `gpu` (GPU conversion), `shard`
(ShardOps), `launch` (launchers), `plugin` (device operator and `FORMAT`), the kernel `bcsr_spmm.cu`.
"""
from kernels.formats.bcsr.plugin import FORMAT

__all__ = ["FORMAT"]
