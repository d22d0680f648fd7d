"""Where a GNN training epoch's fixed cost goes (issue #33), for benchmarks/gnn.py: one library's model run for a
few epochs in four phases (forward, loss, backward, optimizer: zero_grad + Adam step), measured two ways.

- Timing (`phase_times`): host timers around each phase without synchronising (the host's issue time per phase:
  Python, autograd, launch calls) and CUDA events at the phase boundaries (the GPU's time per phase), plus the
  synchronised wall time of the whole epoch; medians over the epochs.
- Counting (`phase_counts`, one torch.profiler epoch with CUDA activity and memory events; the phases separated by
  an event wait, ``cudaEventSynchronize``, which is not counted as a sync): per phase the launch calls
  (cudaLaunchKernel, cuLaunchKernel, cudaGraphLaunch, ...), host syncs (cudaStreamSynchronize,
  cudaDeviceSynchronize, a blocking cudaMemcpy), cudaMalloc calls and caching-allocator device allocations; the GPU
  kernels by category (`category`: sparse product, transpose / format conversion, gather-scatter (permutations,
  indexing), cast-copy, normalisation, other dense), from their names: a heuristic, so the kernel names of each
  category go into the JSON too.

The counted events come from the profiler's exported trace (`trace_events`), not ``prof.events()``: on CUDA the
backward runs on autograd's device thread, and ``prof.events()`` gave no launches and no kernels in the backward
phase for either library (benchmarks/gnn.py, H200, 2026-11-28) while the exported trace holds that thread's launch
calls and their kernels (the per-op table of the same epoch: docs/benchmarks.md).

CPU-checkable pieces (tests/benchmarks/test_epoch_profile.py): `category`, `attribute` (events to phases),
`trace_events` on a written trace, `phase_times` on a CPU model, the table.
"""
from __future__ import annotations

import json
import re
import tempfile
import time
from pathlib import Path

import numpy as np

PHASES = ("forward", "loss", "backward", "optimizer")
LAUNCHES = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch",
            "cuGraphLaunch", "cudaLaunchCooperativeKernel"}
SYNCS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpy", "cuStreamSynchronize", "cuCtxSynchronize"}
MALLOCS = {"cudaMalloc", "cuMemAlloc_v2", "cudaMallocAsync", "cuMemAlloc"}
CATEGORIES = (  # first match wins; names are lower-cased
    ("sparse product", r"spmm|sddmm|csrmm|csr_mm|csr_rows|csr_fixup|cusparse|metcf|bcsr|tiledcsr|cvse|csrmv|spmv"
                       r"|sparse"),
    ("transpose / format", r"transpose|csr2csc|coo|convert_indices|sort|radix|histogram"),
    ("normalisation", r"gcn_norm|rsqrt|pow_|_pow|degree"),
    ("gather-scatter", r"index|gather|scatter|attention_"),  # GAT's edge softmax: PyG's is scatter kernels
    ("cast-copy", r"copy|cast|convert|memcpy|memset|fill"),
)


def category(kernel_name: str) -> str:
    """The category of a GPU kernel by its name (CATEGORIES, first match), else "other dense"."""
    name = kernel_name.lower()
    for cat, pattern in CATEGORIES:
        if re.search(pattern, name):
            return cat
    return "other dense"


def dense_conv():
    """A layer class that keeps a GNN layer's linear map and bias and drops its sparse step (GCN's product with the
    normalised adjacency; GAT's attention and aggregation): ``conv(in, out, heads=1)`` -> ``x W + b`` of width
    ``heads x out``, so `gnn.models.GCN` and `GAT` build on it. Such a model's eager epoch issues only the work both
    libraries share (dropout, the linear maps, the activations, the loss, Adam): the floor no library's eager
    epoch of that model goes below (benchmarks/gnn.py's fixed-cost "dense" rows)."""
    import torch

    class DenseConv(torch.nn.Module):
        def __init__(self, in_channels: int, out_channels: int, heads: int = 1, **_):
            super().__init__()
            self.lin = torch.nn.Linear(in_channels, heads * out_channels, bias=False)
            self.bias = torch.nn.Parameter(torch.zeros(heads * out_channels))

        def forward(self, x, graph):
            return self.lin(x) + self.bias

    return DenseConv


