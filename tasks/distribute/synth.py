"""Large synthetic graphs as sorted keys ``row * n_cols + col`` on the GPU, for the multi-GPU scaling benchmark.

``tasks.fetch.generators`` is single-threaded NumPy: minutes at 100M+ nonzeros. These functions take an array
module ``xp`` (``cupy`` on a GPU, ``numpy`` in tests) and run vectorized steps on it. Graphs follow the
generators' definitions (R-MAT quadrant draws; SBM with contiguous equal-size blocks) but not their random
streams. A format converts the keys itself (ME-TCF: ``kernels.formats.metcf.synth.metcf_from_keys``).
"""
from __future__ import annotations

import numpy as np



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
