"""The B / out contract of every SpMM launcher (ME-TCF TF32 and 16-bit, BCSR, Tiled-CSR, CVSE, the deterministic CSR
kernel), checked in one place: B [K, N] a C-contiguous cupy array in the precision's storage dtype, out [M, N]
C-contiguous float32 or that dtype (TF32: float32), made here when not given; and the kernel flags those buffers
allow. Tested through each launcher family by tests/kernels/test_gpu_operands.py."""
from __future__ import annotations

import numpy as np

from kernels.precision import precision as as_precision

FLAG_VEC, FLAG_ADD, FLAG_OUT16 = 1, 2, 4  # the .cu files' FLAG_* (16-byte accesses, C += A @ B, 16-bit C)


def check_b_out(shape, precision: str, B, out, out_dtype, accumulate: bool, *, vec_elems: int):
    """(out, N, flags) for C = A @ B with A of ``shape`` in ``precision`` (a name); FLAG_VEC when N is a multiple of
    ``vec_elems`` (the elements of one vector access) and B, out are 16-byte aligned."""
    import cupy

    want = as_precision(precision).storage_dtype
    if not isinstance(B, cupy.ndarray) or B.ndim != 2 or not B.flags.c_contiguous or not _storage(B.dtype, want):
        raise TypeError(f"B must be a C-contiguous 2-D cupy {want} array for {precision}, got "
                        f"{type(B).__name__} {getattr(B, 'dtype', None)} ndim={getattr(B, 'ndim', None)}")
    want = B.dtype  # bfloat16: uint16 bits or a dtype named bfloat16; out may be the same
    n_rows, n_cols = shape
    if B.shape[0] != n_cols:
        raise ValueError(f"B has {B.shape[0]} rows, expected A's column count {n_cols}")
    N = int(B.shape[1])
    if N < 1:
        raise ValueError("B has 0 columns, expected N >= 1")
    if out is None:
        if accumulate:
            raise ValueError("accumulate=True adds A @ B to out: pass out")
        dtype = np.dtype(np.float32 if out_dtype is None else out_dtype)
        if dtype not in (np.dtype(np.float32), want):
            raise ValueError(f"out_dtype is {out_dtype}, expected float32 or {want}")
        out = cupy.empty((n_rows, N), dtype=dtype)
    elif out.dtype not in (np.dtype(np.float32), want) or out.shape != (n_rows, N) or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous float32 or {want} of shape {(n_rows, N)}, got {out.dtype} "
                         f"{out.shape}")
    elif out_dtype is not None and np.dtype(out_dtype) != out.dtype:
        raise ValueError(f"out_dtype is {out_dtype} but out is {out.dtype}")
    if precision == "float32" and out.dtype != np.float32:
        raise ValueError(f"TF32 writes float32 C, got out {out.dtype}")
    flags = ((FLAG_VEC if vector_path(N, vec_elems, B, out) else 0) | (FLAG_ADD if accumulate else 0)
             | (FLAG_OUT16 if out.dtype.itemsize == 2 and precision != "float32" else 0))
    return out, N, flags


def vector_path(N: int, vec_elems: int, *buffers) -> bool:
    """Whether a kernel may take its 16-byte path (FLAG_VEC): N a multiple of ``vec_elems`` (the elements of one
    16-byte access) and every buffer given (None: made by the launcher, so aligned) 16-byte aligned."""
    return N % vec_elems == 0 and all(b is None or b.data.ptr % 16 == 0 for b in buffers)


def _storage(dtype, want) -> bool:
    """dtype holds the precision's storage: equal to ``want``, or for bfloat16 (uint16 bits) a 2-byte dtype named
    bfloat16 (ml_dtypes / torch interop)."""
    return dtype == want or (want == np.uint16 and dtype.name == "bfloat16" and dtype.itemsize == 2)
