"""Fetch: turn a source spec into a ``RawMatrix`` (a cached, verified file plus what to expect from it).

``fetch(spec, data_root)`` accepts ``Group/Name`` or ``suitesparse:Group/Name``, ``igb:tiny|small|medium``, a
local ``.mtx``/``.mtx.gz``/``.tar.gz`` path, and ``gen:<kind>?k=v&...`` (see ``tasks.fetch.spec``). Downloads land
atomically in ``data_root/cache/<sha256>`` (``tasks.fetch.http``); a second call makes no request. Errors a user
can act on raise ``InputError``/``FetchError`` with one line naming the source.
"""
from __future__ import annotations

import os
from pathlib import Path

from configs import IgbConfig, SourcesConfig, load_igb, load_sources
from tasks.fetch.spec import RawMatrix, parse_spec

__all__ = ["RawMatrix", "fetch"]


def fetch(spec: str, data_root: str | os.PathLike, *, sources: SourcesConfig | None = None,
          igb: IgbConfig | None = None) -> RawMatrix:
    """Resolve ``spec`` and download what it names (once) into ``data_root``.

    ``sources``/``igb`` default to ``configs.load_sources()``/``configs.load_igb()`` (YAML plus environment).
    Generators only validate their parameters here; ``tasks.parse.load_matrix`` builds them.
    """
    # The fetchers are imported here, not above: the command line checks a spec with tasks.fetch.spec alone, and
    # importing the package must not bring NumPy, SciPy and the HTTP stack for that.
    from tasks.fetch.generators import fetch_gen
    from tasks.fetch.igb import fetch_igb
    from tasks.fetch.local import fetch_local
    from tasks.fetch.suitesparse import fetch_suitesparse

    parsed = parse_spec(spec)
    root = Path(data_root)
    if parsed.kind == "gen":
        return fetch_gen(parsed)
    if parsed.kind == "file":
        return fetch_local(parsed)
    sources = sources or load_sources()
    if parsed.kind == "igb":
        return fetch_igb(parsed, root, sources, igb or load_igb())
    return fetch_suitesparse(parsed, root, sources)
