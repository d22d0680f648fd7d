"""Converted formats as row-window-range Parquet blocks, one Parquet row per tile.

A format is described by a ``BlockLayout``: its arrays split into

- a group offset (``row_window_offset`` [n_windows + 1]): window w owns tiles ``[gofs[w], gofs[w + 1])``;
- an item offset (``tc_offset`` [n_tiles + 1]): tile t owns nonzeros ``[iofs[t], iofs[t + 1])``;
- fixed per-tile arrays (``sparse_a_to_b`` [n_tiles, w]) -> ``fixed_size_list<dtype, w>`` columns, w taken from
  the array (ME-TCF's block width depends on the precision) and recorded in the file metadata (``widths``);
  a 1-D per-tile array -> scalar column;
- ragged per-nonzero arrays (``tc_local_id`` uint8, ``data``) -> ``list<dtype>`` columns sharing the item offsets.

Each Parquet row also has ``window`` (int64, global), so empty windows and window sub-ranges are rebuilt exactly.
Files: ``formats/<fmt>/<perm_key>/part-<w0>-<w1>.parquet``, one per window shard. Reads rebuild the offsets of the
requested window range relative to its first tile / nonzero, vectorised over list offsets (no loop over tiles).
Layouts are registered by the format plugins (``kernels.formats``, ``register_layout``): the store names no format.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from configs.errors import InputError, StorageError
from storage import parquet_io as pio
from storage.indexing import segment_ids
from storage.schemas import format_schema, with_meta

GROUP_KEY = "window"
ROW_GROUP_TILES = 1 << 13


@dataclass(frozen=True)
class BlockLayout:
    rows_per_group: int
    group_offset: str
    item_offset: str
    fixed: dict = field(default_factory=dict)   # name -> default width (0 = one scalar per tile; 2-D arrays keep
    # their own width, recorded in the metadata)
    ragged: tuple = ()  # the last one holds the matrix's values (``value_column``)

    @property
    def value_column(self) -> str:
        """The column of A's values (the last ragged one), whose value type the metadata's ``value_types`` names."""
        return self.ragged[-1]


LAYOUTS: dict[str, BlockLayout] = {}


def register_layout(fmt: str, layout: BlockLayout) -> None:
    LAYOUTS[fmt] = layout


def layout_of(fmt: str) -> BlockLayout:
    try:
        return LAYOUTS[fmt]
    except KeyError:
        raise InputError(f"format {fmt!r} has no storage layout; known: {sorted(LAYOUTS)} "
                         f"(importing kernels.formats registers every format's layout; register another with "
                         "storage.formats.register_layout)") from None


def _width(a: np.ndarray) -> int:
    return int(a.shape[1]) if a.ndim == 2 else 0


def check_arrays(arrays: dict, lay: BlockLayout) -> tuple[np.ndarray, np.ndarray]:
    """O(1) shape checks; returns (group offsets, item offsets) as arrays."""
    missing = [k for k in (lay.group_offset, lay.item_offset, *lay.fixed, *lay.ragged, "shape") if k not in arrays]
    if missing:
        raise InputError(f"format arrays lack {missing}")
    gofs, iofs = np.asarray(arrays[lay.group_offset]), np.asarray(arrays[lay.item_offset])
    n_tiles, nnz = int(gofs[-1]), int(iofs[-1])
    if len(iofs) != n_tiles + 1:
        raise InputError(f"{lay.item_offset} has {len(iofs)} entries, expected {lay.group_offset}[-1] + 1 = "
                         f"{n_tiles + 1}")
    for name, width in lay.fixed.items():
        a = np.asarray(arrays[name])
        want = (n_tiles, _width(a)) if width else (n_tiles,)
        if a.shape != want or (width and a.shape[1] < 1):
            raise InputError(f"{name} has shape {a.shape}, expected {want if width else (n_tiles,)}")
    for name in lay.ragged:
        if len(arrays[name]) != nnz:
            raise InputError(f"{name} has {len(arrays[name])} entries, expected {lay.item_offset}[-1] = {nnz}")
    return gofs, iofs


def shard_ranges(window_ranges, n_windows: int) -> list[list[int]]:
    """Normalise shards: a partptr ``[0, w1, ..., n_windows]`` or ``[(w0, w1), ...]`` covering all windows in order.
    Empty shards are dropped (a window range owns one file); zero windows give one empty shard [0, 0]."""
    wr = np.asarray(window_ranges, dtype=np.int64)
    if wr.ndim == 2 and wr.shape[1] == 2 and len(wr):
        if np.any(wr[1:, 0] != wr[:-1, 1]):
            raise InputError("window_ranges must be contiguous: each shard starts where the previous one ends")
        wr = np.concatenate([wr[:, 0], wr[-1:, 1]])
    if wr.ndim != 1 or len(wr) < 2 or wr[0] != 0 or wr[-1] != n_windows or np.any(np.diff(wr) < 0):
        raise InputError(f"window_ranges {window_ranges!r} is not a partptr from 0 to n_windows = {n_windows}")
    pairs = [[int(a), int(b)] for a, b in zip(wr[:-1], wr[1:]) if b > a]
    return pairs or [[0, 0]]


def format_tables(fmt: str, arrays: dict, lay: BlockLayout, shards: list, meta: dict
                  ) -> Iterator[tuple[str, tuple, pa.Table]]:
    """Yield ``(relative file name, (w0, w1), table)`` per shard; the loop is over shards only."""
    gofs, iofs = check_arrays(arrays, lay)
    fixed = {n: np.asarray(arrays[n]) for n in lay.fixed}
    ragged = {n: np.asarray(arrays[n]) for n in lay.ragged}
    dtypes = {n: a.dtype.name for n, a in {**fixed, **ragged}.items()}
    dtypes.update({lay.group_offset: gofs.dtype.name, lay.item_offset: iofs.dtype.name})
    widths = {n: _width(a) for n, a in fixed.items()}
    value_types = {n: str(v) for n, v in (meta.get("value_types") or {}).items()}  # e.g. data: bfloat16 (uint16 bits)
    common = {"format": fmt, "shape": [int(s) for s in arrays["shape"]], "nnz": int(iofs[-1]),
              "n_tiles": int(gofs[-1]), "n_windows": len(gofs) - 1, "rows_per_window": lay.rows_per_group,
              "dtypes": dtypes, "widths": widths, "value_types": value_types, "ranges": shards, "source": meta}
    for w0, w1 in shards:
        b0, b1 = int(gofs[w0]), int(gofs[w1])
        n0, n1 = int(iofs[b0]), int(iofs[b1])
        schema = format_schema(GROUP_KEY, {n: (a.dtype, widths[n]) for n, a in fixed.items()},
                               {n: a.dtype for n, a in ragged.items()}, n1 - n0)
        cols = [pa.array(segment_ids(gofs[w0:w1 + 1], start=w0))]
        for name, a in fixed.items():
            flat = pa.array(np.ascontiguousarray(a[b0:b1]).reshape(-1))
            cols.append(pa.FixedSizeListArray.from_arrays(flat, widths[name]) if widths[name] else flat)
        offs = iofs[b0:b1 + 1] - n0
        for name, a in ragged.items():
            list_t = schema.field(name).type
            otype = np.int64 if pa.types.is_large_list(list_t) else np.int32
            cols.append(type(pa.array([], list_t)).from_arrays(pa.array(offs.astype(otype)), pa.array(a[n0:n1])))
        yield (f"part-{w0}-{w1}.parquet", (w0, w1),
               pa.Table.from_arrays(cols, schema=with_meta(schema, {**common, "range": [w0, w1]})))


def auto_shards(arrays: dict, lay: BlockLayout, max_block_nnz: int, max_block_rows: int) -> list[list[int]]:
    """Shards bounded like CSR blocks: at most ``max_block_nnz`` nonzeros and ``max_block_rows`` rows."""
    from storage.csr import plan_blocks
    gofs, iofs = check_arrays(arrays, lay)
    bounds = plan_blocks(iofs[gofs], max_block_nnz, max(1, max_block_rows // lay.rows_per_group))
    return shard_ranges(bounds, len(gofs) - 1)


def read_format(folder: Path, entry: dict, lay: BlockLayout, w0: int | None, w1: int | None) -> dict:
    """Arrays of windows [w0, w1) with offsets rebuilt from 0, dtypes as written.

    Extra keys: ``window_range`` (w0, w1) and ``row_range`` (16 * w0, min(16 * w1, n_rows)); ``shape`` is the full
    shape for the full range and (rows in the range, n_cols) for a sub-range.
    """
    meta = entry["meta"]
    n_windows = meta["n_windows"]
    w0 = 0 if w0 is None else int(w0)
    w1 = n_windows if w1 is None else int(w1)
    if not 0 <= w0 <= w1 <= n_windows:
        raise InputError(f"window range [{w0}, {w1}) is outside [0, {n_windows})")
    dt = {k: np.dtype(v) for k, v in meta["dtypes"].items()}
    widths = {**lay.fixed, **meta.get("widths", {})}  # files before session 5 carry no widths: the layout's
    windows, fixed, lengths, values = [], {n: [] for n in lay.fixed}, [], {n: [] for n in lay.ragged}
    for rec in entry["files"]:
        a, b = rec["range"]
        if not (a < w1 and b > w0 and w0 < w1):
            continue
        pf = pio.open_file(folder / rec["path"])
        groups = pio.row_groups_overlapping(pf, GROUP_KEY, w0, w1)
        if not groups:
            continue
        table = pio.read(pf, row_groups=groups)
        win = pio.numpy_column(table, GROUP_KEY)
        lo, hi = (int(x) for x in np.searchsorted(win, [w0, w1]))
        table = table.slice(lo, hi - lo)
        windows.append(win[lo:hi])
        for name, width in lay.fixed.items():
            for chunk in table.column(name).chunks:
                fixed[name].append((chunk.flatten() if width else chunk).to_numpy(zero_copy_only=False))
        for i, name in enumerate(lay.ragged):
            for chunk in table.column(name).chunks:
                if i == 0:  # the ragged columns share offsets; the others are checked by total length below
                    lengths.append(pc.list_value_length(chunk).to_numpy(zero_copy_only=False))
                values[name].append(chunk.flatten().to_numpy(zero_copy_only=False))
    win = np.concatenate(windows) if windows else np.empty(0, np.int64)
    gofs = np.zeros(w1 - w0 + 1, dt[lay.group_offset])
    np.cumsum(np.bincount(win - w0, minlength=w1 - w0), out=gofs[1:])
    n_len = np.concatenate(lengths) if lengths else np.empty(0, np.int64)
    iofs = np.zeros(len(n_len) + 1, dt[lay.item_offset])
    np.cumsum(n_len, out=iofs[1:])
    out = {lay.group_offset: gofs, lay.item_offset: iofs}
    for name in lay.fixed:
        width = widths[name]
        flat = np.concatenate(fixed[name]) if fixed[name] else np.empty(0, dt[name])
        out[name] = flat.astype(dt[name], copy=False).reshape((-1, width) if width else (-1,))
    for name in lay.ragged:
        flat = np.concatenate(values[name]) if values[name] else np.empty(0, dt[name])
        out[name] = flat.astype(dt[name], copy=False)
    for name in lay.ragged[1:]:
        if len(out[name]) != iofs[-1]:
            raise StorageError(f"{folder}: {name} has {len(out[name])} values, {lay.item_offset} says {iofs[-1]}")
    n_rows, n_cols = meta["shape"]
    r0, r1 = lay.rows_per_group * w0, min(lay.rows_per_group * w1, n_rows)
    out["shape"] = (n_rows, n_cols) if (w0, w1) == (0, n_windows) else (max(r1 - r0, 0), n_cols)
    out["window_range"], out["row_range"] = (w0, w1), (r0, max(r1, r0))
    return out
