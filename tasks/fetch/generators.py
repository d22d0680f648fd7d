"""Synthetic sparse matrices, seeded and vectorized (no Python loop over rows or nonzeros).

Spec: ``gen:<kind>?k=v&...``, e.g. ``gen:rmat?scale=20&edge_factor=16&seed=1``. Every kind takes ``seed``
(``np.random.default_rng(seed)``, default 0), ``shuffle`` (1 = random relabelling, the default; 0 = natural
order) and ``values`` (``random``: float32 in (0, 1], the default; ``ones``). Kinds and their size parameters:

=========  ======================================================================================================
rmat       ``scale`` (n = 2**scale), ``edge_factor`` (16), ``a``/``b``/``c`` (0.57/0.19/0.19): R-MAT power-law
           digraph, edge_factor * n draws.
core       R-MAT's parameters and ``members``, ``targets`` (256): an R-MAT graph with a planted dense community,
           its last ``members`` nodes each linked to the same ``targets`` consecutive nodes (at a random id): hub
           rows among sparse ones plus a block of rows that share their columns (what the hybrid plan splits).
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
from typing import Any

import numpy as np
import scipy.sparse as sp

from configs.errors import InputError
from configs.limits import Limits
from storage.indexing import index_dtype
from tasks.fetch.generator_kinds import BUILD, RESOLVE, dlmc_values, sorted_unique
from tasks.fetch.spec import RawMatrix, Spec

_COMMON: dict[str, tuple[type, Any]] = {"seed": (int, 0), "shuffle": (bool, True), "values": (str, "random")}
_RMAT: dict[str, tuple[type, Any]] = {"scale": (int, None), "edge_factor": (int, 16), "a": (float, 0.57),
                                      "b": (float, 0.19), "c": (float, 0.19)}
_SCHEMAS: dict[str, dict[str, tuple[type, Any]]] = {
    "rmat": _RMAT,
    "core": {**_RMAT, "members": (int, None), "targets": (int, 256)},
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
    RESOLVE[kind](params)
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
    if kind == "core":
        n = 1 << p["scale"]
        return (n, n), p["edge_factor"] * n + p["members"] * p["targets"]
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
    rows, cols, shape = BUILD[kind](rng, params)
    if params["shuffle"] and kind != "uniform":
        perm_r = rng.permutation(shape[0])
        perm_c = perm_r if shape[0] == shape[1] else rng.permutation(shape[1])
        rows, cols = perm_r[rows], perm_c[cols]
    keys = _unique_keys(rows, cols, shape)
    nnz = keys.size
    if params["values"] == "ones":
        data = np.ones(nnz, dtype=np.float32)
    elif kind == "dlmc":
        data = dlmc_values(rng, params, keys)
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
    return sorted_unique(rows.astype(np.int64) * np.int64(shape[1]) + cols)


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
