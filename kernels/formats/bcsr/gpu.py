"""CSR -> BCSR on the GPU (CuPy): the same arrays, dtypes and canonical order as `kernels.formats.bcsr.csr_to_bcsr`.

Written once for NumPy and CuPy: the array module is the inputs' (``blocks.csr_inputs``), so the CPU suite
runs this very code on NumPy and checks it bit for bit against the CPU converter (tests/kernels/test_bcsr_xp.py);
on CuPy everything stays on the device. CuPy is imported only for CuPy inputs (and by `csr_to_bcsr_gpu_from_scipy`).
Method (device-wide primitives, no custom kernel, no loop over rows or blocks): row of each nonzero by
`searchsorted` on indptr; one sort of the int64 key ``block_row * n_block_cols + block_col`` groups the nonzeros by
block (the distinct keys in ascending order are the canonical block order; adjacent difference + `cumsum` number
them); block indptr by `searchsorted` of the block rows; values converted to the storage dtype per nonzero and
scattered into zeroed dense blocks. Peak memory about 60 bytes per nonzero (the sort's) on top of the inputs, plus the blocks.
"""
from __future__ import annotations

import numpy as np

from kernels.formats.bcsr.container import BCSR, BLOCK_ROWS
from kernels.formats.blocks import convert_scipy, csr_inputs, host_copy, host_nan_bits
from kernels.launch import free_device_bytes
from storage.indexing import index_dtype
from kernels.precision import precision as as_precision

KEY_LIMIT = 2**62  # n_block_rows * n_block_cols above this would overflow the int64 sort key: rank columns first



def _starts(sorted_x, xp):
    """bool [n]: True where a run of equal values begins in the sorted ``sorted_x`` (n >= 1)."""
    return xp.concatenate([xp.ones(1, dtype=xp.bool_), sorted_x[1:] != sorted_x[:-1]])


def csr_to_bcsr_gpu(indptr, indices, data, shape, *, width: int = 16, to_storage=None,
                    max_bytes: int | None = None) -> BCSR:
    """CSR arrays (CuPy, or NumPy for the CPU twin; int32 or int64 indices) -> a `BCSR` whose arrays live where
    the inputs live, equal to `csr_to_bcsr` array by array, dtypes included.

    Contract: ``indptr`` [M + 1] non-decreasing from 0 to nnz, ``indices`` [>= nnz] in [0, K), no duplicate (row,
    col) pairs (column order within a row does not matter); explicit zeros are kept (they make a block, as on the
    CPU). Values go to float32, then through ``to_storage`` (``Precision.to_storage``; default: float32 kept),
    which must be elementwise with 0 -> 0 bits, so converting per nonzero before the scatter equals the CPU's
    converting the dense blocks. ``max_bytes``: what the blocks may take (default: the device's free memory for
    CuPy, unlimited for NumPy); ValueError before allocating them when they would not fit. Host syncs: nnz, and the
    number of blocks (both size outputs).
    """
    if width not in (8, 16):
        raise ValueError(f"width is {width}, expected 8 (TF32 m16n8k8) or 16 (FP16/BF16 m16n8k16)")
    xp, indptr, indices, data, n_rows, n_cols, nnz = csr_inputs(indptr, indices, data, shape)
    nbr, nbc = -(-n_rows // BLOCK_ROWS), -(-n_cols // width)
    hw = BLOCK_ROWS * width
    to_storage = host_nan_bits(to_storage) if to_storage else (lambda x: x)
    with np.errstate(over="ignore"):  # past float32's range -> inf, as the CPU converter's assignment casts
        vals = to_storage(data[:nnz].astype(xp.float32))
    if nnz == 0:
        return BCSR((n_rows, n_cols), xp.zeros(nbr + 1, dtype=index_dtype(0)), xp.zeros(0, dtype=index_dtype(nbc)),
                    xp.zeros((0, BLOCK_ROWS, width), dtype=vals.dtype))

    rows = xp.searchsorted(indptr.astype(xp.int64), xp.arange(nnz, dtype=xp.int64), side="right") - 1
    cols = indices[:nnz].astype(xp.int64)
    slot = (rows % BLOCK_ROWS) * width + cols % width  # position inside the block, row-major
    brow, bcol = rows // BLOCK_ROWS, cols // width
    del rows, cols
    if nbr * nbc > KEY_LIMIT:  # rank the block columns (order preserving, < nnz) so the key fits int64
        by_col = xp.argsort(bcol)
        sorted_col = bcol[by_col]
        starts = _starts(sorted_col, xp)
        ucol = sorted_col[starts]  # the distinct block columns, ascending
        bcol = xp.empty(nnz, dtype=xp.int64)
        bcol[by_col] = xp.cumsum(starts, dtype=xp.int64) - 1
        del by_col, sorted_col, starts
        key_width = int(ucol.shape[0])
    else:
        ucol, key_width = None, max(nbc, 1)
    key = brow * key_width + bcol
    del brow, bcol
    order = xp.argsort(key)  # equal keys are one block: any sort gives the same blocks and scatter
    sorted_key = key[order]
    del key
    starts = _starts(sorted_key, xp)
    ukey = sorted_key[starts]  # synchronize! (sizes the block arrays): one key per block, canonical order
    flat = (xp.cumsum(starts, dtype=xp.int64) - 1) * hw + slot[order]
    vals = vals[order]
    del sorted_key, starts, slot, order
    n_blocks = int(ukey.shape[0])
    ub_row = ukey // key_width
    ub_col = ukey % key_width if ucol is None else ucol[ukey % key_width]
    out_indptr = xp.searchsorted(ub_row, xp.arange(nbr + 1, dtype=xp.int64), side="left")
    out_indices = ub_col.astype(index_dtype(nbc))
    del ukey, ub_row, ub_col
    need = n_blocks * hw * vals.dtype.itemsize
    limit = free_device_bytes(xp) if max_bytes is None else int(max_bytes)
    if limit is not None and need > limit:
        raise ValueError(f"BCSR of this {n_rows} x {n_cols} matrix needs {n_blocks} blocks x "
                         f"{hw * vals.dtype.itemsize} B = {need / 2**30:.3g} GiB, more than the {limit / 2**30:.3g} "
                         f"GiB available ({'free on the device' if max_bytes is None else 'max_bytes'}); convert row blocks apart (shards) or on the host "
                         "(kernels.formats.bcsr.csr_to_bcsr)")
    out_data = xp.zeros(n_blocks * hw, dtype=vals.dtype)
    out_data[flat] = vals  # positions are distinct (no duplicate entries): no write races
    return BCSR((n_rows, n_cols), out_indptr.astype(index_dtype(n_blocks)), out_indices,
                out_data.reshape(n_blocks, BLOCK_ROWS, width))


def csr_to_bcsr_gpu_from_scipy(A, precision, xp=None) -> BCSR:
    """Upload a SciPy sparse matrix (made canonical on the host first, as the CPU converter does) and convert it
    at ``precision`` (a `Precision` or its name): block width and storage dtype. ``xp`` defaults to cupy."""
    p = as_precision(precision)
    return convert_scipy(csr_to_bcsr_gpu, A, "csr_to_bcsr_gpu", xp, width=p.block_width, to_storage=p.to_storage)


def to_host(X: BCSR) -> BCSR:
    """The host (NumPy) `BCSR` of a device one (synchronizes); a host one is returned as is."""
    return host_copy(X, ("indptr", "indices", "data"))


__all__ = ["KEY_LIMIT", "csr_to_bcsr_gpu", "csr_to_bcsr_gpu_from_scipy", "free_device_bytes", "to_host"]
