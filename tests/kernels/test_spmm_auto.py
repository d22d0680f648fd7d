"""SpmmPlan(format="auto") builds device operators only for the formats the cost estimates rank first
(kernels.formats.ranking.select), without a GPU: fake formats whose operators record their construction stand in
for the registry, and stub timings for the device (as tests/kernels/test_contract.py does)."""
from __future__ import annotations

import threading
from dataclasses import dataclass, replace

import numpy as np
import pytest
import scipy.sparse as sp

import kernels.launch
import kernels.spmm
from configs.errors import InputError
from configs.names import BASE_FORMAT
from kernels.choice import decide
from kernels.formats import ranking, registry
from kernels.formats.contract import Choice, PerCall
from kernels.formats.ranking import CostModel
from kernels.formats.registry import Format
from kernels.spmm import SpmmPlan

BUILT: list[str] = []
THREADS: dict[str, str] = {}  # format -> the thread its operator was built on
FAIL: set[str] = set()  # formats whose operator raises InputError when built


class Op:
    """A fake format's device operator: its construction is recorded; it decides its one kernel."""

    config, out_dtype, summary = None, None, "fake"

    def __init__(self, A, precision, config, calibration, **kw):
        BUILT.append(self.format_name)
        THREADS[self.format_name] = threading.current_thread().name
        if self.format_name in FAIL:
            raise InputError(f"{self.format_name}: does not fit")
        self.timings = {"convert_upload_s": 0.0}

    def decide(self, N, B, time_fn):
        return Choice(kernel=self.kernels[0], N=N, reason=f"{self.format_name}'s only kernel")

    def launch(self, kernel, B, out, **kw):
        return out

    def bind(self, kernel, B, out, **kw):
        return PerCall(self, kernel, B, out, **kw)


@dataclass(frozen=True)
class FakeFormat(Format):
    op: type = None

    def device_class(self):
        return self.op


def fake(name: str, us: float, *, kernels=None, fallbacks=(), gpu_ready=True) -> FakeFormat:
    op = type(f"Op_{name}", (Op,), {"format_name": name, "kernels": tuple(kernels or (f"{name}-k",))})
    return FakeFormat(name=name, summary="fake", block_width={"float32": 8}, convert=None, concat=None, layout=None,
                      from_arrays=None, reference_spmm=None, stats=None, device="fake:none", op=op,
                      fallbacks=fallbacks, gpu_ready=gpu_ready, gpu_not_ready_why="fake",
                      estimate=CostModel(lambda stats, prec, N: {"launch": 1.0, "b_mb": stats.nnz * N * 1e-9},
                                         {"launch": us, "b_mb": 1.0}))


@pytest.fixture
def formats(monkeypatch):
    """Install fake formats as the whole registry on a pretend GPU; returns the installer. The fakes' predictions
    spread wider than AUTO_MARGIN, which these tests leave out (test_formats_past_the_margin_are_not_built)."""
    monkeypatch.setattr(kernels.spmm, "gpu_available", lambda: True)
    monkeypatch.setattr(kernels.launch, "free_device_bytes", lambda xp=None: 1 << 40)
    monkeypatch.setattr(ranking, "AUTO_MARGIN", float("inf"))

    def install(*fmts):
        table = {f.name: f for f in fmts}
        monkeypatch.setattr(registry, "REGISTRY", table)
        monkeypatch.setattr(kernels.spmm, "REGISTRY", table)
        BUILT.clear()
        THREADS.clear()
        FAIL.clear()
        return table

    return install


A = sp.random(300, 200, density=0.05, format="csr", random_state=np.random.default_rng(0), dtype=np.float32)


def test_auto_builds_exactly_the_top_k_in_rank_order(formats):
    formats(fake("a", 5.0), fake("b", 1.0), fake("c", 3.0), fake("d", 2.0))
    plan = SpmmPlan(A, device="gpu", format="auto")  # auto_candidates = 2
    assert BUILT == ["b", "d"] and list(plan._ops) == ["b", "d"] and [f.name for f in plan.formats] == ["b", "d"]
    assert plan.ranking["built"] == ["b", "d"] and list(plan.ranking["estimate_us"]) == ["b", "d", "c", "a"]
    assert plan.ranking["statistics_s"] > 0 and plan.timings["format_ranking_s"] >= plan.ranking["statistics_s"]
    assert plan.choice["format_ranking"] is plan.ranking and plan.choice["format"] == "b"
    plan = SpmmPlan(A, device="gpu", format="auto", auto_candidates=3)
    assert BUILT[2:] == ["b", "d", "c"]


def test_all_are_built_unranked_when_k_covers_them(formats):
    formats(fake("a", 5.0), fake("b", 1.0), fake("c", 3.0))
    plan = SpmmPlan(A, device="gpu", format="auto", auto_candidates=3)
    assert BUILT == ["a", "b", "c"] and not plan.ranking["ranked"] and "format_ranking_s" in plan.timings


