"""Dense arrays as row blocks: ``C-part-<r0>-<r1>.parquet`` (SpMM outputs C under ``results/<run_id>``, the
one-shot's stored B under ``inputs/``, node arrays, splits).

Layout, version 2 (``schemas.DENSE_VERSION``, written from 2026-11-28): one ``values`` column of the array's dtype
holding the block's row-major buffer, N Parquet rows per row of the array (N = its columns, the metadata's
``n_cols``); a row group holds whole rows (``ROW_GROUP_VALUES`` values); float columns uncompressed, others
snappy; no column statistics. Version 1 (before): one Parquet row per array row, a ``values`` column of
``fixed_size_list<dtype, N>``, snappy. The readers take both, file by file (by the column's Arrow type).

Why version 2 (benchmarks/store_io.py, one 64 MiB float32 block, 2 CPUs): pyarrow decodes a fixed_size_list
column through its nested-list path, a repetition and a definition level per value: 1.1 GB/s, against 2.9 GB/s
for the flat column (page CRCs verified in both), and writes it at 0.7 against 1.1 GB/s. Snappy finds nothing to
take out of float mantissas (67.1 MB either way) and costs a copy each way; min/max statistics of a block of
values prune nothing.

Reads (`read_dense`) decode row groups from several threads (``parquet_io.io_threads``), each copying or gathering
its rows straight into the output array: no concatenated copy, and one row group per thread in flight.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from configs.errors import InputError, StorageError
from storage import parquet_io as pio
from storage.schemas import DENSE_VERSION, result_schema, with_meta

DEFAULT_BLOCK_VALUES = 1 << 24
"""Default block size in values (64 MiB of float32): block_rows = max(1, DEFAULT_BLOCK_VALUES // N)."""
ROW_GROUP_VALUES = 1 << 20
"""Values per Parquet row group (4 MiB of float32): the unit a row read decodes."""


def write_options(dtype, n_cols: int, group_rows: int | None = None) -> dict:
    """``parquet_io.write_table`` keywords for dense blocks of ``dtype`` with ``n_cols`` columns: row groups of
    ``group_rows`` whole rows (default ``ROW_GROUP_VALUES // n_cols``), compression none for floats (snappy else),
    no statistics."""
    n_cols = max(1, int(n_cols))
    group_rows = max(1, int(group_rows or ROW_GROUP_VALUES // n_cols))
    return {"row_group_size": group_rows * n_cols, "statistics": False,
            "compression": "none" if np.dtype(dtype).kind == "f" else "snappy"}


def dense_table(block: np.ndarray, meta: dict) -> pa.Table:
    """One dense block (version 2) as an Arrow table over ``block``'s buffer (no copy when C-contiguous)."""
    block = np.asarray(block)
    flat = pa.array(np.ascontiguousarray(block).reshape(-1))
    return pa.Table.from_arrays([flat], schema=with_meta(result_schema(block.dtype), meta, version=DENSE_VERSION))


def result_tables(C: np.ndarray, block_rows: int | None, meta: dict, *, row0: int = 0
                  ) -> Iterator[tuple[str, tuple, pa.Table]]:
    """``(file name, (r0, r1), table)`` per block of ``block_rows`` rows of C (default about DEFAULT_BLOCK_VALUES
    values); ``row0``: C's first row in a larger array (a worker's block of the one-shot's C), which the file names
    and ranges count from (``shape`` and ``ranges`` in the files' metadata are then of these rows)."""
    C = np.asarray(C)
    if C.ndim != 2 or C.shape[1] < 1:
        raise InputError(f"result C must be 2-D with at least one column, got shape {C.shape}")
    n_rows, n_cols = C.shape
    block_rows = int(block_rows or max(1, DEFAULT_BLOCK_VALUES // n_cols))
    if block_rows < 1:
        raise InputError(f"block_rows must be >= 1, got {block_rows}")
    bounds = list(range(0, n_rows, block_rows)) + [n_rows]
    ranges = [[a, b] for a, b in zip(bounds[:-1], bounds[1:])] or [[0, 0]]
    row0 = int(row0)
    common = {"format": "dense", "shape": [n_rows, n_cols], "n_cols": n_cols, "dtypes": {"value": C.dtype.name},
              "ranges": [[row0 + a, row0 + b] for a, b in ranges], "source": meta}
    for a, b in ranges:
        r0, r1 = row0 + a, row0 + b
        yield f"C-part-{r0}-{r1}.parquet", (r0, r1), dense_table(C[a:b], {**common, "range": [r0, r1]})


@dataclass(frozen=True)
class _Group:
    """One row group to decode and where its rows go: ``out[dst] = rows[src]`` (``src`` None: all its rows)."""

    path: Path
    footer: pq.FileMetaData
    flat: bool
    index: int
    n_rows: int
    dst: object  # slice or int64 array of output rows
    src: np.ndarray | None


def read_result(folder: Path, entry: dict) -> np.ndarray:
    return read_dense(folder, entry)[0]


def read_dense(folder: Path, entry: dict, rows=None, *, perm=None,
               threads: int | None = None) -> tuple[np.ndarray, int]:
    """A stored dense array (``entry``: its manifest entry), whole or some rows, and the Parquet bytes of the row
    groups decoded.

    ``rows``: None (all), or row ids in any order, repeats allowed: ``out[i] = A[rows[i]]``; only the row groups
    holding them are decoded, each once. ``perm`` (with ``rows`` None): ``out[perm[i]] = A[i]``, a result stored in
    the reordered row order put back in the original one as it is decoded (``perm[new] = old``). ``threads``: row
    groups decoded at once (None: ``parquet_io.io_threads()``).
    """
    meta = entry["meta"]
    n_rows, n_cols = (int(x) for x in meta["shape"])
    if rows is not None:
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= n_rows):
            raise InputError(f"rows {int(rows.min())}..{int(rows.max())} requested from a dense array of {n_rows} "
                             f"rows")
        order = np.argsort(rows, kind="stable") if np.any(rows[1:] < rows[:-1]) else None
        sorted_rows = rows if order is None else rows[order]
    if perm is not None:
        perm = np.asarray(perm, dtype=np.int64)
        if rows is not None or perm.shape != (n_rows,):
            raise InputError(f"perm has shape {perm.shape}, expected ({n_rows},) and no rows")
    out = np.empty((n_rows if rows is None else rows.shape[0], n_cols), dtype=np.dtype(meta["dtypes"]["value"]))
    groups, nbytes = [], 0
    for rec in entry["files"]:
        r0, r1 = (int(x) for x in rec["range"])
        lo, hi = (0, 0) if rows is None else (int(x) for x in np.searchsorted(sorted_rows, [r0, r1]))
        if rows is not None and lo == hi:
            continue
        path = folder / rec["path"]
        pf = pio.open_file(path)
        flat, starts = _file_groups(pf, path, r0, r1, n_cols)
        if rows is None:
            picked = [(g, slice(int(starts[g]), int(starts[g + 1])) if perm is None else perm[starts[g]:starts[g + 1]],
                       None) for g in range(len(starts) - 1) if starts[g + 1] > starts[g]]
        else:
            picked = _select(sorted_rows, order, lo, hi, starts)
        for g, dst, src in picked:
            groups.append(_Group(path, pf.metadata, flat, g, int(starts[g + 1] - starts[g]), dst, src))
            nbytes += int(pf.metadata.row_group(g).column(0).total_compressed_size)
    pio.map_threads(lambda grp: _decode_into(out, grp, n_cols), groups, threads)
    return out, nbytes


def _file_groups(pf: pq.ParquetFile, path: Path, r0: int, r1: int, n_cols: int) -> tuple[bool, np.ndarray]:
    """(version 2 layout?, first array row of each row group and the file's end, global rows)."""
    try:
        vtype = pf.schema_arrow.field("values").type
    except KeyError as err:
        raise StorageError(f"{path}: no 'values' column; {pio.REBUILD}") from err
    flat = not pa.types.is_fixed_size_list(vtype)
    md = pf.metadata
    sizes = np.array([md.row_group(g).num_rows for g in range(md.num_row_groups)], dtype=np.int64)
    if flat and np.any(sizes % n_cols):
        raise StorageError(f"{path}: a row group holds {sizes[sizes % n_cols != 0][0]} values, not whole rows of "
                           f"{n_cols}; {pio.REBUILD}")
    sizes //= n_cols if flat else 1
    if int(sizes.sum()) != r1 - r0:
        raise StorageError(f"{path}: {int(sizes.sum())} rows, expected {r1 - r0}; {pio.REBUILD}")
    return flat, r0 + np.concatenate([[0], np.cumsum(sizes)])


def _select(sorted_rows, order, lo: int, hi: int, starts: np.ndarray) -> list:
    """(group, dst, src) for the requested rows ``sorted_rows[lo:hi]`` of one file (``starts``: its groups' first
    rows): ``dst`` a slice of the output when the rows came sorted, else their output positions."""
    sel = sorted_rows[lo:hi]
    group = np.searchsorted(starts, sel, side="right") - 1
    cuts = np.concatenate([[0], np.flatnonzero(np.diff(group)) + 1, [sel.shape[0]]])
    picked = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        g = int(group[a])
        dst = slice(lo + int(a), lo + int(b)) if order is None else order[lo + a:lo + b]
        picked.append((g, dst, sel[a:b] - starts[g]))
    return picked


def _decode_into(out: np.ndarray, grp: _Group, n_cols: int) -> None:
    table = pio.read(pio.open_file(grp.path, grp.footer), row_groups=[grp.index])
    chunks = [(c if grp.flat else c.flatten()).to_numpy(zero_copy_only=False) for c in table.column("values").chunks]
    block = (chunks[0] if len(chunks) == 1 else np.concatenate(chunks)).reshape(-1, n_cols)
    if block.shape[0] != grp.n_rows:
        raise StorageError(f"{grp.path}: row group {grp.index} has {block.shape[0]} rows, its footer says "
                           f"{grp.n_rows}; {pio.REBUILD}")
    if grp.src is None:
        out[grp.dst] = block
    elif isinstance(grp.dst, slice):
        np.take(block, grp.src, axis=0, out=out[grp.dst])
    else:
        out[grp.dst] = block[grp.src]
