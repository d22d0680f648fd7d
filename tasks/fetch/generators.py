"""Synthetic sparse matrices, seeded and vectorized (no Python loop over rows or nonzeros).

Spec: ``gen:<kind>?k=v&...``, e.g. ``gen:rmat?scale=20&edge_factor=16&seed=1``. Every kind takes ``seed``
(``np.random.default_rng(seed)``, default 0), ``shuffle`` (1 = random relabelling, the default; 0 = natural
order) and ``values`` (``random``: float32 in (0, 1], the default; ``ones``). Kinds and their size parameters:

=========  ======================================================================================================
rmat       ``scale`` (n = 2**scale), ``edge_factor`` (16), ``a``/``b``/``c`` (0.57/0.19/0.19): R-MAT power-law
           digraph, edge_factor * n draws.
sbm        ``n`` (or ``rows``), ``blocks`` (10), ``p_in`` and ``p_out``, or ``deg_in`` and ``deg_out`` (expected
           neighbours inside / outside the own block): stochastic block model, directed.
mesh       ``nx``, ``ny`` (nx), ``nz`` (1), ``stencil`` (5 or 9 in 2D, 7 or 27 in 3D; default 5 / 7), diagonal
           included.
banded     ``n`` (or ``rows``), ``bandwidth`` (8), ``density`` (1.0): entries with abs(i - j) <= bandwidth.
uniform    ``rows``, ``cols`` (rows), and ``nnz`` or ``density``: exactly nnz distinct uniform positions;
           rectangular; ``shuffle`` has no effect (positions are already i.i.d.), so dimensions may pass 2**31.
longrow    ``rows``, ``cols`` (rows), ``min_row_nnz``/``max_row_nnz`` (300/600), ``communities`` (0 = about
           cols / (4 * max_row_nnz)), ``p_in`` (0.8): every row gets exactly U[min, max] nonzeros, a share p_in
           of them inside its community's column range (reddit / ogbn-proteins-like rows).
dlmc       ``rows`` (M), ``cols`` (K; rows), ``sparsity`` (0.5 .. 0.98), ``vector`` (V: 1, 2, 4, 8, 16; rows % V
           == 0): DNN weights magnitude-pruned at V x 1 granularity in the style of the DLMC collection (Gale et
           al.; not reachable from here, so generated): of the (M / V) K vectors of He-initialised N(0, 2 / K)
           weights, those with the largest norms survive, i.e. a uniformly random set of round((1 - sparsity)
           (M / V) K) vectors whose values are the Gaussian conditioned on a norm above the pruning threshold
           (signed, magnitude-like; ``values=random``). ``shuffle`` has no effect (it would split the vectors).
=========  ======================================================================================================

Shuffling relabels rows and columns with one permutation when the matrix is square (a graph stays the same graph)
and with two independent ones when it is rectangular. Output: canonical CSR (sorted, no duplicates, no explicit
zeros), float32 data, int32 or int64 indices per ``storage.indexing.index_dtype``. ``matrix_id`` is
``gen.<kind>.<sha12>`` of the canonical (defaults filled in) parameters. Parameters whose matrix would not fit in
memory (``configs.limits``) are refused when the spec is fetched, before anything is drawn.
"""
from __future__ import annotations

import hashlib
import json
import urllib.parse
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

from configs.errors import InputError
from configs.limits import Limits
from storage.indexing import index_dtype
from tasks.fetch.spec import RawMatrix, Spec

_CHUNK = 1 << 24  # draws per vectorized step in rmat: bounds temporary memory at ~100 MB
_COMMON: dict[str, tuple[type, Any]] = {"seed": (int, 0), "shuffle": (bool, True), "values": (str, "random")}
_SCHEMAS: dict[str, dict[str, tuple[type, Any]]] = {
    "rmat": {"scale": (int, None), "edge_factor": (int, 16), "a": (float, 0.57), "b": (float, 0.19),
             "c": (float, 0.19)},
    "sbm": {"n": (int, None), "blocks": (int, 10), "p_in": (float, None), "p_out": (float, None),
            "deg_in": (float, None), "deg_out": (float, None)},
    "mesh": {"nx": (int, None), "ny": (int, None), "nz": (int, 1), "stencil": (int, None)},
    "banded": {"n": (int, None), "bandwidth": (int, 8), "density": (float, 1.0)},
    "uniform": {"rows": (int, None), "cols": (int, None), "nnz": (int, None), "density": (float, None)},
    "longrow": {"rows": (int, None), "cols": (int, None), "min_row_nnz": (int, 300), "max_row_nnz": (int, 600),
                "communities": (int, 0), "p_in": (float, 0.8)},
    "dlmc": {"rows": (int, None), "cols": (int, None), "sparsity": (float, None), "vector": (int, 1)},
}
_ALIASES = {"sbm": {"rows": "n"}, "banded": {"rows": "n"}}
KINDS = tuple(_SCHEMAS)


