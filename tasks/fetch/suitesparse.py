"""SuiteSparse Matrix Collection: the ``ssstats.csv`` index and the MatrixMarket tarballs.

- Index: ``{base}/files/ssstats.csv``, downloaded once into the cache. Line 1 is the matrix count, line 2 the date,
  then ``Group,Name,nrows,ncols,nnz,isReal,isBinary,isND,posdef,psym,nsym,kind,nentries``. ``nnz`` excludes explicit
  zeros and counts both triangles of symmetric matrices; ``nentries`` includes explicit zeros.
- Matrix: ``{base}/MM/{Group}/{Name}.tar.gz`` holding ``{Name}/{Name}.mtx`` (other members are auxiliary data and
  ignored). The archive is checked (complete gzip stream, readable tar, the ``.mtx`` member present as a regular
  file, its unpacked size within the budget the index's entry count allows) before it enters the cache, so a
  corrupt, truncated or padded download never lands there. A matrix whose indexed size would not fit in memory
  (``configs.limits``) is refused before its download starts.
"""
from __future__ import annotations

import csv
import gzip
import io
import tarfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from configs import SourcesConfig
from configs.errors import FetchError, InputError
from configs.limits import format_size
from tasks.fetch.http import download
from tasks.fetch.spec import RawMatrix, Spec
from tasks.parse.archive import Budget, extract_budget, over_budget, scan_members
from tasks.parse.sizes import check_csr_memory

INDEX_PATH = "files/ssstats.csv"
_COLUMNS = ("group", "name", "nrows", "ncols", "nnz", "is_real", "is_binary", "is_nd", "posdef", "psym", "nsym",
            "kind", "nentries")


def index_url(sources: SourcesConfig) -> str:
    return f"{sources.suitesparse_url}/{INDEX_PATH}"


def matrix_url(sources: SourcesConfig, group: str, name: str) -> str:
    return f"{sources.suitesparse_url}/MM/{group}/{name}.tar.gz"


def parse_index(text: str, source: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Rows of ``ssstats.csv`` keyed by (Group, Name); raise FetchError naming ``source`` when malformed."""
    lines = text.splitlines()
    if len(lines) < 2 or not lines[0].strip().isdigit():
        raise FetchError(f"{source}: not a SuiteSparse index (line 1 should be the matrix count)")
    declared = int(lines[0])
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for lineno, row in enumerate(csv.reader(io.StringIO("\n".join(lines[2:]))), start=3):
        if not row:
            continue
        if len(row) != len(_COLUMNS):
            raise FetchError(f"{source} line {lineno}: {len(row)} fields, expected {len(_COLUMNS)}")
        rec: dict[str, Any] = dict(zip(_COLUMNS, row))
        try:
            for key in ("nrows", "ncols", "nnz", "nentries", "is_real", "is_binary", "is_nd", "posdef"):
                rec[key] = int(rec[key])
            for key in ("psym", "nsym"):
                rec[key] = float(rec[key])
        except ValueError as err:
            raise FetchError(f"{source} line {lineno}: {err}") from err
        table[(rec["group"], rec["name"])] = rec
    if len(table) != declared:
        raise FetchError(f"{source}: lists {len(table)} matrices, its first line declares {declared}")
    return table


def load_index(data_root: Path, sources: SourcesConfig) -> dict[tuple[str, str], dict[str, Any]]:
    """Download (once) and parse the collection's index."""
    url = index_url(sources)

    def check(path: Path, _digests: Mapping[str, str]) -> None:
        parse_index(path.read_text(encoding="utf-8", errors="replace"), url)

    entry = download(url, data_root, http_config=sources.http, verify=check, label="ssstats.csv")
    return parse_index(entry.path.read_text(encoding="utf-8", errors="replace"), url)


_TAR_SLACK_BYTES = 1 << 20  # tar headers, block padding and the end-of-archive blocks around the members


def check_archive(path: Path, member: str, label: str, budget: Budget | None = None) -> None:
    """Raise FetchError naming ``label`` unless ``path`` is a complete .tar.gz holding the regular file ``member``
    and unpacking to at most ``budget`` (default: the extraction cap).

    Two streaming passes: the gzip stream to its end (catches truncation and CRC errors, which tar's own reader
    can miss when the damage is past the tar end-of-archive blocks; stops once past the budget), then the tar
    member headers.
    """
    budget = budget or extract_budget(None, label)
    try:
        unpacked = 0
        with gzip.open(path, "rb") as stream:
            while block := stream.read(1 << 22):
                unpacked += len(block)
                if unpacked > budget.n_bytes + _TAR_SLACK_BYTES:
                    raise over_budget(label, f"it unpacks to more than {format_size(unpacked)}", budget)
        with tarfile.open(path, "r:gz") as tar:
            names = {m.name: m for m in scan_members(tar, label, budget)}
    except (OSError, EOFError, zlib.error, tarfile.TarError) as err:
        reason = " ".join(str(err).split()) or type(err).__name__
        raise FetchError(f"archive {label} is corrupt or truncated: {reason}") from err
    info = names.get(member) or names.get(f"./{member}")
    if info is None:
        shown = ", ".join(sorted(names)[:5]) or "nothing"
        raise FetchError(f"archive {label} has no member {member} (it holds {shown})")
    if not info.isfile():
        raise FetchError(f"archive {label}: refusing member {info.name}: it is {_member_kind(info)}, not a regular "
                         f"file")


def _member_kind(info: tarfile.TarInfo) -> str:
    if info.issym():
        return f"a symbolic link to {info.linkname!r}"
    if info.islnk():
        return f"a hard link to {info.linkname!r}"
    if info.isdir():
        return "a directory"
    return "a device or FIFO"


def fetch_suitesparse(spec: Spec, data_root: Path, sources: SourcesConfig) -> RawMatrix:
    """Look ``Group/Name`` up in the index, download its tarball into the cache, and describe what to expect."""
    group, name = spec.group, spec.name
    table = load_index(data_root, sources)
    rec = table.get((group, name))
    if rec is None:
        raise InputError(f"matrix '{group}/{name}' is not in the SuiteSparse index at {index_url(sources)}")
    url = matrix_url(sources, group, name)
    member = f"{name}/{name}.mtx"
    entries = max(rec["nnz"], rec["nentries"])
    # Before the download: a size the index announces must fit in memory (the header is checked again at parse).
    check_csr_memory(f"{group}/{name}", (rec["nrows"], rec["ncols"]), entries, 8 if rec["is_real"] else 16)
    budget = extract_budget(entries, "the SuiteSparse index")
    entry = download(url, data_root, http_config=sources.http, label=f"{group}/{name}",
                     verify=lambda path, _d: check_archive(path, member, url, budget))
    return RawMatrix(
        matrix_id=f"suitesparse.{group}.{name}",
        spec=spec.text,
        kind="suitesparse",
        path=entry.path,
        source_url=url,
        sha256=entry.sha256,
        expected_shape=(rec["nrows"], rec["ncols"]),
        expected_nnz=rec["nnz"],
        params={"group": group, "name": name, "member": member, "nentries": rec["nentries"],
                "is_real": bool(rec["is_real"]), "kind": rec["kind"], "index_url": index_url(sources)},
    )
