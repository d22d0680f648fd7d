"""ME-TCF straight from sorted keys ``row * n_cols + col`` (the synthetic matrices of tasks.distribute.synth), on
NumPy or CuPy in window-aligned chunks: `metcf_from_keys` returns exactly ``csr_to_metcf`` of the same matrix
(tests/tasks/distribute/test_synth.py), as host NumPy arrays, at 100M-500M nonzeros where the single-threaded
NumPy conversion takes minutes."""
from __future__ import annotations

import numpy as np

from kernels.formats.metcf.container import METCF, WIDTH, WINDOW
from storage.indexing import index_dtype


def to_host(x) -> np.ndarray:
    return x.get() if hasattr(x, "get") else np.asarray(x)


def metcf_from_keys(xp, keys, shape, seed: int = 0, chunk_nnz: int = 1 << 27) -> METCF:
    """Canonical ME-TCF (host NumPy arrays, float32 values in (0, 1]) of the matrix with sorted distinct
    ``keys = row * n_cols + col``; conversion on ``xp`` in window-aligned chunks of about ``chunk_nnz``."""
    n_rows, n_cols = (int(s) for s in shape)
    n_windows = -(-n_rows // WINDOW)
    nnz = int(keys.shape[0])
    # nonzeros before each window: keys of row 16w start at 16w * n_cols
    wptr = xp.searchsorted(keys, xp.arange(n_windows + 1, dtype=xp.int64) * WINDOW * n_cols)
    wptr_h = to_host(wptr).astype(np.int64)
    cuts = np.unique(np.concatenate([[0], np.searchsorted(wptr_h, np.arange(0, nnz, chunk_nnz), "right") - 1,
                                     [n_windows]]))
    bpw = np.zeros(n_windows, dtype=np.int64)
    per_block, slots, lids = [], [], []
    for w0, w1 in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        p0, p1 = int(wptr_h[w0]), int(wptr_h[w1])
        if p0 == p1:
            continue
        b, npb, sc, lid = _convert(xp, keys[p0:p1], n_cols, w0, w1 - w0)
        bpw[w0:w1] = to_host(b)
        per_block.append(to_host(npb))
        slots.append(to_host(sc))
        lids.append(to_host(lid))
    npb = np.concatenate(per_block) if per_block else np.zeros(0, np.int64)
    n_blocks = int(npb.shape[0])
    rwo = np.zeros(n_windows + 1, dtype=index_dtype(n_blocks))
    np.cumsum(bpw, out=rwo[1:])
    tco = np.zeros(n_blocks + 1, dtype=index_dtype(nnz))
    np.cumsum(npb, out=tco[1:])
    sab_dt = index_dtype(n_cols)
    sab = np.concatenate(slots).astype(sab_dt) if slots else np.zeros((0, WIDTH), sab_dt)
    lid = np.concatenate(lids) if lids else np.zeros(0, np.uint8)
    data = np.float32(1) - np.random.default_rng(seed).random(nnz, dtype=np.float32)
    return METCF((n_rows, n_cols), rwo, tco, lid, sab, data)


def _convert(xp, keys, n_cols: int, w0: int, n_windows: int):
    """One window range: (blocks per window, nnz per block, slot columns [n_blocks, 8], tc_local_id in ME-TCF
    order). The same steps as ``kernels.formats.condense._convert_chunk`` on keys instead of (row, col).

    Not ``gpu.csr_to_metcf_gpu``, although it computes the same arrays with CuPy: that one is
    CuPy only (this runs on NumPy too: tests/tasks/distribute/test_synth.py and ``multi_gpu.py --cpu``), takes a
    CSR with values (here: sorted keys, the values drawn afterwards; it would need an indptr, a dummy value array
    and its permutation per chunk) and returns device arrays; `metcf_from_keys` calls this per window range to bound
    device memory at 100M-500M nonzeros. Calling it on CuPy only would keep this function for NumPy anyway."""
    rows = keys // n_cols
    cols = keys - rows * n_cols
    window = (rows >> 4) - w0
    key2 = window * n_cols + cols
    order = xp.argsort(key2)
    sk = key2[order]
    is_new = xp.ones(sk.shape[0], dtype=bool)
    is_new[1:] = sk[1:] != sk[:-1]
    u = sk[is_new]
    inverse = xp.empty(key2.shape[0], dtype=xp.int64)
    inverse[order] = xp.cumsum(is_new) - 1
    del order, sk, is_new, key2
    u_window = u // n_cols
    u_col = u - u_window * n_cols
    distinct = xp.bincount(u_window, minlength=n_windows)
    first_u = xp.cumsum(distinct) - distinct
    u_rank = xp.arange(u.shape[0], dtype=xp.int64) - first_u[u_window]
    bpw = (distinct + WIDTH - 1) // WIDTH
    block_start = xp.cumsum(bpw) - bpw
    u_block = block_start[u_window] + u_rank // WIDTH
    n_blocks = int(bpw.sum())
    slot = xp.full(n_blocks * WIDTH, -1, dtype=xp.int64)
    slot[u_block * WIDTH + u_rank % WIDTH] = u_col
    nz_block = u_block[inverse]
    lid = (rows & 15) * WIDTH + u_rank[inverse] % WIDTH
    del inverse, rows, cols
    final = xp.argsort(nz_block * 128 + lid)  # unique per nonzero: no reliance on sort stability
    return bpw, xp.bincount(nz_block, minlength=n_blocks), slot.reshape(n_blocks, WIDTH), \
        lid[final].astype(xp.uint8)