def canonical_params(kind: str, query: str | dict[str, Any]) -> dict[str, Any]:
    """Parse ``k=v&...`` (or a dict), check names and values, fill defaults; raise InputError listing valid ones."""
    if kind not in _SCHEMAS:
        raise InputError(f"unknown generator kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    schema = {**_SCHEMAS[kind], **_COMMON}
    if isinstance(query, str):
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        given: dict[str, Any] = {}
        for key, value in pairs:
            if key in given:
                raise InputError(f"gen:{kind}: parameter {key!r} given twice")
            given[key] = value
    else:  # an already canonical dict: None marks an unused alternative (sbm deg_*, uniform density)
        given = {k: v for k, v in query.items() if v is not None and k != "kind"}
    given = {_ALIASES.get(kind, {}).get(k, k): v for k, v in given.items()}
    unknown = sorted(set(given) - set(schema))
    if unknown:
        raise InputError(f"gen:{kind}: unknown parameter(s) {', '.join(unknown)}; valid: {', '.join(schema)}")
    params = {name: _convert(kind, name, typ, given[name]) if name in given else default
              for name, (typ, default) in schema.items()}
    _RESOLVE[kind](params)
    if params["values"] not in ("random", "ones"):
        raise InputError(f"gen:{kind}: values must be 'random' or 'ones', got {params['values']!r}")
    if params["seed"] < 0:
        raise InputError(f"gen:{kind}: seed must be >= 0, got {params['seed']}")
    return params


def canonical_spec(kind: str, params: dict[str, Any]) -> str:
    query = "&".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in sorted(params.items()))
    return f"gen:{kind}?{query}"


def fetch_gen(spec: Spec, limits: Limits | None = None) -> RawMatrix:
    """Validate a ``gen:`` spec (its memory too); nothing is generated until ``tasks.parse.load_matrix``."""
    params = canonical_params(spec.gen_kind, spec.query)
    check_gen_memory(spec.gen_kind, params, limits)
    canonical = canonical_spec(spec.gen_kind, params)
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()
    return RawMatrix(matrix_id=f"gen.{spec.gen_kind}.{digest[:12]}", spec=spec.text, kind="gen", path=None,
                     source_url=canonical, sha256=digest, params={"kind": spec.gen_kind, **params})


def estimate(kind: str, params: dict[str, Any]) -> tuple[tuple[int, int], int]:
    """(shape, coordinates drawn before duplicates merge) of canonical ``params``, from the parameters alone."""
    p = params
    if kind == "rmat":
        n = 1 << p["scale"]
        return (n, n), p["edge_factor"] * n
    if kind == "sbm":
        n, blocks = p["n"], p["blocks"]
        return (n, n), int(p["p_in"] * n * n / blocks + 1.1 * p["p_out"] * n * n) + 16
    if kind == "mesh":
        n = p["nx"] * p["ny"] * p["nz"]
        return (n, n), n * p["stencil"]
    if kind == "banded":
        return (p["n"], p["n"]), int(p["n"] * (2 * p["bandwidth"] + 1) * p["density"]) + 1
    if kind == "uniform":
        return (p["rows"], p["cols"]), 2 * p["nnz"]  # collisions are drawn again
    if kind == "dlmc":
        return (p["rows"], p["cols"]), int(2 * (1 - p["sparsity"]) * p["rows"] * p["cols"]) + p["vector"]
    return (p["rows"], p["cols"]), p["rows"] * p["max_row_nnz"]  # longrow


def check_gen_memory(kind: str, params: dict[str, Any], limits: Limits | None = None) -> None:
    """Refuse (one line naming the size and the memory) parameters whose matrix would not fit in memory: the
    draws as int64 coordinates and sort keys, the CSR, and per-row temporaries (degrees, relabelling)."""
    from tasks.parse.sizes import check_csr_memory

    params = canonical_params(kind, params)
    shape, draws = estimate(kind, params)
    rectangular_shuffle = params["shuffle"] and kind != "uniform" and shape[0] != shape[1]
    extra = 8 * draws + 32 * shape[0] + (8 * shape[1] if rectangular_shuffle else 0)
    check_csr_memory(f"gen:{kind}", shape, draws, 4, limits, extra_bytes=extra)


