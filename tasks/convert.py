"""CSR to any registered format over a Dask cluster: window-aligned row blocks converted on the workers, stitched on
the driver.

The blocks are cut at window boundaries with about ``chunk_nnz`` nonzeros each (``window_chunks``), every block
is converted by the format's ``convert`` on a worker, and its ``concat`` stitches the results in order: the same
arrays as a one-process conversion, whatever the number of workers.
"""
from __future__ import annotations

import numpy as np

from configs.names import BASE_FORMAT
from kernels.formats.blocks import WINDOW, window_chunks

# Below this many nonzeros the scatter/gather costs more than converting in-process (~1 s per 10M nnz, 1 core).
SHARD_MIN_NNZ = 8_000_000
CHUNK_NNZ = 4_000_000


def convert_on_cluster(A, client, fmt=None, precision=None, *, chunk_nnz: int = CHUNK_NNZ):
    """``fmt.convert(A, precision)`` (default ME-TCF, float32) computed in window-aligned row blocks on
    ``client``'s workers."""
    from kernels.formats import get
    from kernels.precision import precision as as_precision

    fmt, precision = fmt or get(BASE_FORMAT), as_precision(precision or "float32")
    A = A.tocsr()
    n_rows = int(A.shape[0])
    n_windows = -(-n_rows // WINDOW)
    wptr = A.indptr[np.minimum(np.arange(n_windows + 1, dtype=np.int64) * WINDOW, n_rows)].astype(np.int64)
    bounds = window_chunks(wptr, chunk_nnz)
    rows = [(int(w0) * WINDOW, min(int(w1) * WINDOW, n_rows)) for w0, w1 in zip(bounds[:-1], bounds[1:])]
    blocks = client.scatter([A[r0:r1] for r0, r1 in rows])
    pieces = client.gather(client.map(fmt.convert, blocks, precision=precision, pure=False))
    return fmt.concat(pieces) if pieces else fmt.convert(A, precision)
