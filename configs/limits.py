"""Resource limits for sizes that come from outside (headers, indexes, metadata, generator parameters).

Nothing is allocated from an outside size before ``check_memory`` has compared its estimate with the memory limit,
and no archive is unpacked past its ``extract_budget``. Values come from ``configs/limits.yaml``, overridden by the
environment (``TCSPMM_MEMORY_LIMIT``, ``TCSPMM_EXTRACT_FACTOR``, ``TCSPMM_EXTRACT_CAP``), which the CLI's
``--memory-limit`` / ``--extract-cap`` set. Sizes accept a byte count or a suffix: ``512M``, ``16G``, ``1.5T``.

``memory_limit: auto`` (the default) is what this machine has for us now: the smallest of the memory available
(``MemAvailable`` in ``/proc/meminfo``, else the physical memory), the cgroup's ``memory.max`` and the process's
``RLIMIT_AS``.
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from pathlib import Path

from configs.errors import InputError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


def parse_size(text: str | int | float, where: str) -> int:
    """Bytes from ``4096``, ``512M``, ``16G``, ``1.5T`` (binary units); InputError naming ``where`` otherwise."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        match = _SIZE_RE.match(str(text))
        if not match:
            raise InputError(f"{where}: {text!r} is not a size; use bytes or a number with K, M, G or T")
        value = float(match.group(1)) * _UNITS[match.group(2).upper()]
    if not value > 0:
        raise InputError(f"{where}: a size must be > 0, got {text!r}")
    return int(value)


def format_size(n_bytes: float) -> str:
    """``24.0 GiB``: one decimal in the largest binary unit that keeps the number >= 1."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{int(n_bytes)} B"


def machine_memory_bytes() -> int:
    """What this process may use now: min(MemAvailable or physical memory, cgroup memory.max, RLIMIT_AS)."""
    candidates = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                candidates.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    if not candidates:
        try:
            candidates.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            pass
    try:
        cgroup = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if cgroup.isdigit():
            candidates.append(int(cgroup))
    except OSError:
        pass
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            candidates.append(int(soft))
    except (ImportError, ValueError, OSError):
        pass
    return min(candidates) if candidates else 1 << 62


@dataclasses.dataclass(frozen=True)
class Limits:
    """``memory_bytes``: None = ``machine_memory_bytes()`` when checked. Extraction: an archive whose source announces
    its entry count may unpack to ``extract_factor * (header + entries * bytes per entry)`` bytes, at least
    ``extract_floor_bytes``, and never more than ``extract_cap_bytes`` (the cap wins over the floor) (which alone bounds sources that announce
    nothing: local archives, IGB)."""

    memory_bytes: int | None = None
    extract_factor: float = 8.0
    extract_floor_bytes: int = 16 << 20
    extract_cap_bytes: int = 256 << 30

    def __post_init__(self) -> None:
        if self.memory_bytes is not None and self.memory_bytes <= 0:
            raise InputError(f"memory_limit must be > 0, got {self.memory_bytes}")
        if not self.extract_factor >= 1:
            raise InputError(f"extract_factor must be >= 1, got {self.extract_factor}")
        if self.extract_floor_bytes <= 0 or self.extract_cap_bytes <= 0:
            raise InputError(f"extract_floor and extract_cap must be > 0, got {self.extract_floor_bytes} and "
                             f"{self.extract_cap_bytes}")

    def memory_limit(self) -> int:
        return self.memory_bytes if self.memory_bytes is not None else machine_memory_bytes()


def load_limits(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> Limits:
    """``limits.yaml`` (or ``path``) with the environment overrides listed in the module docstring."""
    from configs import CONFIG_DIR, _read_yaml

    env = os.environ if env is None else env
    path = Path(path) if path is not None else CONFIG_DIR / "limits.yaml"
    raw = dict(_read_yaml(path))
    valid = ("memory_limit", "extract_factor", "extract_floor", "extract_cap")
    unknown = sorted(set(raw) - set(valid))
    if unknown:
        raise InputError(f"{path}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(valid)}")
    for key, var in (("memory_limit", "TCSPMM_MEMORY_LIMIT"), ("extract_factor", "TCSPMM_EXTRACT_FACTOR"),
                     ("extract_cap", "TCSPMM_EXTRACT_CAP")):
        if env.get(var):
            raw[key] = env[var]
    memory = raw.get("memory_limit", "auto")
    kwargs: dict = {}
    if str(memory).strip().lower() != "auto":
        kwargs["memory_bytes"] = parse_size(memory, _where(path, env, "memory_limit", "TCSPMM_MEMORY_LIMIT"))
    if "extract_factor" in raw:
        where = _where(path, env, "extract_factor", "TCSPMM_EXTRACT_FACTOR")
        try:
            kwargs["extract_factor"] = float(raw["extract_factor"])
        except (TypeError, ValueError):
            raise InputError(f"{where}: {raw['extract_factor']!r} is not a number") from None
    if "extract_floor" in raw:
        kwargs["extract_floor_bytes"] = parse_size(raw["extract_floor"], f"{path}: extract_floor")
    if "extract_cap" in raw:
        kwargs["extract_cap_bytes"] = parse_size(raw["extract_cap"],
                                                 _where(path, env, "extract_cap", "TCSPMM_EXTRACT_CAP"))
    return Limits(**kwargs)


def _where(path: Path, env: Mapping[str, str], key: str, var: str) -> str:
    return var if env.get(var) else f"{path}: {key}"


def check_memory(label: str, what: str, need_bytes: int, limits: Limits | None = None) -> None:
    """Refuse (one-line InputError) when ``need_bytes`` is above the memory limit; ``what`` says what needs it."""
    limits = limits or load_limits()
    limit = limits.memory_limit()
    if need_bytes > limit:
        origin = "set by TCSPMM_MEMORY_LIMIT or --memory-limit" if limits.memory_bytes is not None \
            else "what this machine has available; raise it with TCSPMM_MEMORY_LIMIT or --memory-limit"
        raise InputError(f"{label}: {what} needs about {format_size(need_bytes)} of memory, over the limit of "
                         f"{format_size(limit)} ({origin})")
