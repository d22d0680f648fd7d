"""device.warm_worker on a GPU: every kernel of the default format's plan (and its baselines) loads and runs on
the small matrix, in each precision; a shard planned after it is correct."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)

from kernels.spmm import SpmmPlan  # noqa: E402
from tasks.distribute.device import warm_worker  # noqa: E402


def test_warm_worker_runs_every_kernel_then_plans_work():
    res = warm_worker(dtypes=("float32", "float16", "bfloat16"), device="gpu")
    assert res["failed"] == {} and res["ms"] > 0
    A = sp.random_array((300, 200), density=0.04, format="csr", dtype=np.float32, rng=np.random.default_rng(1))
    B = np.random.default_rng(2).standard_normal((200, 64), dtype=np.float32)
    C = SpmmPlan(A, device="gpu").run(cupy.asarray(B)).get()
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=2e-3, atol=2e-3)
