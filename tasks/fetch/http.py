"""Downloads into a content-addressed cache: ``data_root/cache/<sha256>`` plus ``data_root/cache/index.json``.

Contract of ``download(url, data_root, ...)``:

- A URL already in the index (and its file present with the recorded size) returns at once: no request is made.
- Otherwise the body streams into a temp file beside the cache (``.tmp-`` prefix), with a socket timeout on every
  connect and read (a server that accepts and then stalls fails within ``timeout_s``), retries with exponential
  backoff on connection errors, timeouts, 5xx, 408 and 429 (never on other 4xx), and resumes with
  ``Range: bytes=<have>-`` when the server answers 206 (a 200 restarts from zero).
- The finished file is hashed (sha256 and md5 in one pass), handed to ``verify`` (checksum, archive integrity),
  fsynced and renamed to ``cache/<sha256>``; then the index is rewritten atomically.
- Any failure raises ``FetchError`` with one line naming the URL, and leaves no temp file and no index entry.

The index maps URL -> {sha256, size_bytes, md5}. An unreadable index counts as empty (files are content
addressed, so the worst case is one re-download). Concurrent writers may lose each other's index entries, never
a cache file.
"""
from __future__ import annotations

import dataclasses
import errno
import fcntl
import hashlib
import http.client
import json
import os
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from configs import HttpConfig
from configs.errors import FetchError
from storage.atomic import STALE_TEMP_S, TEMP_PREFIX, atomic_write_bytes, sweep_temp
from tasks import progress

INDEX_NAME = "index.json"
USER_AGENT = "tcspmm/0.1 (+https://github.com/)"
Verify = Callable[[Path, Mapping[str, str]], None]


@dataclasses.dataclass(frozen=True)
class CacheEntry:
    """A cached download: ``path`` is ``data_root/cache/<sha256>``."""

    url: str
    path: Path
    sha256: str
    md5: str
    size_bytes: int


class _Retryable(Exception):
    """A transient failure (connection, timeout, 5xx, short body): try again, resuming where possible."""


def cache_dir(data_root: str | os.PathLike) -> Path:
    return Path(data_root) / "cache"


