"""Offline compile check of every .cu (kernels/cuda, kernels/formats/<name>/) for sm_80 and sm_90 (skipped without\nnvcc)."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from kernels import compile_check
from kernels.formats.metcf.config import CONFIG

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit) on PATH")
NVRTC = compile_check.find_nvrtc()
needs_nvrtc = pytest.mark.skipif(NVRTC is None, reason="no libnvrtc (TCSPMM_NVRTC, the nvidia CUDA wheels, the system)")


@needs_nvcc
def test_every_cu_compiles_for_sm80_and_sm90_without_spills():
    results = compile_check.check(("sm_80", "sm_90"), verbose=False)
    assert {r["arch"] for r in results} == {"sm_80", "sm_90"}
    assert {r["file"] for r in results} >= {"metcf_spmm.cu", "bcsr_spmm.cu", "tiledcsr_spmm.cu", "cvse_spmm.cu",
                                            "cvse_sddmm.cu", "csr_spmm.cu"}
    for r in results:
        assert r["ok"], f"{r['file']} {r['arch']} failed:\n{r['report']}"
        assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0, f"{r['file']} {r['arch']} uses local memory"


@needs_nvcc
def test_static_asserts_guard_the_config(tmp_path):
    cu = compile_check.FORMATS_DIR / "metcf" / "metcf_spmm.cu"
    bad = [d.replace("CFG_WINDOW_ROWS=16", "CFG_WINDOW_ROWS=32") for d in CONFIG.defines()]
    cmd = [shutil.which("nvcc"), "-arch=sm_90", "-std=c++17", "-c", f"-I{compile_check.CUDA_DIR}", *bad, str(cu),
           "-o", str(tmp_path / "x.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode != 0 and "16-row windows" in proc.stderr
    proc = subprocess.run(cmd[:5] + [str(cu), "-o", str(tmp_path / "y.o")], capture_output=True, text=True)
    assert proc.returncode != 0 and "KernelConfig.defines" in proc.stderr


@needs_nvcc
def test_static_asserts_guard_the_half_config(tmp_path):
    # metcf_half.cuh re-checks KernelConfig.half_warp_cols (the 16-byte register remapping needs 64)
    cu = compile_check.FORMATS_DIR / "metcf" / "metcf_spmm.cu"
    bad = [d.replace("CFG_HALF_WARP_COLS=64", "CFG_HALF_WARP_COLS=32") for d in CONFIG.defines()]
    assert bad != list(CONFIG.defines())
    cmd = [shutil.which("nvcc"), "-arch=sm_90", "-std=c++17", "-c", f"-I{compile_check.CUDA_DIR}", *bad, str(cu),
           "-o", str(tmp_path / "x.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode != 0 and "KernelConfig.half_warp_cols" in proc.stderr


@needs_nvrtc
def test_every_cu_compiles_under_nvrtc_as_cupy_compiles_it():
    results = compile_check.nvrtc_check(("sm_80", "sm_90"), lib=NVRTC)
    assert {r["file"] for r in results} >= {"metcf_spmm.cu", "csr_spmm.cu", "edge.cu", "gather_rows.cu"}
    for r in results:
        assert r["ok"], f"{r['file']} {r['arch']} {r['config']} failed under NVRTC:\n{r['log']}"


@needs_nvrtc
def test_the_nvrtc_pass_catches_what_nvcc_lets_through():
    # INFINITY comes from a host header nvcc includes and NVRTC does not (edge.cu's first version, 2026-11-29)
    ok, log = compile_check.nvrtc_compile('extern "C" __global__ void k(float* x) { *x = -INFINITY; }', "sm_90",
                                          lib=NVRTC)
    assert not ok and "INFINITY" in log
    ok, log = compile_check.nvrtc_compile('extern "C" __global__ void k(float* x) { *x = __int_as_float(0xff800000); }',
                                          "sm_90", lib=NVRTC)
    assert ok, log