def run_epoch(model, x, y_train, train_idx, graph, opt, mark=None):
    """One epoch in PHASES order; ``mark(phase)`` after each phase (timers, events, separators)."""
    import torch.nn.functional as F

    mark = mark or (lambda _p: None)
    out = model(x, graph)
    mark("forward")
    loss = F.cross_entropy(out[train_idx].float(), y_train)
    mark("loss")
    loss.backward()
    mark("backward")
    opt.step()
    opt.zero_grad()
    mark("optimizer")
    return loss


def phase_times(model, x, y_train, train_idx, graph, *, epochs: int = 20, warmup: int = 3, lr: float = 0.01) -> dict:
    """Median per phase of host issue ms (no sync inside the epoch) and, on CUDA, GPU ms between CUDA events at the
    phase boundaries; ``epoch_ms``: median synchronised wall ms of the epoch."""
    import torch

    cuda = x.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(warmup):
        run_epoch(model, x, y_train, train_idx, graph, opt)
    host, gpu, wall = {p: [] for p in PHASES}, {p: [] for p in PHASES}, []
    for _ in range(epochs):
        sync()
        stamps, events = [time.perf_counter()], []
        if cuda:
            events.append(torch.cuda.Event(enable_timing=True))
            events[0].record()

        def mark(_phase):
            stamps.append(time.perf_counter())
            if cuda:
                events.append(torch.cuda.Event(enable_timing=True))
                events[-1].record()

        run_epoch(model, x, y_train, train_idx, graph, opt, mark)
        sync()
        wall.append((time.perf_counter() - stamps[0]) * 1e3)
        for i, p in enumerate(PHASES):
            host[p].append((stamps[i + 1] - stamps[i]) * 1e3)
            if cuda:
                gpu[p].append(events[i].elapsed_time(events[i + 1]))
    med = (lambda v: float(np.median(v)) if v else None)
    return {"epoch_ms": med(wall), "host_ms": {p: med(host[p]) for p in PHASES},
            "gpu_ms": {p: med(gpu[p]) for p in PHASES} if cuda else None,
            "host_total_ms": float(sum(med(host[p]) for p in PHASES))}


def attribute(ranges: dict, events) -> dict:
    """Per phase: launch calls, syncs, cudaMalloc calls, allocations and GPU kernels by category, from profiler
    events ``(name, kind, start_us, nbytes)`` (kind "cpu", "cuda" or "memory") placed in the phase whose
    [start, end) range ``ranges[phase]`` holds their start."""
    out = {p: {"launches": 0, "syncs": 0, "cuda_malloc": 0, "allocations": 0, "kernels": {}, "kernel_names": {}}
           for p in ranges}
    for name, kind, start, nbytes in events:
        phase = next((p for p, (a, b) in ranges.items() if a <= start < b), None)
        if phase is None:
            continue
        row = out[phase]
        if kind == "cpu":
            row["launches"] += name in LAUNCHES
            row["syncs"] += name in SYNCS
            row["cuda_malloc"] += name in MALLOCS
        elif kind == "memory":
            row["allocations"] += nbytes > 0
        elif kind == "cuda" and not name.startswith("Memcpy") and not name.startswith("Memset"):
            cat = category(name)
            row["kernels"][cat] = row["kernels"].get(cat, 0) + 1
            names = row["kernel_names"].setdefault(cat, [])
            if name not in names and len(names) < 12:
                names.append(name[:120])
        elif kind == "cuda":  # device-side copies: DtoH means the host waited for data
            cat = "cast-copy"
            row["kernels"][cat] = row["kernels"].get(cat, 0) + 1
            row["dtoh"] = row.get("dtoh", 0) + ("DtoH" in name or "Device -> Host" in name)
    return out