def test_a_format_timed_as_a_fallback_takes_no_slot_and_still_competes(formats):
    formats(fake("rows", 1.0, kernels=("rows-k",)), fake("tc", 2.0, fallbacks=("rows-k",)), fake("v", 3.0),
            fake("slow", 9.0))
    plan = SpmmPlan(A, device="gpu", format="auto")
    assert BUILT == ["tc", "v"] and plan.ranking["timed_as_fallback"] == ["rows"] and plan._fallbacks == ["rows-k"]
    times = {"tc-k": 0.5, "v-k": 0.4, "rows-k": 0.3}
    plan._time = lambda kernel, B, **kw: times[kernel]
    choice = decide(plan, 64, np.zeros((200, 64), dtype=np.float32))
    assert choice.formats_measured_ms == {"tc": 0.5, "v": 0.4} and choice["rows_k_ms"] == 0.3
    assert (choice.kernel, choice.format) == ("rows-k", "rows") and BUILT == ["tc", "v", "rows"]  # built on use
    assert choice["format_ranking"] is plan.ranking


def test_the_default_format_is_always_one_of_the_built(formats):
    formats(fake("b", 1.0), fake("c", 2.0), fake(BASE_FORMAT, 9.0), fake("d", 3.0))
    plan = SpmmPlan(A, device="gpu", format="auto")  # ranked last, built in the second slot, rank order kept
    assert sorted(BUILT) == ["b", BASE_FORMAT] and list(plan._ops) == ["b", BASE_FORMAT]
    assert plan.ranking["anchor"] == BASE_FORMAT
    assert list(plan.ranking["estimate_us"]) == ["b", "c", "d", BASE_FORMAT]
    BUILT.clear()
    SpmmPlan(A, device="gpu", format="auto", auto_candidates=1)  # one slot: the cost model's first only
    assert BUILT == ["b"]


def test_the_default_format_covering_the_first_leaves_two_slots_to_fill(formats):
    formats(fake("rows", 1.0, kernels=("rows-k",)), fake("v", 2.0), fake("w", 3.0),
            fake(BASE_FORMAT, 9.0, fallbacks=("rows-k",)))
    plan = SpmmPlan(A, device="gpu", format="auto")
    assert sorted(BUILT) == [BASE_FORMAT, "v"] and list(plan._ops) == ["v", BASE_FORMAT]
    assert plan.ranking["timed_as_fallback"] == ["rows"]


def test_formats_past_the_margin_are_not_built(formats, monkeypatch):
    monkeypatch.setattr(ranking, "AUTO_MARGIN", 2.0)
    formats(fake("rows", 1.0, kernels=("rows-k",)), fake("near", 1.9), fake("far", 2.5),
            fake(BASE_FORMAT, 9.0, fallbacks=("rows-k",)))
    plan = SpmmPlan(A, device="gpu", format="auto", auto_candidates=3)  # the default format: built past it too
    assert list(plan._ops) == ["near", BASE_FORMAT] and sorted(BUILT) == [BASE_FORMAT, "near"]
    assert plan.ranking["beyond_margin"] == ["far"]
    assert plan.ranking["timed_as_fallback"] == ["rows"] and plan.ranking["margin"] == 2.0
    BUILT.clear()
    monkeypatch.setattr(ranking, "AUTO_MARGIN", 3.0)
    plan = SpmmPlan(A, device="gpu", format="auto", auto_candidates=3)
    assert list(plan._ops) == ["near", "far", BASE_FORMAT] and sorted(BUILT) == ["far", BASE_FORMAT, "near"]


def test_the_default_format_is_built_on_a_background_thread_beside_the_ranking(formats):
    formats(fake("b", 1.0), fake(BASE_FORMAT, 9.0), fake("c", 2.0))
    plan = SpmmPlan(A, device="gpu", format="auto")
    assert list(plan._ops) == ["b", BASE_FORMAT] and plan._ops[BASE_FORMAT].format_name == BASE_FORMAT
    assert THREADS[BASE_FORMAT].startswith("plan-build") and THREADS["b"] == threading.current_thread().name
    THREADS.clear()
    SpmmPlan(A, device="gpu", format="auto", auto_candidates=3)  # every format built: no ranking to overlap
    SpmmPlan(A, device="gpu", format=BASE_FORMAT)
    assert THREADS == {"b": threading.current_thread().name, BASE_FORMAT: threading.current_thread().name,
                       "c": threading.current_thread().name}


