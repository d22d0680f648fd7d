"""Sparse formats for Tensor-Core SpMM, each a plugin on one seam (``kernels.formats.registry``): `REGISTRY` maps a
name to its `Format`, and every stage (convert, store, SpmmPlan, shards, report) iterates it instead of naming a
format. ME-TCF (DTC-SpMM section 4.2) lives in `kernels.formats.metcf` (arrays, CPU conversion),
`kernels.formats.metcf_gpu` (GPU conversion, CuPy imported lazily) and `kernels.formats.metcf_plugin` (its
registration and device operator), so this package imports without a GPU.
"""
from kernels.formats.metcf import (METCF, balance, balanced_items, csr_to_metcf, metcf_stats,  # noqa: F401
                                   metcf_to_csr)
from kernels.formats.registry import REGISTRY, Format, candidates, get, register  # noqa: F401

from kernels.formats import metcf_plugin  # noqa: E402

register(metcf_plugin.FORMAT)
from kernels.formats import bcsr_plugin  # noqa: E402
register(bcsr_plugin.FORMAT)
from kernels.formats import tiledcsr_plugin  # noqa: E402
register(tiledcsr_plugin.FORMAT)
from kernels.formats import cvse_plugin  # noqa: E402
register(cvse_plugin.FORMAT)

__all__ = ["METCF", "REGISTRY", "Format", "balance", "balanced_items", "candidates", "csr_to_metcf", "get",
           "metcf_stats", "metcf_to_csr", "register"]
