"""kernels.launch's timers on the GPU: graph_ms's private stream is ordered after the caller's stream and before
its later work (a non-blocking stream does not wait for the legacy default stream by itself)."""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)

from kernels import launch  # noqa: E402

# one block spins for `ns` nanoseconds of the GPU's global timer, then writes v into x: work still running when
# the host moves on
SPIN_WRITE = cupy.RawKernel(r"""
extern "C" __global__ void spin_write(float* x, unsigned long long ns, float v) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
    x[threadIdx.x] = v;
}""", "spin_write")
SPIN_NS = 50_000_000  # 50 ms


@pytest.mark.parametrize("caller", ["legacy default", "created"])
def test_graph_ms_waits_for_the_callers_earlier_work(caller):
    """x is written by a 50 ms kernel on the caller's stream; graph_ms times a copy of x into y: every copy it runs
    must see x's final value (before the fix, its non-blocking stream copied the zeros while the writer spun)."""
    stream = cupy.cuda.Stream.null if caller == "legacy default" else cupy.cuda.Stream()
    with stream:
        x = cupy.zeros(32, dtype=cupy.float32)
        y = cupy.zeros(32, dtype=cupy.float32)
        # warm everything first: a module's first load (the copy kernel's, the spin kernel's) can synchronize the
        # device and hide the race
        launch.graph_ms(lambda: cupy.copyto(y, x), repeats=1, warmup=1)
        SPIN_WRITE((1,), (32,), (x, np.uint64(0), np.float32(0.0)))
        stream.synchronize()
        SPIN_WRITE((1,), (32,), (x, np.uint64(SPIN_NS), np.float32(7.0)))
        ms = launch.graph_ms(lambda: cupy.copyto(y, x), repeats=2, warmup=1)
        assert ms > 0
        assert bool((y == 7.0).all()), "graph_ms ran fn before the caller's stream had written its input"


def test_graph_ms_orders_the_callers_later_work_after_it():
    """The caller's stream's next kernel sees what the timed fn wrote (the private stream's last work is joined)."""
    x = cupy.full(32, 3.0, dtype=cupy.float32)
    y = cupy.zeros(32, dtype=cupy.float32)
    launch.graph_ms(lambda: cupy.copyto(y, x), repeats=1, warmup=1)
    z = y * 2  # on the caller's (legacy default) stream
    assert bool((z == 6.0).all())


def _spin(ms: float):
    """A call of ``ms`` on the GPU (one spinning block), counted: the timers' call budget is what is tested."""
    x = cupy.zeros(32, dtype=cupy.float32)
    calls = []

    def fn():
        calls.append(1)
        SPIN_WRITE((1,), (32,), (x, np.uint64(int(ms * 1e6)), np.float32(1.0)))

    return fn, calls


def test_a_long_call_is_its_own_estimate_after_one_warm_up():
    fn, calls = _spin(2.0)
    fn()  # the module's first load
    calls.clear()
    assert launch.single_ms(fn, warmup=3, long_ms=0.2) >= 1.9
    assert len(calls) == 2
    calls.clear()
    launch.single_ms(fn, warmup=3)  # without long_ms: 3 warm-up and 3 estimate calls
    assert len(calls) == 6


def test_a_candidate_far_slower_than_the_best_is_not_timed_further():
    fn, calls = _spin(2.0)
    fn()
    calls.clear()
    ms = launch.graph_ms(fn, repeats=5, warmup=3, target_ms=0.2, long_ms=0.2, give_up_ms=1.0)
    assert ms >= 1.9 and len(calls) == 2  # the estimate returned: no capture, no replays
    calls.clear()
    ms = launch.graph_ms(fn, repeats=5, warmup=3, target_ms=0.2, long_ms=0.2, give_up_ms=4.0)
    assert 1.9 <= ms < 4.0 and len(calls) == 3  # estimated, then one call captured and replayed


def test_a_hinted_candidate_is_captured_at_once_and_its_first_replay_is_the_estimate():
    """graph_ms with ``hint_ms`` (an autotune's best so far): no single-call estimate; the graph sized by the hint,
    warmed by its first launch; a first replay past give_up_ms ends the timing."""
    fn, calls = _spin(2.0)
    fn()
    calls.clear()
    ms = launch.graph_ms(fn, repeats=5, warmup=3, target_ms=0.2, long_ms=0.2, give_up_ms=1.0, hint_ms=0.5)
    assert ms >= 1.9 and len(calls) == 1  # one call captured (0.2 / 0.5 rounds to 1), one replay timed
    calls.clear()
    ms = launch.graph_ms(fn, repeats=5, warmup=3, target_ms=0.2, long_ms=0.2, give_up_ms=4.0, hint_ms=0.05)
    assert 1.9 <= ms < 4.0 and len(calls) == 4  # four captured (0.2 / 0.05), every replay timed
