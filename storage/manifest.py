"""The per-matrix manifest: which artifacts are complete, with their files' sizes and checksums.

``matrices/<id>/manifest.json``::

    {"version": 1, "matrix_id": "...", "artifacts": {
        "<artifact>": {"kind": "csr|perm|format|result", "meta": {...}, "written_at": "<UTC ISO>",
                       "files": [{"path": "<relative>", "range": [a, b], "size": n,
                                  "sha256": "...", "footer_crc32": n}, ...]}}}

Artifact names are their relative homes: ``csr``, ``perm/<key>``, ``formats/<fmt>/<perm_key>``, ``results/<run>``.

Checksums: ``sha256`` covers the whole file and is computed once at write time (``verify_entry(full=True)``
re-checks it); the cheap check on every read is size + CRC-32 of the Parquet footer (the last ``footer_len + 8``
bytes), and data pages carry Parquet page CRCs that the readers verify while decoding.

Protocol: a writer drops the artifact's entry (under the lock), writes its files (each atomic), then adds the entry
(under the lock): the manifest is the last thing written, so a writer killed at any moment leaves no entry a reader
would trust. Read-modify-write of the manifest holds ``fcntl.flock`` on ``manifest.lock``, so concurrent writers of
different artifacts of one matrix keep each other's entries. Readers take no lock (the JSON is replaced atomically).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import zlib
from pathlib import Path
from typing import Iterator

from configs.errors import StorageError
from storage.atomic import atomic_write_bytes
from storage.naming import dumps
from storage.parquet_io import REBUILD

MANIFEST_NAME = "manifest.json"
LOCK_NAME = "manifest.lock"
MANIFEST_VERSION = 1
_CHUNK = 1 << 23


def footer_crc32(path: Path, size: int | None = None) -> int:
    """CRC-32 of a Parquet file's footer (metadata + length + magic); of the last 64 KiB if it is not Parquet."""
    with open(path, "rb") as f:
        size = f.seek(0, 2) if size is None else size
        tail = 8
        if size >= 12:
            f.seek(size - 8)
            last = f.read(8)
            if last[4:] == b"PAR1":
                tail = min(size, int.from_bytes(last[:4], "little") + 8)
            else:
                tail = min(size, 1 << 16)
        else:
            tail = size
        f.seek(size - tail)
        return zlib.crc32(f.read(tail))


def file_record(root: Path, rel: str, **extra) -> dict:
    """Size, sha256 and footer CRC-32 of ``root / rel`` (read once, streaming)."""
    path = root / rel
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    size = path.stat().st_size
    return {"path": rel, **extra, "size": size, "sha256": h.hexdigest(), "footer_crc32": footer_crc32(path, size)}


def check_record(root: Path, rec: dict, *, full: bool = False) -> str | None:
    """None if the file matches its record, else the reason (one line naming the file)."""
    path = root / rec["path"]
    try:
        size = path.stat().st_size
        if size != rec["size"]:
            return f"{path}: size {size} bytes, manifest says {rec['size']}"
        if footer_crc32(path, size) != rec["footer_crc32"]:
            return f"{path}: Parquet footer checksum does not match the manifest (file changed after write)"
        if full and file_record(root, rec["path"])["sha256"] != rec["sha256"]:
            return f"{path}: sha256 does not match the manifest (file changed after write)"
    except FileNotFoundError:
        return f"{path}: missing"
    return None


class Manifest:
    """The manifest of one matrix folder."""

    def __init__(self, folder: Path, matrix_id: str):
        self.folder = Path(folder)
        self.matrix_id = matrix_id
        self.path = self.folder / MANIFEST_NAME

    def _empty(self) -> dict:
        return {"version": MANIFEST_VERSION, "matrix_id": self.matrix_id, "artifacts": {}}

    def read(self) -> dict:
        """The manifest as a dict (an empty one when there is none yet)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return self._empty()
        try:
            data = json.loads(text)
            data["artifacts"]
        except (ValueError, KeyError, TypeError) as err:
            raise StorageError(f"{self.path}: manifest is not valid JSON ({err}); delete it to rebuild") from err
        return data

    @contextlib.contextmanager
    def update(self) -> Iterator[dict]:
        """Hold the lock, yield the manifest dict for in-place edits, write it back atomically on success."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / LOCK_NAME, "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                data = self.read()
                before = dumps(data, canonical=True)
                yield data
                if dumps(data, canonical=True) != before:
                    atomic_write_bytes(self.path, (json.dumps(data, indent=1) + "\n").encode())
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def entry(self, name: str) -> dict | None:
        """The artifact's entry as listed, or None (no file checks)."""
        return self.read()["artifacts"].get(name)

    def complete(self, name: str) -> dict | None:
        """The entry if every listed file exists with the recorded size and footer checksum, else None."""
        entry = self.entry(name)
        if entry is None or any(check_record(self.folder, rec) for rec in entry["files"]):
            return None
        return entry

    def require(self, name: str) -> dict:
        """The complete entry, or StorageError saying why the artifact cannot be trusted."""
        entry = self.entry(name)
        if entry is None:
            raise StorageError(f"{self.folder}: artifact '{name}' is not complete (not in the manifest); write it first")
        for rec in entry["files"]:
            reason = check_record(self.folder, rec)
            if reason:
                raise StorageError(f"artifact '{name}' is not complete: {reason}; {REBUILD}")
        return entry

    def verify(self, name: str) -> list[str]:
        """Full check (sha256 of every file): the list of problems, empty when the artifact is intact."""
        entry = self.entry(name)
        if entry is None:
            return [f"artifact '{name}' is not in the manifest"]
        return [r for rec in entry["files"] if (r := check_record(self.folder, rec, full=True))]
