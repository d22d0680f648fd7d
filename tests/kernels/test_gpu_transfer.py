"""kernels.transfer: staged host <-> device copies are bitwise copies, for every size around the staging's
thresholds, on the current stream."""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)

from kernels import transfer  # noqa: E402

SIZES = [0, 1, transfer.MIN_BYTES - 4, transfer.MIN_BYTES, transfer.MIN_BYTES + 4,
         transfer.CHUNK * (transfer.BUFFERS + 1) + 12, transfer.CHUNK * 2 * transfer.BUFFERS]


@pytest.mark.parametrize("nbytes", SIZES)
def test_round_trip_is_bitwise(nbytes):
    rng = np.random.default_rng(nbytes)
    x = rng.integers(0, 2**32, size=nbytes // 4, dtype=np.uint32).view(np.float32)  # NaN patterns included
    d = transfer.to_device(x)
    assert d.dtype == x.dtype and d.shape == x.shape
    assert bool((d.view(cupy.uint32) == cupy.asarray(x.view(np.uint32))).all())
    back = transfer.to_host(d)
    assert back.dtype == x.dtype and np.array_equal(back.view(np.uint32), x.view(np.uint32))


def test_non_contiguous_and_2d_on_a_side_stream():
    rng = np.random.default_rng(3)
    big = rng.standard_normal((transfer.MIN_BYTES // 512 + 7, 256), dtype=np.float32)
    x = big[:, ::2]  # strided rows: copied contiguous first
    with cupy.cuda.Stream(non_blocking=True):
        d = transfer.to_device(x)
        d2 = d * 2  # queued after the copy on the same stream
        back = transfer.to_host(d2)
    assert d.flags.c_contiguous and back.shape == x.shape
    np.testing.assert_array_equal(back, x * 2)
    np.testing.assert_array_equal(transfer.to_host(d[:, 1:]), x[:, 1:])  # a strided device view


def test_host_arrays_pass_through_to_host():
    x = np.arange(10.0)
    assert transfer.to_host(x) is x
