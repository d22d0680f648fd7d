"""Atomic file writes: write to a temp path beside the target, fsync, then rename.

A run killed at any moment leaves either the old file or the new one, never a partial one; stray temp files carry
the ``.tmp-`` prefix so readers never take them for data and ``sweep_temp`` removes them on the next run.
"""
from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path
from typing import Iterator

from configs.errors import StorageError

TEMP_PREFIX = ".tmp-"


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path in the target's folder; on success rename it over ``target``, on failure delete it."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX + target.name + ".", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, target)
    except OSError as err:
        tmp_path.unlink(missing_ok=True)
        if err.errno == errno.ENOSPC:
            raise StorageError(f"{target}: no space left on device while writing") from err
        raise
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def atomic_write_bytes(target: str | os.PathLike, payload: bytes) -> None:
    with atomic_path(target) as tmp:
        tmp.write_bytes(payload)


def sweep_temp(folder: str | os.PathLike) -> int:
    """Remove temp files left by killed writers under ``folder``; return how many."""
    removed = 0
    for path in Path(folder).rglob(TEMP_PREFIX + "*"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed += 1
    return removed
