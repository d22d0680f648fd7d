"""kernels/operands.vector_path on the CPU: the 16-byte-path rule every launcher and the CVSE plan's tiled-kernel
choice share (N a multiple of the vector width, every given buffer 16-byte aligned, None counting as aligned)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernels.operands import vector_path


def buf(ptr):
    return SimpleNamespace(data=SimpleNamespace(ptr=ptr))


@pytest.mark.parametrize("N, ptrs, want", [
    (64, (256, 512), True),
    (64, (256, None), True),      # out made by the launcher
    (60, (256, 512), False),      # N not a multiple of 8
    (64, (264, 512), False),      # B 8-byte aligned only
    (64, (256, 520), False),      # out 8-byte aligned only
    (8, (), True),
])
def test_vector_path(N, ptrs, want):
    assert vector_path(N, 8, *(None if p is None else buf(p) for p in ptrs)) is want
