"""The contract between a format and `SpmmPlan`: the device-operator Protocol and the typed `Choice` record.

A device operator (``Format.device`` names its class; ``kernels.baselines`` holds the cuSPARSE and CUDA-core CSR
ones) is built once per matrix, precision and device: ``Class(A, precision, config, calibration, balance=...,
autotune=..., allow_cusparse=...)`` converts (or takes the converted object), uploads and compiles. Then per N:

- ``decide(N, B, time_fn) -> Choice``: its best kernel for N columns, from its cost model and, when ``B`` is given,
  timings through ``time_fn(kernel, **params)`` (device ms of one candidate, measured the way ``run`` issues it;
  a kernel another operator owns, e.g. "cusparse", is timed through that operator);
- ``launch(kernel, B, out, *, accumulate=False, ksplit=None, choice=None)``: out (=, or += with accumulate) A @ B
  with one of its ``kernels`` on the current stream; returns out;
- ``bind(...)``, same arguments: that launch checked and packed once, ``bound(stream_ptr)`` issues it and
  ``bound.out`` is C (``kernels.launch.Bound``; `PerCall` for an operator that only launches).

Optional: ``timed_ms(kernel, N, out_dtype) -> float | None``, the autotune-budget graph timing of ``kernel``'s bound
launch for N into a C of ``out_dtype`` where the operator has measured exactly that already (the CSR kernel's
`tune` times its kept mapping), so the plan's decision does not time it again (``SpmmPlan._time``); and
``prepare()``, called by a plan on the operator of a fallback kernel when the plan is made: what the operator
would build on first use (the CSR kernel's arrays) started on a background thread (`kernels.launch.in_background`),
so that it overlaps the formats' builds; it returns that build's Future (None when there is nothing to start),
which the plan waits for before it times anything (no copy or kernel of a build beside a timing).

Attributes: ``format_name`` (the format whose arrays it runs: a choice's ``format``), ``kernels`` (the kernel
names it owns), ``timings`` (conversion and upload ms), ``config`` (its compile-time configuration, or None), and
``out_dtype`` (None: C in the plan's out dtype; else the dtype it writes, cuSPARSE's B dtype).

SDDMM (``kernels.sddmm.SddmmPlan``) has its own, smaller contract: a format that computes ``(A @ B^T) (.) S`` gives
its record an `SddmmOperator` (``Format.sddmm``), one route of the plan. ``prepare`` turns S (canonical SciPy CSR,
values already rounded to the precision) into the format's host form once, on the CPU; ``twin`` is the float64
NumPy result on that form (the plan's CPU path); ``upload`` puts it on the current device as an `SddmmDevice`,
whose ``run(A, B, out)`` is the route's per-call launch. ``route`` and ``description`` name it in ``plan.routes``,
``kernel=`` and the plan's choice; ``gpu_ready`` / ``gpu_not_ready_why`` gate it on a GPU besides the format's own
(a new SDDMM kernel waits for its GPU tests); ``on_csr`` says whether it runs on S's CSR as it is (any plan may
take it) or on the format's own conversion (only a plan of that format).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterator, Protocol, runtime_checkable

import numpy as np


@dataclass(eq=False)
class Choice(Mapping):
    """One decision for one N: the kernel and why, with what the cost model predicted and autotune measured.

    Typed fields cover what every operator reports; ``extra`` holds an operator's own details (ME-TCF's
    calibration and A layout, BCSR's times per ksplit, Tiled-CSR's bands, CVSE's V). Read-only dict access
    (``choice["kernel"]``, ``.get``, ``{**choice}``, ``json``) sees the fields that are set plus ``extra``, as the
    reports and JSON files always did (an unset field reads None, and is left out of iteration and ``in``);
    ``choice[key] = value`` and ``update`` set a field or an extra entry."""

    kernel: str
    reason: str = ""
    N: int | None = None
    format: str | None = None
    precision: str | None = None
    predicted_ms: float | None = None
    prediction: dict | None = None
    measured_ms: dict | None = None  # kernel -> device ms, when autotuned
    predicted_kernel: str | None = None  # the model's pick, when autotune overrode it
    ksplit: int | None = None
    formats_measured_ms: dict | None = None  # format -> ms of its choice, when several formats were timed
    extra: dict = field(default_factory=dict)

    @classmethod
    def of(cls, values: Mapping) -> "Choice":
        """A Choice from a mapping (a cost model's decision dict): known keys to fields, the rest to ``extra``."""
        choice = cls(kernel=values["kernel"])
        choice.update({k: v for k, v in values.items() if k != "kernel"})
        return choice

    def update(self, values: Mapping = (), **kw) -> None:
        for key, value in {**dict(values), **kw}.items():
            self[key] = value

    def __setitem__(self, key: str, value: Any) -> None:
        if key in _FIELDS:
            setattr(self, key, value)
        else:
            self.extra[key] = value

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key) if key in _FIELDS else self.extra[key]  # an unset field reads None

    def __contains__(self, key) -> bool:
        return getattr(self, key) is not None if key in _FIELDS else key in self.extra

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def __iter__(self) -> Iterator[str]:
        yield from (k for k in _FIELDS if getattr(self, k) is not None)
        yield from self.extra

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def replace(self, **kw) -> "Choice":
        """A copy with some fields or extra entries changed (the plan annotates a format's choice this way)."""
        out = Choice(**{f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"},
                     extra=dict(self.extra))
        out.update(kw)
        return out


_FIELDS = tuple(f.name for f in fields(Choice) if f.name != "extra")


@runtime_checkable
class DeviceOperator(Protocol):
    """What `SpmmPlan` holds per candidate (see the module docstring)."""

    format_name: str
    kernels: tuple[str, ...]
    timings: dict
    config: Any
    out_dtype: Any

    def decide(self, N: int, B, time_fn: Callable[..., float]) -> Choice: ...

    def launch(self, kernel: str, B, out, *, accumulate: bool = False, ksplit: int | None = None,
               choice: Choice | None = None): ...

    def bind(self, kernel: str, B, out, *, accumulate: bool = False, ksplit: int | None = None,
             choice: Choice | None = None): ...


@runtime_checkable
class SddmmDevice(Protocol):
    """A format's SDDMM route with S on the device (`SddmmOperator.upload`), built once per plan."""

    def run(self, A, B, out=None):
        """out (float32 [nnz], new unless given) = (A @ B^T) (.) S in S's canonical CSR order, on the current
        stream. A [M, Kd] and B [K, Kd]: C-contiguous CuPy arrays in the precision's storage dtype (float32 is
        rounded to TF32 by the kernel). Nothing allocated per call when ``out`` is given.

        Optional: ``bind(A, B, out)``, that call checked and packed once: ``bound(stream_ptr)`` launches it on that
        stream and returns out, ``bound.set_io(A, new_out)`` re-points its output (same shape and dtype); where a
        route has it, `kernels.sddmm.SddmmPlan.run` issues repeated calls on the same A and B through it."""


@runtime_checkable
class SddmmOperator(Protocol):
    """What `kernels.sddmm.SddmmPlan` reads of a format that computes SDDMM (``Format.sddmm``; the module
    docstring)."""

    route: str  # the route's name: plan.routes, SddmmPlan(kernel=route), a choice's "kernel"
    description: str  # one line: what runs (the plan's choice's "reason")
    on_csr: bool  # True: runs on S's CSR as it is, so a plan of any format may take it
    gpu_ready: bool  # False while its SDDMM kernel has not passed its GPU tests (the format's own gate applies too)
    gpu_not_ready_why: str

    def prepare(self, S, precision, *, vector: int | None = None) -> tuple[Any, dict | None]:
        """(host form, conversion report or None) of S: canonical SciPy CSR, float32 values rounded to the
        precision (`kernels.precision.Precision`). ``vector``: the plan's ``vector=`` (a vector length for formats
        that compress into vectors; others ignore it). CPU only: also what the CPU path runs on."""

    def twin(self, host, A, B) -> np.ndarray:
        """float64 [nnz] (A @ B^T) (.) S in S's canonical CSR order from the host form, A and B float32 already
        rounded to the precision: the plan's CPU path and what its kernel is tested against."""

    def upload(self, host, precision) -> SddmmDevice:
        """The host form on the current device (and its kernels compiled): the route's `SddmmDevice`. An ``on_csr``
        operator's upload also takes ``scale=``: `kernels.reference.sddmm_scale` of S (its values, or None where
        all are one), which the plan computes once for every route on S's CSR, cuSPARSE's included."""


def check_single_kernel(kernel: str, name: str, ksplit, no_ksplit: str) -> None:
    """The check of an operator with one kernel ``name`` and no split-K choice of its own: ValueError in one line
    for another kernel, or a ``ksplit`` other than None / 1 (``no_ksplit`` says why it takes none)."""
    if kernel != name:
        raise ValueError(f"unknown kernel {kernel!r}: this operator runs {name}")
    if ksplit not in (None, 1):
        raise ValueError(f"{no_ksplit}, got ksplit={ksplit}")


class PerCall:
    """The bound form of an operator that only launches: the same interface as kernels.launch.Bound, launching per
    call on the current stream, which is the stream it is given (the plan's call cache passes the current one and
    makes its capture stream current)."""

    def __init__(self, op, kernel: str, B, out, **kw):
        self.op, self.kernel, self.B, self.out, self.kw = op, kernel, B, out, kw

    def set_io(self, B, out) -> None:
        self.B, self.out = B, out

    def __call__(self, stream_ptr: int):
        return self.op.launch(self.kernel, self.B, self.out, **self.kw)
