"""benchmarks/machine.py without a GPU: gpu_meta's record from a stand-in CuPy carries every key the benchmark scripts
wrote by hand before they took it from here (bcsr, bindings, convert, cvse, formats, precision, spmm, svc_slack), and
its slug is the file-name slug they computed."""
from __future__ import annotations

import platform
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import scipy

REPO = Path(__file__).resolve().parents[2]
NAME = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def machine(load_script):
    return load_script(REPO / "benchmarks" / "machine.py")


@pytest.fixture
def fake_cupy(monkeypatch):
    """A CuPy whose runtime answers like a CUDA 12.8 runtime on device 0 (name as bytes, as CuPy returns it)."""
    runtime = types.SimpleNamespace(getDeviceProperties=lambda i: {"name": NAME.encode(), "multiProcessorCount": 132},
                                    runtimeGetVersion=lambda: 12080, driverGetVersion=lambda: 12090)
    cupy = types.ModuleType("cupy")
    cupy.__version__ = "13.9.9"
    cupy.cuda = types.SimpleNamespace(runtime=runtime, Device=lambda: types.SimpleNamespace(id=0))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return cupy


def test_gpu_meta_has_the_keys_the_scripts_wrote(machine, fake_cupy, monkeypatch):
    monkeypatch.setattr(machine, "gpu_clocks", lambda: {"clocks.max.sm": "1980 MHz"})
    meta = machine.gpu_meta()
    assert meta == {"device": NAME, "slug": "nvidia-h100-80gb-hbm3", "sm_count": 132, "cpu_model": machine.cpu_model(),
                    "gpu_clocks": {"clocks.max.sm": "1980 MHz"}, "python": platform.python_version(),
                    "numpy": np.__version__, "scipy": scipy.__version__, "cupy": "13.9.9", "cuda_runtime": 12080,
                    "driver": 12090}
    assert meta["python"] == sys.version.split()[0]  # what formats.py and host_overhead.py wrote
    # bcsr.py, bindings.py, cvse.py and svc_slack.py named their files with this slug of their own
    assert meta["slug"] == "".join(c if c.isalnum() else "-" for c in NAME.lower()).strip("-")


def test_the_slug_is_the_calibration_files_rule_and_imports_nothing_from_kernels(machine):
    from kernels.formats.metcf.selector import slug
    for name in (NAME, "NVIDIA H200", "Tesla V100-SXM2-16GB", "  odd/name  "):
        assert machine.slug(name) == slug(name)
    lines = (REPO / "benchmarks" / "machine.py").read_text().splitlines()
    assert not any(ln.strip().startswith(("from kernels", "import kernels")) for ln in lines)


def test_write_json_replaces_the_file_whole_or_not_at_all(tmp_path, machine):
    """A results file rewritten after each matrix: a write that fails (here a value JSON cannot hold) leaves the
    last whole file and no temp file beside it."""
    import json

    path = tmp_path / "run.json"
    machine.write_json(path, {"rows": [1, 2]})
    assert json.loads(path.read_text()) == {"rows": [1, 2]}
    with pytest.raises(TypeError):
        machine.write_json(path, {"rows": [1, 2, object()]})
    assert json.loads(path.read_text()) == {"rows": [1, 2]} and [p.name for p in tmp_path.iterdir()] == ["run.json"]
