"""cuSPARSE SpMM baseline (CSR_ALG1/2/3, row-major B and C) against the float64 reference; torch cross-check.

First the CPU tests of the seam to nvmath-python (import without it, the error when it is missing, one libcusparse,
error messages); then the GPU tests, each marked ``gpu``. One module for both, departing from the house style's
GPU-only modules, because tests/ mirrors kernels/ and these CPU tests are about kernels/cusparse.py.
"""
from __future__ import annotations

import os
import subprocess
import sys
import types

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.cusparse import ALGORITHMS, CusparseSpmm, checked, one_libcusparse
from kernels.reference import csr_spmm

try:
    import cupy
except ImportError:  # CPU machines: the GPU tests skip (and CI deselects them with -m "not gpu")
    cupy = None

FP32_RTOL = 1e-5  # fp32 products and sums (no TF32 in cuSPARSE's CSR SpMM): far below 1e-5 relative to the norm
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def gpu(fn):
    """Marks a GPU test: ``gpu`` marker, skipped without CuPy."""
    return pytest.mark.gpu(pytest.mark.skipif(cupy is None, reason="needs CuPy and a CUDA GPU")(fn))


def test_import_needs_neither_cupy_nor_nvmath():
    code = ("import sys, kernels, kernels.cusparse, kernels.cusparse_bell, kernels.cusparse_bsr, "
            "kernels.cusparse_sddmm; print(sorted(m for m in ('cupy', 'nvmath') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_missing_nvmath_is_one_import_error_line(monkeypatch):
    from kernels.cusparse import _import_bindings

    for name in ("nvmath", "nvmath.bindings", "nvmath.bindings.cusparse"):
        monkeypatch.setitem(sys.modules, name, None)  # import of ... halted: as if not installed
    with pytest.raises(ImportError, match="pip install nvmath-python") as info:
        _import_bindings()
    assert "\n" not in str(info.value) and info.value.__cause__ is None and info.value.__suppress_context__


def test_one_libcusparse_in_the_process(tmp_path):
    lib = tmp_path / "libcusparse.so.12.6.3"
    lib.write_bytes(b"")
    (tmp_path / "libcusparse.so.12").symlink_to(lib)
    other = tmp_path / "other" / "libcusparse.so.12"
    other.parent.mkdir()
    other.write_bytes(b"")

    def maps(*paths):
        lines = [f"7f00-7f10 r-xp 00000000 08:01 {i} {p}" for i, p in enumerate(paths)]
        return lines + ["7f20-7f30 r-xp 00000000 08:01 9 /lib/libc.so.6"]

    assert one_libcusparse(maps()) is None
    same = one_libcusparse(maps(lib, tmp_path / "libcusparse.so.12", lib))  # one file, several mappings/names
    assert same == os.path.realpath(lib)
    with pytest.raises(RuntimeError, match="2 libcusparse files are loaded in this process, expected one") as info:
        one_libcusparse(maps(lib, other))
    assert os.path.realpath(other) in str(info.value) and os.path.realpath(lib) in str(info.value)


def test_checked_names_the_call_and_keeps_the_status():
    class cuSPARSEError(Exception):
        pass

    ncs = types.SimpleNamespace(cuSPARSEError=cuSPARSEError)

    def refuse(*args):
        raise cuSPARSEError("NOT_SUPPORTED (10): operation not supported")

    assert checked(ncs, "cusparseSetStream", lambda a, b: a + b, 2, 3) == 5
    with pytest.raises(RuntimeError, match=r"cusparseSpMM\(CSR_ALG3\) returned NOT_SUPPORTED \(10\)") as info:
        checked(ncs, "cusparseSpMM(CSR_ALG3)", refuse, 1, 2)
    assert isinstance(info.value.__cause__, cuSPARSEError)
    with pytest.raises(TypeError):  # not a cuSPARSE status: not turned into an algorithm refusal
        checked(ncs, "cusparseSpMM(CSR_ALG1)", lambda: None, 1)


def _matrix(seed, shape=(700, 333), density=0.02):
    return sp.random_array(shape, density=density, format="csr", dtype=np.float32, rng=np.random.default_rng(seed))


@gpu
@pytest.mark.parametrize("alg", list(ALGORITHMS))
@pytest.mark.parametrize("N", [1, 7, 128])
def test_each_algorithm(alg, N):
    A = _matrix(N)
    op = CusparseSpmm(A)
    B = np.random.default_rng(1).standard_normal((A.shape[1], N)).astype(np.float32)
    out = cupy.full((A.shape[0], N), np.nan, dtype=cupy.float32)
    try:
        op.run(cupy.asarray(B), out, algorithm=alg)
    except RuntimeError as err:  # an algorithm cuSPARSE refuses for this layout must say so, not compute garbage
        pytest.skip(f"cuSPARSE refused {alg} for N={N}: {err}")
    ref = csr_spmm(A, B)
    C = cupy.asnumpy(out)
    assert np.linalg.norm(C - ref) / np.linalg.norm(ref) < FP32_RTOL


@gpu
@pytest.mark.parametrize("alg", list(ALGORITHMS))
def test_accumulate_adds_to_out(alg):
    """accumulate=True runs with beta = 1 (ALG3 after its beta = 0 preprocessing too): out += A @ B."""
    A = _matrix(5)
    op = CusparseSpmm(A)
    rng = np.random.default_rng(3)
    B = rng.standard_normal((A.shape[1], 32)).astype(np.float32)
    C0 = rng.standard_normal((A.shape[0], 32)).astype(np.float32)
    out = cupy.asarray(C0)
    try:
        op.run(cupy.asarray(B), out, algorithm=alg, accumulate=True)
    except RuntimeError as err:
        pytest.skip(f"cuSPARSE refused {alg}: {err}")
    ref = C0 + csr_spmm(A, B)
    assert np.linalg.norm(cupy.asnumpy(out) - ref) / np.linalg.norm(ref) < FP32_RTOL
    empty = CusparseSpmm(sp.csr_array(A.shape, dtype=np.float32))
    out = cupy.asarray(C0)
    empty.run(cupy.asarray(B), out, accumulate=True)  # nothing to add: out stays
    assert cupy.array_equal(out, cupy.asarray(C0))


@gpu
def test_tune_keeps_fastest_and_reuses_descriptors():
    A = _matrix(3, (5000, 4000), 0.002)
    op = CusparseSpmm(A)
    B1 = cupy.asarray(np.random.default_rng(2).standard_normal((4000, 64)).astype(np.float32))
    info = op.tune(B1, repeats=5, warmup=2)
    assert info["best"] == min(info["ms"], key=info["ms"].get)
    B2 = B1 * 2  # a new pointer: descriptors are re-pointed, not rebuilt
    C = cupy.asnumpy(op.run(B2))
    ref = csr_spmm(A, cupy.asnumpy(B2))
    assert np.linalg.norm(C - ref) / np.linalg.norm(ref) < FP32_RTOL


@gpu
def test_empty_matrix():
    op = CusparseSpmm(sp.csr_array((10, 5), dtype=np.float32))
    out = cupy.full((10, 3), np.nan, dtype=cupy.float32)
    op.run(cupy.ones((5, 3), dtype=cupy.float32), out)
    assert cupy.all(out == 0)


# torch 2.11 warns on every CSR tensor it builds ("Sparse CSR tensor support is in beta state"); not ours to fix.
@gpu
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state:UserWarning")
def test_torch_cross_check():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    A = _matrix(4)
    B = np.random.default_rng(5).standard_normal((A.shape[1], 32)).astype(np.float32)
    with torch.sparse.check_sparse_tensor_invariants(True):  # opting in explicitly silences torch's UserWarning
        At = torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(np.int64)),
                                     torch.from_numpy(A.indices.astype(np.int64)), torch.from_numpy(A.data),
                                     size=A.shape, device="cuda")
    Ct = (At @ torch.from_numpy(B).cuda()).cpu().numpy()
    C = cupy.asnumpy(CusparseSpmm(A).run(cupy.asarray(B)))
    assert np.linalg.norm(C - Ct) / np.linalg.norm(Ct) < FP32_RTOL


@gpu
def test_bound_call_replays_in_a_graph_on_one_libcusparse():
    """CusparseBound (nvmath's set_stream + sp_mm) captured into a CUDA graph (kernels.launch.graph_ms) gives
    A @ B; nvmath and CuPy share one libcusparse in the process."""
    from kernels.launch import graph_ms

    A = _matrix(6)
    op = CusparseSpmm(A)
    B = np.random.default_rng(7).standard_normal((A.shape[1], 16)).astype(np.float32)
    out = cupy.full((A.shape[0], 16), np.nan, dtype=cupy.float32)
    bound = op.bind(cupy.asarray(B), out, "CSR_ALG1")
    assert graph_ms(lambda: bound(cupy.cuda.get_current_stream().ptr), repeats=3, warmup=1) > 0
    ref = csr_spmm(A, B)
    assert np.linalg.norm(cupy.asnumpy(out) - ref) / np.linalg.norm(ref) < FP32_RTOL
    with open("/proc/self/maps") as maps:
        assert one_libcusparse(maps) is not None
