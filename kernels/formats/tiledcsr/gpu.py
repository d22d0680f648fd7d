"""CSR -> Tiled-CSR on the GPU (CuPy): the same arrays, dtypes and canonical order as `csr_to_tiledcsr` (CPU).

Written once for NumPy and CuPy: the array module is the inputs' (``blocks.csr_inputs``), so the CPU suite runs
this very code on NumPy and checks it bit for bit against the host converter (tests/kernels/formats/tiledcsr/
test_tiledcsr_xp.py); on CuPy everything stays on the device. CuPy is imported only for CuPy inputs (and by
`csr_to_tiledcsr_gpu_from_scipy`). The host converter (``container.csr_to_tiledcsr`` over
``kernels.formats.condense``) stays the reference.

Method (device-wide primitives, no custom kernel, no loop over rows, groups or tiles): row of each nonzero by
`searchsorted` on indptr; one sort of the int64 key ``group * K + col`` gives each 16-row group's distinct columns
(adjacent difference + `cumsum` number them); a column's rank in its group gives its tile ``rank // w`` and slot
``rank % w``; a second sort on the unique key ``tile * 16 * w + r * w + slot`` gives the canonical (tile, r, c)
order of the nonzeros; tile-local row pointers are a `bincount` of (tile, r) and a `cumsum` along each tile's
rows. Three host syncs: nnz, the distinct (group, column) pairs and the tile count (they size outputs). Peak
memory about 70 bytes per nonzero on top of the inputs.
"""
from __future__ import annotations

from kernels.formats.blocks import convert_scipy, csr_inputs, host_copy, host_nan_bits
from kernels.formats.tiledcsr.container import HEIGHT, TiledCSR, indptr_dtype
from kernels.precision import precision as as_precision
from storage.indexing import index_dtype

KEY_LIMIT = 2**62  # n_groups * K above this would overflow the int64 sort key: rank the columns first



def csr_to_tiledcsr_gpu(indptr, indices, data, shape, *, width: int = 16, to_storage=None) -> TiledCSR:
    """CSR arrays (CuPy, or NumPy for the CPU twin; int32 or int64 indices) -> a `TiledCSR` whose arrays live where
    the inputs live, equal to `csr_to_tiledcsr` array by array, dtypes included.

    Contract: ``indptr`` [M + 1] non-decreasing from 0 to nnz, ``indices`` [>= nnz] in [0, K), no duplicate (row,
    col) pairs (column order within a row does not matter); explicit zeros are kept. Values keep their dtype
    through the reordering, then go through ``to_storage`` (``Precision.to_storage``; default: float32), which is
    elementwise, as on the host.
    """
    if width not in (8, 16):
        raise ValueError(f"width is {width}, expected 8 (TF32 m16n8k8) or 16 (FP16/BF16 m16n8k16)")
    xp, indptr, indices, data, n_rows, n_cols, nnz = csr_inputs(indptr, indices, data, shape)
    n_groups = -(-n_rows // HEIGHT)
    to_storage = host_nan_bits(to_storage) if to_storage else (lambda x: x.astype(xp.float32))
    if nnz == 0:
        return TiledCSR((n_rows, n_cols), xp.zeros(n_groups + 1, dtype=index_dtype(0)),
                        xp.zeros(1, dtype=index_dtype(0)), xp.zeros((0, width), dtype=index_dtype(n_cols)),
                        xp.zeros((0, HEIGHT + 1), dtype=indptr_dtype(width)), xp.zeros(0, dtype=xp.uint8),
                        to_storage(data[:0]))

    rows = xp.searchsorted(indptr.astype(xp.int64), xp.arange(nnz, dtype=xp.int64), side="right") - 1
    group = rows // HEIGHT
    cols = indices[:nnz].astype(xp.int64)
    if n_groups * max(n_cols, 1) > KEY_LIMIT:  # rank the columns (order preserving, < nnz) so the key fits
        _, ranked = xp.unique(cols, return_inverse=True)
        key_cols, key_width = ranked.reshape(-1).astype(xp.int64), nnz
    else:
        key_cols, key_width = cols, max(n_cols, 1)
    key = group * key_width + key_cols
    del key_cols
    by_key = xp.argsort(key)  # equal keys are one (group, column) pair: any sort numbers them the same
    sorted_key = key[by_key]
    del key
    is_new = xp.concatenate([xp.ones(1, dtype=xp.bool_), sorted_key[1:] != sorted_key[:-1]])
    pair = xp.empty(nnz, dtype=xp.int64)
    pair[by_key] = xp.cumsum(is_new, dtype=xp.int64) - 1  # nonzero -> its (group, column) pair
    first = xp.flatnonzero(is_new)  # synchronize! (sizes the pair arrays)
    u_group, u_col = group[by_key[first]], cols[by_key[first]]
    del by_key, sorted_key, is_new, first, group, cols
    distinct = xp.bincount(u_group, minlength=n_groups)  # distinct columns per group
    u_rank = xp.arange(u_group.shape[0], dtype=xp.int64) - (xp.cumsum(distinct) - distinct)[u_group]
    tile_start = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.cumsum((distinct + (width - 1)) // width)])
    n_tiles = int(tile_start[-1])  # synchronize!
    u_tile = tile_start[u_group] + u_rank // width
    tile_cols = xp.full((n_tiles, width), -1, dtype=index_dtype(n_cols))
    tile_cols[u_tile, u_rank % width] = u_col.astype(tile_cols.dtype)
    nz_tile, slot, r = u_tile[pair], u_rank[pair] % width, rows % HEIGHT
    del pair, rows, u_group, u_col, u_rank, u_tile
    order = xp.argsort(nz_tile * (HEIGHT * width) + r * width + slot)  # unique keys: the canonical order
    counts = xp.bincount(nz_tile * HEIGHT + r, minlength=n_tiles * HEIGHT).reshape(n_tiles, HEIGHT)
    tile_indptr = xp.zeros((n_tiles, HEIGHT + 1), dtype=indptr_dtype(width))
    tile_indptr[:, 1:] = xp.cumsum(counts, axis=1).astype(tile_indptr.dtype)  # <= 16 * w: fits the dtype
    tile_ptr = xp.zeros(n_tiles + 1, dtype=index_dtype(nnz))
    tile_ptr[1:] = xp.cumsum(xp.bincount(nz_tile, minlength=n_tiles)).astype(tile_ptr.dtype)
    return TiledCSR((n_rows, n_cols), tile_start.astype(index_dtype(n_tiles)), tile_ptr, tile_cols, tile_indptr,
                    slot[order].astype(xp.uint8), to_storage(data[:nnz][order]))


def csr_to_tiledcsr_gpu_from_scipy(A, precision, xp=None) -> TiledCSR:
    """Upload a SciPy sparse matrix (made canonical on the host first, as the CPU converter does) and convert it
    at ``precision`` (a `Precision` or its name): tile width and storage dtype. ``xp`` defaults to cupy."""
    p = as_precision(precision)
    return convert_scipy(csr_to_tiledcsr_gpu, A, "csr_to_tiledcsr_gpu", xp, width=p.block_width,
                         to_storage=p.to_storage)


def to_host(X: TiledCSR) -> TiledCSR:
    """The host (NumPy) `TiledCSR` of a device one (synchronizes); a host one is returned as is."""
    return host_copy(X, ("group_ptr", "tile_ptr", "tile_cols", "tile_indptr", "tile_indices", "data"))


__all__ = ["KEY_LIMIT", "csr_to_tiledcsr_gpu", "csr_to_tiledcsr_gpu_from_scipy", "to_host"]
