"""The hybrid plan for power-law graphs (issue 32): ``SpmmPlan(A, format="hybrid")`` runs A's dense 16-row windows
on a Tensor Core format and its other rows on the CUDA-core CSR kernel, two parts of one product; ``format="auto"``
builds it where the cost model ranks it among the first. `parts` splits A (host side, NumPy twin), `device` runs
it (device operator); the split itself is ``kernels.formats.ranking.split`` on the per-window statistics of
``kernels.formats.structure``.

Why a plan-level composition and not a registered format (``kernels.formats.registry.Format``): a registered
format is also a storage layout (Parquet blocks of row windows), a convert-stage output, a per-window-range
conversion that Dask concatenates, and a shardable object (``ShardOps``: halos, column remaps); the store, the
convert stage and the multi-GPU shards iterate the registry. A hybrid has no bytes of its own: it is two registered
formats' objects and two row maps, decided from the whole matrix's statistics (a row block's best split is not a
slice of the whole one's), so it has no block layout and no window-range read. `HYBRID` is therefore a
`Composite`: the part of a format's record that ``SpmmPlan`` and the ranking read (name, device operator, NumPy
twin, estimate, fallbacks), kept out of ``REGISTRY`` so those stages never see it; `plan_candidates` adds it to
the plan's candidates.

In the pipeline (``--format hybrid``, or ``auto`` ranking it among the first) the convert stage stores what
decides a hybrid, not a converted copy: `record` (each window's TC flag, the TC format, the N it was split at),
and the SpMM stage rebuilds the same split from it and the stored reordered CSR (`rebuild`); each part is then
converted by its own format's operator, on the device when there is one. A hybrid runs on one device: its split is
of the whole matrix, and it has no window-range shards.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from kernels.formats.ranking import split
from kernels.formats.registry import DeviceRecord, candidates, get
from kernels.hybrid.parts import (CUDA_CORE, HybridA, applicable, check_applicable, convert, rebuild, record,
                                  reference_spmm, tc_formats, to_csr)
from kernels.precision import PRECISIONS
from kernels.precision import precision as as_precision


@dataclass(frozen=True)
class Composite(DeviceRecord):
    """What SpmmPlan, its CPU path and the ranking read of a format, for a plan built from registered formats."""

    name: str
    summary: str
    convert: Callable[..., Any]
    reference_spmm: Callable[..., Any]
    to_csr: Callable[[Any], Any]
    device: str  # "module:Class", imported only when a GPU plan is built
    estimate: Callable[..., float | None]
    fallbacks: tuple = ()
    block_width: dict = field(default_factory=dict)  # precision name -> 1: every precision it runs
    gpu_ready: bool = True
    gpu_not_ready_why: str = ""
    record: Callable[..., tuple] | None = None  # (A, precision) -> (per-window labels, meta): what the store keeps
    rebuild: Callable[..., Any] | None = None  # (A, precision, labels, meta) -> host object, `record` inverted
    shard = None  # no window-range shards (kernels.formats.registry.Format.shard's place): one device only
    one_device_why: str = ""  # why, in the words of the one-line refusal of several devices


def estimate(stats, precision, N: int) -> float | None:
    """The hybrid's predicted us from `structure`'s windows (its sample, scaled): None where its best split sends
    every window to one side (it is then that format) or the statistics carry no windows."""
    if stats.windows is None or not applicable(precision):
        return None
    found = split(stats.windows, tc_formats(precision), get(CUDA_CORE), as_precision(precision), N)
    return None if found is None or found.degenerate else found.predicted_us


HYBRID = Composite(
    name="hybrid", summary="dense 16-row windows on a Tensor Core format, the other rows on the CUDA-core CSR "
    "kernel; windows split by the cost model", convert=convert, reference_spmm=reference_spmm, to_csr=to_csr,
    device="kernels.hybrid.device:HybridDevice", estimate=estimate, fallbacks=("csr-rows",),
    block_width={name: 1 for name in PRECISIONS}, record=record, rebuild=rebuild,
    one_device_why="the hybrid runs on one device: its split is chosen from the whole matrix's windows and it has no "
    "row-window shards")
COMPOSITES = {HYBRID.name: HYBRID}  # the plans built from registered formats, by name (the CLI's --format)


def plan_candidates(name: str, precision: str) -> list:
    """The formats a plan of ``format=name`` tries: the registry's (``kernels.formats.registry.candidates``), the
    hybrid for ``"hybrid"``, and for ``"auto"`` the hybrid after the registered ones where it can be built."""
    if name == HYBRID.name:
        check_applicable(precision)
        return [HYBRID]
    found = candidates(name, precision)
    return found + [HYBRID] if name == "auto" and applicable(precision) else found


def plan_record(name: str):
    """The record a plan reads for a converted object's ``format_name``: a composite's, else the registry's."""
    return COMPOSITES.get(name) or get(name)


__all__ = ["COMPOSITES", "HYBRID", "Composite", "HybridA", "plan_candidates", "plan_record"]
