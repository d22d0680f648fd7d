"""The device-operator contract (kernels.formats.contract): the typed Choice record with its read-only dict view,
every registered operator's declared kernels and methods, and SpmmPlan's choice across operators (several formats,
the baselines' fallback) with stub operators and timings, which needs no GPU."""
from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

from kernels.baselines import BASELINES
from kernels.choice import decide
from kernels.formats import REGISTRY
from kernels.formats.contract import Choice, DeviceOperator, PerCall
from kernels.spmm import SpmmPlan
from storage.naming import dumps


def test_choice_reads_like_the_dicts_it_replaces():
    ch = Choice(kernel="k-window", N=64, reason="model", extra={"bands": 2})
    assert ch["kernel"] == "k-window" and ch["bands"] == 2 and ch.get("N") == 64
    assert ch["measured_ms"] is None and ch.get("measured_ms", {}) == {}  # unset: reads None, get's default
    assert "bands" in ch and "N" in ch and "measured_ms" not in ch and "nope" not in ch
    assert dict(ch) == {"kernel": "k-window", "reason": "model", "N": 64, "bands": 2}
    assert {**ch, "kernel": "x"}["kernel"] == "x" and len(ch) == 4
    with pytest.raises(KeyError):
        ch["nope"]
    assert json.loads(dumps({"choice": ch})) == {"choice": dict(ch)}


def test_choice_writes_fields_and_extras():
    ch = Choice.of({"kernel": "a", "predicted_ms": 0.5, "calibration": "file"})
    assert ch.predicted_ms == 0.5 and ch.extra == {"calibration": "file"}
    ch.update({"kernel": "b", "measured_ms": {"a": 1.0, "b": 0.5}}, warps=4)
    ch["ksplit"] = 8
    assert (ch.kernel, ch.measured_ms["b"], ch.ksplit, ch["warps"]) == ("b", 0.5, 8, 4)
    copy = ch.replace(format="f", csr_rows_ms=0.1)
    assert copy.format == "f" and copy["csr_rows_ms"] == 0.1
    assert ch.format is None and "csr_rows_ms" not in ch  # replace leaves the original alone


def test_every_operator_declares_the_contract():
    ops = [f.device_class() for f in REGISTRY.values()] + list(BASELINES)
    owned = [k for op in ops for k in op.kernels]
    assert len(owned) == len(set(owned)), owned  # a kernel has one operator: SpmmPlan routes by the name
    for fmt in REGISTRY.values():
        assert fmt.device_class().format_name == fmt.name
        assert set(fmt.fallbacks) <= set(owned)  # a fallback is some operator's kernel
    for op in ops:
        for name in ("decide", "launch", "bind"):
            assert callable(getattr(op, name)), (op, name)
        params = inspect.signature(op.launch).parameters
        assert {"kernel", "B", "out"} <= set(params), op
        assert hasattr(op, "out_dtype") and hasattr(op, "format_name")


class Stub:
    """A device operator with fixed choices; `launch` records what ran."""

    def __init__(self, name, kernels, choice, out_dtype=None):
        self.format_name, self.kernels, self.out_dtype, self.config, self.timings = name, kernels, out_dtype, None, {}
        self.choice, self.ran, self.summary = choice, [], "stub"

    def decide(self, N, B, time_fn):
        ch = Choice.of(self.choice)
        if B is not None and "measured_ms" not in self.choice:
            ch.measured_ms = {ch.kernel: time_fn(ch.kernel)}
        return ch

    def launch(self, kernel, B, out, *, accumulate=False, ksplit=None, choice=None):
        self.ran.append((kernel, accumulate))
        return out

    def bind(self, kernel, B, out, **kw):
        return PerCall(self, kernel, B, out, **kw)


def plan_with(ops, fallbacks=(), times=None):
    """A GPU plan's decision state without a GPU: operators, the kernel routing, stub timings."""
    plan = object.__new__(SpmmPlan)
    plan._ops = {op.format_name: op for op in ops if op.format_name != "csr"}
    plan._by_kernel = {k: op for op in ops for k in op.kernels}
    plan._fallbacks = list(fallbacks)
    plan.precision = type("P", (), {"name": "float32"})()
    plan._time = lambda kernel, B, **kw: times[kernel]
    return plan


