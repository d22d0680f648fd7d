"""Formats, reference SpMMs, CUDA kernels, the cuSPARSE baseline and the selector.

Importing this package never imports CuPy: GPU modules (kernels.launch, kernels.cusparse) import it inside
their functions, and `SpmmPlan` falls back to the NumPy reference when CuPy or a device is missing.
The one-shot function is `kernels.spmm.spmm` (the name `kernels.spmm` is the module).
"""
from __future__ import annotations

import importlib

__all__ = ["SpmmPlan", "gpu_available"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module("kernels.spmm"), name)
    raise AttributeError(f"module 'kernels' has no attribute {name!r}")
