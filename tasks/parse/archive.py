"""Extraction of downloaded archives into ``data_root/extracted/<sha256>/``, atomically.

Members go to a temp folder beside the target (``.tmp-`` prefix) and the folder is renamed into place, so the
target exists only when complete. A member with an absolute path or a ``..`` component is refused by name before
anything is written (`scan_members`); the rest pass ``tarfile`` ``filter='data'``: links out of the tree and
device files are refused. A corrupt or truncated archive raises ``FetchError`` naming it; no
temp folder survives any failure.

Budget: an archive may unpack to at most ``extract_budget`` bytes: a generous multiple of what its source announces
(the SuiteSparse index's entry count as MatrixMarket text), capped by ``configs.limits`` (the cap alone when the
source announces nothing). Member sizes are read from the tar headers before any member is written, so a member
padded with a gigabyte of whitespace is refused without writing it; ``.gz`` files are counted while they stream and
what was written is removed.
"""
from __future__ import annotations

import dataclasses
import errno
import gzip
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path, PurePosixPath, PureWindowsPath

from configs.errors import FetchError
from configs.limits import Limits, format_size, load_limits
from storage.atomic import STALE_TEMP_S, TEMP_PREFIX, sweep_temp
from tasks import progress

Select = Callable[[list[tarfile.TarInfo]], list[tarfile.TarInfo]]
MTX_BYTES_PER_ENTRY = 64  # "1234567 1234567 -1.2345678901234567e-123" plus a newline, rounded up
MTX_HEADER_BYTES = 4096


@dataclasses.dataclass(frozen=True)
class Budget:
    """At most ``n_bytes`` unpacked; ``why`` says where the number comes from, for the error message."""

    n_bytes: int
    why: str


def extract_budget(entries: int | None, source: str, limits: Limits | None = None) -> Budget:
    """The unpacked-size budget of an archive whose ``source`` announces ``entries`` entries (None: nothing)."""
    limits = limits or load_limits()
    cap = limits.extract_cap_bytes
    if entries is None:
        return Budget(cap, "the extraction cap, TCSPMM_EXTRACT_CAP or --extract-cap")
    need = limits.extract_factor * (MTX_HEADER_BYTES + int(entries) * MTX_BYTES_PER_ENTRY)
    n_bytes = int(min(cap, max(limits.extract_floor_bytes, need)))
    if n_bytes == cap:
        return Budget(cap, "the extraction cap, TCSPMM_EXTRACT_CAP or --extract-cap")
    return Budget(n_bytes, f"{source} announces {int(entries):,} entries; allowed: {limits.extract_factor:g}x their "
                           f"size as MatrixMarket text, at least {format_size(limits.extract_floor_bytes)} "
                           f"(TCSPMM_EXTRACT_FACTOR)")


def over_budget(label: str, wrote: str, budget: Budget) -> FetchError:
    return FetchError(f"archive {label}: {wrote}, over its budget of {format_size(budget.n_bytes)} ({budget.why}); "
                      f"nothing was kept")


def unsafe_path(name: str) -> str | None:
    """Why a member's path must not be unpacked (absolute, or climbing with ``..``), or None. ``tarfile``'s
    ``data`` filter would quietly strip a leading ``/`` and let ``a/../b`` through; we refuse both by name."""
    if name.startswith(("/", "\\")) or PureWindowsPath(name).drive:
        return "its path is absolute"
    if ".." in PurePosixPath(name.replace("\\", "/")).parts:
        return "its path climbs out of its folder with '..'"
    return None


def scan_members(tar: tarfile.TarFile, label: str, budget: Budget | None) -> list[tarfile.TarInfo]:
    """Every member's header, stopping (FetchError) at the first member with an unsafe path (`unsafe_path`) and as
    soon as the declared sizes pass ``budget``: nothing of such an archive is written."""
    members, total = [], 0
    while (info := tar.next()) is not None:
        why = unsafe_path(info.name)
        if why:
            raise FetchError(f"archive {label}: refusing member {info.name}: {why}; nothing was kept")
        members.append(info)
        total += max(int(info.size), 0) if info.isfile() else 0
        if budget is not None and total > budget.n_bytes:
            raise over_budget(label, f"member {info.name} brings the unpacked size to {format_size(total)}",
                              budget)
    return members


def extracted_dir(data_root: str | os.PathLike, sha256: str) -> Path:
    return Path(data_root) / "extracted" / sha256


def extract_tar(archive: Path, sha256: str, data_root: str | os.PathLike, label: str,
                select: Select | None = None, budget: Budget | None = None) -> Path:
    """Extract ``archive`` (all members, or those ``select`` keeps) once, within ``budget`` (default: the
    extraction cap); return the extracted folder."""
    budget = budget or extract_budget(None, label)

    def fill(tmp: Path) -> None:
        with tarfile.open(archive, "r:*") as tar:
            members = scan_members(tar, label, budget)
            chosen = list(select(members) if select else members)
            tar.extractall(tmp, members=progress.track(chosen, f"extract {label}", unit="B", weight=_size),
                           filter="data")

    return _materialize(sha256, data_root, label, fill)


def _size(member: tarfile.TarInfo) -> int:
    return member.size if member.isfile() else 0


GUNZIPPED = "matrix.mtx"  # one fixed name: the folder is keyed by content, which several file names may share


def gunzip(archive: Path, sha256: str, data_root: str | os.PathLike, label: str, budget: Budget | None = None) -> Path:
    """Decompress a ``.gz`` file once into ``extracted/<sha256>/matrix.mtx`` within ``budget`` (default: the
    extraction cap); return that file's path."""
    budget = budget or extract_budget(None, label)

    def fill(tmp: Path) -> None:
        written = 0
        with gzip.open(archive, "rb") as src, open(tmp / GUNZIPPED, "wb") as dst, \
                progress.task(f"gunzip {label}", unit="B") as bar:
            while block := src.read(min(1 << 22, budget.n_bytes - written + 1)):
                written += len(block)
                if written > budget.n_bytes:
                    raise over_budget(label, f"it unpacks to more than {format_size(budget.n_bytes)}", budget)
                dst.write(block)
                bar.update(written)

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