def generate(kind: str, params: dict[str, Any] | str) -> sp.csr_array:
    """Build the matrix described by ``kind`` and (canonical or raw) ``params``."""
    params = canonical_params(kind, params)
    rng = np.random.default_rng(params["seed"])
    rows, cols, shape = _BUILD[kind](rng, params)
    if params["shuffle"] and kind != "uniform":
        perm_r = rng.permutation(shape[0])
        perm_c = perm_r if shape[0] == shape[1] else rng.permutation(shape[1])
        rows, cols = perm_r[rows], perm_c[cols]
    keys = _unique_keys(rows, cols, shape)
    nnz = keys.size
    if params["values"] == "ones":
        data = np.ones(nnz, dtype=np.float32)
    elif kind == "dlmc":
        data = _dlmc_values(rng, params, keys)
    else:
        data = np.float32(1) - rng.random(nnz, dtype=np.float32)  # (0, 1]: never an explicit zero
    return keys_to_csr(keys, data, shape)


def keys_to_csr(keys: np.ndarray, data: np.ndarray, shape: tuple[int, int]) -> sp.csr_array:
    """CSR from sorted distinct keys ``row * n_cols + col``; dtypes per ``index_dtype(max(shape), nnz)``."""
    n_rows, n_cols = shape
    idx = index_dtype(max(shape), keys.size)
    row = keys // n_cols
    indices = (keys - row * n_cols).astype(idx)
    indptr = np.zeros(n_rows + 1, dtype=idx)
    np.cumsum(np.bincount(row, minlength=n_rows), out=indptr[1:])
    A = sp.csr_array((data, indices, indptr), shape=shape, copy=False)
    A.indices, A.indptr = A.indices.astype(idx, copy=False), A.indptr.astype(idx, copy=False)
    A.has_sorted_indices = True
    return A


def _unique_keys(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    return _sorted_unique(rows.astype(np.int64) * np.int64(shape[1]) + cols)


def _sorted_unique(keys: np.ndarray) -> np.ndarray:
    """Sorted distinct values, sorting ``keys`` in place. np.unique is ~20x slower on 10M int64 with NumPy 2.4
    (measured 16 s vs 0.8 s for sort + mask on this 2-core box)."""
    keys.sort()
    if keys.size:
        keep = np.empty(keys.size, dtype=bool)
        keep[0] = True
        np.not_equal(keys[1:], keys[:-1], out=keep[1:])
        keys = keys[keep]
    return keys


def _convert(kind: str, name: str, typ: type, value: Any) -> Any:
    text = str(value).strip()
    try:
        if typ is bool:
            if text.lower() in ("1", "true", "yes"):
                return True
            if text.lower() in ("0", "false", "no"):
                return False
            raise ValueError(text)
        if typ is int:
            number = float(text) if any(ch in text for ch in ".eE") else int(text)
            if number != int(number):
                raise ValueError(text)
            return int(number)
        if typ is float:
            number = float(text)
            if not np.isfinite(number):
                raise ValueError(text)
            return number
        return text
    except ValueError:
        raise InputError(f"gen:{kind}: {name}={text!r} is not a valid {typ.__name__}") from None


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


def _resolve_rmat(p: dict[str, Any]) -> None:
    _need("rmat", p, "scale", "edge_factor")
    if p["scale"] > 40:
        raise InputError(f"gen:rmat: scale must be <= 40, got {p['scale']}")
    a, b, c = p["a"], p["b"], p["c"]
    if min(a, b, c) <= 0 or a + b + c >= 1:
        raise InputError(f"gen:rmat: need a, b, c > 0 and a + b + c < 1, got {a}, {b}, {c}")


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
        keys = _sorted_unique(np.concatenate((keys, rng.integers(0, n_rows * n_cols, target - keys.size))))
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
        keys = _sorted_unique(np.concatenate((keys, r * n_cols + c)))
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
        keys = _sorted_unique(np.concatenate((keys, rng.integers(0, n_pos, target - keys.size))))
    vrow, col = keys // n_cols, keys % n_cols
    rows = (vrow[:, None] * V + np.arange(V)).reshape(-1)
    return rows, np.repeat(col, V), (n_rows, n_cols)


def _dlmc_values(rng: np.random.Generator, p: dict[str, Any], keys: np.ndarray) -> np.ndarray:
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


_RESOLVE: dict[str, Callable[[dict[str, Any]], None]] = {
    "rmat": _resolve_rmat, "sbm": _resolve_sbm, "mesh": _resolve_mesh, "banded": _resolve_banded,
    "uniform": _resolve_uniform, "longrow": _resolve_longrow, "dlmc": _resolve_dlmc}
_BUILD: dict[str, Callable[[np.random.Generator, dict[str, Any]], tuple[np.ndarray, np.ndarray, tuple[int, int]]]] = {
    "rmat": _build_rmat, "sbm": _build_sbm, "mesh": _build_mesh, "banded": _build_banded,
    "uniform": _build_uniform, "longrow": _build_longrow, "dlmc": _build_dlmc}
