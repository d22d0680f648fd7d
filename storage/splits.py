"""A composite's split next to the converted formats: one small label per 16-row window of the reordered matrix,
``matrices/<id>/formats/<name>/<key>/C-part-<w0>-<w1>.parquet``.

A composite (``kernels.hybrid``: a plan built from registered formats) has no tiles of its own; what decides it is
which part each row window goes to. Layout: the dense layout (storage.results) of a uint8 [n_windows, 1] array
(one Parquet row per window, a flat uint8 column; version 1 files, a fixed_size_list<uint8, 1>, still read); the
caller's meta (the part formats, the N it was chosen at, the report's summary) is kept whole under ``source``.
Manifest artifact ``formats/<name>/<key>``, beside the registered formats' ``formats/<fmt>/<key>``, so a stage
checks and reuses it the same way; the write/read contract is ``MatrixStore``'s. Knows the layout, not what the
labels mean.
"""
from __future__ import annotations

import numpy as np

from configs.errors import InputError
from storage import results as res_io
from storage.naming import validate_id
from storage.store import MatrixStore

KIND = "split"


def _name(fmt: str, key: str) -> str:
    return f"formats/{validate_id(fmt, 'format')}/{validate_id(key, 'format key')}"


def write_split(mstore: MatrixStore, fmt: str, key: str, labels, meta: dict | None = None) -> dict:
    """Store ``labels`` (uint8 [n_windows], one per 16-row window) as the split ``fmt`` / ``key``."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.dtype != np.uint8:
        raise InputError(f"split {fmt}/{key}: expected uint8 [n_windows] labels, got shape {labels.shape} dtype "
                         f"{labels.dtype}")
    name = _name(fmt, key)
    meta = {**(meta or {}), "split": fmt, "n_windows": int(labels.size)}
    # mstore._write_artifact is the store's one writer (atomic files, manifest entry last), as for node arrays
    return mstore._write_artifact(name, KIND, name, "C-part-*.parquet",
                                  res_io.result_tables(labels.reshape(-1, 1), None, meta),
                                  **res_io.write_options(labels.dtype, 1))


def has_split(mstore: MatrixStore, fmt: str, key: str) -> bool:
    entry = mstore.manifest.complete(_name(fmt, key))
    return entry is not None and entry.get("kind") == KIND


def read_split(mstore: MatrixStore, fmt: str, key: str) -> tuple[np.ndarray, dict]:
    """(uint8 [n_windows] labels, the caller's meta) of a stored split; StorageError when it is not complete."""
    entry = mstore.manifest.require(_name(fmt, key))
    if entry.get("kind") != KIND:
        raise InputError(f"{_name(fmt, key)} of matrix {mstore.matrix_id!r} is a {entry.get('kind')}, not a split")
    labels = res_io.read_result(mstore.folder, entry).reshape(-1)
    meta = dict(entry["meta"].get("source", {}))
    if labels.size != int(meta.get("n_windows", labels.size)):
        raise InputError(f"{_name(fmt, key)} of matrix {mstore.matrix_id!r}: {labels.size} labels, its meta says "
                         f"{meta.get('n_windows')}; convert the matrix again")
    return labels, meta
