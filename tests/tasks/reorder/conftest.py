"""Small seeded matrices for the reorder tests (private on purpose: independent of tasks.fetch)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp


def community(n: int, deg: int, block: int, seed: int = 0, p_in: float = 0.9):
    """(natural, shuffled) square pattern matrices with communities of ``block`` consecutive ids."""
    rng = np.random.default_rng(seed)
    m = n * deg
    r = rng.integers(0, n, m)
    c = np.where(rng.random(m) < p_in, (r // block) * block + rng.integers(0, block, m), rng.integers(0, n, m))
    nat = sp.csr_matrix((np.ones(m, np.float32), (r, np.minimum(c, n - 1))), shape=(n, n))
    nat.sum_duplicates()
    p = rng.permutation(n)
    shuf = sp.csr_matrix(nat[p][:, p])
    shuf.sort_indices()
    return nat, shuf


def _matrices():
    rng = np.random.default_rng(7)
    empty_rows = sp.random(333, 200, density=0.03, format="csr", random_state=3)
    empty_rows = sp.csr_matrix(empty_rows.multiply((rng.random((333, 1)) < 0.7)))
    return {
        "random": sp.random(500, 500, density=0.02, format="csr", random_state=1),
        "rectangular": sp.random(301, 1200, density=0.01, format="csr", random_state=2),
        "tall": sp.random(1000, 37, density=0.05, format="csr", random_state=4),
        "empty_rows": empty_rows,
        "nnz0": sp.csr_matrix((50, 20)),
        "one_row": sp.csr_matrix(np.arange(12.0).reshape(1, 12)),
        "community": community(2000, 8, 64, seed=5)[1],
        "int64": sp.csr_matrix((np.ones(3), np.array([0, 5, 2], np.int64), np.array([0, 2, 2, 3], np.int64)),
                               shape=(3, 6)),
    }


MATRICES = _matrices()


@pytest.fixture(params=sorted(MATRICES))
def matrix(request):
    return MATRICES[request.param]


@pytest.fixture
def make_community():
    """The `community` generator, as a fixture (importlib import mode: test modules cannot import conftest)."""
    return community
