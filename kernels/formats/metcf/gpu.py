"""CSR -> ME-TCF on the GPU with CuPy: the same arrays, dtypes and canonical order as `csr_to_metcf` (CPU).

CuPy is imported inside the functions, so this module imports on a machine without CuPy or a GPU.
Method (all device-wide primitives, no custom kernel): row of each nonzero by `searchsorted` on indptr; one sort
of the int64 key ``window * n_cols + col`` gives each window's distinct columns (unique by adjacent difference +
`cumsum`); ranks within a window give block and slot; a second sort on the unique key ``block * 16 * width + tc_local_id``
gives the canonical nonzero order. Peak device memory is about 60 bytes per nonzero on top of the inputs.
"""
from __future__ import annotations

from kernels.formats.metcf.container import METCF, WIDTH, WIDTHS, WINDOW
from kernels.transfer import to_device
from storage.indexing import index_dtype


class DeviceMETCF(dict):
    """ME-TCF arrays on the device: keys ``row_window_offset``, ``tc_offset``, ``tc_local_id``,
    ``sparse_a_to_b``, ``data`` (CuPy arrays with the METCF dtypes) plus the ``shape`` attribute."""

    def __init__(self, shape: tuple[int, int], arrays: dict):
        super().__init__(arrays)
        self.shape = (int(shape[0]), int(shape[1]))

    def to_host(self) -> METCF:
        """Copy to a host `METCF` (synchronizes)."""
        return to_host(self)


def to_host(arrays: DeviceMETCF) -> METCF:
    """The host `METCF` for a `DeviceMETCF` (or any dict with the five arrays and a ``shape`` key/attribute)."""
    import cupy

    shape = getattr(arrays, "shape", None) or arrays["shape"]
    host = {k: cupy.asnumpy(arrays[k]) for k in ("row_window_offset", "tc_offset", "tc_local_id",
                                                    "sparse_a_to_b", "data")}
    return METCF(shape=(int(shape[0]), int(shape[1])), **host)


