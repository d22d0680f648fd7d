"""Tiled-CSR's tiles are the window tiles of kernels.formats.condense, which ME-TCF shares: the conversion and the
shard operations give, array by array, what they gave when Tiled-CSR converted through ME-TCF's arrays
(``csr_to_metcf``, ``split_columns``): the digests below were recorded from that path. The matrices are built
from integer arithmetic (no random generator whose stream could change), values multiples of 1/4 (duplicates sum
exactly in any order)."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats.metcf.container import csr_to_metcf
from kernels.formats.tiledcsr import plugin
from kernels.formats.tiledcsr.container import csr_to_tiledcsr


def matrix(n_rows: int, n_cols: int, max_len: int, seed: int, hub: int | None = None) -> sp.csr_array:
    """Row i holds a length from a quadratic in i (row ``hub``: wider than several tiles), columns from a
    multiplicative hash, values in -9/4 .. 9/4 with explicit zeros; duplicates summed by the conversion."""
    i = np.arange(n_rows, dtype=np.int64)
    lengths = (i * i * (seed + 3) + 7 * i + seed) % (max_len + 1)
    if hub is not None:
        lengths[hub] = min(n_cols, 5 * max_len + 40)
    rows = np.repeat(i, lengths)
    k = np.arange(rows.size, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    cols = (rows * 2654435761 + k * (40503 + seed) + seed * 97) % n_cols
    vals = ((rows * 31 + k * 17 + seed) % 19 - 9) / 4.0
    return sp.csr_array(sp.coo_array((vals, (rows, cols)), shape=(n_rows, n_cols)))


CASES = {"small": (37, 29, 6, 1, None), "hub": (100, 300, 9, 2, 17), "rect": (333, 70, 12, 3, 200),
         "wide": (64, 5000, 30, 4, 3), "empty": (48, 48, 0, 5, None)}
# sha256 (first 16 hex digits) of every array (name, dtype, shape, bytes) of the conversions (default chunks and
# 50-nonzero chunks, float32 and float16 values), the own/halo split and two column remaps, per case and width
EXPECTED = {
    ("small", 8): "df99705663b71970", ("small", 16): "64833ff134517f3f",
    ("hub", 8): "f181bbafd70b9c54", ("hub", 16): "1db6efbbd58ef24e",
    ("rect", 8): "7d4c0edaa536bfda", ("rect", 16): "33dd3bb7615ffc71",
    ("wide", 8): "5d35dbc7705d0233", ("wide", 16): "148a08baa85415b1",
    ("empty", 8): "50f5ecc5265ed44a", ("empty", 16): "8d7163c84edf1db6",
}


def digest(objs) -> str:
    d = hashlib.sha256()
    for obj in objs:
        for name, a in sorted(vars(obj).items()):
            a = np.asarray(a)
            d.update(f"{name}:{a.dtype}:{a.shape}".encode())
            d.update(np.ascontiguousarray(a).tobytes())
    return d.hexdigest()[:16]


def outputs(case: str, width: int) -> list:
    n_rows, n_cols, max_len, seed, hub = CASES[case]
    A = matrix(n_rows, n_cols, max_len, seed, hub)
    X = csr_to_tiledcsr(A, width=width)
    keep = (np.arange(n_cols) * 7 + seed) % 3 != 0
    perm = (np.arange(n_cols) * 11 + 5) % n_cols if np.gcd(11, n_cols) == 1 else np.arange(n_cols)[::-1].copy()
    cols = np.arange(n_cols)
    return [X, csr_to_tiledcsr(A, width=width, chunk_nnz=50),
            csr_to_tiledcsr(A, width=width, to_storage=lambda x: x.astype(np.float16)), plugin._split(X, keep),
            plugin._remap(X, cols, perm, n_cols), plugin._remap(X, cols, cols + 2, n_cols + 2)]


@pytest.mark.parametrize("case, width", sorted(EXPECTED))
def test_arrays_equal_the_recorded_ones(case, width):
    out = outputs(case, width)
    for X in out:
        X.validate(full=True)
    assert digest(out) == EXPECTED[case, width]


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("case", sorted(CASES))
def test_tiles_are_metcf_blocks(case, width):
    """The same tiles as ME-TCF's TC blocks: offsets, slot columns, values, and local ids r * w + c."""
    n_rows, n_cols, max_len, seed, hub = CASES[case]
    A = matrix(n_rows, n_cols, max_len, seed, hub)
    X, M = csr_to_tiledcsr(A, width=width, to_storage=np.asarray), csr_to_metcf(A, width=width)
    for got, want in ((X.group_ptr, M.row_window_offset), (X.tile_ptr, M.tc_offset), (X.tile_cols, M.sparse_a_to_b),
                      (X.data, M.data)):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    r = np.repeat(np.tile(np.arange(16), X.n_tiles), np.diff(X.tile_indptr.astype(np.int64), axis=1).reshape(-1))
    assert np.array_equal(r * width + X.tile_indices, M.tc_local_id)
