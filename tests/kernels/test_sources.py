"""The kernel sources as CuPy compiles them (kernels.launch.cuda_source: local headers inlined into one string):
every header once, however many files include it, and nothing left to include (NVRTC gets no include path)."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from kernels.launch import CUDA_DIR, cuda_source

SOURCES = sorted(p.name for p in CUDA_DIR.glob("*.cu"))


def includes(name: str) -> set[str]:
    """The headers name includes, transitively."""
    found = set()
    for h in re.findall(r'#include "([\w.]+)"', (CUDA_DIR / name).read_text()):
        found |= {h} | includes(h)
    return found


@pytest.mark.parametrize("name", SOURCES)
def test_each_header_is_inlined_once(name):
    text = cuda_source(name)
    assert "#include \"" not in text
    headers = includes(name)
    for h in headers:  # a header's first line marks its copy
        first = (CUDA_DIR / h).read_text().splitlines()[0]
        assert text.count(first + "\n") == 1, (name, h)
    if "tc_ops.cuh" in headers:
        assert text.count("enum Kind") == 1


def test_tc_ops_is_shared():  # the case the inlining must handle: one header reached by two paths
    assert sum("tc_ops.cuh" in includes(n) for n in SOURCES) >= 4
    assert {"metcf_half.cuh", "metcf_tile.cuh"} <= includes("metcf_spmm.cu")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit) on PATH")
@pytest.mark.parametrize("name", ["metcf_spmm.cu", "tiledcsr_spmm.cu", "cvse_spmm.cu"])
def test_the_inlined_source_compiles_without_an_include_path(name, tmp_path):
    from kernels.config import CONFIG

    cu = tmp_path / name
    cu.write_text(cuda_source(name))
    proc = subprocess.run([shutil.which("nvcc"), "-arch=sm_90", "-std=c++17", "-c", *CONFIG.defines(), str(cu),
                           "-o", str(tmp_path / "x.o")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
