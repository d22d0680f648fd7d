"""The project's `rowshuffle` (tasks/reorder/greedy.py) against a literal transcription of the Tiled-CSR paper's
Algorithm 1 (row shuffle) with Algorithms 2 (similar matching) and 3 (complementary matching), and the paper's own
measure (effective computation rate per tile) on its Fig. 4 examples."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats.tiledcsr.container import effective_rate
from tasks.reorder import reorder
from tasks.reorder.greedy import rowshuffle_order


def similar_matching(v1: set, v2: set, threshold: float) -> bool:
    """Algorithm 2, line by line."""
    len1, len2 = len(v1), len(v2)
    len3 = len(v1 | v2)
    return len3 < (1 + threshold) * len1 or len3 < (1 + threshold) * len2


def complementary_matching(v1: set, slots: list, k: int) -> bool:
    """Algorithm 3, line by line: V2 = V1 | Slots[0] | Slots[1] | ...; true when |V2| < k."""
    v2 = set(v1).union(*slots)
    return len(v2) < k


def paper_row_shuffle(A, *, slot_rows, threshold, k, bin_len, joins: dict | None = None) -> np.ndarray:
    """Algorithm 1 over rows presorted by sum of squared column indices (section III-B), O(M^2) as written.
    One repair: the pseudocode adds a Slot to the output only when it or the Bin fills (line 22); a Slot whose scan
    runs out of rows would be lost, so it is emitted too (the rows must all appear once)."""
    A = sp.csr_array(A)
    rows = [set(A.indices[A.indptr[i]:A.indptr[i + 1]].tolist()) for i in range(A.shape[0])]
    key = [float(sum(float(c) ** 2 for c in r)) for r in rows]
    order = sorted(range(len(rows)), key=lambda i: key[i])  # stable
    new, done = [], set()
    for i in order:
        if i in done:
            continue
        slot, bin_ = [i], []
        done.add(i)
        for j in order:
            if j in done:
                continue
            if similar_matching(rows[j], rows[i], threshold):
                slot.append(j)
                done.add(j)
                if joins is not None:
                    joins["similar"] = joins.get("similar", 0) + 1
            elif complementary_matching(rows[j], [rows[s] for s in slot], k):
                slot.append(j)
                done.add(j)
                if joins is not None:
                    joins["complementary"] = joins.get("complementary", 0) + 1
            else:
                bin_.append(j)
            if len(slot) == slot_rows or len(bin_) == bin_len:
                break
        new.extend(slot)
    return np.array(new, dtype=np.int64)


def pruned(n_rows, n_cols, sparsity, seed):
    """A DLMC-like magnitude-pruned weight pattern: uniform positions at the given sparsity."""
    return sp.random(n_rows, n_cols, density=1 - sparsity, format="csr", random_state=seed, dtype=np.float32)


@pytest.mark.parametrize("params", [dict(slot_rows=16, threshold=0.5, k_cols=8, bin_len=32),
                                    dict(slot_rows=8, threshold=0.3, k_cols=16, bin_len=8),
                                    dict(slot_rows=16, threshold=1.0, k_cols=16, bin_len=4)])
@pytest.mark.parametrize("matrix", ["pruned50", "pruned95", "short_rows", "empty_rows"])
def test_rowshuffle_is_the_papers_algorithm(matrix, params):
    A = {"pruned50": lambda: pruned(120, 60, 0.5, 1), "pruned95": lambda: pruned(200, 300, 0.95, 2),
         "short_rows": lambda: pruned(300, 2000, 0.999, 3),
         "empty_rows": lambda: sp.csr_array(sp.vstack([pruned(50, 40, 0.9, 4), sp.csr_array((30, 40)),
                                                       pruned(50, 40, 0.8, 5)]))}[matrix]()
    ours = rowshuffle_order(A, **params)
    joins = {}
    paper = paper_row_shuffle(A, slot_rows=params["slot_rows"], threshold=params["threshold"], k=params["k_cols"],
                              bin_len=params["bin_len"], joins=joins)
    np.testing.assert_array_equal(ours, paper)
    JOINS.setdefault(matrix, {}).update({k: JOINS.get(matrix, {}).get(k, 0) + v for k, v in joins.items()})
    assert np.array_equal(np.sort(ours), np.arange(A.shape[0]))


JOINS: dict = {}  # matrix -> rows joined by each matching rule over the parametrisations above


def test_both_matchings_were_exercised():
    for matrix in ("pruned50", "pruned95", "short_rows", "empty_rows"):
        if matrix not in JOINS:
            test_rowshuffle_is_the_papers_algorithm(matrix, dict(slot_rows=16, threshold=0.5, k_cols=8, bin_len=32))
            test_rowshuffle_is_the_papers_algorithm(matrix, dict(slot_rows=8, threshold=0.3, k_cols=16, bin_len=8))
    assert sum(j.get("similar", 0) for j in JOINS.values()) > 0, JOINS
    assert JOINS["short_rows"].get("complementary", 0) > 0, JOINS


# Fig. 4(b) with 2 x 4 tiles: rows 0 and 3 share columns 0, 1; rows 1 and 2 share columns 2, 3.
#   row 0: x x . .    in this order every 2-row group has 4 distinct columns: 2 tiles, rate 8 / 16
#   row 1: . . x x    after the shuffle (0, 3), (1, 2): 2 columns per group; with 4-wide tiles still 1 tile per
#   row 2: . . x x    group, but with the columns spread over 8 the unshuffled order needs more tiles (below)
#   row 3: x x . .
def test_fig4b_pairs_rows_with_the_same_columns():
    A = sp.csr_array(np.array([[1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 0, 0]], dtype=np.float32))
    perm = rowshuffle_order(A, slot_rows=2, threshold=0.5, k_cols=4, bin_len=2)
    assert perm.tolist() == [0, 3, 1, 2]
    wide = sp.csr_array(np.kron(A.toarray(), np.ones((1, 3))))  # 6 columns per pair: 2 tiles each unshuffled
    before, after = effective_rate(wide, 2, 4), effective_rate(wide[rowshuffle_order(wide, slot_rows=2)], 2, 4)
    assert (before["n_tiles"], after["n_tiles"]) == (6, 4)
    assert after["effective_rate"] == pytest.approx(24 / (4 * 8))


def test_shuffle_raises_the_effective_rate_of_a_clustered_pattern():
    # 32 column clusters of 12 columns, rows drawn from them, then shuffled: row shuffle regroups them
    rng = np.random.default_rng(0)
    n = 512
    cluster = rng.integers(0, 32, n)
    cols = np.concatenate([12 * c + rng.choice(12, 8, replace=False) for c in cluster])
    A = sp.csr_array((np.ones(8 * n, np.float32), (np.repeat(np.arange(n), 8), cols)), shape=(n, 384))
    before = effective_rate(A, 16, 16)["effective_rate"]
    after = effective_rate(A[reorder(A, "rowshuffle", slot_rows=16, k_cols=16)], 16, 16)["effective_rate"]
    assert after > 2 * before
