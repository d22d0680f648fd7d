"""What every format's conversion shares: canonical CSR in, and the pieces of a row-block conversion stacked back.

- `canonical_csr(A, who)`: SciPy CSR with sorted, duplicate-free rows (a copy only when A is not already so;
  explicit zeros kept); TypeError naming the caller for anything that is not a SciPy sparse matrix.
- `check_pieces(pieces, name, rows_multiple, same)`: the row blocks a Dask conversion stitches: at least one, all
  alike by ``same(piece)`` (columns, block width, value dtype), all but the last a whole number of row groups.
- `stack_offsets(ptrs)`: concatenated ``[n + 1]`` offset arrays of consecutive pieces, each shifted by the total
  of the pieces before it (their last entry), as int64.
- `WINDOW`: rows per row window, the unit of Dask row blocks, store groups and shards for every format;
  `window_chunks(wptr, chunk_nnz)`: window ranges of about ``chunk_nnz`` nonzeros each.
- The GPU converters (``<format>/gpu.py``, one code path for NumPy and CuPy): `array_namespace(*arrays)` (cupy if
  any input is a CuPy array), `csr_inputs(indptr, indices, data, shape)` (their checked CSR inputs and nnz),
  `convert_scipy(converter, A, who, xp, **kw)` (canonical on the host, uploaded, converted there),
  `host_copy(X, fields)` (a container's arrays brought to the host, synchronizing).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

WINDOW = 16  # rows per row window (the m16 of mma.m16n8k8 and m16n8k16)


def canonical_csr(A, who: str) -> sp.csr_array:
    if not sp.issparse(A):
        raise TypeError(f"{who} needs a scipy.sparse matrix, got {type(A).__name__}")
    A = A if isinstance(A, sp.csr_array) else sp.csr_array(A)  # the same object: its canonical flag is cached
    if not A.has_canonical_format:
        A = A.copy()
        A.sum_duplicates()  # sorts indices; keeps explicit zeros
    return A


def array_namespace(*arrays):
    """cupy if any input is a CuPy array (imported only then), else numpy."""
    for a in arrays:
        if type(a).__module__.startswith("cupy"):
            import cupy
            return cupy
    return np


def csr_inputs(indptr, indices, data, shape):
    """(xp, indptr, indices, data, n_rows, n_cols, nnz) of a GPU converter's CSR inputs, in their array library;
    ValueError in one line for an indptr of the wrong length or indices / data shorter than nnz. Reading nnz
    synchronizes on the device."""
    xp = array_namespace(indptr, indices, data)
    indptr, indices, data = xp.asarray(indptr), xp.asarray(indices), xp.asarray(data)
    n_rows, n_cols = (int(s) for s in shape)
    if indptr.shape != (n_rows + 1,):
        raise ValueError(f"indptr has {indptr.shape[0] if indptr.ndim else 0} entries, expected n_rows + 1 = "
                         f"{n_rows + 1}")
    nnz = int(indptr[-1])  # synchronize!
    if indices.shape[0] < nnz or data.shape[0] < nnz:
        raise ValueError(f"indices/data have {indices.shape[0]}/{data.shape[0]} entries, expected nnz = {nnz}")
    return xp, indptr, indices, data, n_rows, n_cols, nnz


def convert_scipy(converter, A, who: str, xp=None, **kw):
    """A SciPy sparse matrix made canonical on the host (as the CPU converters do), its CSR arrays uploaded to
    ``xp`` (default cupy) and converted there: ``converter(indptr, indices, data, shape, **kw)``."""
    if xp is None:
        import cupy as xp
    A = canonical_csr(A, who)
    return converter(xp.asarray(A.indptr), xp.asarray(A.indices), xp.asarray(A.data), A.shape, **kw)


def host_nan_bits(to_storage):
    """``to_storage`` for a GPU converter, giving NaN the 16-bit pattern NumPy gives it: CuPy's float -> float16
    cast writes 0x7fff for every NaN where NumPy keeps the sign and the top payload bits (0x7e00 for the usual
    NaN), so without this a device conversion differed from the host one in NaN's bits (the CVSE converter's
    special_values case at float16, H100, 2026-11-27). NaNs are rare: their few values go through NumPy's cast on
    the host (one device sync to find them); other values and dtypes are left as ``to_storage`` made them."""
    def convert(x):
        out = to_storage(x)
        xp = array_namespace(out)
        if xp is np or out.dtype != np.float16 or out.size == 0:
            return out
        flat = x.reshape(-1)
        nan = xp.flatnonzero(xp.isnan(flat))  # synchronize! (sizes the result)
        if nan.size:
            bits = xp.asnumpy(flat[nan]).astype(np.float16).view(np.uint16)
            out.reshape(-1).view(xp.uint16)[nan] = xp.asarray(bits)
        return out

    return convert


def host_copy(X, fields: tuple[str, ...]):
    """``type(X)(X.shape, *fields as NumPy)``: the host container of a device one (synchronizes); a host one (its
    first field a NumPy array) is returned as is."""
    arrays = [getattr(X, f) for f in fields]
    if array_namespace(*arrays) is np:
        return X
    import cupy
    return type(X)(X.shape, *(cupy.asnumpy(a) for a in arrays))


def check_pieces(pieces: list, name: str, rows_multiple: int, same, multiple_label: str = "") -> None:
    if not pieces:
        raise ValueError(f"{name} needs at least one piece")
    want = same(pieces[0])
    for k, P in enumerate(pieces):
        if same(P) != want:
            raise ValueError(f"piece {k} is {same(P)}; expected {want} like piece 0")
        if k < len(pieces) - 1 and int(P.shape[0]) % rows_multiple:
            raise ValueError(f"piece {k} has {P.shape[0]} rows, expected a multiple of "
                             f"{multiple_label or rows_multiple} (all but the last)")


def stack_offsets(ptrs: list[np.ndarray]) -> np.ndarray:
    base = np.cumsum([0] + [int(p[-1]) for p in ptrs])
    return np.concatenate([np.zeros(1, np.int64)] + [p[1:].astype(np.int64) + b for p, b in zip(ptrs, base)])


def window_chunks(wptr: np.ndarray, chunk_nnz: int, max_windows: int | None = None) -> np.ndarray:
    """Boundaries [c0=0, c1, ..., n_windows] of window ranges holding about ``chunk_nnz`` nonzeros each.

    A window heavier than ``chunk_nnz`` forms its own chunk; ``max_windows`` caps the windows per chunk.
    """
    n_windows = wptr.shape[0] - 1
    nnz = int(wptr[-1])
    cuts = np.searchsorted(wptr, np.arange(0, nnz, max(int(chunk_nnz), 1), dtype=np.int64), side="right") - 1
    if max_windows:
        cuts = np.concatenate([cuts, np.arange(0, n_windows, int(max_windows))])
    return np.unique(np.concatenate([[0], cuts, [n_windows]])).astype(np.int64)
