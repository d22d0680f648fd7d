"""`device.gather_rows` / `scatter_rows` (the halo packs and the row split's stores) on the GPU: bitwise what CuPy's
take and fancy assignment give, for every row width and dtype the exchange moves, with the fallback for rows that
are not whole 16-byte words and for strided views."""
from __future__ import annotations

import numpy as np
import pytest

from tasks.distribute import device as dev

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if not dev.gpu_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint16])
@pytest.mark.parametrize("n_cols", [256, 64, 8, 3, 1000])
def test_gather_and_scatter_rows_equal_cupy(dtype, n_cols):
    rng = np.random.default_rng(n_cols)
    host = (rng.integers(0, 1 << 16, (5000, n_cols)) if dtype == np.uint16  # bfloat16 bits
            else rng.standard_normal((5000, n_cols)))
    src = cupy.asarray(host.astype(dtype))
    idx = cupy.asarray(rng.choice(5000, 1777, replace=False).astype(np.int64))
    out = cupy.full((1777, n_cols), 7, dtype=dtype)
    dev.gather_rows(src[1:4001] if n_cols == 8 else src, idx % 4000, out)  # n_cols 8: an offset view
    want = cupy.take(src[1:4001] if n_cols == 8 else src, idx % 4000, axis=0)
    assert cupy.array_equal(out.view(np.uint8), want.view(np.uint8))
    dst = cupy.zeros_like(src)
    dev.scatter_rows(out, idx, dst)
    ref = cupy.zeros_like(src)
    ref[idx] = out
    assert cupy.array_equal(dst.view(np.uint8), ref.view(np.uint8))


def test_strided_views_and_empty_index_fall_back_or_do_nothing():
    src = cupy.arange(64 * 40, dtype=cupy.float32).reshape(64, 40)
    idx = cupy.asarray([5, 0, 63], dtype=np.int64)
    out = cupy.empty((3, 20), dtype=cupy.float32)
    dev.gather_rows(src[:, ::2], idx, out)  # not C-ordered: CuPy's take
    assert cupy.array_equal(out, src[:, ::2][idx])
    before = out.copy()
    dev.gather_rows(src[:, :20].copy(), cupy.empty(0, dtype=np.int64), out[:0])
    assert cupy.array_equal(out, before)


def test_checked_rows_raise_before_the_kernel(monkeypatch):
    monkeypatch.setattr(dev, "CHECK_ROWS", True)
    src, out = cupy.zeros((10, 64), np.float32), cupy.zeros((3, 64), np.float32)
    with pytest.raises(IndexError, match="gather_rows16"):
        dev.gather_rows(src, cupy.asarray(np.array([0, 10, 1], dtype=np.int64)), out)
    dev.gather_rows(src, cupy.asarray(np.array([0, 9, 1], dtype=np.int64)), out)
    cupy.cuda.Device().synchronize()


def test_high_priority_stream_runs_work():
    s = dev.high_priority_stream()
    with s:
        x = cupy.arange(1000, dtype=np.float32).sum()
    s.synchronize()
    assert float(x) == 499500.0
