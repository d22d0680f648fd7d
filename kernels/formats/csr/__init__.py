"""CSR on CUDA cores, the deterministic fallback where Tensor Core blocks stay nearly empty: `container` (arrays,
conversion, NumPy twin), `shard` (ShardOps), `launch` (the row cut and launchers), `plugin` (device operator and
`FORMAT`), the kernels `csr_spmm.cu` (its 16-bit mappings in `csr_rows16.cuh`, the per-call 16-bit copy of float32
B in `csr_pack.cuh`) and `csr_sddmm.cu`.
"""
from kernels.formats.csr.plugin import FORMAT

__all__ = ["FORMAT"]
