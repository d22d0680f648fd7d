"""The GPU Tiled-CSR conversion (kernels/formats/tiledcsr/gpu.py) on the device: the host converter's arrays bit for
bit at every precision and edge case, from device inputs too; the device operator converts a SciPy matrix there
("GPU Tiled-CSR") and runs the same C as from a host-converted Tiled-CSR."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)

from kernels.formats import get  # noqa: E402
from kernels.formats.tiledcsr import gpu as tiled_gpu  # noqa: E402
from kernels.precision import precision  # noqa: E402
from kernel_cases import CONVERTER_CASES as CASES, assert_same_arrays  # noqa: E402

PRECISIONS = ("float32", "float16", "bfloat16")
FIELDS = ("group_ptr", "tile_ptr", "tile_cols", "tile_indptr", "tile_indices", "data")


def assert_device_equals_host(G, X):
    assert_same_arrays(G, X, FIELDS, where=cupy.ndarray)


@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_conversion_equals_host(name, p_name):
    p = precision(p_name)
    A = CASES[name]()
    assert_device_equals_host(tiled_gpu.csr_to_tiledcsr_gpu_from_scipy(A, p), get("tiledcsr").convert(A, p))


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_gpu_conversion_device_inputs(index_dtype):
    p = precision("float16")
    A = sp.csr_array(CASES["random_3"]())
    d = [cupy.asarray(a) for a in (A.indptr.astype(index_dtype), A.indices.astype(index_dtype), A.data)]
    G = tiled_gpu.csr_to_tiledcsr_gpu(*d, A.shape, width=16, to_storage=p.to_storage)
    assert_device_equals_host(G, get("tiledcsr").convert(A, p))
    host = tiled_gpu.to_host(G)
    assert all(isinstance(getattr(host, f), np.ndarray) for f in FIELDS)


@pytest.mark.parametrize("p_name", PRECISIONS)
def test_device_operator_converts_on_the_gpu(p_name):
    from kernels.spmm import SpmmPlan

    p = precision(p_name)
    A = sp.csr_array(CASES["random_4"](), dtype=np.float32)
    plan = SpmmPlan(A, dtype=p_name, format="tiledcsr", out_dtype=np.float32)
    given = SpmmPlan(get("tiledcsr").convert(A, p), dtype=p_name, format="tiledcsr", out_dtype=np.float32)
    assert plan.timings["conversion"] == "GPU Tiled-CSR" and plan.timings["convert_gpu_s"] > 0
    assert given.timings["conversion"] == "host Tiled-CSR upload"
    B = np.random.default_rng(3).standard_normal((A.shape[1], 64)).astype(np.float32)
    assert np.array_equal(plan.run(B), given.run(B))
