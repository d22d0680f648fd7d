"""What the benchmarks record about the host they ran on, and how they write it (shared by the benchmark scripts;
imports nothing from the tree under test: host_overhead.py --code times another tree's kernels)."""
from __future__ import annotations

import json
import os
import platform
import tempfile
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def slug(name: str) -> str:
    """A device name as a file-name part ("NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"); the rule of the
    selector's calibration files (kernels.formats.metcf.selector.slug), kept here so that recording the machine
    imports nothing from the tree under test (host_overhead.py --code times another tree's kernels)."""
    return "".join(ch if ch.isalnum() else "-" for ch in name.lower()).strip("-")


def gpu_clocks() -> dict:
    """Clocks and power limit of GPU 0 from ``nvidia-smi`` ({} without it): a kernel bound by latency moves with
    the SM clock, so two runs are comparable only at the same clocks."""
    import shutil
    import subprocess

    fields = ("clocks.max.sm", "clocks.max.memory", "power.limit", "driver_version")
    if shutil.which("nvidia-smi") is None:
        return {}
    proc = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader", "-i", "0"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return {}
    return dict(zip(fields, (v.strip() for v in proc.stdout.strip().split(","))))


def gpu_meta() -> dict:
    """The current CUDA device and the software around it, for a results file: device name, its slug (file
    names), SM count, CPU model, GPU clocks, Python / NumPy / SciPy / CuPy versions, CUDA runtime and driver."""
    import cupy
    import numpy as np
    import scipy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {"device": name, "slug": slug(name), "sm_count": props["multiProcessorCount"], "cpu_model": cpu_model(),
            "gpu_clocks": gpu_clocks(), "python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__, "cupy": cupy.__version__,
            "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(), "driver": cupy.cuda.runtime.driverGetVersion()}


def write_json(path: Path, obj) -> None:
    """``obj`` as indented JSON at ``path``, whole or not at all: written to a temp file beside it, then renamed
    over it (a run killed while writing, e.g. a partial file rewritten after each matrix, leaves the last whole
    file). storage.atomic.atomic_path does the same for the store (with fsync and its own errors); this one stays
    here because host_overhead.py --code runs with another tree's packages first on the path."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
