"""The runs table: one row per run and stage, appended by many writers at once.

Stored append-only as ``runs/part-<UTC timestamp>-<uuid>.parquet`` under the data root (one file per
``append_runs`` call, each written atomically), read back as one dataset with ``storage.schemas.RUNS_SCHEMA``:
concurrent appenders never touch the same file, so no lock is needed and no row is lost. Temp files start with
``.`` and datasets skip them.
"""
from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

from configs.errors import InputError, StorageError
from storage import parquet_io as pio
from storage.naming import dumps
from storage.schemas import RUNS_SCHEMA

RUNS_DIR = "runs"


def _row(row: dict, now: dt.datetime) -> dict:
    unknown = set(row) - set(RUNS_SCHEMA.names)
    if unknown:
        raise InputError(f"runs row has unknown keys {sorted(unknown)}; put them in 'extra' "
                         f"(columns: {RUNS_SCHEMA.names})")
    out = {name: row.get(name) for name in RUNS_SCHEMA.names}
    if out["extra"] is not None and not isinstance(out["extra"], str):
        out["extra"] = dumps(out["extra"])
    elif isinstance(out["extra"], str):
        json.loads(out["extra"])  # must already be JSON text
    if out["timestamp"] is None:
        out["timestamp"] = now
    return out


def append_runs(data_root: Path, rows: list[dict]) -> Path | None:
    """Append ``rows`` as one new file; returns its path (None for no rows). Missing keys are null."""
    if not rows:
        return None
    now = dt.datetime.now(dt.timezone.utc)
    try:
        table = pa.Table.from_pylist([_row(r, now) for r in rows], schema=RUNS_SCHEMA)
    except (pa.ArrowException, ValueError) as err:
        raise InputError(f"runs rows do not fit the runs schema: {err}") from err
    target = Path(data_root) / RUNS_DIR / f"part-{now.strftime('%Y%m%dT%H%M%S%f')}-{uuid.uuid4().hex}.parquet"
    pio.write_table(target, table)
    return target


def read_runs(data_root: Path) -> pa.Table:
    """All appended rows as one table (empty, with the schema, when there are none), ordered by timestamp."""
    folder = Path(data_root) / RUNS_DIR
    if not folder.is_dir():
        return RUNS_SCHEMA.empty_table()
    try:
        table = ds.dataset(folder, schema=RUNS_SCHEMA, format="parquet").to_table()
    except (OSError, pa.ArrowException) as err:
        raise StorageError(f"{folder}: cannot read the runs table ({err})") from err
    return table.sort_by([("timestamp", "ascending")]) if table.num_rows else table
