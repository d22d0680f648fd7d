"""Dense SpMM outputs C as row blocks: ``results/<run_id>/C-part-<r0>-<r1>.parquet``.

One Parquet row per row of C, a single ``values`` column of ``fixed_size_list<dtype, N>`` (N = C's columns): the
bytes are C's row-major buffer plus a small header, written and read without per-row work.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa

from configs.errors import InputError, StorageError
from storage import parquet_io as pio
from storage.schemas import result_schema, with_meta

DEFAULT_BLOCK_VALUES = 1 << 24
"""Default block size in values (64 MiB of float32): block_rows = max(1, DEFAULT_BLOCK_VALUES // N)."""
ROW_GROUP_VALUES = 1 << 20
"""Values per Parquet row group (4 MiB of float32)."""


def result_tables(C: np.ndarray, block_rows: int | None, meta: dict) -> Iterator[tuple[str, tuple, pa.Table]]:
    C = np.asarray(C)
    if C.ndim != 2 or C.shape[1] < 1:
        raise InputError(f"result C must be 2-D with at least one column, got shape {C.shape}")
    n_rows, n_cols = C.shape
    block_rows = int(block_rows or max(1, DEFAULT_BLOCK_VALUES // n_cols))
    if block_rows < 1:
        raise InputError(f"block_rows must be >= 1, got {block_rows}")
    bounds = list(range(0, n_rows, block_rows)) + [n_rows]
    ranges = [[a, b] for a, b in zip(bounds[:-1], bounds[1:])] or [[0, 0]]
    schema = result_schema(C.dtype, n_cols)
    common = {"format": "dense", "shape": [n_rows, n_cols], "dtypes": {"value": C.dtype.name}, "ranges": ranges,
              "source": meta}
    for r0, r1 in ranges:
        flat = pa.array(np.ascontiguousarray(C[r0:r1]).reshape(-1))
        col = pa.FixedSizeListArray.from_arrays(flat, n_cols)
        yield (f"C-part-{r0}-{r1}.parquet", (r0, r1),
               pa.Table.from_arrays([col], schema=with_meta(schema, {**common, "range": [r0, r1]})))


def read_result(folder: Path, entry: dict) -> np.ndarray:
    meta = entry["meta"]
    n_rows, n_cols = meta["shape"]
    out = np.empty((n_rows, n_cols), dtype=np.dtype(meta["dtypes"]["value"]))
    for rec in entry["files"]:
        r0, r1 = rec["range"]
        table = pio.read(pio.open_file(folder / rec["path"]))
        pos = r0
        for chunk in table.column("values").chunks:
            block = chunk.flatten().to_numpy(zero_copy_only=False).reshape(-1, n_cols)
            out[pos:pos + len(block)] = block
            pos += len(block)
        if pos != r1:
            raise StorageError(f"{folder / rec['path']}: {pos - r0} rows, expected {r1 - r0}; rewrite the result")
    return out
