"""The one B / out contract (kernels/operands.check_b_out) through every SpMM launcher family on the GPU: ME-TCF TF32
(kernels/launch.py), ME-TCF 16-bit (launch_half.py), BCSR, CVSE. Each refuses the same bad operands with the same
message, and takes unaligned or odd-width B on the element path with the 16-byte path's result."""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)

from kernels.formats.metcf import launch as metcf_launch  # noqa: E402
from kernels.formats.bcsr import launch as launch_bcsr
from kernels.formats.cvse import launch as launch_cvse
from kernels.formats.metcf import launch_half  # noqa: E402
from kernels.formats import get  # noqa: E402
from kernels.formats.cvse.container import csr_to_cvse  # noqa: E402
from kernels.formats.metcf.container import csr_to_metcf  # noqa: E402
from kernels.precision import precision  # noqa: E402
from kernel_cases import random_csr  # noqa: E402

SHAPE = (70, 45)  # M not a multiple of 16 or of V, K odd


def _launchers():
    """{name: (storage dtype, spmm(B, out=None, **kw))} over one random A."""
    A = random_csr(SHAPE, 400, seed=3)
    A.data = (np.where(A.data > 0, 1, -1) * np.random.default_rng(4).integers(1, 4, A.nnz)).astype(np.float32)
    dm32 = metcf_launch.upload(csr_to_metcf(A))
    dh = launch_half.upload_half(csr_to_metcf(A, width=16), "bfloat16")
    f16 = precision("float16")
    db = launch_bcsr.upload(get("bcsr").convert(A, f16), "float16")
    dc = launch_cvse.upload(csr_to_cvse(A, vector=4, to_storage=f16.to_storage), "float16")
    return {
        "metcf-tf32": (np.float32, lambda B, out=None, **kw: metcf_launch.spmm_window(dm32, B, out, **kw)),
        "metcf-bf16": (np.uint16, lambda B, out=None, **kw: launch_half.spmm_window_half(dh, B, out, **kw)),
        "bcsr-f16": (np.float16, lambda B, out=None, **kw: launch_bcsr.spmm(db, B, out, **kw)),
        "cvse-f16": (np.float16, lambda B, out=None, **kw: launch_cvse.spmm(dc, B, out, **kw)),
    }


@pytest.fixture(scope="module")
def launchers():
    return _launchers()


NAMES = ("metcf-tf32", "metcf-bf16", "bcsr-f16", "cvse-f16")


def _b(dtype, rows=SHAPE[1], N=16, *, offset=0, seed=0):
    """B [rows, N] of small integers (exact in every precision) in ``dtype``; ``offset`` elements into its buffer
    (offset 1: not 16-byte aligned)."""
    vals = np.random.default_rng(seed).integers(-3, 4, size=rows * N).astype(np.float32)
    host = vals.view(np.uint32).__rshift__(16).astype(np.uint16) if dtype == np.uint16 else vals.astype(dtype)
    buf = cupy.zeros(rows * N + offset, dtype=dtype)
    buf[offset:] = cupy.asarray(host)
    return buf[offset:].reshape(rows, N)


@pytest.mark.parametrize("name", NAMES)
def test_bad_operands_named(launchers, name):
    dtype, spmm = launchers[name]
    wrong = np.float16 if dtype != np.float16 else np.float32
    with pytest.raises(TypeError, match=f"B must be a C-contiguous 2-D cupy {np.dtype(dtype).name} array"):
        spmm(_b(wrong))
    with pytest.raises(TypeError, match="C-contiguous"):
        spmm(_b(dtype, N=32)[:, ::2])
    with pytest.raises(ValueError, match=f"B has {SHAPE[1] + 1} rows, expected A's column count {SHAPE[1]}"):
        spmm(_b(dtype, rows=SHAPE[1] + 1))
    with pytest.raises(ValueError, match="0 columns"):
        spmm(cupy.zeros((SHAPE[1], 0), dtype=dtype))
    with pytest.raises(ValueError, match="pass out"):
        spmm(_b(dtype), accumulate=True)
    with pytest.raises(ValueError, match=r"out must be C-contiguous float32.* of shape \(70, 16\)"):
        spmm(_b(dtype), cupy.zeros((SHAPE[0], 17), dtype=cupy.float32))
    if dtype == np.float32:  # TF32 writes float32 C only
        with pytest.raises(ValueError, match="out must be C-contiguous float32"):
            spmm(_b(dtype), cupy.zeros((SHAPE[0], 16), dtype=cupy.float16))
    else:  # out given and out_dtype saying otherwise: refused, not silently ignored
        with pytest.raises(ValueError, match=f"out_dtype is {np.dtype(dtype).name} but out is float32"):
            spmm(_b(dtype), cupy.zeros((SHAPE[0], 16), dtype=cupy.float32), out_dtype=np.dtype(dtype))
        with pytest.raises(ValueError, match="out_dtype is int32, expected float32 or"):
            spmm(_b(dtype), out_dtype=np.dtype(np.int32))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("N", (16, 13))
def test_unaligned_b_same_result(launchers, name, N):
    """B one element into its buffer (not 16-byte aligned) and N = 13 (no vector width divides it) run on the
    element path; integer-valued operands make every result exact, so both paths must agree bit for bit."""
    dtype, spmm = launchers[name]
    aligned = cupy.asnumpy(spmm(_b(dtype, N=N)))
    shifted = cupy.asnumpy(spmm(_b(dtype, N=N, offset=1)))
    assert aligned.shape == (SHAPE[0], N) and aligned.dtype == np.float32
    assert np.isfinite(aligned).all()
    assert np.array_equal(aligned, shifted)
