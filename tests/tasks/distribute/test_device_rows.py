"""The row copies' debugging check (``TCSPMM_CHECK_ROWS``) and the pack's high-priority stream, on the CPU: the
check names the call and the bounds; the stream asks CuPy for a priority beyond any device's range (CUDA clamps it)
and falls back to a plain stream where CuPy's Stream takes no priority."""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from tasks.distribute import device as dev


def test_check_rows_names_the_call_and_the_bounds():
    src, out = np.zeros((10, 4)), np.zeros((3, 4))
    dev._check_rows("gather_rows16", src, np.array([0, 9, 4]), out)  # in range: no error
    with pytest.raises(IndexError, match=r"gather_rows16: 3 indices in \[0, 10\] for 10 indexed rows"):
        dev._check_rows("gather_rows16", src, np.array([0, 10, 4]), out)
    with pytest.raises(IndexError, match=r"scatter_rows16: 3 indices in \[-1, 4\]"):
        dev._check_rows("scatter_rows16", out, np.array([-1, 2, 4]), src)
    with pytest.raises(IndexError, match="2 counted rows"):  # the packed side holds fewer rows than indices
        dev._check_rows("gather_rows16", src, np.array([0, 1, 2]), out[:2])


def _fake_cupy(monkeypatch, takes_priority: bool) -> list:
    made = []

    class Stream:
        def __init__(self, **kw):
            if kw and not takes_priority:
                raise TypeError("__init__() got an unexpected keyword argument 'priority'")
            made.append(kw)

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=types.SimpleNamespace(Stream=Stream)))
    return made


@pytest.mark.parametrize("takes_priority", [True, False])
def test_high_priority_stream(monkeypatch, takes_priority):
    made = _fake_cupy(monkeypatch, takes_priority)
    dev.high_priority_stream()
    assert made == ([{"priority": -(1 << 20)}] if takes_priority else [{}])
