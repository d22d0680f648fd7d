"""SSpMM's Sparse Vector Compression (TPDS'25 section V-A/B): an unstructured matrix in CVSE. V consecutive rows are
compressed into V x 1 column vectors; a vector is kept when any of its V values is nonzero and deleted when all are
zero, so the zeros it keeps are the padding. V trades Tensor-Core utilization (small V: fewer stored zeros) against
parallelism (large V: more rows per vector, fewer vector rows to walk).

`compress(A, precision, vectors=...)` -> (CVSE, report): it measures every candidate V (vectors, padding, the new
sparsity ``1 - nnz / (V n_vectors)`` and the compute-density improvement of eq. (1): ``M K / (V n_vectors)``) and
chooses V by the paper's rule (section V-C, measured in its Fig. 14): while the original sparsity is below 0.9 the
larger V wins (vector densities are alike, parallelism decides); from 0.9 on the candidate with the least Tensor-Core
work wins, work = n_vectors x ceil(V / 8) n8 columns of mma (the Transpose Mapping Scheme puts V on the n8 side, so
V <= 8 costs one n8 column per vector and V = 16 two). Ties go to the larger V.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from kernels.formats.cvse import VECTORS, CVSE, check_vector, csr_to_cvse

PAPER_CANDIDATES = (8, 16)  # the V the paper's kernels and Fig. 12-14 use
SPARSITY_SPLIT = 0.9  # Fig. 14 (A100): below it V = 16 is faster, from it V = 8 overtakes


def vector_counts(A, vectors=VECTORS) -> dict[int, int]:
    """{V: vectors CVSE with that V keeps} from the pattern alone (no values are copied)."""
    A = sp.csr_array(A)
    n_cols = int(A.shape[1])
    rows = np.repeat(np.arange(int(A.shape[0]), dtype=np.int64), np.diff(A.indptr.astype(np.int64)))
    cols = A.indices.astype(np.int64)
    out = {}
    for V in vectors:
        keys = (rows // check_vector(V)) * n_cols + cols
        keys.sort()
        out[int(V)] = int(np.count_nonzero(np.diff(keys)) + 1) if keys.size else 0
    return out


def choose(nnz: int, shape, counts: dict[int, int]) -> tuple[int, str]:
    """(V, reason) by the paper's rule (module docstring) from the candidates' vector counts."""
    dense = int(shape[0]) * int(shape[1])
    sparsity = 1.0 - nnz / dense if dense else 1.0
    cands = sorted(counts)
    if sparsity < SPARSITY_SPLIT:
        return cands[-1], (f"sparsity {sparsity:.3f} < {SPARSITY_SPLIT}: vector densities are alike, the largest V "
                           "gives the most parallelism")
    work = {V: counts[V] * -(-V // 8) for V in cands}
    best = min(cands, key=lambda V: (work[V], -V))
    return best, (f"sparsity {sparsity:.3f} >= {SPARSITY_SPLIT}: least mma work (vectors x n8 columns) "
                  f"{ {V: work[V] for V in cands} }")


def compress(A, precision=None, *, vectors=PAPER_CANDIDATES, vector: int | None = None) -> tuple[CVSE, dict]:
    """Sparse Vector Compression of ``A``: CVSE at the chosen (or the given ``vector``) V, and a report with, per
    candidate V, n_vectors, padding (stored zeros), new sparsity and density improvement, plus the choice and why."""
    A = sp.csr_array(A)
    nnz = int(A.nnz)
    cands = tuple(sorted({check_vector(V) for V in (vectors if vector is None else (vector,))}))
    counts = vector_counts(A, cands)
    dense = int(A.shape[0]) * int(A.shape[1])
    per_v = {V: {"n_vectors": n, "padding": V * n - nnz, "new_sparsity": 1.0 - nnz / (V * n) if n else 0.0,
                 "density_improvement": dense / (V * n) if n else float("nan"), "mma_n8_columns": n * -(-V // 8)}
             for V, n in counts.items()}
    V, reason = (vector, "given") if vector is not None else choose(nnz, A.shape, counts)
    to_storage = precision.to_storage if precision is not None else None
    X = csr_to_cvse(A, vector=V, to_storage=to_storage)
    report = {"vector": V, "reason": reason, "nnz": nnz, "sparsity": 1.0 - nnz / dense if dense else 1.0,
              "padding": per_v[V]["padding"], "new_sparsity": per_v[V]["new_sparsity"], "candidates": per_v}
    return X, report
