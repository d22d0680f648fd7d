"""Configuration: YAML files beside this module, loaded into validated frozen dataclasses.

Precedence, highest first: explicit arguments (``dataclasses.replace`` on a loaded config), environment variables,
the YAML files (``sources.yaml``, ``igb.yaml``, ``catalog.yaml``). A bad file or value raises
``configs.errors.InputError`` with one line naming the file (or variable) and the key.

Environment variables:
- ``TCSPMM_DATA``: data root (default ``./data``).
- ``TCSPMM_SUITESPARSE_URL``, ``TCSPMM_IGB_URL``: mirror base URLs.
- ``TCSPMM_HTTP_TIMEOUT_S``, ``TCSPMM_HTTP_RETRIES``, ``TCSPMM_HTTP_BACKOFF_S``: download socket timeout, retry
  count and first backoff.
- ``TCSPMM_IGB_MD5_<SIZE>`` (``TINY``, ``SMALL``, ``MEDIUM``): expected md5 of an IGB archive.
- ``TCSPMM_MEMORY_LIMIT``, ``TCSPMM_EXTRACT_FACTOR``, ``TCSPMM_EXTRACT_CAP``: limits on sizes from outside
  (``configs.limits``, ``limits.yaml``).
- ``TCSPMM_FIXTURES``: the test fixtures folder, looked in before a checkout's ``.fixtures`` and
  ``../shared/fixtures`` (`fixture_roots`: the tests and the benchmarks; the pipeline never reads it).
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from configs.errors import InputError

CONFIG_DIR = Path(__file__).resolve().parent
IGB_SIZES = ("tiny", "small", "medium")
_MD5_RE = re.compile(r"^[0-9a-f]{32}$")


@dataclasses.dataclass(frozen=True)
class HttpConfig:
    """Download behaviour. ``progress=None`` draws a progress bar only when stderr is a TTY."""

    timeout_s: float = 30.0
    retries: int = 4
    backoff_s: float = 1.0
    chunk_bytes: int = 1 << 20
    progress: bool | None = None

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise InputError(f"http.timeout_s must be > 0, got {self.timeout_s}")
        if self.retries < 0:
            raise InputError(f"http.retries must be >= 0, got {self.retries}")
        if self.backoff_s < 0:
            raise InputError(f"http.backoff_s must be >= 0, got {self.backoff_s}")
        if self.chunk_bytes < 1024:
            raise InputError(f"http.chunk_bytes must be >= 1024, got {self.chunk_bytes}")


@dataclasses.dataclass(frozen=True)
class SourcesConfig:
    """Base URLs (no trailing slash) of the SuiteSparse and IGB mirrors, and the download settings."""

    suitesparse_url: str = "https://sparse.tamu.edu"
    igb_url: str = "https://igb-public-awsopen.s3.amazonaws.com"
    http: HttpConfig = HttpConfig()

    def __post_init__(self) -> None:
        for name in ("suitesparse_url", "igb_url"):
            url = getattr(self, name)
            if not re.match(r"^(https?|file)://", url):
                raise InputError(f"{name} must start with http://, https:// or file://, got {url!r}")
            object.__setattr__(self, name, url.rstrip("/"))


@dataclasses.dataclass(frozen=True)
class IgbConfig:
    """Expected md5 of each IGB homogeneous archive, keyed by size (tiny, small, medium)."""

    md5: Mapping[str, str]

    def __post_init__(self) -> None:
        for size, digest in self.md5.items():
            if size not in IGB_SIZES:
                raise InputError(f"igb md5 table: unknown size {size!r}; valid sizes: {', '.join(IGB_SIZES)}")
            if not _MD5_RE.match(digest):
                raise InputError(f"igb md5 table: {size} md5 {digest!r} is not 32 lowercase hex digits")
        object.__setattr__(self, "md5", MappingProxyType(dict(self.md5)))


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        payload = yaml.safe_load(path.read_text())
    except OSError as err:
        raise InputError(f"{path}: cannot read config: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise InputError(f"{path}: invalid YAML: {' '.join(str(err).split())}") from err
    if payload is None:
        return {}
    if not isinstance(payload, dict):
        raise InputError(f"{path}: expected a mapping at the top level, got {type(payload).__name__}")
    return payload


def _build(cls: type, values: Mapping[str, Any], where: str) -> Any:
    """``cls(**values)`` with unknown keys and wrong types reported as one-line InputErrors."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(fields)}")
    kwargs = {}
    for key, value in values.items():
        default = fields[key].default
        if isinstance(default, bool) or default is None:
            kwargs[key] = value
        elif isinstance(default, (int, float)) and not isinstance(value, bool):
            try:
                kwargs[key] = type(default)(value)
            except (TypeError, ValueError) as err:
                raise InputError(f"{where}: {key} must be a {type(default).__name__}, got {value!r}") from err
        else:
            kwargs[key] = value
    return cls(**kwargs)


