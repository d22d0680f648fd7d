"""The per-call path's CPU-side pieces: the selector charges host cost per call, kernel arguments packed as the
64-bit slots cuLaunchKernel reads, and the CPU plan never binds."""
from __future__ import annotations

import inspect
import sys
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp

from kernels import launch
from kernels.launch import _arg_bits, time_bound
from kernels.formats.metcf.selector import Calibration, choose, issued_ms
from kernels.spmm import SpmmPlan


def _pred(plain_ms, cusparse_ms):
    return {"plain_ms": plain_ms, "balanced_ms": 10 * plain_ms, "split_ms": float("inf"), "split_ksplit": 0,
            "cusparse_ms": cusparse_ms, "approximation_ratio": 1.0, "mean_nnz_tc": 9.0}


def test_choice_counts_host_cost_per_call():
    # An 8 us kernel behind a 40 us issue path loses to a 12 us cuSPARSE call that costs 8 us to issue (issue 15)
    cal = Calibration(host_launch_us=40.0, cus_host_us=8.0)
    ch = choose(_pred(0.008, 0.012), cal, allow_cusparse=True)
    assert ch["kernel"] == "cusparse" and ch["predicted_ms"] == 0.012
    # with a lean launch the faster kernel wins again
    ch = choose(_pred(0.008, 0.012), Calibration(host_launch_us=4.0, cus_host_us=8.0), allow_cusparse=True)
    assert ch["kernel"] == "metcf-window" and ch["predicted_ms"] == 0.008
    # deterministic plans never get cuSPARSE, whatever the host costs
    assert choose(_pred(0.008, 0.001), cal, allow_cusparse=False)["kernel"] == "metcf-window"


def test_issued_ms_is_the_larger_of_gpu_and_host_time():
    cal = Calibration(host_launch_us=4.0, cus_host_us=9.0)
    assert issued_ms(0.002, 1, cal) == 0.004
    assert issued_ms(0.002, 2, cal) == 0.008  # the balanced kernel's two launches
    assert issued_ms(0.050, 2, cal) == 0.050
    assert issued_ms(0.002, 1, cal, cusparse=True) == 0.009


def test_kernel_arguments_pack_into_64_bit_slots():
    vals = np.array([_arg_bits(np.int64(-2)), _arg_bits(np.int32(7)), _arg_bits(np.int32(-1)), _arg_bits(5)],
                    dtype=np.uint64)
    assert vals.view(np.int64)[0] == -2
    assert vals.view(np.int32)[2] == 7  # an int parameter is read from the slot's low 4 bytes (little-endian)
    assert vals.view(np.int32)[4] == -1
    assert vals[3] == 5

    class Dev:  # a device array's pointer is its slot
        class data:
            ptr = 0x7F00_0000_1230

    assert _arg_bits(Dev()) == 0x7F00_0000_1230


def test_cpu_plan_runs_numpy_out_without_binding():
    A = sp.random_array((40, 30), density=0.2, format="csr", dtype=np.float32, rng=np.random.default_rng(0))
    plan = SpmmPlan(A, device="cpu")
    B = np.random.default_rng(1).standard_normal((30, 5)).astype(np.float32)
    out = np.empty((40, 5), dtype=np.float32)
    for _ in range(4):
        assert plan.run(B, out) is out
    np.testing.assert_allclose(out, A @ B, rtol=1e-5, atol=1e-5)
    assert plan._calls == {}


def test_autotune_timings_spend_the_tune_budget(monkeypatch):
    # a plan times its candidates on launch's autotune budget; benchmark() measures on the full one
    stream = SimpleNamespace(ptr=0)
    monkeypatch.setitem(sys.modules, "cupy", SimpleNamespace(cuda=SimpleNamespace(get_current_stream=lambda: stream)))
    seen = []
    monkeypatch.setattr(launch, "graph_ms", lambda fn, **kw: seen.append(("graph", kw)) or fn() or 1.0)
    monkeypatch.setattr(launch, "issued_ms", lambda fn, **kw: seen.append(("issued", kw)) or fn() or 1.0)
    calls = []
    for how in ("graph", "issued"):
        assert time_bound(calls.append, how, launch.TUNE_REPEATS, launch.TUNE_WARMUP, launch.TUNE_TARGET_MS) == 1.0
    assert calls == [0, 0]  # the bound launch called with the current stream's pointer
    tune = {"target_ms": launch.TUNE_TARGET_MS, "long_ms": launch.TUNE_TARGET_MS, "give_up_ms": None}
    assert seen == [("graph", {"repeats": launch.TUNE_REPEATS, "warmup": launch.TUNE_WARMUP, **tune,
                               "hint_ms": None}),
                    ("issued", {"repeats": max(3, launch.TUNE_REPEATS // 2), "warmup": launch.TUNE_WARMUP, **tune})]
    seen.clear()  # with the best so far: give up past GIVE_UP x it, never below the target; the graph sized by it
    time_bound(calls.append, "graph", best_ms=2.0)
    time_bound(calls.append, "graph", best_ms=0.01)
    assert [kw["give_up_ms"] for _, kw in seen] == [launch.GIVE_UP * 2.0, launch.TUNE_TARGET_MS]
    assert [kw["hint_ms"] for _, kw in seen] == [2.0, 0.01]
    defaults = {k: p.default for k, p in inspect.signature(SpmmPlan._time).parameters.items()}
    assert (defaults["repeats"], defaults["warmup"], defaults["target_ms"]) == \
        (launch.TUNE_REPEATS, launch.TUNE_WARMUP, launch.TUNE_TARGET_MS)


def test_a_decision_times_each_candidate_against_the_best_so_far():
    # choice.decide hands every timing of one decision the best time before it (kernels.choice._timer)
    from kernels.choice import _timer

    seen = []
    plan = SimpleNamespace(_time=lambda kernel, B, best_ms=None, **kw: seen.append((kernel, best_ms)) or
                           {"a": 3.0, "b": 1.0, "c": 2.0}[kernel])
    time_fn = _timer(plan, None)
    assert [time_fn(k) for k in "abc"] == [3.0, 1.0, 2.0]
    assert seen == [("a", None), ("b", 3.0), ("c", 1.0)]
    assert _timer(plan, None)("c") == 2.0 and seen[-1] == ("c", None)  # a new decision starts afresh
