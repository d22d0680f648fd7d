"""A helper process that dies with the run which started it, even after ``kill -9`` of the run.

Two mechanisms, because either alone has a gap: Linux's ``PR_SET_PDEATHSIG`` (the kernel signals the child when
the thread that forked it exits; immediate, Linux only), and a watchdog thread that polls ``os.getppid()`` (a
child whose parent died is re-parented, so its parent id changes; portable, within ``POLL_S``). The temporary
Prefect API server (``tasks.prefect_server``) binds itself with `bind_to_parent`; Dask's worker processes already
exit when their nanny's pipe closes (``distributed.process.AsyncProcess``).
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
POLL_S = 0.5


def bind_to_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """End this process with ``sig`` when ``parent_pid`` is no longer its parent (the run died, however). Exits at
    once when the parent is already gone (it died before this was set up)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        except (OSError, AttributeError):  # no prctl here: the watchdog alone
            pass
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)
    threading.Thread(target=_watch, args=(parent_pid, sig), name="lifeline", daemon=True).start()


def _watch(parent_pid: int, sig: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(POLL_S)
    os.kill(os.getpid(), sig)