def read_index(data_root: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """The URL -> {sha256, size_bytes, md5} map; empty when missing or unreadable."""
    try:
        index = json.loads((cache_dir(data_root) / INDEX_NAME).read_text())
    except (OSError, ValueError):
        return {}
    return index if isinstance(index, dict) else {}


def lookup(url: str, data_root: str | os.PathLike) -> CacheEntry | None:
    """The cached entry for ``url`` when the index lists it and its file is present with the recorded size."""
    record = read_index(data_root).get(url)
    if not isinstance(record, dict) or not {"sha256", "md5", "size_bytes"} <= set(record):
        return None
    path = cache_dir(data_root) / str(record["sha256"])
    try:
        if path.stat().st_size != int(record["size_bytes"]):
            return None
    except OSError:
        return None
    return CacheEntry(url, path, str(record["sha256"]), str(record["md5"]), int(record["size_bytes"]))


def download(url: str, data_root: str | os.PathLike, *, http_config: HttpConfig | None = None,
             verify: Verify | None = None, label: str | None = None) -> CacheEntry:
    """Return the cache entry for ``url``, downloading it first when it is not cached (see the module contract)."""
    cached = lookup(url, data_root)
    if cached is not None:
        return cached
    cfg = http_config or HttpConfig()
    folder = cache_dir(data_root)
    folder.mkdir(parents=True, exist_ok=True)
    sweep_temp(folder, older_than_s=STALE_TEMP_S)  # partial downloads of killed runs
    fd, tmp_name = tempfile.mkstemp(prefix=TEMP_PREFIX + "download.", dir=folder)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        _fetch_with_retries(url, tmp, cfg, label or url)
        digests = _digests(tmp)
        if verify is not None:
            verify(tmp, digests)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        target = folder / digests["sha256"]
        existed = target.exists()  # the same content under another URL: keep it whatever happens below
        os.replace(tmp, target)
        entry = CacheEntry(url, target, digests["sha256"], digests["md5"], target.stat().st_size)
        try:
            _record(data_root, entry)
        except BaseException:
            if not existed:  # an unindexed cache file would be an orphan
                target.unlink(missing_ok=True)
            raise
        return entry
    except OSError as err:
        raise _os_error(url, folder, err) from err
    finally:
        tmp.unlink(missing_ok=True)


def _os_error(url: str, folder: Path, err: OSError) -> FetchError:
    if err.errno == errno.ENOSPC:
        return FetchError(f"{url}: no space left on device while writing to {folder}")
    return FetchError(f"{url}: cannot write to {folder}: {err.strerror or err}")


def _record(data_root: str | os.PathLike, entry: CacheEntry) -> None:
    """Add ``entry`` to the cache index under an exclusive lock (concurrent downloads of the catalog flow would
    otherwise each rewrite the index from a stale read and drop each other's entries)."""
    folder = cache_dir(data_root)
    with open(folder / (INDEX_NAME + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        index = read_index(data_root)
        index[entry.url] = {"sha256": entry.sha256, "md5": entry.md5, "size_bytes": entry.size_bytes}
        atomic_write_bytes(folder / INDEX_NAME, json.dumps(index, indent=1, sort_keys=True).encode())


def _digests(path: Path) -> dict[str, str]:
    sha, md5 = hashlib.sha256(), hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            sha.update(block)
            md5.update(block)
    return {"sha256": sha.hexdigest(), "md5": md5.hexdigest()}


def _fetch_with_retries(url: str, tmp: Path, cfg: HttpConfig, label: str) -> None:
    attempt = 0
    while True:
        try:
            _fetch_once(url, tmp, cfg, label)
            return
        except _Retryable as err:
            attempt += 1
            if attempt > cfg.retries:
                tries = "1 attempt" if attempt == 1 else f"{attempt} attempts"
                raise FetchError(f"{url}: {err} (gave up after {tries})") from err
            time.sleep(cfg.backoff_s * 2 ** (attempt - 1))


def _fetch_once(url: str, tmp: Path, cfg: HttpConfig, label: str) -> None:
    """One request; appends to ``tmp`` when the server honours the Range header. Raises _Retryable or FetchError."""
    have = tmp.stat().st_size
    headers = {"User-Agent": USER_AGENT}
    if have:
        headers["Range"] = f"bytes={have}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=cfg.timeout_s) as resp:
            status = getattr(resp, "status", None) or 200
            flags = os.O_WRONLY | os.O_APPEND
            if not (have and status == 206 and _range_start(resp.headers.get("Content-Range")) == have):
                flags, have = os.O_WRONLY | os.O_TRUNC, 0
            length = resp.headers.get("Content-Length")
            total = have + int(length) if length and length.isdigit() else None
            fd = os.open(tmp, flags)
            try:
                got = _stream(resp, fd, have, total, cfg, label)
            finally:
                os.close(fd)
            if total is not None and got < total:
                raise _Retryable(f"connection closed after {got} of {total} bytes")
    except urllib.error.HTTPError as err:
        err.close()
        if err.code == 416 and have:  # our partial file is stale or complete: start over
            tmp.write_bytes(b"")
            raise _Retryable("server refused the resume range (HTTP 416)") from err
        if err.code >= 500 or err.code in (408, 429):
            raise _Retryable(f"HTTP {err.code} {err.reason}") from err
        raise FetchError(f"HTTP {err.code} {err.reason} for {url}") from err
    except urllib.error.URLError as err:
        reason = err.reason
        if isinstance(reason, FileNotFoundError):
            raise FetchError(f"{url}: no such file") from err
        raise _Retryable(f"cannot connect: {_describe(reason)}") from err
    except TimeoutError as err:
        raise _Retryable(f"no data for {cfg.timeout_s:g} s (server stalled)") from err
    except (ConnectionError, http.client.HTTPException) as err:
        raise _Retryable(f"connection failed: {_describe(err)}") from err


def _stream(resp: Any, fd: int, have: int, total: int | None, cfg: HttpConfig, label: str) -> int:
    """Copy the body to file descriptor ``fd``; return the byte count including ``have``.

    Write errors (ENOSPC) propagate as OSError; ``download`` turns them into one-line FetchErrors.
    """
    got = have
    with progress.task(f"download {label}", total=total, unit="B", enabled=cfg.progress) as bar:
        bar.update(got)
        while True:
            try:
                chunk = resp.read(cfg.chunk_bytes)
            except http.client.IncompleteRead as err:
                _write_all(fd, err.partial)
                got += len(err.partial)
                raise _Retryable(f"connection closed after {got} of {total} bytes") from err
            if not chunk:
                return got
            _write_all(fd, chunk)
            got += len(chunk)
            bar.update(got)


def _write_all(fd: int, chunk: bytes) -> None:
    view = memoryview(chunk)
    while view:
        view = view[os.write(fd, view):]


def _range_start(content_range: str | None) -> int | None:
    """Start offset of ``bytes 100-199/200``; None when absent or malformed."""
    if not content_range or not content_range.startswith("bytes "):
        return None
    start = content_range[6:].split("-", 1)[0].strip()
    return int(start) if start.isdigit() else None


def _describe(err: object) -> str:
    text = " ".join(str(err).split())
    return text or type(err).__name__
