"""Extraction of downloaded archives into ``data_root/extracted/<sha256>/``, atomically.

Members go to a temp folder beside the target (``.tmp-`` prefix) and the folder is renamed into place, so the
target exists only when complete. Tar members pass ``tarfile`` ``filter='data'``: absolute paths, ``..``, links
out of the tree and device files are refused. A corrupt or truncated archive raises ``FetchError`` naming it; no
temp folder survives any failure.
"""
from __future__ import annotations

import errno
import gzip
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path

from configs.errors import FetchError
from storage.atomic import STALE_TEMP_S, TEMP_PREFIX, sweep_temp

Select = Callable[[list[tarfile.TarInfo]], list[tarfile.TarInfo]]


def extracted_dir(data_root: str | os.PathLike, sha256: str) -> Path:
    return Path(data_root) / "extracted" / sha256


def extract_tar(archive: Path, sha256: str, data_root: str | os.PathLike, label: str,
                select: Select | None = None) -> Path:
    """Extract ``archive`` (all members, or those ``select`` keeps) once; return the extracted folder."""

    def fill(tmp: Path) -> None:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            tar.extractall(tmp, members=select(members) if select else members, filter="data")

    return _materialize(sha256, data_root, label, fill)


GUNZIPPED = "matrix.mtx"  # one fixed name: the folder is keyed by content, which several file names may share


def gunzip(archive: Path, sha256: str, data_root: str | os.PathLike, label: str) -> Path:
    """Decompress a ``.gz`` file once into ``extracted/<sha256>/matrix.mtx``; return that file's path."""

    def fill(tmp: Path) -> None:
        with gzip.open(archive, "rb") as src, open(tmp / GUNZIPPED, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 22)

    return _materialize(sha256, data_root, label, fill) / GUNZIPPED


def _materialize(sha256: str, data_root: str | os.PathLike, label: str, fill: Callable[[Path], None]) -> Path:
    target = extracted_dir(data_root, sha256)
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    sweep_temp(target.parent, older_than_s=STALE_TEMP_S)  # extractions of killed runs
    tmp = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX + sha256[:16] + ".", dir=target.parent))
    try:
        fill(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():  # lost a race to another extractor: theirs is as good as ours
                raise
        return target
    except tarfile.FilterError as err:
        raise FetchError(f"archive {label}: refusing unsafe member {err.tarinfo.name!r} ({err})") from err
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as err:
        reason = " ".join(str(err).split()) or type(err).__name__
        raise FetchError(f"archive {label} is corrupt or truncated: {reason}") from err
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise FetchError(f"archive {label}: no space left on device while extracting to {target.parent}") \
                from err
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
