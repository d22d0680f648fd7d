"""Every reordering on the real SuiteSparse and IGB fixtures (fetched from the local mirror): a permutation, and
C = A @ B unchanged once the reordered product is put back in the original row order."""
from pathlib import Path

import numpy as np
import pytest

from tasks.fetch import fetch
from tasks.parse import load_matrix
from tasks.reorder import METHODS, reorder, reorder_checked

SPECS = ["Newman/karate", "HB/west0067", "LPnetlib/lp_e226", "HB/bcsstk13", "HB/bcspwr10", "Pajek/Erdos971",
         "HB/jagmesh7", "SNAP/email-Enron", "igb:tiny"]


@pytest.fixture(scope="module")
def fixture_matrices(mirror, tmp_path_factory):
    root = tmp_path_factory.mktemp("reorder-fixtures")
    env = {"TCSPMM_SUITESPARSE_URL": mirror.suitesparse_url, "TCSPMM_IGB_URL": mirror.igb_url,
           "TCSPMM_IGB_MD5_TINY": mirror.igb_md5["tiny"]}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        return {spec: load_matrix(fetch(spec, Path(root)), data_root=root).csr for spec in SPECS}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("spec", SPECS)
def test_reordering_a_fixture_keeps_the_product(fixture_matrices, spec, method):
    A = fixture_matrices[spec]
    perm = reorder(A, method, seed=0)
    assert perm.dtype == np.int64 and np.array_equal(np.sort(perm), np.arange(A.shape[0]))
    B = np.random.default_rng(1).standard_normal((A.shape[1], 8))
    C = np.empty((A.shape[0], 8))
    C[perm] = A[perm] @ B  # perm[new] = old: row new of A[perm] is row perm[new] of A
    np.testing.assert_allclose(C, A @ B, rtol=1e-12, atol=1e-12)
    checked, before, after, applied = reorder_checked(A, method, seed=0)
    assert after["n_tc_blocks"] <= before["n_tc_blocks"]
    assert applied or np.array_equal(checked, np.arange(A.shape[0]))
