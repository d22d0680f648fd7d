"""kernels/formats/blocks.py's shared converter pieces that need no GPU."""
from __future__ import annotations

import types

import numpy as np

from kernels.formats import blocks


def test_host_nan_bits_gives_nan_numpys_float16_bits(monkeypatch):
    """A device cast that writes 0x7fff for every NaN (CUDA's) is corrected to NumPy's bits; other values, and
    NumPy arrays, are left alone. The device namespace is NumPy dressed as CuPy (asnumpy), enough for the logic."""
    fake = types.SimpleNamespace(**{n: getattr(np, n) for n in ("flatnonzero", "isnan", "asarray", "uint16")},
                                 asnumpy=np.asarray)
    monkeypatch.setattr(blocks, "array_namespace", lambda *a: fake)

    def cuda_like(x):
        with np.errstate(over="ignore"):  # 1e6 -> inf, as Precision.to_storage allows
            out = x.astype(np.float16)
        out.view(np.uint16)[np.isnan(x)] = 0x7FFF
        return out

    x = np.array([[1.0, np.nan, -np.nan], [np.inf, 3e-6, 1e6]], dtype=np.float32)
    got = blocks.host_nan_bits(cuda_like)(x)
    with np.errstate(over="ignore"):
        assert got.tobytes() == x.astype(np.float16).tobytes()
    assert got.view(np.uint16)[0, 1] != 0x7FFF
    assert blocks.host_nan_bits(cuda_like)(np.ones(3, np.float32)).tobytes() == np.ones(3, np.float16).tobytes()
    monkeypatch.setattr(blocks, "array_namespace", lambda *a: np)
    assert blocks.host_nan_bits(cuda_like)(x).view(np.uint16)[0, 1] == 0x7FFF  # host arrays: to_storage's own
