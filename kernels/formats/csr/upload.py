"""A's column ids and values on the device in a given row order, permuted and converted there (`CsrRows`' upload).

On the host, the row gather (SciPy's fancy row indexing) and NumPy's float32 -> float16 rounding took 0.08 s of a
10M-nonzero plan's CSR kernel build (H200 host); here A's arrays travel as they are (kernels.transfer) and the
gather and rounding run on the GPU, in chunks of ``CHUNK`` nonzeros so that the index temporaries stay bounded.
The result is bitwise the host path's: the same entries in the same order, rounded by the same rule
(`kernels.precision.Precision.to_storage` on a CuPy array).
"""
from __future__ import annotations

import numpy as np

from kernels import transfer

CHUNK = 1 << 24  # nonzeros gathered per step (three int64 temporaries of 128 MiB)


def ordered_ptr(indptr, order) -> np.ndarray:
    """int64 row pointer of the rows ``order`` of a CSR with row pointer ``indptr``, one after another."""
    ptr = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(np.diff(np.asarray(indptr, dtype=np.int64))[order], out=ptr[1:])
    return ptr


def upload_rows(A, order, prec, order_ptr=None) -> tuple:
    """(indices int32, values in ``prec``'s storage dtype) of canonical CSR ``A``'s rows in ``order`` (int array of
    row ids, None: A's own order) as CuPy arrays. Values stored in the storage dtype already (16-bit bits
    included) are moved as they are; others are rounded from float32 on the device. ``order_ptr``: `ordered_ptr`
    of A and ``order`` where the caller has it."""
    import cupy

    nnz = int(A.nnz)
    if nnz == 0:
        return cupy.zeros(1, cupy.int32), cupy.zeros(1, prec.storage_dtype)
    values = A.data if A.data.dtype in (prec.storage_dtype, np.float32) else A.data.astype(np.float32)
    indices = transfer.to_device(np.asarray(A.indices, dtype=np.int32))
    values = transfer.to_device(values)
    if order is not None:
        order = np.asarray(order)
        new_ptr = ordered_ptr(A.indptr, order) if order_ptr is None else order_ptr
        indices, values = _gather_rows(np.asarray(A.indptr, dtype=np.int64), order, new_ptr, indices, values)
    if values.dtype != prec.storage_dtype:
        values = prec.to_storage(values)
    return indices, values


def _gather_rows(indptr: np.ndarray, order: np.ndarray, new_ptr: np.ndarray, indices, values) -> tuple:
    """The entries of rows ``order`` (one after another, each row's in its own order; ``new_ptr`` their
    `ordered_ptr`) of a CSR matrix with host ``indptr`` and device ``indices`` / ``values``: entry k of the result
    is entry k + shift[r] of the input, r its row in the new order (the last new row starting at or before k:
    empty rows take no entry)."""
    import cupy

    new_ptr_d = cupy.asarray(new_ptr)
    shift = cupy.asarray(indptr[order] - new_ptr[:-1])
    out_idx, out_val = cupy.empty_like(indices), cupy.empty_like(values)
    total = int(new_ptr[-1])
    for lo in range(0, total, CHUNK):
        k = cupy.arange(lo, min(lo + CHUNK, total), dtype=cupy.int64)
        src = k + shift[cupy.searchsorted(new_ptr_d, k, side="right") - 1]
        out_idx[lo:lo + k.size] = indices[src]
        out_val[lo:lo + k.size] = values[src]
    return out_idx, out_val
