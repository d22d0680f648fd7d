"""The GPU CVSE conversion (kernels/formats/cvse/gpu.py) on the device: the host converter's arrays bit for bit at
every V, precision and edge case, from device inputs too; the device operator builds its CVSE there ("GPU CVSE", V
still chosen by Sparse Vector Compression) and runs the same C as from a host-converted CVSE."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)

from kernels.formats.cvse import gpu as cvse_gpu  # noqa: E402
from kernels.formats.cvse.container import VECTORS, csr_to_cvse  # noqa: E402
from kernels.precision import precision  # noqa: E402
from kernel_cases import CONVERTER_CASES as CASES, assert_same_arrays  # noqa: E402

PRECISIONS = ("float32", "float16", "bfloat16")


def assert_device_equals_host(G, X):
    assert_same_arrays(G, X, ("vec_ptr", "indices", "data"), where=cupy.ndarray)


@pytest.mark.parametrize("vector", VECTORS)
@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_conversion_equals_host(name, p_name, vector):
    p = precision(p_name)
    A = CASES[name]()
    assert_device_equals_host(cvse_gpu.csr_to_cvse_gpu_from_scipy(A, p, vector=vector),
                              csr_to_cvse(A, vector=vector, to_storage=p.to_storage))


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_gpu_conversion_device_inputs(index_dtype):
    p = precision("bfloat16")
    A = sp.csr_array(CASES["random_3"]())
    d = [cupy.asarray(a) for a in (A.indptr.astype(index_dtype), A.indices.astype(index_dtype), A.data)]
    G = cvse_gpu.csr_to_cvse_gpu(*d, A.shape, vector=4, to_storage=p.to_storage)
    assert_device_equals_host(G, csr_to_cvse(A, vector=4, to_storage=p.to_storage))
    assert isinstance(cvse_gpu.to_host(G).data, np.ndarray)


@pytest.mark.parametrize("p_name", PRECISIONS)
def test_device_operator_converts_on_the_gpu(p_name):
    from kernels.spmm import SpmmPlan

    p = precision(p_name)
    A = sp.csr_array(CASES["random_4"](), dtype=np.float32)
    plan = SpmmPlan(A, dtype=p_name, format="cvse", out_dtype=np.float32)
    assert plan.timings["conversion"].startswith("GPU CVSE (V = ") and plan.timings["convert_gpu_s"] > 0
    V = int(plan.timings["conversion"].split("V = ")[1].split(":")[0])
    given = SpmmPlan(csr_to_cvse(A, vector=V, to_storage=p.to_storage), dtype=p_name, format="cvse",
                     out_dtype=np.float32)
    assert given.timings["conversion"].startswith("host CVSE upload")
    B = np.random.default_rng(3).standard_normal((A.shape[1], 64)).astype(np.float32)
    assert np.array_equal(plan.run(B, kernel="cvse-vector"), given.run(B, kernel="cvse-vector"))


@pytest.mark.parametrize("p_name", PRECISIONS)
def test_upload_takes_a_device_cvse_as_it_is(p_name):
    """kernels.formats.cvse.launch.upload of the GPU converter's CVSE (its arrays on the device, as the device
    operator now passes them) gives the arrays an upload of the host CVSE gives; a 16-bit matrix dense enough for
    the tiled layout runs the tiled kernel from it with the host-converted plan's bits."""
    from kernels.formats.cvse import launch as lc
    from kernels.spmm import SpmmPlan

    p = precision(p_name)
    A = sp.csr_array(sp.random_array((512, 384), density=0.3, random_state=5, format="csr", dtype=np.float32))
    G = cvse_gpu.csr_to_cvse_gpu_from_scipy(A, p, vector=8)
    X = csr_to_cvse(A, vector=8, to_storage=p.to_storage)
    dg, dh = lc.upload(G, p_name), lc.upload(X, p_name)
    for name in ("vec_ptr", "indices", "data"):
        assert cupy.array_equal(getattr(dg, name), getattr(dh, name)), name
    assert np.array_equal(dg.vec_ptr_host, dh.vec_ptr_host) and isinstance(dg.vec_ptr_host, np.ndarray)
    plan = SpmmPlan(A, dtype=p_name, format="cvse", out_dtype=np.float32)
    V = int(plan.timings["conversion"].split("V = ")[1].split(":")[0])
    given = SpmmPlan(csr_to_cvse(A, vector=V, to_storage=p.to_storage), dtype=p_name, format="cvse",
                     out_dtype=np.float32)
    B = np.random.default_rng(4).standard_normal((A.shape[1], 128)).astype(np.float32)
    kernels = ("cvse-vector", "cvse-tiled") if p.half else ("cvse-vector",)
    for kernel in kernels:
        assert np.array_equal(plan.run(B, kernel=kernel), given.run(B, kernel=kernel)), kernel
