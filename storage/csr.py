"""Canonical CSR as row-range Parquet blocks: planning, writing tables, full and row-range reads.

Layout: ``csr/part-<r0>-<r1>.parquet`` holds rows [r0, r1), one Parquet row per nonzero (``row`` global, ``col``,
``value``; schema in ``storage.schemas.csr_schema``), sorted by row, in-row order as written. Every row belongs to
exactly one block; a block holds at least one row, so a row longer than ``max_block_nnz`` gets a block of its own.
A matrix with no rows is one empty block ``part-0-0``. Row groups of ``DEFAULT_ROW_GROUP_SIZE`` nonzeros carry
min/max statistics of ``row``, so a row-range read opens only the overlapping files and decodes only the
overlapping row groups.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa

from configs.errors import StorageError
from storage.indexing import index_dtype, segment_ids
from storage import parquet_io as pio
from storage.schemas import csr_schema, with_meta

DEFAULT_MAX_BLOCK_NNZ = 4 << 20
DEFAULT_MAX_BLOCK_ROWS = 1 << 20


def plan_blocks(indptr: np.ndarray, max_block_nnz: int, max_block_rows: int) -> np.ndarray:
    """Block boundaries ``[0, r1, ..., n_rows]``: each block has at most ``max_block_rows`` rows and at most
    ``max_block_nnz`` nonzeros, except a single row wider than ``max_block_nnz``. Loops over blocks, not rows."""
    if max_block_nnz < 1 or max_block_rows < 1:
        raise ValueError(f"block limits must be >= 1, got max_block_nnz={max_block_nnz}, "
                         f"max_block_rows={max_block_rows}")
    indptr = np.asarray(indptr)
    n_rows = len(indptr) - 1
    bounds = [0]
    r = 0
    while r < n_rows:
        by_nnz = int(np.searchsorted(indptr, indptr[r] + max_block_nnz, side="right")) - 1
        r = min(r + max_block_rows, max(by_nnz, r + 1), n_rows)
        bounds.append(r)
    return np.asarray(bounds, dtype=np.int64)


def block_tables(indptr, indices, data, shape, bounds, meta: dict) -> Iterator[tuple[str, tuple, pa.Table]]:
    """Yield ``(file name, (r0, r1), table)`` per block; tables are built lazily (one block in memory)."""
    nnz = int(indptr[-1])
    idx = index_dtype(max(shape, default=0), nnz)
    ranges = [[int(a), int(b)] for a, b in zip(bounds[:-1], bounds[1:])] or [[0, 0]]
    common = {"format": "csr", "shape": [int(s) for s in shape], "nnz": nnz, "ranges": ranges,
              "dtypes": {"index": np.dtype(idx).name, "value": data.dtype.name}, "source": meta}
    schema = csr_schema(idx, data.dtype)
    for r0, r1 in ranges:
        a, b = int(indptr[r0]), int(indptr[r1])
        row = segment_ids(indptr[r0:r1 + 1], idx, start=r0)
        arrays = [pa.array(row), pa.array(indices[a:b].astype(idx, copy=False)), pa.array(data[a:b])]
        block_meta = {**common, "range": [r0, r1], "block_nnz": b - a}
        yield f"part-{r0}-{r1}.parquet", (r0, r1), pa.Table.from_arrays(arrays, schema=with_meta(schema,
                                                                                                      block_meta))


def encodings() -> dict:
    """Sorted global rows delta-encode to almost nothing; col/value stay PLAIN (+ snappy)."""
    return {"row": "DELTA_BINARY_PACKED"}


def read_coo(folder: Path, entry: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All nonzeros ``(row, col, value)`` in row order, dtypes as stored, into preallocated arrays."""
    meta = entry["meta"]
    nnz = int(meta["nnz"])
    idx, val = np.dtype(meta["dtypes"]["index"]), np.dtype(meta["dtypes"]["value"])
    row, col, data = np.empty(nnz, idx), np.empty(nnz, idx), np.empty(nnz, val)
    pos = 0
    for rec in entry["files"]:
        table = pio.read(pio.open_file(folder / rec["path"]))
        k = table.num_rows
        if pos + k > nnz:
            raise _corrupt(folder / rec["path"], f"more nonzeros than the manifest's {nnz}")
        row[pos:pos + k] = pio.numpy_column(table, "row")
        col[pos:pos + k] = pio.numpy_column(table, "col")
        data[pos:pos + k] = pio.numpy_column(table, "value")
        pos += k
    if pos != nnz:
        raise _corrupt(folder, f"{pos} nonzeros in the CSR blocks, manifest says {nnz}")
    return row, col, data


def read_rows(folder: Path, entry: dict, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """``(indptr, indices, data, stats)`` of rows [r0, r1): opens only files whose range overlaps, decodes only
    row groups whose ``row`` statistics overlap. ``indptr`` starts at 0; ``stats`` = files and row groups read."""
    meta = entry["meta"]
    idx, val = np.dtype(meta["dtypes"]["index"]), np.dtype(meta["dtypes"]["value"])
    rows, cols, vals, stats = [], [], [], {"files": [], "row_groups": 0}
    for rec in entry["files"]:
        a, b = rec["range"]
        if not (a < r1 and b > r0 and r0 < r1):
            continue
        pf = pio.open_file(folder / rec["path"])
        groups = pio.row_groups_overlapping(pf, "row", r0, r1)
        stats["files"].append(rec["path"])
        stats["row_groups"] += len(groups)
        if not groups:
            continue
        table = pio.read(pf, row_groups=groups)
        row = pio.numpy_column(table, "row")
        lo, hi = np.searchsorted(row, [r0, r1])
        rows.append(row[lo:hi])
        cols.append(pio.numpy_column(table, "col")[lo:hi])
        vals.append(pio.numpy_column(table, "value")[lo:hi])
    row = np.concatenate(rows) if rows else np.empty(0, idx)
    indices = np.concatenate(cols) if cols else np.empty(0, idx)
    data = np.concatenate(vals) if vals else np.empty(0, val)
    counts = np.bincount((row - r0).astype(np.int64, copy=False), minlength=r1 - r0)
    indptr = np.zeros(r1 - r0 + 1, dtype=index_dtype(max(meta["shape"], default=0), meta["nnz"]))
    np.cumsum(counts, out=indptr[1:])
    return indptr, indices.astype(idx, copy=False), data.astype(val, copy=False), stats


def indptr_from_rows(row: np.ndarray, n_rows: int, dtype) -> np.ndarray:
    """CSR ``indptr`` of sorted global ``row`` indices."""
    indptr = np.zeros(n_rows + 1, dtype=dtype)
    np.cumsum(np.bincount(row, minlength=n_rows), out=indptr[1:])
    return indptr


def _corrupt(path, what: str) -> StorageError:
    return StorageError(f"{path}: {what}; rewrite the CSR")
