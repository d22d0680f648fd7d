"""Parquet reads and writes with checksums, row-group pruning and one-line StorageErrors.

Writes go through ``storage.atomic.atomic_path`` with Parquet page CRCs on; reads verify those CRCs, so bytes
changed inside a data page raise StorageError naming the file instead of returning wrong numbers.
"""
from __future__ import annotations

import os
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from configs.errors import StorageError
from configs.threads import threads_from_env, usable_cpus
from storage.atomic import atomic_path

DEFAULT_ROW_GROUP_SIZE = 1 << 17
"""Parquet rows per row group: small enough that a row-range read skips most of a 4M-nnz block."""
IO_THREADS_MAX = 8
"""At most this many threads per read or write of a set of files (``io_threads``): one process per GPU shares the
host's cores and memory bandwidth with the others."""


def io_threads() -> int:
    """Threads for one read or write of several row groups or files: ``TCSPMM_IO_THREADS`` if set, else the CPUs
    this process may use, at most ``IO_THREADS_MAX``."""
    return threads_from_env("TCSPMM_IO_THREADS", min(usable_cpus(), IO_THREADS_MAX))


def map_threads(fn: Callable, items: Iterable, threads: int | None = None) -> list:
    """``[fn(x) for x in items]`` from up to ``threads`` threads (None: `io_threads`; pyarrow's reads and writes,
    hashing and NumPy copies release the GIL). Returns once every call has ended (none still running); the first
    failure in the items' order is raised and the calls not yet started are cancelled."""
    items = list(items)
    n = min(io_threads() if threads is None else max(1, int(threads)), len(items))
    if n <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(n, thread_name_prefix="tcspmm-io") as ex:
        futures = [ex.submit(fn, x) for x in items]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        if any(f.exception() is not None for f in done):
            for f in futures:
                f.cancel()
    failed = [f.exception() for f in futures if not f.cancelled() and f.exception() is not None]
    if failed:
        raise failed[0]
    return [f.result() for f in futures]


def write_table(target: Path, table: pa.Table, *, row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
                encodings: dict | None = None, compression: str | dict = "snappy",
                statistics: bool | list = True) -> None:
    """Write ``table`` to ``target`` atomically (no partial file on any failure; ENOSPC -> StorageError).
    ``compression`` and ``statistics`` as ``pyarrow.parquet.write_table`` takes them (per column or for all)."""
    kwargs = dict(row_group_size=max(1, int(row_group_size)), compression=compression, write_page_checksum=True,
                  write_statistics=statistics, use_dictionary=False)
    if encodings:
        kwargs["column_encoding"] = encodings
    with atomic_path(target) as tmp:
        pq.write_table(table, tmp, **kwargs)


# The fix for a damaged block: the pipeline's stages check what they reuse (sha256, ``MatrixStore.intact``) and
# rebuild a damaged artifact from its source.
REBUILD = "a run of flows/spmm.py on the matrix rebuilds it from its source"


_ARROW_POOL_SIZED = False


def size_arrow_pool() -> None:
    """Arrow decodes a read's columns and row groups on its CPU pool, which it sizes from ``OMP_NUM_THREADS``;
    a Dask nanny starts its workers with ``OMP_NUM_THREADS=1`` (for BLAS), so every read in a worker decoded on
    one thread. Once per process the pool is raised to `io_threads` (never lowered)."""
    global _ARROW_POOL_SIZED
    if not _ARROW_POOL_SIZED:
        _ARROW_POOL_SIZED = True
        n = io_threads()
        if pa.cpu_count() < n:
            pa.set_cpu_count(n)


def open_file(path: str | os.PathLike, metadata: pq.FileMetaData | None = None) -> pq.ParquetFile:
    """Open a Parquet file with page CRC verification; any decode problem -> StorageError naming the file.
    ``metadata``: the file's footer as an earlier open read it (not read again: a second handle for another thread).

    Every reader in ``storage`` opens files through this one function (tests count calls to it); the first call
    sizes Arrow's decode pool (`size_arrow_pool`).
    """
    size_arrow_pool()
    try:
        pf = pq.ParquetFile(path, page_checksum_verification=True, metadata=metadata)
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

