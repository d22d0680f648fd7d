"""Atomic file writes: write to a temp path beside the target, fsync, then rename.

A run killed at any moment leaves either the old file or the new one, never a partial one; stray temp files carry
the ``.tmp-`` prefix so readers never take them for data, and ``sweep_temp`` removes stale ones on a later
run (the download cache and the extraction folder sweep theirs when they next write).
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator

from configs.errors import StorageError

TEMP_PREFIX = ".tmp-"
STALE_TEMP_S = 3600.0  # a temp file untouched this long belongs to a writer that was killed


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


def sweep_temp(folder: str | os.PathLike, older_than_s: float | None = None) -> int:
    """Remove temp files and folders left by killed writers directly in ``folder``; return how many.

    ``older_than_s``: only those untouched for that long, so a writer still at work beside us keeps its temp."""
    removed = 0
    cutoff = None if older_than_s is None else time.time() - older_than_s
    for path in Path(folder).glob(TEMP_PREFIX + "*"):
        with contextlib.suppress(FileNotFoundError):
            if cutoff is not None and path.stat().st_mtime > cutoff:
                continue
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink()
            removed += 1
    return removed
