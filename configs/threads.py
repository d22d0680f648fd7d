"""Thread counts, decided here only: the CPUs this process may run on, and a count set in the environment
(``TCSPMM_CPU_THREADS`` for the CPU SpMM, ``TCSPMM_IO_THREADS`` for the store's reads and writes); and the
persistent thread pools that work runs on (`pool`)."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_POOLS: dict[tuple[str, int], ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def usable_cpus() -> int:
    """The CPUs this process may run on (``os.sched_getaffinity``, else ``os.cpu_count``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def threads_from_env(var: str, default: int) -> int:
    """The environment's ``var`` when set (a positive integer; ValueError naming it otherwise), else ``default``."""
    env = os.environ.get(var)
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"{var} is {env!r}, expected a positive integer")
        return int(env)
    return int(default)


def pool(name: str, threads: int) -> ThreadPoolExecutor:
    """One persistent pool per (purpose, thread count), made on first use (creating threads per call cost ~0.5 ms);
    its threads are named after ``name``. A forked child makes its own: the parent's pool threads do not exist
    there, and a pool that believes it has them never runs what it is given."""
    key = (name, int(threads))
    with _POOLS_LOCK:
        if key not in _POOLS:
            _POOLS[key] = ThreadPoolExecutor(int(threads), thread_name_prefix=name)
        return _POOLS[key]


def _forget_pools() -> None:
    """In a forked child: the parent's pools (and their lock, which a parent thread may have held) left behind."""
    global _POOLS_LOCK
    _POOLS.clear()
    _POOLS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_pools)