def csr_to_metcf_gpu(indptr, indices, data, shape, width: int = WIDTH) -> DeviceMETCF:
    """Convert a CSR given as arrays (NumPy or CuPy; int32 or int64 indices) to ME-TCF on the current device.

    Contract: ``indptr`` [M + 1] non-decreasing from 0 to nnz, ``indices`` [nnz] in [0, K), no duplicate
    (row, col) pairs (column order within a row does not matter). Values keep their dtype; explicit zeros are kept.
    Result arrays match `kernels.formats.metcf.csr_to_metcf` array by array, dtypes included. Three host syncs:
    nnz, the number of distinct (window, col) pairs, and the number of blocks (all needed to size outputs).
    """
    import cupy

    if width not in WIDTHS:
        raise ValueError(f"width is {width}, expected one of {WIDTHS}")
    n_rows, n_cols = int(shape[0]), int(shape[1])
    # host arrays through pinned staging (kernels.transfer: the plain copy of pageable memory ran at 1.5-1.8 GB/s,
    # 0.06 s of a 10M-nonzero plan's conversion on the H200's host); device arrays as they are
    indptr, indices, data = (to_device(a) for a in (indptr, indices, data))
    n_windows = -(-n_rows // WINDOW)
    if indptr.shape != (n_rows + 1,):
        raise ValueError(f"indptr has {indptr.shape[0]} entries, expected n_rows + 1 = {n_rows + 1}")
    nnz = int(indptr[-1])  # synchronize!
    if indices.shape[0] < nnz or data.shape[0] < nnz:
        raise ValueError(f"indices/data have {indices.shape[0]}/{data.shape[0]} entries, expected nnz = {nnz}")
    indices, data = indices[:nnz], data[:nnz]
    if nnz == 0:
        return DeviceMETCF((n_rows, n_cols), {
            "row_window_offset": cupy.zeros(n_windows + 1, dtype=index_dtype(0)),
            "tc_offset": cupy.zeros(1, dtype=index_dtype(0)), "tc_local_id": cupy.zeros(0, dtype=cupy.uint8),
            "sparse_a_to_b": cupy.zeros((0, width), dtype=index_dtype(n_cols)), "data": data.copy()})

    rows = cupy.searchsorted(indptr, cupy.arange(nnz, dtype=indptr.dtype), side="right").astype(cupy.int64) - 1
    window = rows >> 4
    cols = indices.astype(cupy.int64)
    if n_windows and n_cols > (2**62) // n_windows:
        # window * n_cols would overflow int64: rank the columns first (order preserving, values < nnz).
        _, cols_for_key = cupy.unique(cols, return_inverse=True)
        cols_for_key = cols_for_key.reshape(-1).astype(cupy.int64)
        key_width = max(nnz, 1)
    else:
        cols_for_key, key_width = cols, max(n_cols, 1)
    key = window * key_width + cols_for_key
    del cols_for_key
    by_key = cupy.argsort(key)
    sorted_key = key[by_key]
    del key
    is_new = cupy.concatenate([cupy.ones(1, dtype=cupy.bool_), sorted_key[1:] != sorted_key[:-1]])  # nnz >= 1
    pair_id = cupy.cumsum(is_new, dtype=cupy.int64) - 1
    inverse = cupy.empty(nnz, dtype=cupy.int64)
    inverse[by_key] = pair_id
    first_nz = cupy.flatnonzero(is_new)  # synchronize! (sizes the distinct-pair arrays)
    u_window = window[by_key[first_nz]]
    u_col = cols[by_key[first_nz]]
    del by_key, sorted_key, is_new, pair_id, first_nz
    n_pairs = int(u_window.shape[0])
    distinct = cupy.bincount(u_window, minlength=n_windows)
    first_pair = cupy.cumsum(distinct) - distinct
    u_rank = cupy.arange(n_pairs, dtype=cupy.int64) - first_pair[u_window]
    blocks_per_window = (distinct + (width - 1)) // width
    block_start = cupy.concatenate([cupy.zeros(1, dtype=cupy.int64), cupy.cumsum(blocks_per_window)])
    n_blocks = int(block_start[-1])  # synchronize!
    u_block = block_start[u_window] + u_rank // width
    sab_dtype = index_dtype(n_cols)
    sparse_a_to_b = cupy.full((n_blocks, width), -1, dtype=sab_dtype)
    sparse_a_to_b[u_block, u_rank % width] = u_col.astype(sab_dtype)

    nz_block = u_block[inverse]
    local_id = (rows & 15) * width + u_rank[inverse] % width
    del inverse, rows, window, cols
    order = cupy.argsort(nz_block * (WINDOW * width) + local_id)  # unique keys: any sort gives the canonical order
    tc_local_id = local_id[order].astype(cupy.uint8)
    out_data = data[order]
    nnz_per_block = cupy.bincount(nz_block, minlength=n_blocks)
    tc_offset = cupy.concatenate([cupy.zeros(1, dtype=cupy.int64), cupy.cumsum(nnz_per_block)])
    tc_offset = tc_offset.astype(index_dtype(nnz))
    row_window_offset = block_start.astype(index_dtype(n_blocks))
    return DeviceMETCF((n_rows, n_cols), {
        "row_window_offset": row_window_offset, "tc_offset": tc_offset, "tc_local_id": tc_local_id,
        "sparse_a_to_b": sparse_a_to_b, "data": out_data})


def metcf_to_csr_gpu(M: METCF):
    """`kernels.formats.metcf.metcf_to_csr` computed on the current device: the same SciPy CSR, array by array
    (canonical (row, col) order, ties in ME-TCF order, explicit zeros kept, the same dtypes). A GPU plan given
    ME-TCF (every distributed shard) builds its CUDA-core candidates from it: 1.5 s on the host at 21M nonzeros.

    Method: the window of each block and the block of each nonzero by `searchsorted` on the offsets; one stable
    sort of the int64 key ``row * n_cols + col``; row counts by `bincount`. About 40 bytes per nonzero of device
    memory; where the key would overflow int64 or the device is out of memory, the host conversion runs instead."""
    import cupy
    import scipy.sparse as sp

    from kernels.formats.metcf.container import metcf_to_csr

    n_rows, n_cols = (int(s) for s in M.shape)
    nnz = M.nnz
    if nnz == 0 or n_rows * n_cols >= 2**63:
        return metcf_to_csr(M)
    try:
        tco = cupy.asarray(M.tc_offset)
        blocks = cupy.searchsorted(tco, cupy.arange(nnz, dtype=tco.dtype), side="right") - 1
        rwo = cupy.asarray(M.row_window_offset)
        windows = cupy.searchsorted(rwo, cupy.arange(rwo[-1].item(), dtype=rwo.dtype), side="right") - 1
        lid = cupy.asarray(M.tc_local_id).astype(cupy.int64)
        shift = M.width.bit_length() - 1
        rows = (windows[blocks].astype(cupy.int64) * WINDOW) + (lid >> shift)
        cols = cupy.asarray(M.sparse_a_to_b)[blocks, lid & (M.width - 1)].astype(cupy.int64)
        del blocks, windows, lid
        order = cupy.argsort(rows * n_cols + cols)  # thrust's stable sort: ties keep ME-TCF order
        idx = index_dtype(max(n_rows, n_cols), nnz)
        indptr = cupy.zeros(n_rows + 1, dtype=idx)
        indptr[1:] = cupy.cumsum(cupy.bincount(rows, minlength=n_rows))
        indices = cols[order].astype(idx)
        del rows, cols
        bits = cupy.dtype(f"u{M.data.dtype.itemsize}")  # any value type (bfloat16 bits included): moved, not read
        data = cupy.asarray(M.data.view(bits))[order]
        host = (cupy.asnumpy(data).view(M.data.dtype), cupy.asnumpy(indices), cupy.asnumpy(indptr))
    except cupy.cuda.memory.OutOfMemoryError:
        return metcf_to_csr(M)
    out = sp.csr_array(host, shape=(n_rows, n_cols))
    out.indices, out.indptr = out.indices.astype(idx, copy=False), out.indptr.astype(idx, copy=False)
    out.has_sorted_indices = True
    out.has_canonical_format = True
    return out


def csr_to_metcf_gpu_from_scipy(A, width: int = WIDTH) -> DeviceMETCF:
    """Convenience: upload a SciPy sparse matrix (made canonical first, as the CPU converter does) and convert."""
    import scipy.sparse as sp

    A = A if isinstance(A, sp.csr_array) else sp.csr_array(A)  # the same object: its canonical flag is cached
    if not A.has_canonical_format:
        A = A.copy()
        A.sum_duplicates()
    return csr_to_metcf_gpu(A.indptr, A.indices, A.data, A.shape, width)


__all__ = ["DeviceMETCF", "csr_to_metcf_gpu", "csr_to_metcf_gpu_from_scipy", "metcf_to_csr_gpu", "to_host"]
