"""Explicit Arrow schemas of every file in the block store, and the metadata each file carries.

Every Parquet file has one schema-metadata key, ``tcspmm``, holding JSON with at least: ``format`` and ``version``
(``SCHEMA_VERSION``; ``DENSE_VERSION`` for dense blocks), ``shape``, ``nnz``, ``dtypes``, the block's own
``range`` and the whole set's ``ranges`` (half-open, in rows for CSR and results, in windows for formats), and
``source`` (the caller's ``meta`` dict: source URL, checksum, ...).
Permutation files add ``direction = "perm[new]=old"``, ``method`` and ``params``.
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from storage.naming import dumps

SCHEMA_VERSION = 1
DENSE_VERSION = 2
"""Dense blocks (storage.results) from 2026-11-28: a flat ``values`` column; version 1 (``fixed_size_list``) reads."""
META_KEY = b"tcspmm"
PERM_DIRECTION = "perm[new]=old"


def arrow_type(dtype) -> pa.DataType:
    return pa.from_numpy_dtype(np.dtype(dtype))


def csr_schema(index_dtype, value_dtype) -> pa.Schema:
    """CSR block: one Parquet row per nonzero, sorted by ``row``; ``row`` is the GLOBAL row index.

    Columns: ``row`` and ``col`` in the index dtype (``storage.indexing.index_dtype(max(shape), nnz)``), ``value``
    in the matrix's value dtype. Within a row, nonzeros keep the order of the written CSR.
    """
    it = arrow_type(index_dtype)
    return pa.schema([pa.field("row", it, nullable=False), pa.field("col", it, nullable=False),
                      pa.field("value", arrow_type(value_dtype), nullable=False)])


def perm_schema() -> pa.Schema:
    """Permutation: one column ``perm`` int64 with ``perm[new] = old``."""
    return pa.schema([pa.field("perm", pa.int64(), nullable=False)])


def list_type(value_type: pa.DataType, n_values: int) -> pa.DataType:
    """``list<value>`` while the offsets fit int32, ``large_list<value>`` beyond."""
    return pa.list_(value_type) if n_values <= np.iinfo(np.int32).max else pa.large_list(value_type)


def format_schema(group_key: str, fixed: dict, ragged: dict, n_values: int) -> pa.Schema:
    """Format block: one Parquet row per tile (e.g. a TC block of ME-TCF), sorted by ``group_key`` (the window).

    ``fixed`` maps column -> (dtype, width): width > 0 gives ``fixed_size_list<dtype, width>``, width 0 a scalar.
    ``ragged`` maps column -> dtype: ``list<dtype>`` (per-nonzero values of the tile).
    """
    fields = [pa.field(group_key, pa.int64(), nullable=False)]
    for name, (dtype, width) in fixed.items():
        t = arrow_type(dtype)
        fields.append(pa.field(name, pa.list_(t, width) if width else t, nullable=False))
    for name, dtype in ragged.items():
        fields.append(pa.field(name, list_type(arrow_type(dtype), n_values), nullable=False))
    return pa.schema(fields)


def result_schema(value_dtype) -> pa.Schema:
    """Dense block (version 2): the block's row-major values as one ``values`` column of the dtype, N Parquet rows
    per row of the array (N: its column count, in the metadata's ``shape``); row groups hold whole rows.
    Version 1 files have one Parquet row per array row, a ``values`` ``fixed_size_list<dtype, N>`` column."""
    return pa.schema([pa.field("values", arrow_type(value_dtype), nullable=False)])


RUNS_SCHEMA = pa.schema([
    pa.field("run_id", pa.string()), pa.field("matrix_id", pa.string()), pa.field("stage", pa.string()),
    pa.field("device", pa.string()), pa.field("kernel", pa.string()), pa.field("ms", pa.float64()),
    pa.field("gflops", pa.float64()), pa.field("n_cols_b", pa.int64()), pa.field("reorder", pa.string()),
    pa.field("error", pa.string()), pa.field("extra", pa.string()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
])
"""One row per run and stage. ``extra`` is a JSON object as text; ``timestamp`` is UTC."""


def with_meta(schema: pa.Schema, meta: dict, version: int = SCHEMA_VERSION) -> pa.Schema:
    return schema.with_metadata({META_KEY: dumps({"version": int(version), **meta}).encode()})


def file_meta(schema: pa.Schema) -> dict:
    """The ``tcspmm`` metadata dict of a file's Arrow schema ({} when absent)."""
    raw = (schema.metadata or {}).get(META_KEY)
    return json.loads(raw) if raw else {}
