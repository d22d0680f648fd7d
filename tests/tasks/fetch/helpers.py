"""Assertions shared by the fetch/parse tests."""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import scipy.io
import scipy.sparse as sp


def one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text and text.strip(), f"not a one-line message: {text!r}"
    return text


def cached_urls(data_root: Path) -> set[str]:
    index = Path(data_root) / "cache" / "index.json"
    return set(json.loads(index.read_text())) if index.exists() else set()


def assert_clean(data_root: Path, *, allowed_urls: set[str] | None = None) -> None:
    """No temp files or folders anywhere; the cache holds exactly the index's files."""
    leftovers = [p for p in Path(data_root).rglob("*") if p.name.startswith(".tmp-")]
    assert not leftovers, leftovers
    cache = Path(data_root) / "cache"
    if not cache.exists():
        return
    index = json.loads((cache / "index.json").read_text()) if (cache / "index.json").exists() else {}
    files = {p.name for p in cache.iterdir() if p.name not in ("index.json", "index.json.lock")}
    assert files == {rec["sha256"] for rec in index.values()}
    if allowed_urls is not None:
        assert set(index) <= allowed_urls, set(index) - allowed_urls


def mmread_member(tarball: bytes, member: str) -> sp.csr_array:
    """The reference: scipy.io.mmread of one member of a .tar.gz given as bytes."""
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        payload = tar.extractfile(member).read()
    return sp.csr_array(scipy.io.mmread(io.BytesIO(payload)))
