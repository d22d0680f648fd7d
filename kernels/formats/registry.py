"""The format seam: a sparse format is one `Format` record, registered once, and no stage names a format.

A format provides, for each precision it supports (`kernels.precision`):
- ``block_width[precision]``: TC block columns (the mma's k); rows are 16 for every format here;
- ``convert(csr, precision)``: canonical CSR (one row block: Dask converts row-window-aligned blocks) -> the
  format's host object; ``concat(pieces)`` stitches row blocks back (equal to converting the whole matrix);
- ``layout``: its Parquet block layout (`storage.formats.BlockLayout`), registered with the store here, and
  ``from_arrays(dict)`` to rebuild the object from the store's arrays;
- ``reference_spmm(obj, B)``: the NumPy twin (float64) the kernels are tested against;
- ``stats(obj, csr_nbytes)``: the numbers the convert stage reports (MeanNnzTC, bytes) and the cost model reads;
- ``to_csr(obj)``: the inverse conversion (SciPy CSR), for the cuSPARSE candidate and the CPU path;
  ``to_csr_device(obj)``, where given, the same CSR computed on the GPU (what a GPU plan uses);
- ``shard``: its `kernels.formats.shard.ShardOps` (window slice, halo, column remap, split) when it runs sharded;
- ``device``: ``"module:Class"`` of its device operator, imported lazily (CuPy): the contract in
  ``kernels.formats.contract`` (``DeviceOperator``: converts/uploads once; ``decide(N, B, time_fn) -> Choice``,
  ``launch`` and ``bind`` per call);
- ``fallbacks``: baseline kernels (kernels.baselines) the plan times against this format's timed choice;
- ``cuda_sources`` / ``cuda_builds``: its ``.cu`` files and what each is compiled with, ``(label, nvcc -D
  options)`` pairs (its launchers' configs; default one build without options), which ``kernels.compile_check``
  compiles offline;
- ``estimate``: its cost estimate, ``estimate(stats, precision_name, N)`` -> predicted microseconds from A's
  structure statistics (``kernels.formats.ranking.CostModel`` on ``kernels.formats.structure.Structure``): a plan
  of ``format="auto"`` builds only the formats it ranks first (None: ranked after those with an estimate);
- ``per_window_cost``: that estimate can be evaluated per window (``kernels.formats.ranking.window_costs``), so the
  hybrid plan (``kernels.hybrid``) may run a set of A's windows on this format and the rest on another;
- ``sddmm``: its SDDMM operator (``kernels.formats.contract.SddmmOperator``: prepare S once, its float64 twin, the
  upload whose ``run(A, B, out)`` launches), one route of ``kernels.sddmm.SddmmPlan``, or None (no SDDMM).

`SpmmPlan`, `SddmmPlan` (`sddmm_formats`), the convert stage, the store and the multi-GPU shards iterate
`REGISTRY`; adding a format means its folder ``kernels/formats/<name>/``, one `register(...)` line in
``kernels/formats/__init__.py`` and its tests.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from configs.errors import InputError
from storage.formats import register_layout

DEFAULT_BUILDS = (("default", ()),)  # a .cu compiled once, without -D options (its own #ifndef defaults)


class DeviceRecord:
    """What a plan reads of a record with ``block_width`` (precision name -> width: the precisions it runs) and
    ``device`` ("module:Class"): shared by `Format` and kernels.hybrid's `Composite`."""

    @property
    def precisions(self) -> tuple[str, ...]:
        return tuple(self.block_width)

    def device_class(self):
        """The device operator class, imported on first use (a GPU plan)."""
        module, cls = self.device.split(":")
        return getattr(importlib.import_module(module), cls)


@dataclass(frozen=True)
class Format(DeviceRecord):
    name: str
    summary: str  # one line: the paper and what the format is
    block_width: dict  # precision name -> TC block columns
    convert: Callable[..., Any]  # (csr, precision) -> host object
    concat: Callable[[list], Any]
    layout: Any  # storage.formats.BlockLayout
    from_arrays: Callable[[dict], Any]
    reference_spmm: Callable[..., Any]
    stats: Callable[..., dict]
    device: str  # "module:Class", imported only when a GPU plan is built
    to_csr: Callable[[Any], Any] | None = None  # obj -> SciPy CSR (the inverse of convert)
    # obj -> the same SciPy CSR as to_csr, computed on the current GPU (a GPU plan's inverse conversion); None: to_csr
    to_csr_device: Callable[[Any], Any] | None = None
    # False while the format's GPU kernels have not passed their GPU tests: GPU plans leave it out of "auto" and
    # refuse it by name (its CPU path, storage and conversion work); the reason says what failed
    gpu_ready: bool = True
    gpu_not_ready_why: str = ""
    shard: Any = None  # kernels.formats.shard.ShardOps: how it runs per row-window shard (None: one device only)
    # kernels of kernels.baselines timed against this format's timed choice and taken where faster (ME-TCF: the
    # CUDA-core CSR kernel, as DTC-SpMM's selector falls back from Tensor Cores)
    fallbacks: tuple = ()
    value_types: dict = field(default_factory=dict)  # stored column -> value type, where it is not the dtype
    cuda_sources: tuple = ()  # its kernels' .cu files (pathlib.Path)
    # what each of them is compiled with: (label, nvcc -D options) pairs, one compile each (kernels.compile_check)
    cuda_builds: tuple = DEFAULT_BUILDS
    # (stats, precision name, N) -> predicted us (kernels.formats.ranking.CostModel): "auto" builds the top-ranked
    estimate: Callable[..., float] | None = None
    # its estimate's terms are element-wise sums over 16-row windows, and its operator runs any set of whole windows
    # as a matrix of its own: the hybrid (kernels.hybrid) may give it a part of A (kernels.formats.ranking.split)
    per_window_cost: bool = False
    # its SDDMM operator (kernels.formats.contract.SddmmOperator): a route of kernels.sddmm.SddmmPlan; None: no SDDMM
    sddmm: Any = None


REGISTRY: dict[str, Format] = {}


def register(fmt: Format) -> Format:
    """Add a format (and its storage layout) once; a second registration of the same name is a bug."""
    if fmt.name in REGISTRY and REGISTRY[fmt.name] is not fmt:
        raise ValueError(f"format {fmt.name!r} is registered twice")
    REGISTRY[fmt.name] = fmt
    register_layout(fmt.name, fmt.layout)
    return fmt


def get(name: str) -> Format:
    """The registered format ``name``; InputError naming the known ones otherwise."""
    if name not in REGISTRY:
        raise InputError(f"--format {name!r} is not a registered format; choose auto or one of "
                         f"{', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def candidates(name: str, precision: str) -> list[Format]:
    """The formats a plan of ``--format name`` tries at ``precision``: that one, or every registered format that
    supports the precision for ``auto``."""
    if name == "auto":
        found = [f for f in REGISTRY.values() if precision in f.block_width]
        if not found:
            raise InputError(f"no registered format supports dtype {precision}")
        return found
    fmt = get(name)
    if precision not in fmt.block_width:
        raise InputError(f"format {name!r} has no {precision} kernels; it supports {', '.join(fmt.precisions)}")
    return [fmt]


def sddmm_formats() -> list[Format]:
    """The registered formats with an SDDMM operator (``Format.sddmm``), in registration order: the routes of
    ``kernels.sddmm.SddmmPlan`` besides cuSPARSE."""
    return [f for f in REGISTRY.values() if f.sddmm is not None]
