"""Source spec strings and the ``RawMatrix`` record that fetch hands to parse.

Accepted specs (one grammar, checked here once):

==============================  =============================================================
``HB/bcsstk17``                 SuiteSparse matrix by Group/Name
``suitesparse:HB/bcsstk17``     same, explicit
``igb:tiny|small|medium``       IGB homogeneous citation graph
``path/to/file.mtx``            local MatrixMarket file (also ``.mtx.gz`` and ``.tar.gz``)
``gen:<kind>?k=v&...``          synthetic matrix (``tasks.fetch.generators``)
==============================  =============================================================
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Literal

from configs import IGB_SIZES
from configs.errors import InputError

Kind = Literal["suitesparse", "igb", "file", "gen"]
LOCAL_SUFFIXES = (".mtx", ".mtx.gz", ".tar.gz")
_SS_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")
_FORMS = "Group/Name, suitesparse:Group/Name, igb:tiny|small|medium, a path ending .mtx/.mtx.gz/.tar.gz, gen:<kind>?k=v"


@dataclasses.dataclass(frozen=True)
class RawMatrix:
    """What fetch produced: a file in the cache (or a local file, or nothing for generators) plus what to expect.

    ``path`` is the downloaded archive (``data_root/cache/<sha256>``) for suitesparse and igb, the user's file for
    ``file``, and None for ``gen``. ``sha256`` is the file's digest (for ``gen``: of the canonical spec).
    ``expected_shape``/``expected_nnz`` are None where the source publishes none; parse verifies the ones given.
    ``params`` carries source-specific extras (SuiteSparse index row, IGB size and md5, generator parameters).
    """

    matrix_id: str
    spec: str
    kind: Kind
    path: Path | None
    source_url: str
    sha256: str
    expected_shape: tuple[int, int] | None = None
    expected_nnz: int | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Spec:
    """A parsed spec: ``kind`` and its fields (``group``/``name``, ``size``, ``path``, or ``gen_kind``/``query``)."""

    kind: Kind
    text: str
    group: str = ""
    name: str = ""
    size: str = ""
    path: Path | None = None
    gen_kind: str = ""
    query: str = ""


def parse_spec(text: str) -> Spec:
    """Classify ``text``; raise InputError naming the accepted forms when it fits none."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"empty matrix spec; accepted forms: {_FORMS}")
    text = text.strip()
    if text.startswith("gen:"):
        kind, _, query = text[4:].partition("?")
        if not kind:
            raise InputError(f"spec {text!r}: missing generator kind after 'gen:'")
        return Spec("gen", text, gen_kind=kind, query=query)
    if text.startswith("igb:"):
        size = text[4:]
        if size not in IGB_SIZES:
            raise InputError(f"spec {text!r}: unknown IGB size {size!r}; valid sizes: {', '.join(IGB_SIZES)}")
        return Spec("igb", text, size=size)
    if text.endswith(LOCAL_SUFFIXES) and not text.startswith("suitesparse:"):
        return Spec("file", text, path=Path(text).expanduser())
    body = text.removeprefix("suitesparse:")
    parts = body.split("/")
    if len(parts) == 2 and all(_SS_NAME.match(p) for p in parts):
        return Spec("suitesparse", text, group=parts[0], name=parts[1])
    raise InputError(f"spec {text!r} is not a matrix spec; accepted forms: {_FORMS}")


def local_stem(path: Path) -> str:
    """``foo`` for ``foo.mtx``, ``foo.mtx.gz`` and ``foo.tar.gz``."""
    name = path.name
    for suffix in LOCAL_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def safe_id(text: str) -> str:
    """Filesystem-safe matrix_id component: anything outside ``[A-Za-z0-9_.-]`` (what ``storage`` accepts as an
    id) becomes ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)
