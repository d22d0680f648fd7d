"""Parse: turn a ``RawMatrix`` into canonical CSR (docs/architecture.md) plus metadata.

``load_matrix(raw, *, drop_zeros=False, complex_mode=None, allow_nonfinite=False)`` reads MatrixMarket files
(SuiteSparse tarballs, local ``.mtx``/``.mtx.gz``/``.tar.gz``), IGB edge lists, or runs a generator, then checks
the result against what fetch promised (SuiteSparse index shape and nnz). Archives extract once into
``data_root/extracted/<sha256>/``, within the budget the source's announced entry count allows
(``tasks.parse.archive.extract_budget``). Every size from outside is checked against the memory limit before
anything is allocated from it (``tasks.parse.sizes``). NaN and Inf values are refused unless ``allow_nonfinite``.
"""
from __future__ import annotations

import dataclasses
import os
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from configs import data_root as default_data_root
from configs.errors import FetchError, InputError
from configs.limits import Limits, load_limits
from tasks.fetch.generators import check_gen_memory, generate
from tasks.fetch.spec import RawMatrix, local_stem
from tasks.parse import igb as igb_parse
from tasks.parse.archive import extract_budget, extract_tar, gunzip
from tasks.parse.csr import drop_explicit_zeros
from tasks.parse.mtx import ComplexMode, read_mtx

__all__ = ["ParsedMatrix", "load_matrix", "load_features"]


@dataclasses.dataclass(frozen=True)
class ParsedMatrix:
    """Canonical CSR and its provenance.

    ``meta`` always has: matrix_id, spec, kind, source_url, sha256, field, symmetry, shape, nnz (stored entries,
    explicit zeros included unless dropped), nonzero_entries, nonfinite_entries (NaN/Inf values kept under
    ``allow_nonfinite``); plus format (MatrixMarket), complex_mode,
    orientation/edges (IGB) and params (generators: the canonical parameters).
    """

    csr: sp.csr_array
    meta: dict[str, Any]


def load_matrix(raw: RawMatrix, *, drop_zeros: bool = False, complex_mode: ComplexMode = None,
                data_root: str | os.PathLike | None = None, allow_nonfinite: bool = False,
                limits: Limits | None = None) -> ParsedMatrix:
    """Parse ``raw`` (see the module docstring); raise InputError/FetchError with a one-line message on bad input.

    ``data_root`` is where archives extract; default: the root of ``raw.path``'s cache, else ``TCSPMM_DATA``.
    ``limits``: memory and extraction limits (default ``configs.limits.load_limits()``).
    """
    root = _data_root(raw, data_root)
    limits = limits or load_limits()
    meta: dict[str, Any] = {"matrix_id": raw.matrix_id, "spec": raw.spec, "kind": raw.kind,
                            "source_url": raw.source_url, "sha256": raw.sha256, "nonfinite_entries": 0}
    if raw.kind == "gen":
        params = {k: v for k, v in raw.params.items() if k != "kind"}
        check_gen_memory(raw.params["kind"], params, limits)
        A = generate(raw.params["kind"], params)
        meta.update(field="real", symmetry="general", params=params, nonzero_entries=int(A.nnz))
    elif raw.kind == "igb":
        A, extra = igb_parse.load_igb(raw, root, limits)
        meta.update(extra)
    else:
        path, label = _mtx_file(raw, root, limits)
        m = read_mtx(path, label, complex_mode=complex_mode, allow_nonfinite=allow_nonfinite, limits=limits)
        A = m.csr
        meta.update(format=m.format, field=m.field, symmetry=m.symmetry, nonzero_entries=m.nonzero_entries,
                    nonfinite_entries=m.nonfinite_entries,
                    complex_mode=complex_mode if m.field == "complex" else None)
    _verify(raw, A, meta)
    if drop_zeros:
        A = drop_explicit_zeros(A)
    meta.update(shape=(int(A.shape[0]), int(A.shape[1])), nnz=int(A.nnz))
    return ParsedMatrix(A, meta)


def load_features(raw: RawMatrix, data_root: str | os.PathLike | None = None) -> np.ndarray | None:
    """IGB node features ``[N, F]`` (memory-mapped float32); None for other sources or when absent."""
    if raw.kind != "igb":
        return None
    return igb_parse.load_features(raw, _data_root(raw, data_root))


def _data_root(raw: RawMatrix, data_root: str | os.PathLike | None) -> Path:
    if data_root is not None:
        return Path(data_root)
    if raw.kind in ("suitesparse", "igb") and raw.path is not None and raw.path.parent.name == "cache":
        return raw.path.parent.parent
    return default_data_root()


def _mtx_file(raw: RawMatrix, root: Path, limits: Limits) -> tuple[Path, str]:
    """The ``.mtx`` to read (extracting it when archived, within its budget) and the label error messages use."""
    assert raw.path is not None
    if raw.kind == "suitesparse":
        member = raw.params["member"]
        label = f"{raw.params['group']}/{raw.params['name']}.mtx"
        announced = max(int(raw.expected_nnz or 0), int(raw.params.get("nentries", 0)))
        folder = extract_tar(raw.path, raw.sha256, root, raw.source_url,
                             select=lambda ms: [m for m in ms if m.name in (member, f"./{member}")],
                             budget=extract_budget(announced, "the SuiteSparse index", limits))
        path = folder / member
        if not path.is_file():
            raise FetchError(f"archive {raw.source_url} has no member {member}")
        return path, label
    name = raw.path.name
    stem = local_stem(raw.path)
    if name.endswith(".mtx.gz"):
        return gunzip(raw.path, raw.sha256, root, str(raw.path), extract_budget(None, str(raw.path), limits)), name
    if name.endswith(".tar.gz"):
        chosen: list[str] = []

        def pick(members: list[tarfile.TarInfo]) -> list[tarfile.TarInfo]:
            mtx = [m for m in members if m.isfile() and m.name.endswith(".mtx")]
            preferred = [m for m in mtx if m.name.removeprefix("./") == f"{stem}/{stem}.mtx"]
            if not preferred and len(mtx) != 1:
                shown = ", ".join(m.name for m in mtx[:5]) or "none"
                raise InputError(f"{raw.path}: expected one .mtx member (or {stem}/{stem}.mtx), found {shown}")
            chosen.append((preferred or mtx)[0].name)
            return (preferred or mtx)[:1]

        folder = extract_tar(raw.path, raw.sha256, root, str(raw.path), select=pick,
                             budget=extract_budget(None, str(raw.path), limits))
        if not chosen:  # extracted by an earlier run: find the member again
            found = sorted(folder.rglob("*.mtx"))
            if len(found) != 1:
                raise InputError(f"{raw.path}: expected one .mtx member under {folder}, found {len(found)}")
            return found[0], found[0].name
        return folder / chosen[0], Path(chosen[0]).name
    return raw.path, name


def _verify(raw: RawMatrix, A: sp.csr_array, meta: dict[str, Any]) -> None:
    """Compare with the source's published shape and nnz (nonzero entries, both triangles)."""
    where = f"{raw.params['group']}/{raw.params['name']}" if raw.kind == "suitesparse" else raw.spec
    if raw.expected_shape is not None and tuple(A.shape) != tuple(raw.expected_shape):
        er, ec = raw.expected_shape
        raise InputError(f"{where}: parsed shape {A.shape[0]}x{A.shape[1]}, the source index says {er}x{ec}")
    if raw.expected_nnz is not None and meta["nonzero_entries"] != raw.expected_nnz:
        raise InputError(f"{where}: parsed {meta['nonzero_entries']:,} nonzeros, the source index says "
                         f"{raw.expected_nnz:,}")
