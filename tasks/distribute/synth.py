"""Large synthetic graphs straight to ME-TCF on the GPU, for the multi-GPU scaling benchmark.

``tasks.fetch.generators`` and ``kernels.formats.metcf.csr_to_metcf`` are single-threaded NumPy: minutes at 100M+
nonzeros. These functions take an array module ``xp`` (``cupy`` on a GPU, ``numpy`` in tests) and run the same
vectorized steps on it. Graphs follow the generators' definitions (R-MAT quadrant draws; SBM with
contiguous equal-size blocks) but not their random streams. `metcf_from_keys` returns exactly
``csr_to_metcf`` of the same matrix (tested with NumPy), as host NumPy arrays.
"""
from __future__ import annotations

import numpy as np

from kernels.formats.metcf.container import METCF, WIDTH, WINDOW
from storage.indexing import index_dtype
from tasks.distribute.device import to_host


def rmat_keys(xp, scale: int, edge_factor: int, seed: int, a=0.57, b=0.19, c=0.19, chunk: int = 1 << 26):
    """Sorted distinct keys ``row * n + col`` of an R-MAT digraph with n = 2**scale, ``edge_factor * n`` draws."""
    rng = xp.random.default_rng(seed)
    n_edges = int(edge_factor) << int(scale)
    a, ab, abc = np.float32(a), np.float32(a + b), np.float32(a + b + c)
    parts = []
    for start in range(0, n_edges, chunk):
        m = min(chunk, n_edges - start)
        r, cc = xp.zeros(m, dtype=xp.int64), xp.zeros(m, dtype=xp.int64)
        for _ in range(int(scale)):
            u = rng.random(m, dtype=xp.float32)
            r = (r << 1) | (u >= ab)
            cc = (cc << 1) | (((u >= a) & (u < ab)) | (u >= abc))
        parts.append(r * (1 << int(scale)) + cc)
    return unique_sorted(xp, xp.concatenate(parts)), (1 << int(scale), 1 << int(scale))


def sbm_keys(xp, n: int, blocks: int, deg_in: float, deg_out: float, seed: int):
    """Sorted distinct keys of a directed SBM: ``blocks`` contiguous equal blocks, about ``deg_in`` neighbours
    inside and ``deg_out`` outside the own block per row (uniform draws; the few self-block hits of the outside
    draws are kept)."""
    rng = xp.random.default_rng(seed)
    size = -(-int(n) // int(blocks))
    m_in, m_out = int(n * deg_in), int(n * deg_out)
    r = rng.integers(0, n, m_in, dtype=xp.int64)
    start = (r // size) * size
    width = xp.minimum(start + size, n) - start
    c = start + (rng.random(m_in, dtype=xp.float32) * width).astype(xp.int64) % width
    keys_in = r * n + c
    del r, c, start, width
    r2, c2 = rng.integers(0, n, m_out, dtype=xp.int64), rng.integers(0, n, m_out, dtype=xp.int64)
    return unique_sorted(xp, xp.concatenate([keys_in, r2 * n + c2])), (int(n), int(n))


def mesh_keys(xp, side: int):
    """Sorted keys of a 3D 27-point stencil on a ``side``^3 grid, lexicographic numbering (a finite-element-like
    mesh: every node couples to itself and its up to 26 neighbours)."""
    side = int(side)
    n = side ** 3
    node = xp.arange(n, dtype=xp.int64)
    z, rest = node // (side * side), node % (side * side)
    y, x = rest // side, rest % side
    parts = []
    for dz in (-1, 0, 1):
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                zz, yy, xx = z + dz, y + dy, x + dx
                ok = (zz >= 0) & (zz < side) & (yy >= 0) & (yy < side) & (xx >= 0) & (xx < side)
                parts.append(node[ok] * n + (zz[ok] * side + yy[ok]) * side + xx[ok])
    return xp.sort(xp.concatenate(parts)), (n, n)


def unique_sorted(xp, keys):
    keys = xp.sort(keys)
    keep = xp.ones(keys.shape[0], dtype=bool)
    if keys.shape[0] > 1:
        keep[1:] = keys[1:] != keys[:-1]
    return keys[keep]


def relabel(xp, keys, shape, perm_new_of_old):
    """Keys of the graph with every node ``v`` renamed ``perm_new_of_old[v]`` (rows and columns), re-sorted."""
    n_cols = int(shape[1])
    rows, cols = keys // n_cols, keys % n_cols
    p = xp.asarray(perm_new_of_old)
    return xp.sort(p[rows] * n_cols + p[cols])


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
    order). The same steps as ``kernels.formats.metcf._convert_chunk`` on keys instead of (row, col).

    Not ``kernels.formats.metcf.gpu.csr_to_metcf_gpu``, although it computes the same arrays with CuPy: that one is
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
