"""Parquet reads and writes with checksums, row-group pruning and one-line StorageErrors.

Writes go through ``storage.atomic.atomic_path`` with Parquet page CRCs on; reads verify those CRCs, so bytes
changed inside a data page raise StorageError naming the file instead of returning wrong numbers.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from configs.errors import StorageError
from storage.atomic import atomic_path

DEFAULT_ROW_GROUP_SIZE = 1 << 17
"""Parquet rows per row group: small enough that a row-range read skips most of a 4M-nnz block."""


def write_table(target: Path, table: pa.Table, *, row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
                encodings: dict | None = None) -> None:
    """Write ``table`` to ``target`` atomically (no partial file on any failure; ENOSPC -> StorageError)."""
    kwargs = dict(row_group_size=max(1, int(row_group_size)), compression="snappy", write_page_checksum=True,
                  write_statistics=True, use_dictionary=False)
    if encodings:
        kwargs["column_encoding"] = encodings
    with atomic_path(target) as tmp:
        pq.write_table(table, tmp, **kwargs)


# The fix for a damaged block: the pipeline's stages check what they reuse (sha256, ``MatrixStore.intact``) and
# rebuild a damaged artifact from its source.
REBUILD = "a run of flows/spmm.py on the matrix rebuilds it from its source"


def open_file(path: str | os.PathLike) -> pq.ParquetFile:
    """Open a Parquet file with page CRC verification; any decode problem -> StorageError naming the file.

    Every reader in ``storage`` opens files through this one function (tests count calls to it).
    """
    try:
        pf = pq.ParquetFile(path, page_checksum_verification=True)
    except (OSError, pa.ArrowException) as err:
        raise StorageError(f"{path}: cannot open as Parquet ({err}); {REBUILD}") from err
    pf._tcspmm_path = path
    return pf


def read(pf: pq.ParquetFile, columns: list[str] | None = None, row_groups: list[int] | None = None) -> pa.Table:
    """Read columns (and optionally only some row groups) of an open file; errors -> StorageError naming the file."""
    try:
        if row_groups is None:
            return pf.read(columns=columns)
        return pf.read_row_groups(row_groups, columns=columns)
    except (OSError, pa.ArrowException) as err:
        raise StorageError(f"{_name(pf)}: corrupt data ({err}); {REBUILD}") from err


def _name(pf: pq.ParquetFile) -> str:
    return str(getattr(pf, "_tcspmm_path", "parquet file"))


def row_groups_overlapping(pf: pq.ParquetFile, column: str, lo: int, hi: int) -> list[int]:
    """Row groups whose ``column`` statistics may hold a value in [lo, hi) (all of them when stats are missing)."""
    md = pf.metadata
    idx = pf.schema_arrow.get_field_index(column)
    keep = []
    for i in range(md.num_row_groups):
        stats = md.row_group(i).column(idx).statistics
        if stats is None or not stats.has_min_max or (stats.max >= lo and stats.min < hi):
            keep.append(i)
    return keep


def numpy_column(table: pa.Table, name: str, dtype=None) -> np.ndarray:
    """A flat primitive column as one NumPy array (zero-copy for a single chunk)."""
    col = table.column(name)
    if col.num_chunks == 1:
        out = col.chunk(0).to_numpy(zero_copy_only=False)
    elif col.num_chunks == 0:
        out = np.empty(0, dtype=col.type.to_pandas_dtype())
    else:
        out = np.concatenate([c.to_numpy(zero_copy_only=False) for c in col.chunks])
    return out if dtype is None else out.astype(dtype, copy=False)