def test_a_background_build_that_fails_fails_the_plan_and_one_not_kept_is_waited_for(formats):
    formats(fake("b", 1.0), fake(BASE_FORMAT, 9.0), fake("c", 2.0))
    FAIL.add(BASE_FORMAT)
    with pytest.raises(InputError, match=f"^{BASE_FORMAT}: does not fit$"):
        SpmmPlan(A, device="gpu", format="auto")
    # the default format covered by the first format's fallbacks: built early, then not kept (its failure unseen)
    formats(fake("v", 1.0, fallbacks=(f"{BASE_FORMAT}-k",)), fake(BASE_FORMAT, 9.0), fake("w", 2.0))
    FAIL.add(BASE_FORMAT)
    plan = SpmmPlan(A, device="gpu", format="auto")
    assert list(plan._ops) == ["v", "w"] and plan.ranking["timed_as_fallback"] == [BASE_FORMAT]
    assert BASE_FORMAT in BUILT and plan._fallbacks == [f"{BASE_FORMAT}-k"]


def test_formats_without_gpu_kernels_leave_before_ranking(formats):
    formats(fake("cheap", 0.1, gpu_ready=False), fake("b", 1.0), fake("c", 3.0), fake("d", 2.0))
    plan = SpmmPlan(A, device="gpu", format="auto")
    assert BUILT == ["b", "d"] and "cheap" not in plan.ranking["estimate_us"]


def test_a_named_format_or_the_cpu_path_is_not_ranked(formats):
    formats(fake("a", 5.0), fake("b", 1.0), fake("c", 3.0))
    plan = SpmmPlan(A, device="gpu", format="a")
    assert BUILT == ["a"] and plan.ranking is None and "format_ranking" not in plan.choice


def test_bad_auto_candidates_is_refused_in_one_line():
    with pytest.raises(ValueError, match="auto_candidates is 0, expected a positive number of formats"):
        SpmmPlan(A, device="cpu", format="auto", auto_candidates=0)


def test_the_cpu_path_keeps_working_under_auto():
    B = np.random.default_rng(1).standard_normal((200, 8)).astype(np.float32)
    plan = SpmmPlan(A, device="cpu", format="auto")
    assert plan.ranking is None and plan.choice["kernel"] == "cpu-csr"
    np.testing.assert_allclose(plan.run(B), A @ B, rtol=1e-5, atol=1e-5)


def test_the_default_formats_fallbacks_are_prepared_before_the_ranking_and_done_when_the_plan_is(formats,
                                                                                                  monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    events, pool = [], ThreadPoolExecutor(1)

    class Prepared(Op):
        def prepare(self):
            events.append(f"prepare {self.format_name}")
            self.future = pool.submit(lambda: events.append("prepared") or "arrays")
            return self.future

    rows = replace(fake("rows", 1.0, kernels=("rows-k",)),
                   op=type("Op_rows", (Prepared,), {"format_name": "rows", "kernels": ("rows-k",)}))
    formats(rows, fake(BASE_FORMAT, 9.0, fallbacks=("rows-k",)), fake("v", 2.0), fake("w", 3.0))
    stats = ranking.structure
    monkeypatch.setattr(ranking, "structure", lambda A, **kw: events.append("statistics") or stats(A, **kw))
    plan = SpmmPlan(A, device="gpu", format="auto")
    assert events.index("prepare rows") < events.index("statistics") and "prepared" in events
    assert plan._fallbacks == ["rows-k"] and plan._op("rows-k").future.done() and list(plan._ops) == ["v", BASE_FORMAT]
    events.clear()
    SpmmPlan(A, device="gpu", format="auto", autotune=False)  # nothing timed against the choice: nothing prepared
    assert events == ["statistics"]
    pool.shutdown()


def test_without_room_on_the_device_the_builds_run_one_by_one(formats, monkeypatch):
    """Less free device memory than CONCURRENT_BUILD_BYTES_PER_NNZ a nonzero: nothing built on a background
    thread, nothing prepared (the fallback built on first use), the same formats kept."""
    from concurrent.futures import Future

    prepared = []

    class Prepared(Op):
        def prepare(self):
            prepared.append(self.format_name)
            future = Future()
            future.set_result(None)
            return future

    rows = replace(fake("rows", 1.0, kernels=("rows-k",)),
                   op=type("Op_rows", (Prepared,), {"format_name": "rows", "kernels": ("rows-k",)}))
    formats(rows, fake(BASE_FORMAT, 9.0, fallbacks=("rows-k",)), fake("v", 2.0), fake("w", 3.0))
    need = kernels.spmm.CONCURRENT_BUILD_BYTES_PER_NNZ * A.nnz
    monkeypatch.setattr(kernels.launch, "free_device_bytes", lambda xp=None: need - 1)
    plan = SpmmPlan(A, device="gpu", format="auto")
    assert list(plan._ops) == ["v", BASE_FORMAT] and plan._fallbacks == ["rows-k"] and prepared == []
    assert set(THREADS.values()) == {threading.current_thread().name}
    monkeypatch.setattr(kernels.launch, "free_device_bytes", lambda xp=None: need)
    THREADS.clear()
    SpmmPlan(A, device="gpu", format="auto")
    assert prepared == ["rows"] and THREADS[BASE_FORMAT].startswith("plan-build")
