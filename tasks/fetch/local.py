"""Local files: ``.mtx``, ``.mtx.gz`` and ``.tar.gz`` (one ``.mtx`` member) given by path.

The file is not copied: ``RawMatrix.path`` is the user's file, ``sha256`` its digest and ``matrix_id``
``file.<stem>.<sha12>`` so that two different files with one name never share stored results.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from configs.errors import InputError
from tasks.fetch.spec import RawMatrix, Spec, local_stem, safe_id


def file_sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            sha.update(block)
    return sha.hexdigest()


def fetch_local(spec: Spec) -> RawMatrix:
    """Describe a local matrix file; raise InputError when it is missing or unreadable."""
    path = spec.path
    assert path is not None
    try:
        if not path.is_file():
            raise InputError(f"{path}: no such file")
        digest = file_sha256(path)
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror or err}") from err
    resolved = path.resolve()
    return RawMatrix(
        matrix_id=f"file.{safe_id(local_stem(path))}.{digest[:12]}",
        spec=spec.text,
        kind="file",
        path=resolved,
        source_url=resolved.as_uri(),
        sha256=digest,
        params={"format": path.name[len(local_stem(path)):].lstrip(".")},
    )
