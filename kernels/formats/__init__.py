"""Sparse formats for Tensor-Core SpMM. ME-TCF (DTC-SpMM section 4.2) lives in `kernels.formats.metcf`;
the GPU converter in `kernels.formats.metcf_gpu` imports CuPy lazily, so this package imports without a GPU."""
from kernels.formats.metcf import (METCF, balance, balanced_items, csr_to_metcf, metcf_stats,  # noqa: F401
                                   metcf_to_csr)

__all__ = ["METCF", "balance", "balanced_items", "csr_to_metcf", "metcf_stats", "metcf_to_csr"]
