"""Offline compile check of every .cu (kernels/cuda, kernels/formats/<name>/) for sm_80 and sm_90 (skipped without\nnvcc)."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from kernels import compile_check
from kernels.formats.metcf.config import CONFIG

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit) on PATH")


def test_every_cu_compiles_for_sm80_and_sm90_without_spills():
    results = compile_check.check(("sm_80", "sm_90"), verbose=False)
    assert {r["arch"] for r in results} == {"sm_80", "sm_90"}
    assert {r["file"] for r in results} >= {"metcf_spmm.cu", "bcsr_spmm.cu", "tiledcsr_spmm.cu", "cvse_spmm.cu",
                                            "cvse_sddmm.cu", "csr_spmm.cu"}
    for r in results:
        assert r["ok"], f"{r['file']} {r['arch']} failed:\n{r['report']}"
        assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0, f"{r['file']} {r['arch']} uses local memory"


def test_static_asserts_guard_the_config(tmp_path):
    cu = compile_check.FORMATS_DIR / "metcf" / "metcf_spmm.cu"
    bad = [d.replace("CFG_WINDOW_ROWS=16", "CFG_WINDOW_ROWS=32") for d in CONFIG.defines()]
    cmd = [shutil.which("nvcc"), "-arch=sm_90", "-std=c++17", "-c", f"-I{compile_check.CUDA_DIR}", *bad, str(cu),
           "-o", str(tmp_path / "x.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode != 0 and "16-row windows" in proc.stderr
    proc = subprocess.run(cmd[:5] + [str(cu), "-o", str(tmp_path / "y.o")], capture_output=True, text=True)
    assert proc.returncode != 0 and "KernelConfig.defines" in proc.stderr


def test_static_asserts_guard_the_half_config(tmp_path):
    # metcf_half.cuh re-checks KernelConfig.half_warp_cols (the 16-byte register remapping needs 64)
    cu = compile_check.FORMATS_DIR / "metcf" / "metcf_spmm.cu"
    bad = [d.replace("CFG_HALF_WARP_COLS=64", "CFG_HALF_WARP_COLS=32") for d in CONFIG.defines()]
    assert bad != list(CONFIG.defines())
    cmd = [shutil.which("nvcc"), "-arch=sm_90", "-std=c++17", "-c", f"-I{compile_check.CUDA_DIR}", *bad, str(cu),
           "-o", str(tmp_path / "x.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode != 0 and "KernelConfig.half_warp_cols" in proc.stderr
