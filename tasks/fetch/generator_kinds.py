"""The generator kinds' recipes (tasks.fetch.generators is the front: parameters, memory checks, shuffling,
values): per kind ``RESOLVE[kind](params)`` fills defaults that depend on other parameters and refuses impossible
ones (InputError naming ``gen:<kind>``), and ``BUILD[kind](rng, params)`` draws its (rows, cols, shape), seeded and
vectorized (no Python loop over rows or nonzeros). ``dlmc_values`` draws the dlmc kind's pruned weights.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from configs.errors import InputError

_CHUNK = 1 << 24  # draws per vectorized step in rmat: bounds temporary memory at ~100 MB


def sorted_unique(keys: np.ndarray) -> np.ndarray:
    """Sorted distinct values, sorting ``keys`` in place. np.unique is ~20x slower on 10M int64 with NumPy 2.4
    (measured 16 s vs 0.8 s for sort + mask on this 2-core box)."""
    keys.sort()
    if keys.size:
        keep = np.empty(keys.size, dtype=bool)
        keep[0] = True
        np.not_equal(keys[1:], keys[:-1], out=keep[1:])
        keys = keys[keep]
    return keys


def _need(kind: str, params: dict[str, Any], *names: str, low: int = 1) -> None:
    for name in names:
        value = params[name]
        if value is None:
            raise InputError(f"gen:{kind}: missing required parameter {name!r}")
        if value < low:
            raise InputError(f"gen:{kind}: {name} must be >= {low}, got {value}")


def _check_product(kind: str, n_rows: int, n_cols: int) -> None:
    if n_rows * n_cols >= 2**63:
        raise InputError(f"gen:{kind}: rows x cols = {n_rows * n_cols} does not fit int64 positions")


def _resolve_rmat(p: dict[str, Any], kind: str = "rmat") -> None:
    _need(kind, p, "scale", "edge_factor")
    if p["scale"] > 40:
        raise InputError(f"gen:{kind}: scale must be <= 40, got {p['scale']}")
    a, b, c = p["a"], p["b"], p["c"]
    if min(a, b, c) <= 0 or a + b + c >= 1:
        raise InputError(f"gen:{kind}: need a, b, c > 0 and a + b + c < 1, got {a}, {b}, {c}")


def _resolve_core(p: dict[str, Any]) -> None:
    _resolve_rmat(p, "core")
    _need("core", p, "members", "targets")
    n = 1 << p["scale"]
    if max(p["members"], p["targets"]) > n:
        raise InputError(f"gen:core: members ({p['members']}) and targets ({p['targets']}) must be <= 2**scale = {n}")


def _resolve_sbm(p: dict[str, Any]) -> None:
    _need("sbm", p, "n", "blocks")
    if p["blocks"] > p["n"]:
        raise InputError(f"gen:sbm: blocks={p['blocks']} exceeds n={p['n']}")
    by_p = p["p_in"] is not None or p["p_out"] is not None
    by_deg = p["deg_in"] is not None or p["deg_out"] is not None
    if by_p == by_deg or (by_p and None in (p["p_in"], p["p_out"])) or (by_deg and None in (p["deg_in"], p["deg_out"])):
        raise InputError("gen:sbm: give either p_in and p_out, or deg_in and deg_out")
    if by_deg:
        size = p["n"] / p["blocks"]
        p["p_in"] = p["deg_in"] / size
        p["p_out"] = p["deg_out"] / max(p["n"] - size, 1)
        p["deg_in"] = p["deg_out"] = None
    for name in ("p_in", "p_out"):
        if not 0 <= p[name] <= 1:
            raise InputError(f"gen:sbm: {name} must be in [0, 1], got {p[name]}")


def _resolve_mesh(p: dict[str, Any]) -> None:
    p["ny"] = p["nx"] if p["ny"] is None else p["ny"]
    _need("mesh", p, "nx", "ny", "nz")
    allowed = (5, 9) if p["nz"] == 1 else (7, 27)
    p["stencil"] = allowed[0] if p["stencil"] is None else p["stencil"]
    if p["stencil"] not in allowed:
        raise InputError(f"gen:mesh: stencil must be one of {allowed} for nz={p['nz']}, got {p['stencil']}")


def _resolve_banded(p: dict[str, Any]) -> None:
    _need("banded", p, "n")
    _need("banded", p, "bandwidth", low=0)
    if not 0 < p["density"] <= 1:
        raise InputError(f"gen:banded: density must be in (0, 1], got {p['density']}")


def _resolve_uniform(p: dict[str, Any]) -> None:
    p["cols"] = p["rows"] if p["cols"] is None else p["cols"]
    _need("uniform", p, "rows", "cols")
    _check_product("uniform", p["rows"], p["cols"])
    if (p["nnz"] is None) == (p["density"] is None):
        raise InputError("gen:uniform: give exactly one of nnz and density")
    if p["density"] is not None:
        p["nnz"], p["density"] = int(round(p["density"] * p["rows"] * p["cols"])), None
    if not 0 <= p["nnz"] <= p["rows"] * p["cols"] // 2:
        raise InputError(f"gen:uniform: nnz must be in [0, rows * cols / 2], got {p['nnz']}")


def _resolve_longrow(p: dict[str, Any]) -> None:
    p["cols"] = p["rows"] if p["cols"] is None else p["cols"]
    _need("longrow", p, "rows", "cols", "min_row_nnz", "max_row_nnz")
    _check_product("longrow", p["rows"], p["cols"])
    if not p["min_row_nnz"] <= p["max_row_nnz"] <= p["cols"] // 2:
        raise InputError(f"gen:longrow: need min_row_nnz <= max_row_nnz <= cols / 2, got "
                         f"{p['min_row_nnz']}, {p['max_row_nnz']}, cols={p['cols']}")
    if p["communities"] == 0:
        p["communities"] = max(1, p["cols"] // (4 * p["max_row_nnz"]))
    _need("longrow", p, "communities")
    if not 0 <= p["p_in"] <= 1:
        raise InputError(f"gen:longrow: p_in must be in [0, 1], got {p['p_in']}")


def _build_rmat(rng: np.random.Generator, p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    scale, n_edges = p["scale"], p["edge_factor"] << p["scale"]
    a, ab, abc = np.float32(p["a"]), np.float32(p["a"] + p["b"]), np.float32(p["a"] + p["b"] + p["c"])
    rows, cols = np.zeros(n_edges, dtype=np.int64), np.zeros(n_edges, dtype=np.int64)
    for start in range(0, n_edges, _CHUNK):  # loop over chunks of ~16M edges and over bits, never over edges
        r, c = rows[start:start + _CHUNK], cols[start:start + _CHUNK]
        for _ in range(scale):
            u = rng.random(r.size, dtype=np.float32)
            lower = u >= ab  # quadrants c and d: row bit 1
            right = (u >= a) & (u < ab) | (u >= abc)  # quadrants b and d: column bit 1
            r <<= 1
            r |= lower
            c <<= 1
            c |= right
    return rows, cols, (1 << scale, 1 << scale)


def _build_core(rng: np.random.Generator, p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """R-MAT (``_build_rmat``) plus a planted community: the last ``members`` nodes (R-MAT's sparse end in natural
    order) each linked to all of ``targets`` consecutive nodes starting at a random id."""
    rows, cols, shape = _build_rmat(rng, p)
    n, members, targets = shape[0], p["members"], p["targets"]
    first = int(rng.integers(0, n - targets + 1))
    core_rows = np.repeat(np.arange(n - members, n, dtype=np.int64), targets)
    core_cols = np.tile(np.arange(first, first + targets, dtype=np.int64), members)
    return np.concatenate([rows, core_rows]), np.concatenate([cols, core_cols]), shape


def _build_sbm(rng: np.random.Generator, p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    n, blocks = p["n"], p["blocks"]
    sizes = np.full(blocks, n // blocks, dtype=np.int64)
    sizes[: n % blocks] += 1
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    k_in = rng.binomial(sizes * sizes, p["p_in"])
    blk = np.repeat(np.arange(blocks), k_in)
    r_in = starts[blk] + (rng.random(blk.size) * sizes[blk]).astype(np.int64)
    c_in = starts[blk] + (rng.random(blk.size) * sizes[blk]).astype(np.int64)
    pairs_out = n * n - int((sizes * sizes).sum())
    k_out = int(rng.binomial(pairs_out, p["p_out"])) if pairs_out else 0
    share = pairs_out / (n * n)
    r_out, c_out = np.empty(0, np.int64), np.empty(0, np.int64)
    while r_out.size < k_out:  # rejection sampling; each round keeps about k_out pairs
        draw = int((k_out - r_out.size) / share * 1.1) + 16
        r, c = rng.integers(0, n, draw), rng.integers(0, n, draw)
        keep = np.searchsorted(starts, r, side="right") != np.searchsorted(starts, c, side="right")
        r_out, c_out = np.concatenate((r_out, r[keep])), np.concatenate((c_out, c[keep]))
    return np.concatenate((r_in, r_out[:k_out])), np.concatenate((c_in, c_out[:k_out])), (n, n)


def _build_mesh(rng: np.random.Generator, p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    nx, ny, nz, stencil = p["nx"], p["ny"], p["nz"], p["stencil"]
    n = nx * ny * nz
    idx = np.arange(n, dtype=np.int64)
    x, y, z = idx % nx, (idx // nx) % ny, idx // (nx * ny)
    span = (-1, 0, 1)
    offsets = [(dx, dy, dz) for dz in (span if nz > 1 else (0,)) for dy in span for dx in span]
    if stencil in (5, 7):
        offsets = [o for o in offsets if sum(map(abs, o)) <= 1]
    rows, cols = [], []
    for dx, dy, dz in offsets:  # at most 27 offsets
        ok = (x + dx >= 0) & (x + dx < nx) & (y + dy >= 0) & (y + dy < ny) & (z + dz >= 0) & (z + dz < nz)
        rows.append(idx[ok])
        cols.append(idx[ok] + dx + dy * nx + dz * nx * ny)
    return np.concatenate(rows), np.concatenate(cols), (n, n)


def _build_banded(rng: np.random.Generator, p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    n, bw, density = p["n"], p["bandwidth"], p["density"]
    if density >= 1:
        rows = np.repeat(np.arange(n, dtype=np.int64), 2 * bw + 1)
        cols = rows + np.tile(np.arange(-bw, bw + 1, dtype=np.int64), n)
    else:  # density draws with replacement; duplicates merge, so nnz comes out slightly below density * band
        count = int(rng.binomial(n * (2 * bw + 1), density))
        rows = rng.integers(0, n, count)
        cols = rows + rng.integers(-bw, bw + 1, count)
    ok = (cols >= 0) & (cols < n)
    return rows[ok], cols[ok], (n, n)


def _build_uniform(rng: np.random.Generator, p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    n_rows, n_cols, target = p["rows"], p["cols"], p["nnz"]
    keys = np.empty(0, dtype=np.int64)
    while keys.size < target:  # top up collisions; nnz <= half the positions, so each round at least halves the gap
        keys = sorted_unique(np.concatenate((keys, rng.integers(0, n_rows * n_cols, target - keys.size))))
    rows = keys // n_cols
    return rows, keys - rows * n_cols, (n_rows, n_cols)


def _build_longrow(rng: np.random.Generator, p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    n_rows, n_cols, n_comm = p["rows"], p["cols"], p["communities"]
    degree = rng.integers(p["min_row_nnz"], p["max_row_nnz"] + 1, n_rows)
    lo = np.arange(n_comm, dtype=np.int64) * n_cols // n_comm
    width = np.diff(np.append(lo, n_cols))
    comm_of_row = np.arange(n_rows, dtype=np.int64) * n_comm // n_rows
    keys = np.empty(0, dtype=np.int64)
    deficit = degree
    while deficit.any():  # draw, drop repeated columns within a row, redraw exactly the missing ones
        r = np.repeat(np.arange(n_rows, dtype=np.int64), deficit)
        cm = comm_of_row[r]
        inside = rng.random(r.size) < p["p_in"]
        c = np.where(inside, lo[cm] + (rng.random(r.size) * width[cm]).astype(np.int64),
                     rng.integers(0, n_cols, r.size))
        keys = sorted_unique(np.concatenate((keys, r * n_cols + c)))
        deficit = degree - np.bincount(keys // n_cols, minlength=n_rows)
    rows = keys // n_cols
    return rows, keys - rows * n_cols, (n_rows, n_cols)


def _resolve_dlmc(p: dict[str, Any]) -> None:
    p["cols"] = p["rows"] if p["cols"] is None else p["cols"]
    _need("dlmc", p, "rows", "cols")
    _check_product("dlmc", p["rows"], p["cols"])
    if p["sparsity"] is None or not 0.5 <= p["sparsity"] <= 0.98:
        raise InputError(f"gen:dlmc: sparsity must be in [0.5, 0.98] (the DLMC range), got {p['sparsity']}")
    if p["vector"] not in (1, 2, 4, 8, 16) or p["rows"] % p["vector"]:
        raise InputError(f"gen:dlmc: vector must be 1, 2, 4, 8 or 16 and divide rows = {p['rows']}, got "
                         f"{p['vector']}")
    p["shuffle"] = False  # a relabelling would split the V x 1 vectors


def _build_dlmc(rng: np.random.Generator, p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    n_rows, n_cols, V = p["rows"], p["cols"], p["vector"]
    n_pos = n_rows // V * n_cols  # vector positions (vector row, column)
    target = int(round((1.0 - p["sparsity"]) * n_pos))
    keys = np.empty(0, dtype=np.int64)
    while keys.size < target:  # kept <= half the positions, so each round at least halves the gap
        keys = sorted_unique(np.concatenate((keys, rng.integers(0, n_pos, target - keys.size))))
    vrow, col = keys // n_cols, keys % n_cols
    rows = (vrow[:, None] * V + np.arange(V)).reshape(-1)
    return rows, np.repeat(col, V), (n_rows, n_cols)


def dlmc_values(rng: np.random.Generator, p: dict[str, Any], keys: np.ndarray) -> np.ndarray:
    """Surviving weights of magnitude pruning: per vector a norm r from the chi(V) law conditioned on r above its
    ``sparsity`` quantile (inverse CDF), times a uniform direction, times the He scale sqrt(2 / K)."""
    from scipy.stats import chi

    V, n_cols, n_rows = p["vector"], p["cols"], p["rows"]
    rows = keys // n_cols
    # the V rows of a vector row hold the same columns, so entry t of row V i + v belongs to vector t of vector row i
    per_row = np.bincount(rows, minlength=n_rows)
    start = np.concatenate(([0], np.cumsum(per_row)[:-1]))
    per_vrow = per_row[::V]
    vec_start = np.concatenate(([0], np.cumsum(per_vrow)[:-1]))
    vid = vec_start[rows // V] + (np.arange(keys.size, dtype=np.int64) - start[rows])
    n_vec = int(per_vrow.sum())
    s = p["sparsity"]
    r = chi.ppf(s + (1.0 - s) * rng.random(n_vec), V)
    z = rng.standard_normal(keys.size)
    norm = np.sqrt(np.bincount(vid, weights=z * z, minlength=n_vec))
    return (z * (r / np.maximum(norm, 1e-30))[vid] * np.sqrt(2.0 / n_cols)).astype(np.float32)


RESOLVE: dict[str, Callable[[dict[str, Any]], None]] = {
    "rmat": _resolve_rmat, "core": _resolve_core, "sbm": _resolve_sbm, "mesh": _resolve_mesh, "banded": _resolve_banded,
    "uniform": _resolve_uniform, "longrow": _resolve_longrow, "dlmc": _resolve_dlmc}
BUILD: dict[str, Callable[[np.random.Generator, dict[str, Any]], tuple[np.ndarray, np.ndarray, tuple[int, int]]]] = {
    "rmat": _build_rmat, "core": _build_core, "sbm": _build_sbm, "mesh": _build_mesh, "banded": _build_banded,
    "uniform": _build_uniform, "longrow": _build_longrow, "dlmc": _build_dlmc}