def phase_counts(model, x, y_train, train_idx, graph, *, warmup: int = 3, lr: float = 0.01) -> dict:
    """One profiled epoch after ``warmup``: `attribute`'s counts per phase (CUDA only)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(warmup):
        run_epoch(model, x, y_train, train_idx, graph, opt)
    torch.cuda.synchronize()
    ranges: dict = {}
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True) as prof:
        t: dict = {}

        def separator(phase):  # wait for the phase's kernels (an event wait: not one of SYNCS), close its range
            ev = torch.cuda.Event()
            ev.record()
            ev.synchronize()
            ctx = t.pop("ctx")
            ctx.__exit__(None, None, None)
            nxt = PHASES.index(phase) + 1
            if nxt < len(PHASES):
                t["ctx"] = record_function(f"phase:{PHASES[nxt]}")
                t["ctx"].__enter__()

        t["ctx"] = record_function(f"phase:{PHASES[0]}")
        t["ctx"].__enter__()
        run_epoch(model, x, y_train, train_idx, graph, opt, separator)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        ranges, events = trace_events(json.loads(path.read_text()))
    return attribute({p: ranges[p] for p in PHASES if p in ranges}, events)


TRACE_KINDS = {"cpu_op": "cpu", "cuda_runtime": "cpu", "cuda_driver": "cpu", "kernel": "cuda", "gpu_memcpy": "cuda",
               "gpu_memset": "cuda"}


def trace_events(trace: dict) -> tuple[dict, list]:
    """(phase ranges, events) of a torch.profiler chrome trace: ranges from the ``phase:<name>`` annotations,
    events as `attribute` takes them from every thread (host calls, device kernels and copies by category) and the
    device allocations (``[memory]`` instants on a CUDA device with a positive byte count)."""
    ranges, events = {}, []
    for e in trace.get("traceEvents", []):
        name, cat, ts = e.get("name", ""), e.get("cat", ""), e.get("ts")
        if ts is None:
            continue
        if e.get("ph") == "X" and cat == "user_annotation" and name.startswith("phase:"):
            ranges[name[6:]] = (float(ts), float(ts) + float(e.get("dur", 0)))
        elif e.get("ph") == "X" and cat in TRACE_KINDS:
            events.append((name, TRACE_KINDS[cat], float(ts), 0))
        elif name == "[memory]" and (e.get("args") or {}).get("Device Type") == 1:
            events.append((name, "memory", float(ts), int(e["args"].get("Bytes", 0))))
    return ranges, events


def summary(times: dict, counts: dict | None) -> dict:
    """One library's fixed-cost record: the timings, the counts and their per-epoch totals."""
    out = {**times}
    if counts:
        out["counts"] = counts
        out["launches"] = sum(c["launches"] for c in counts.values())
        out["syncs"] = sum(c["syncs"] for c in counts.values())
        out["allocations"] = sum(c["allocations"] for c in counts.values())
        cats: dict = {}
        for c in counts.values():
            for k, v in c["kernels"].items():
                cats[k] = cats.get(k, 0) + v
        out["kernels"] = cats
    return out


def table(rows: list[dict]) -> str:
    """Fixed cost per library and model: epoch ms, host and GPU ms per phase, launches, syncs, allocations, and
    kernels by category."""
    head = (f"{'graph':10} {'model':5} {'library':8} {'epoch ms':>8} {'host ms':>7} {'fwd h/g':>11} "
            f"{'bwd h/g':>11} {'opt h/g':>11} {'launch':>6} {'sync':>4} {'alloc':>5}  kernels by category")
    lines = [head, "-" * len(head)]
    for r in rows:
        h, g = r["host_ms"], r.get("gpu_ms") or {}
        hg = (lambda p: f"{h[p]:.2f}/{g[p]:.2f}" if g.get(p) is not None else f"{h[p]:.2f}/-")
        cats = ", ".join(f"{k} {v}" for k, v in sorted((r.get("kernels") or {}).items()))
        lines.append(f"{r['graph']:10} {r['model']:5} {r['library']:8} {r['epoch_ms']:>8.3f} "
                     f"{r['host_total_ms']:>7.3f} {hg('forward'):>11} {hg('backward'):>11} {hg('optimizer'):>11} "
                     f"{r.get('launches', '-'):>6} {r.get('syncs', '-'):>4} {r.get('allocations', '-'):>5}  {cats}")
    return "\n".join(lines)
