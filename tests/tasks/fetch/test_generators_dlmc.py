"""gen:dlmc: DNN weights magnitude-pruned at V x 1 granularity (DLMC style; DLMC itself is not reachable here):
exact sparsity, whole V x 1 vectors, signed magnitude-like values above the pruning threshold, seeding, the
parameter checks, and CVSE at the pruning V storing no padding."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi

from configs.errors import InputError
from kernels.formats.cvse.container import csr_to_cvse, cvse_stats
from tasks.fetch.generators import KINDS, canonical_params, generate


def test_kind_is_listed_and_shuffle_is_off():
    assert "dlmc" in KINDS
    p = canonical_params("dlmc", "rows=64&cols=96&sparsity=0.9&vector=4")
    assert p["shuffle"] is False and p["cols"] == 96 and p["vector"] == 4


@pytest.mark.parametrize("V", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("sparsity", [0.5, 0.9, 0.98])
def test_exact_sparsity_and_whole_vectors(V, sparsity):
    A = generate("dlmc", f"rows=128&cols=96&sparsity={sparsity}&vector={V}&seed=3")
    assert A.shape == (128, 96)
    n_pos = 128 // V * 96
    assert A.nnz == V * int(round((1 - sparsity) * n_pos))
    X = csr_to_cvse(A, vector=V) if V > 1 else None
    if X is not None:  # every kept vector is full: CVSE at the pruning V stores no padding
        assert cvse_stats(X)["padding"] == 0 and X.n_vectors * V == A.nnz
    D = A.toarray()
    blocks = (D.reshape(128 // V, V, 96) != 0)
    assert np.all(blocks.all(axis=1) == blocks.any(axis=1))  # a vector is all kept or all pruned


def test_values_are_signed_and_above_the_pruning_threshold():
    V, s, K = 4, 0.9, 256
    A = generate("dlmc", f"rows=512&cols={K}&sparsity={s}&vector={V}&seed=1")
    D = A.toarray().reshape(512 // V, V, K)
    norms = np.sqrt((D.astype(np.float64) ** 2).sum(axis=1))
    kept = norms[norms > 0] / np.sqrt(2.0 / K)  # in units of the weight scale
    threshold = chi.ppf(s, V)
    assert kept.min() >= threshold * (1 - 1e-5)  # every survivor's norm is above the magnitude threshold
    assert (A.data > 0).mean() == pytest.approx(0.5, abs=0.03)  # signed, symmetric
    # kept norms follow chi(V) conditioned above the threshold: compare the median
    assert np.median(kept) == pytest.approx(chi.ppf(s + (1 - s) / 2, V), rel=0.05)


def test_seeded():
    a = generate("dlmc", "rows=64&cols=64&sparsity=0.8&vector=8&seed=5")
    b = generate("dlmc", "rows=64&cols=64&sparsity=0.8&vector=8&seed=5")
    c = generate("dlmc", "rows=64&cols=64&sparsity=0.8&vector=8&seed=6")
    assert (a != b).nnz == 0 and (a != c).nnz > 0


@pytest.mark.parametrize("query,match", [
    ("rows=64&cols=64&sparsity=0.3", r"sparsity must be in \[0.5, 0.98\]"),
    ("rows=64&cols=64&sparsity=0.99", r"sparsity must be in \[0.5, 0.98\]"),
    ("rows=64&cols=64", r"sparsity must be in"),
    ("rows=60&cols=64&sparsity=0.9&vector=8", "divide rows = 60"),
    ("rows=64&cols=64&sparsity=0.9&vector=3", "vector must be 1, 2, 4, 8 or 16"),
    ("cols=64&sparsity=0.9", "missing required parameter 'rows'"),
])
def test_parameter_checks(query, match):
    with pytest.raises(InputError, match=match):
        canonical_params("dlmc", query)