def test_the_fastest_measured_format_wins_and_names_its_format():
    a = Stub("fa", ("fa-x",), {"kernel": "fa-x", "reason": "a"})
    b = Stub("fb", ("fb-y",), {"kernel": "fb-y", "reason": "b"})
    plan = plan_with([a, b], times={"fa-x": 0.3, "fb-y": 0.2})
    ch = decide(plan, 64, np.zeros((4, 64)))
    assert (ch.kernel, ch.format, ch.precision) == ("fb-y", "fb", "float32")
    assert ch.formats_measured_ms == {"fa": 0.3, "fb": 0.2} and ch.reason.endswith("b")
    assert set(ch["timing_s"]) == {"fa-x", "fb-y"} and all(s >= 0 for s in ch["timing_s"].values())
    prior = decide(plan, 64, None)  # a priori: no timing, no fallback
    assert prior.kernel in ("fa-x", "fb-y") and "timing_s" not in prior


@pytest.mark.parametrize("fallback_ms, kernel", [(0.1, "rows"), (0.9, "fa-x")])
def test_a_fallback_is_timed_against_a_timed_choice(fallback_ms, kernel):
    a = Stub("fa", ("fa-x",), {"kernel": "fa-x", "reason": "tc"})
    rows = Stub("csr", ("rows",), {"kernel": "rows"})
    plan = plan_with([a, rows], fallbacks=["rows"], times={"fa-x": 0.5, "rows": fallback_ms})
    ch = decide(plan, 64, np.zeros((4, 64)))
    assert ch.kernel == kernel and ch["rows_ms"] == fallback_ms
    assert ch.format == ("csr" if kernel == "rows" else "fa")
    assert set(ch["timing_s"]) == {"fa-x", "rows"}  # the fallback's timing is counted too


def test_a_choice_of_another_operators_kernel_is_routed_to_it():
    cus = Stub("csr", ("cusparse",), {"kernel": "cusparse"}, out_dtype=np.dtype(np.float16))
    a = Stub("fa", ("fa-x",), {"kernel": "cusparse", "reason": "model", "measured_ms": {"cusparse": 0.1}})
    plan = plan_with([a, cus], times={})
    ch = decide(plan, 64, np.zeros((4, 64)))
    assert ch.format == "csr" and plan._op("cusparse") is cus
    bound = plan._bind("cusparse", np.zeros((4, 64)), np.zeros((8, 64)), True, choice=ch)
    bound(0)
    assert cus.ran == [("cusparse", True)] and a.ran == []
    with pytest.raises(ValueError, match="belongs to none of this plan's operators"):
        plan._op("fb-y")


def test_the_protocol_is_what_a_plan_holds():
    assert issubclass(DeviceOperator, object) and "decide" in dir(DeviceOperator)
    op = Stub("fa", ("fa-x",), {"kernel": "fa-x"})
    assert isinstance(op, DeviceOperator)  # runtime_checkable: attributes and methods present


class Built(Stub):
    """A registered format's operator, constructed the way SpmmPlan builds one: (A, precision, config, calib, **kw)."""

    kernels = ("toy-rows",)
    made: list = []

    def __init__(self, A, precision, config, calibration, **kw):
        super().__init__("toy", ("toy-rows",), {"kernel": "toy-rows"})
        Built.made.append((A, kw))


def test_a_registered_formats_kernel_is_built_on_first_use(monkeypatch):
    from types import SimpleNamespace

    from kernels.formats import registry

    monkeypatch.setitem(registry.REGISTRY, "toy", SimpleNamespace(device_class=lambda: Built))
    plan = plan_with([Stub("fa", ("fa-x",), {"kernel": "fa-x"})], times={})
    plan._op_kw, plan._csr_of = {"balance": "auto"}, lambda: "A as CSR"
    Built.made.clear()
    op = plan._op("toy-rows")
    assert plan._op("toy-rows") is op and Built.made == [("A as CSR", {"balance": "auto"})]  # once
