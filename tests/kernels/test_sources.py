"""The kernel sources as CuPy compiles them (kernels.launch.cuda_source: local headers inlined into one string):
every header once, however many files include it, and nothing left to include (NVRTC gets no include path).
Sources live in their format's folder (kernels/formats/<name>/) or, shared, in kernels/cuda; an include resolves
against the including file's folder first, then kernels/cuda."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from kernels.compile_check import FORMATS_DIR, builds, sources
from kernels.formats import REGISTRY
from kernels.launch import CUDA_DIR, cuda_source, include_path

PATHS = {p.name: p for p in sources()}
SOURCES = sorted(PATHS)


def includes(path) -> set:
    """The headers (resolved paths) the file at ``path`` includes, transitively."""
    found = set()
    for h in re.findall(r'#include "([\w./]+)"', path.read_text()):
        header = include_path(h, path.parent)
        found |= {header} | includes(header)
    return found


def names(path) -> set[str]:
    return {h.name for h in includes(path)}


@pytest.mark.parametrize("name", SOURCES)
def test_each_header_is_inlined_once(name):
    text = cuda_source(PATHS[name])
    assert "#include \"" not in text
    headers = includes(PATHS[name])
    for h in headers:  # a header's first line marks its copy
        first = h.read_text().splitlines()[0]
        assert text.count(first + "\n") == 1, (name, h)
    if "tc_ops.cuh" in {h.name for h in headers}:
        assert text.count("enum Kind") == 1


def test_tc_ops_is_shared():  # the case the inlining must handle: one header reached by two paths
    assert sum("tc_ops.cuh" in names(p) for p in PATHS.values()) >= 4
    assert {"metcf_half.cuh", "metcf_tile.cuh"} <= names(PATHS["metcf_spmm.cu"])
    # the 16-bit accumulator of ME-TCF and Tiled-CSR (the same tiles), in kernels/cuda: no format's folder includes
    # another format's header
    assert "half_acc.cuh" in names(PATHS["metcf_spmm.cu"]) & names(PATHS["tiledcsr_spmm.cu"])
    for path in PATHS.values():
        assert all(h.parent in (path.parent, CUDA_DIR) for h in includes(path)), path


def test_a_relative_include_resolves_against_the_including_folder(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.cu").write_text('#include "../b/y.cuh"\nint x;\n')
    (tmp_path / "b" / "y.cuh").write_text('#pragma once\n#include "z.cuh"\nint y;\n')
    (tmp_path / "b" / "z.cuh").write_text("#pragma once\nint z;\n")
    assert include_path("../b/y.cuh", tmp_path / "a") == (tmp_path / "b" / "y.cuh").resolve()
    assert cuda_source(tmp_path / "a" / "x.cu").split() == ["#pragma", "once", "#pragma", "once", "int", "z;", "int",
                                                            "y;", "int", "x;"]


def test_a_missing_header_names_both_places(tmp_path):
    (tmp_path / "x.cu").write_text('#include "nowhere.cuh"\n')
    with pytest.raises(FileNotFoundError, match="nowhere.cuh"):
        cuda_source(tmp_path / "x.cu")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit) on PATH")
@pytest.mark.parametrize("name", ["metcf_spmm.cu", "tiledcsr_spmm.cu", "cvse_spmm.cu"])
def test_the_inlined_source_compiles_without_an_include_path(name, tmp_path):
    defines = next(d for path, _, d in builds() if path == PATHS[name])  # its format's (first) build
    cu = tmp_path / name
    cu.write_text(cuda_source(PATHS[name]))
    proc = subprocess.run([shutil.which("nvcc"), "-arch=sm_90", "-std=c++17", "-c", *defines, str(cu),
                           "-o", str(tmp_path / "x.o")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_each_format_declares_its_sources_and_builds():
    """compile_check compiles a format folder's .cu with what its format declares (ME-TCF: its three configs; the
    others: their launcher's config), so every .cu of a format folder is declared by that folder's format."""
    declared = {cu.resolve(): fmt.name for fmt in REGISTRY.values() for cu in fmt.cuda_sources}
    assert {cu: declared.get(cu) for cu in sources() if cu.parent.parent == FORMATS_DIR} == \
        {cu: cu.parent.name for cu in sources() if cu.parent.parent == FORMATS_DIR}
    labels = {}
    for cu, label, defines in builds():
        labels.setdefault(cu.name, []).append(label)
        assert all(d.startswith("-D") for d in defines), (cu, defines)
    assert labels.pop("metcf_spmm.cu") == ["default", "bitmap", "v0"]
    assert all(v == ["default"] for v in labels.values()) and len(labels) >= 5, labels
