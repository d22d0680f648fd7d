"""CSR -> CVSE on the GPU (CuPy): the same arrays, dtypes and canonical order as `csr_to_cvse` (CPU), at a given V.

Written once for NumPy and CuPy: the array module is the inputs' (``blocks.csr_inputs``), so the CPU suite runs
this very code on NumPy and checks it bit for bit against the host converter (tests/kernels/formats/cvse/
test_cvse_xp.py); on CuPy everything stays on the device. CuPy is imported only for CuPy inputs (and by
`csr_to_cvse_gpu_from_scipy`). The host converter (``container.csr_to_cvse``) stays the reference; choosing V
(Sparse Vector Compression, ``svc``) counts vectors on the host and is not part of this.

Method (device-wide primitives, no custom kernel): row of each nonzero by `searchsorted` on indptr; one sort of
the int64 key ``vector_row * K + col`` groups the nonzeros by vector (the distinct keys, ascending, are the
canonical vector order; adjacent difference + `cumsum` number them); vec_ptr by `bincount` of the vectors' rows
and `cumsum`; values to float32, scattered to ``data[vector, row % V]`` (distinct positions), then to the storage
dtype. Two host syncs: nnz and the vector count. Peak memory about 50 bytes per nonzero on top of the inputs, plus
the vectors.
"""
from __future__ import annotations

import numpy as np

from kernels.formats.blocks import convert_scipy, csr_inputs, host_copy, host_nan_bits
from kernels.formats.cvse.container import CVSE, check_vector
from kernels.precision import precision as as_precision
from storage.indexing import index_dtype

KEY_LIMIT = 2**62  # n_vec_rows * K above this would overflow the int64 sort key: rank the columns first



def csr_to_cvse_gpu(indptr, indices, data, shape, *, vector: int = 8, to_storage=None) -> CVSE:
    """CSR arrays (CuPy, or NumPy for the CPU twin; int32 or int64 indices) -> a `CVSE` with V = ``vector`` whose
    arrays live where the inputs live, equal to `csr_to_cvse` array by array, dtypes included.

    Contract: ``indptr`` [M + 1] non-decreasing from 0 to nnz, ``indices`` [>= nnz] in [0, K), no duplicate (row,
    col) pairs (column order within a row does not matter); an explicit zero makes a vector, as on the host.
    Values go to float32, then through ``to_storage`` (``Precision.to_storage``; default: float32 kept), which is
    elementwise with 0 -> 0 bits, so converting the scattered vectors equals the host's converting them.
    """
    V = check_vector(vector)
    xp, indptr, indices, data, n_rows, n_cols, nnz = csr_inputs(indptr, indices, data, shape)
    nvr = -(-n_rows // V)
    to_storage = host_nan_bits(to_storage) if to_storage else (lambda x: x)
    if nnz == 0:
        return CVSE((n_rows, n_cols), xp.zeros(nvr + 1, dtype=index_dtype(0)), xp.zeros(0, dtype=index_dtype(n_cols)),
                    to_storage(xp.zeros((0, V), dtype=xp.float32)))
    rows = xp.searchsorted(indptr.astype(xp.int64), xp.arange(nnz, dtype=xp.int64), side="right") - 1
    vrow = rows // V
    cols = indices[:nnz].astype(xp.int64)
    if nvr * max(n_cols, 1) >= KEY_LIMIT:  # rank the columns (order preserving, < nnz) so the key fits
        _, ranked = xp.unique(cols, return_inverse=True)
        key = vrow * nnz + ranked.reshape(-1).astype(xp.int64)
    else:
        key = vrow * max(n_cols, 1) + cols
    order = xp.argsort(key)  # equal keys are one vector: any sort numbers the vectors and scatters the same
    sorted_key = key[order]
    del key
    first = xp.concatenate([xp.ones(1, dtype=xp.bool_), sorted_key[1:] != sorted_key[:-1]])
    del sorted_key
    vec_of = xp.empty(nnz, dtype=xp.int64)
    vec_of[order] = xp.cumsum(first, dtype=xp.int64) - 1
    heads = order[xp.flatnonzero(first)]  # synchronize! (sizes the vectors): one nonzero per vector, in order
    del order, first
    n_vectors = int(heads.shape[0])
    with np.errstate(over="ignore"):  # past float32's range -> inf, as the host's assignment casts
        vals = data[:nnz].astype(xp.float32)
    out = xp.zeros((n_vectors, V), dtype=xp.float32)
    out[vec_of, rows % V] = vals  # positions are distinct (no duplicate entries): no write races
    vec_ptr = xp.zeros(nvr + 1, dtype=index_dtype(n_vectors))
    vec_ptr[1:] = xp.cumsum(xp.bincount(vrow[heads], minlength=nvr)).astype(vec_ptr.dtype)
    return CVSE((n_rows, n_cols), vec_ptr, cols[heads].astype(index_dtype(n_cols)), to_storage(out))


def csr_to_cvse_gpu_from_scipy(A, precision, *, vector: int = 8, xp=None) -> CVSE:
    """Upload a SciPy sparse matrix (made canonical on the host first, as the CPU converter does) and convert it
    at V = ``vector`` and ``precision`` (a `Precision` or its name: the storage dtype). ``xp`` defaults to cupy."""
    return convert_scipy(csr_to_cvse_gpu, A, "csr_to_cvse_gpu", xp, vector=vector,
                         to_storage=as_precision(precision).to_storage)


def to_host(X: CVSE) -> CVSE:
    """The host (NumPy) `CVSE` of a device one (synchronizes); a host one is returned as is."""
    return host_copy(X, ("vec_ptr", "indices", "data"))


__all__ = ["KEY_LIMIT", "csr_to_cvse_gpu", "csr_to_cvse_gpu_from_scipy", "to_host"]
