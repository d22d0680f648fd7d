"""Names in the block store: id validation, permutation keys, the data root, JSON-safe metadata.

Every id that becomes a path component (matrix id, run id, format name, perm key) matches ``[A-Za-z0-9._-]+`` and is
not made of dots only, so it can never climb out of its folder.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from configs.errors import InputError

_ID_RE = re.compile(r"[A-Za-z0-9._-]+")


def validate_id(value: str, what: str = "matrix_id") -> str:
    """Return ``value`` if it is a safe path component, else raise InputError naming ``what``."""
    if not isinstance(value, str) or not _ID_RE.fullmatch(value) or set(value) == {"."}:
        raise InputError(f"{what} {value!r} is not valid: use only letters, digits, '.', '_' and '-'")
    return value


def default_data_root(data_root: str | os.PathLike | None = None) -> Path:
    """``data_root`` if given, else env ``TCSPMM_DATA``, else ``./data``."""
    from configs import data_root as resolve

    return resolve(data_root)


def jsonable(obj: Any) -> Any:
    """``json.dumps`` default hook: NumPy scalars and arrays, tuples, paths, read-only mappings (a plan's
    choice record)."""
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.dtype) or (isinstance(obj, type) and issubclass(obj, np.generic)):
        return np.dtype(obj).name
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, (Path, tuple, set)):
        return str(obj) if isinstance(obj, Path) else list(obj)
    raise TypeError(f"metadata value {obj!r} of type {type(obj).__name__} is not JSON-serialisable")


def dumps(obj: Any, *, canonical: bool = False) -> str:
    """JSON text of ``obj``; ``canonical`` sorts keys and drops whitespace (for hashing)."""
    try:
        if canonical:
            return json.dumps(obj, default=jsonable, sort_keys=True, separators=(",", ":"))
        return json.dumps(obj, default=jsonable)
    except (TypeError, ValueError) as err:
        raise InputError(f"metadata is not JSON-serialisable: {err}") from err


def perm_key(method: str, params: dict | None = None) -> str:
    """``<method>-<12 hex of sha256(canonical JSON of params)>``, e.g. ``tca-3f2a9c0d1b4e``.

    The same method and params (key order and NumPy scalar types ignored) always give the same key.
    """
    validate_id(method, "reorder method")
    digest = hashlib.sha256(dumps(params or {}, canonical=True).encode()).hexdigest()[:12]
    return f"{method}-{digest}"
