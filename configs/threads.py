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
    its threads are named after ``name``."""
    key = (name, int(threads))
    with _POOLS_LOCK:
        if key not in _POOLS:
            _POOLS[key] = ThreadPoolExecutor(int(threads), thread_name_prefix=name)
        return _POOLS[key]