def load_sources(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> SourcesConfig:
    """Load ``sources.yaml`` (or ``path``) and apply the environment overrides listed in the module docstring."""
    env = os.environ if env is None else env
    path = Path(path) if path is not None else CONFIG_DIR / "sources.yaml"
    raw = dict(_read_yaml(path))
    http_raw = dict(raw.pop("http", None) or {})
    if "TCSPMM_HTTP_TIMEOUT_S" in env:
        http_raw["timeout_s"] = env["TCSPMM_HTTP_TIMEOUT_S"]
    if "TCSPMM_HTTP_RETRIES" in env:
        http_raw["retries"] = env["TCSPMM_HTTP_RETRIES"]
    if "TCSPMM_HTTP_BACKOFF_S" in env:
        http_raw["backoff_s"] = env["TCSPMM_HTTP_BACKOFF_S"]
    http = _build(HttpConfig, http_raw, f"{path} (http)")
    for key, var in (("suitesparse_url", "TCSPMM_SUITESPARSE_URL"), ("igb_url", "TCSPMM_IGB_URL")):
        if env.get(var):
            raw[key] = env[var]
    return _build(SourcesConfig, {**raw, "http": http}, str(path))


def load_igb(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> IgbConfig:
    """Load ``igb.yaml`` (or ``path``); ``TCSPMM_IGB_MD5_<SIZE>`` replaces one size's expected md5."""
    env = os.environ if env is None else env
    path = Path(path) if path is not None else CONFIG_DIR / "igb.yaml"
    raw = _read_yaml(path)
    md5 = dict(raw.get("md5") or {})
    for size in IGB_SIZES:
        override = env.get(f"TCSPMM_IGB_MD5_{size.upper()}")
        if override:
            md5[size] = override.strip().lower()
    return _build(IgbConfig, {**raw, "md5": md5}, str(path))


def load_catalog(path: str | os.PathLike | None = None) -> list[str]:
    """The catalog's matrix specs (strings accepted by ``tasks.fetch.fetch``), in file order."""
    path = Path(path) if path is not None else CONFIG_DIR / "catalog.yaml"
    raw = _read_yaml(path)
    unknown = sorted(set(raw) - {"matrices"})
    if unknown:
        raise InputError(f"{path}: unknown key(s) {', '.join(unknown)}; valid keys: matrices")
    specs = raw.get("matrices") or []
    if not isinstance(specs, list) or not all(isinstance(s, str) and s.strip() for s in specs):
        raise InputError(f"{path}: 'matrices' must be a list of non-empty spec strings")
    return [s.strip() for s in specs]


def data_root(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The data root, decided here only: ``path`` when given, else ``TCSPMM_DATA`` (when set and not empty), else
    ``./data``."""
    if path:
        return Path(path)
    env = os.environ if env is None else env
    return Path(env.get("TCSPMM_DATA") or "data")


def fixture_roots(repo: str | os.PathLike, env: Mapping[str, str] | None = None) -> list[Path]:
    """The folders that may hold the test fixtures (``MANIFEST.json``, ``suitesparse/MM/...``, ``igb/...``) for the
    checkout at ``repo``, in the order they are looked in, decided here only: ``TCSPMM_FIXTURES`` (when set and not
    empty), ``<repo>/.fixtures``, ``<repo>/../shared/fixtures``. Whether they exist is the caller's question."""
    env = os.environ if env is None else env
    named = env.get("TCSPMM_FIXTURES")
    return ([Path(named)] if named else []) + [Path(repo) / ".fixtures", Path(repo).parent / "shared" / "fixtures"]
