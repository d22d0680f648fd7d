"""configs.threads: the persistent pools survive a fork (the child makes its own: the parent's threads are not
there, and the parent's pool would never run what the child gives it)."""
from __future__ import annotations

import os

import pytest

from configs.threads import pool


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_forked_child_runs_work_on_its_own_pool():
    parent = pool("test-fork", 1)
    assert parent.submit(lambda: 1).result(timeout=10) == 1  # the parent's pool thread exists now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report, never return into pytest
        try:
            child = pool("test-fork", 1)
            ok = child is not parent and child.submit(lambda: 2).result(timeout=10) == 2
            os.write(write, b"ok" if ok else b"wrong")
        except BaseException as err:  # noqa: BLE001 - anything: reported to the parent
            os.write(write, type(err).__name__.encode()[:50])
        finally:
            os._exit(0)
    os.close(write)
    got = os.read(read, 64)
    os.close(read)
    os.waitpid(pid, 0)
    assert got == b"ok"
    assert pool("test-fork", 1) is parent  # the parent keeps its own
