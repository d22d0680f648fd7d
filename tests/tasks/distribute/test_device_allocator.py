"""`use_gc_safe_allocator`: CuPy's pool goes between CuPy and RMM's allocator (once), never over another allocator,
and `release_device_memory` returns the pool's blocks to RMM. CuPy is replaced by a recording fake (no GPU here)."""
from __future__ import annotations

import sys
import types

import pytest

from tasks.distribute import device as dev


class FakePool:
    def __init__(self, allocator=None):
        self.allocator, self.freed = allocator, 0

    def malloc(self, nbytes):
        return self.allocator(nbytes)

    def free_all_blocks(self):
        self.freed += 1


def rmm_cupy_allocator(nbytes):
    return ("rmm", nbytes)


rmm_cupy_allocator.__module__ = "rmm.allocators.cupy"


@pytest.fixture
def fake_cupy(monkeypatch):
    state = {"allocator": None}
    default_pool = FakePool()
    cuda = types.SimpleNamespace(
        get_allocator=lambda: state["allocator"],
        set_allocator=lambda a: state.__setitem__("allocator", a),
        MemoryPool=FakePool)
    cupy = types.SimpleNamespace(cuda=cuda, get_default_memory_pool=lambda: default_pool)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(dev, "_RMM_BACKED_POOL", None)
    monkeypatch.setattr(dev, "gpu_available", lambda: True)
    return state, default_pool


def test_rmm_allocator_gets_cupys_pool_in_front_once(fake_cupy):
    state, _ = fake_cupy
    state["allocator"] = rmm_cupy_allocator
    assert dev.worker_device("auto") is True
    pool = state["allocator"].__self__
    assert isinstance(pool, FakePool) and pool.allocator is rmm_cupy_allocator
    assert state["allocator"](64) == ("rmm", 64)  # blocks still come from RMM
    assert dev.cupy_allocator_name() == "cupy MemoryPool over rmm.allocators.cupy.rmm_cupy_allocator"
    dev.worker_device("gpu")  # a second task on the worker: no pool over the pool
    assert state["allocator"].__self__ is pool and pool.allocator is rmm_cupy_allocator
    dev.release_device_memory(True)
    assert pool.freed == 1


def test_other_allocators_are_left_alone(fake_cupy):
    state, default_pool = fake_cupy

    def own_malloc(nbytes):
        return ("cupy", nbytes)
    state["allocator"] = own_malloc
    dev.worker_device("gpu")
    assert state["allocator"] is own_malloc and dev._RMM_BACKED_POOL is None
    dev.release_device_memory(True)
    assert default_pool.freed == 1


def test_cpu_tasks_do_not_touch_cupy(fake_cupy):
    state, _ = fake_cupy
    state["allocator"] = rmm_cupy_allocator
    assert dev.worker_device("cpu") is False
    assert state["allocator"] is rmm_cupy_allocator


def test_two_threads_starting_at_once_make_one_pool(fake_cupy, monkeypatch):
    """A task thread and the actor thread of a fresh worker: one pool, so no array outlives the pool it came from."""
    import threading
    import time

    state, _ = fake_cupy
    state["allocator"] = rmm_cupy_allocator
    made = []

    class SlowPool(FakePool):
        def __init__(self, allocator=None):
            time.sleep(0.05)  # widen the window between reading the allocator and setting the pool
            super().__init__(allocator)
            made.append(self)

    monkeypatch.setattr(sys.modules["cupy"].cuda, "MemoryPool", SlowPool)
    threads = [threading.Thread(target=dev.worker_device, args=("gpu",)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and state["allocator"].__self__ is made[0]
