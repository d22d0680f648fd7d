"""GPU-path synthetic graphs, run here with NumPy: the conversion equals csr_to_metcf on the same matrix."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats.metcf.container import csr_to_metcf
from kernels.formats.metcf.synth import metcf_from_keys
from tasks.distribute.synth import relabel, rmat_keys, sbm_keys


def keys_csr(keys, shape):
    rows, cols = np.divmod(keys, shape[1])
    return sp.csr_array((np.ones(len(keys), np.float32), (rows, cols)), shape=shape)


@pytest.mark.parametrize("chunk_nnz", [1 << 27, 300])  # one chunk, and many window-aligned chunks
@pytest.mark.parametrize("kind", ["rmat", "sbm"])
def test_metcf_from_keys_equals_csr_to_metcf(kind, chunk_nnz):
    if kind == "rmat":
        keys, shape = rmat_keys(np, 9, 8, seed=3)
    else:
        keys, shape = sbm_keys(np, 333, 5, 6.0, 1.0, seed=3)  # 333 rows: a partial last window
    assert np.all(np.diff(keys) > 0)
    M = metcf_from_keys(np, keys, shape, chunk_nnz=chunk_nnz)
    M.validate(full=True)
    ref = csr_to_metcf(keys_csr(keys, shape))
    for name in ("row_window_offset", "tc_offset", "tc_local_id", "sparse_a_to_b"):
        a, b = getattr(M, name), getattr(ref, name)
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert M.data.dtype == np.float32 and M.data.min() > 0


def test_sbm_is_mostly_inside_blocks_and_relabel_is_a_graph_isomorphism():
    keys, shape = sbm_keys(np, 1000, 10, 8.0, 0.5, seed=1)
    rows, cols = np.divmod(keys, 1000)
    assert np.mean(rows // 100 == cols // 100) > 0.9
    perm = np.random.default_rng(0).permutation(1000)
    moved = relabel(np, keys, shape, perm)
    A, B = keys_csr(keys, shape), keys_csr(moved, shape)
    assert (B[perm][:, perm] != A).nnz == 0  # new label perm[v] of node v
