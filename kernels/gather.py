"""Row gather on the device, bound once: ``out[i, :] = C[index[i], :]`` (kernels/cuda/gather_rows.cu), moved as raw
words, so any element type comes out bitwise. What a plan on permuted rows (A[perm]) needs to hand back its product
in the caller's row order (``index`` the inverse permutation): `bind_rows` packs the launch like the formats'
bound launches (kernels.launch.Bound: one ``cuLaunchKernel``, ``set_io`` re-points C and out), and
kernels.calls.gathered puts it behind a plan's bound call, so that one call, and one replayed CUDA graph, does both.
The word is the widest of 16, 4 and 2 bytes that divides a row's bytes and both pointers' alignment. With a bias
(float32 rows of whole 16-byte words only, `bias_fits`), ``out[i, :] = C[index[i], :] + bias`` in the same pass.
"""
from __future__ import annotations

import numpy as np

from kernels import launch

SOURCE = launch.CUDA_DIR / "gather_rows.cu"
THREADS = 256
MAX_BLOCKS = 65535  # the grid-stride loop covers the rest


class _Build:
    """gather_rows.cu takes no -D options."""

    @staticmethod
    def defines() -> tuple:
        return ()


BUILD = _Build()


def word_bytes(row_bytes: int, *ptrs: int) -> int:
    """The widest word (16, 4 or 2 bytes) dividing ``row_bytes`` and every pointer."""
    for w in (16, 4, 2):
        if row_bytes % w == 0 and all(p % w == 0 for p in ptrs):
            return w
    raise ValueError(f"gather_rows: rows of {row_bytes} bytes at these addresses are not whole 2-byte words")


def bias_fits(C, out, bias) -> bool:
    """Whether `bind_rows` can add ``bias`` in its pass: float32 C, out and bias [n] (cupy arrays), n % 4 == 0,
    all three 16-byte aligned."""
    return (C.dtype == out.dtype == bias.dtype == np.float32 and bias.shape == (int(C.shape[1]),)
            and int(C.shape[1]) % 4 == 0 and bias.flags.c_contiguous
            and all(int(p) % 16 == 0 for p in (C.data.ptr, out.data.ptr, bias.data.ptr)))


def bind_rows(C, index, out, bias=None) -> tuple[launch.Bound, int]:
    """``out[i] = C[index[i]]`` (``+ bias`` when given: it must `bias_fits`) bound on these buffers (cupy arrays:
    C [m, n] and out [k, n] C-contiguous, of one dtype of 2 or more bytes per element; index int64 [k], every entry
    in [0, m): not checked on the device), and the word it moves in bytes: ``set_io(C, out)`` re-points both, and a
    new pointer must be a multiple of it (the bias stays the bound one)."""
    import cupy

    if C.ndim != 2 or out.ndim != 2 or C.shape[1] != out.shape[1] or C.dtype != out.dtype:
        raise ValueError(f"gather_rows: C {C.shape} {C.dtype} and out {out.shape} {out.dtype} differ in columns or "
                         f"dtype")
    if not (C.flags.c_contiguous and out.flags.c_contiguous):
        raise ValueError("gather_rows: C and out must be C-contiguous")
    if index.dtype != cupy.int64 or index.shape != (out.shape[0],):
        raise ValueError(f"gather_rows: index must be int64 of shape ({out.shape[0]},), got {index.dtype} "
                         f"{index.shape}")
    if bias is not None and not bias_fits(C, out, bias):
        raise ValueError(f"gather_rows: a bias {bias.shape} {bias.dtype} is added to float32 rows of whole 16-byte "
                         f"words, 16-byte aligned (C {C.shape} {C.dtype})")
    row_bytes = int(C.shape[1]) * C.dtype.itemsize
    w = word_bytes(row_bytes, C.data.ptr, out.data.ptr)
    row_words = row_bytes // w
    total = int(out.shape[0]) * row_words
    bound = launch.Bound(C, out, 1)
    blocks = max(1, min(MAX_BLOCKS, -(-total // THREADS)))
    rows = (np.int64(out.shape[0]), np.int64(row_words))
    if bias is None:
        bound.add(launch.function(f"gather_rows_w{w}", BUILD, SOURCE), (blocks,), (THREADS,), (C, index, out, *rows),
                  b_at=0, out_at=2)
    else:
        bound.add(launch.function("gather_rows_bias_f32", BUILD, SOURCE), (blocks,), (THREADS,),
                  (C, index, bias, out, *rows), b_at=0, out_at=3)
    return bound, w
