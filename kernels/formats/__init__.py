"""Sparse formats for Tensor-Core SpMM, each a plugin on one seam (``kernels.formats.registry``) and each one folder,
``kernels/formats/<name>/`` (its container and conversions, NumPy twin, sharding, device operator, launcher and
``.cu``): `REGISTRY` maps a name to its `Format`, and every stage (convert, store, SpmmPlan, shards, report)
iterates it instead of naming a format (SddmmPlan the formats with an SDDMM operator, `sddmm_formats`). The
registry is filled here, once, one line per format; importing this package imports no GPU module (each format's
launcher imports CuPy inside its functions).
"""
from kernels.formats.registry import REGISTRY, Format, candidates, get, register, sddmm_formats

from kernels.formats import bcsr, csr, cvse, metcf, tiledcsr  # noqa: E402  (each folder's __init__ defines FORMAT)

register(metcf.FORMAT)
register(bcsr.FORMAT)
register(tiledcsr.FORMAT)
register(cvse.FORMAT)
register(csr.FORMAT)

__all__ = ["REGISTRY", "Format", "candidates", "get", "register", "sddmm_formats"]
