"""tasks.reorder.minhash.jaccard_block, TCA's exact Jaccard of candidate pairs: by column markers and by the sorted
merge of both rows, against sets."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from tasks.reorder import minhash


@pytest.mark.parametrize("path", ["markers", "merge"])
@pytest.mark.parametrize("sorted_pairs", [True, False])
def test_jaccard_block_against_sets(path, sorted_pairs, monkeypatch):
    if path == "merge":  # what a matrix of more than MARKED_MAX_COLS columns takes
        monkeypatch.setattr(minhash, "MARKED_MAX_COLS", 0)
    A = sp.random(120, 90, density=0.08, format="lil", random_state=4)
    A[7, :] = 0  # empty rows: Jaccard 0 of two of them, not a division by zero
    A[8, :] = 0
    A = sp.csr_matrix(A)
    A.eliminate_zeros()
    A.sort_indices()
    rng = np.random.default_rng(1)
    pairs = np.concatenate([rng.integers(0, 120, size=(400, 2)), [[7, 8], [7, 7], [3, 3]]])
    if sorted_pairs:  # TCA's order: by i, then j
        pairs = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]
    rows = [set(A.indices[A.indptr[r]:A.indptr[r + 1]].tolist()) for r in range(120)]
    want = [len(rows[i] & rows[j]) / len(rows[i] | rows[j]) if rows[i] | rows[j] else 0.0 for i, j in pairs]
    got = minhash.jaccard_block(A.indptr, A.indices, pairs)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.asarray(want, dtype=np.float32))
