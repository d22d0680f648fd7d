"""SSpMM's Sparse Vector Compression (TPDS'25 section V-A/B): an unstructured matrix in CVSE. V consecutive rows are
compressed into V x 1 column vectors; a vector is kept when any of its V values is nonzero and deleted when all are
zero, so the zeros it keeps are the padding. V trades Tensor-Core utilization (small V: fewer stored zeros) against
parallelism (large V: more rows per vector, fewer vector rows to walk).

`compress(A, precision, vectors=...)` -> (CVSE, report): it measures every candidate V (vectors, padding, the new
sparsity ``1 - nnz / (V n_vectors)`` and the compute-density improvement of eq. (1): ``M K / (V n_vectors)``) and
chooses V by `choose`:

- mma work of V = n_vectors x ceil(V / 8) n8 columns (the Transpose Mapping Scheme puts V on the mma's n8 side:
  V <= 8 costs one n8 column per vector, V = 16 two). For V >= 8 this is ``nnz / (8 density)`` with density =
  nnz / (V n_vectors): comparing work is comparing padding.
- The least-work V is the base; a larger V replaces it while its work is at most ``WORK_SLACK`` = 1.49 x the least
  (for V >= 8: its vector density at least 1 / 1.49 = 0.67 of the base's). Ties go to the larger V.

Why a larger V may win at all is the paper's rule (section V-B/C, Fig. 14, A100): while the original sparsity is
below 0.9 the vectors of V = 8 and 16 are about equally dense on DLMC's unstructured matrices (equal mma work), and
V = 16's parallelism decides (each gathered B row serves 16 output rows instead of 8: half the B traffic per
useful product); from 0.9 on, V = 8's utilization wins. The paper's rule keys on the original sparsity, which says
nothing about structure: a matrix pruned at V = 8 has full V = 8 vectors at any sparsity, and V = 16 pads it by
33-49 %. So the rule here keys on the padding itself, and its slack comes from our measurement, not the paper's:

WORK_SLACK from benchmarks/results/svc-slack-nvidia-h200-2026-11-25.json (benchmarks/svc_slack.py; H200, FP16,
graph replay, the cp.async-staged SpMM kernel): gen:dlmc 4096 x 4096 weights pruned at V = 8 (sparsity 0.5-0.9)
and unstructured (0.5-0.8), N = 256 and 1024, CVSE at V = 8 and V = 16 side by side (14 rows). Work ratio
w = work(16) / work(8) = 1.00 .. 1.90; per unit of mma work V = 16 took t / w = 0.58 .. 0.80 of V = 8's time
(t = ms(16) / ms(8)), geometric mean 0.669: V = 16 breaks even at w = 1 / 0.669 = 1.49. (On the kernel before the
cp.async staging, formats-nvidia-h200-2026-11-25.json gave 0.894, a slack of 1.12; the new kernel's gain is larger
at V = 16.) Per N it differs: at N = 256 V = 8-pruned weights run 1.21-1.29x slower at V = 16, at N = 1024
0.90-1.10x, so the rule, which is per matrix, sits between. On a uniform random matrix of sparsity s, n_V ~
(M K / V)(1 - s^V), so w = (1 - s^16) / (1 - s^8) = 1 + s^8: V = 16 up to s = 0.49^(1/8) = 0.915, close to the
paper's split at 0.9. Re-derive WORK_SLACK (benchmarks/svc_slack.py) when the SpMM kernel changes.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from kernels.formats import structure
from kernels.formats.cvse.container import VECTORS, CVSE, check_vector, csr_to_cvse
from kernels.formats.metrics import markers_fit, window_counts
from storage.indexing import segment_ids

PAPER_CANDIDATES = (8, 16)  # the V the paper's kernels and Fig. 12-14 use
WORK_SLACK = 1.49  # a larger V is taken while its mma work <= 1.49 x the least: module docstring, measured rows


def vector_counts(A, vectors=VECTORS) -> dict[int, int]:
    """{V: vectors CVSE with that V keeps} from the pattern alone (no values are copied): the distinct columns of
    each group of V rows, summed. Counted by `kernels.formats.metrics.window_counts`' column markers where they fit
    (one pass for a V and a multiple of it: V = 8 and 16 together at 9.9M nonzeros 0.05 s against 0.18 s sorting,
    2-core CPU; the sort was 0.38 s of an `auto` plan's 0.60 s build on the H200's host), else by sorting the
    (group, column) keys. Where an `auto` plan's statistics counted every window of A's arrays
    (`kernels.formats.structure.kept_windows`: the distinct (row // V, col) pairs per window, V = 2 .. 16), their
    sums."""
    A = sp.csr_array(A)
    order = list(dict.fromkeys(check_vector(V) for V in vectors))
    kept = structure.kept_windows(A)  # an `auto` plan's ranking counted every window of these arrays already
    if kept is not None and all(("v", V) in kept.counts for V in order):
        return {V: int(kept.counts[("v", V)].sum()) for V in order}
    if not markers_fit(A.shape, int(A.nnz)):
        return {V: _sorted_vector_count(A, V) for V in order}
    out, todo = {}, sorted(order)
    while todo:
        V = todo.pop(0)
        multiple = next((W for W in todo if W % V == 0), None)  # counted in the same pass, as groups of V windows
        distinct, _, groups = window_counts(A, window=V, widths=(), group_windows=multiple // V if multiple else 1)
        out[V] = int(distinct.sum())
        if multiple:
            out[multiple] = int(groups.sum())
            todo.remove(multiple)
    return {V: out[V] for V in order}


def _sorted_vector_count(A, V: int) -> int:
    """Distinct (row group of V rows, column) keys of CSR ``A``, by sorting them."""
    keys = (segment_ids(A.indptr) // V) * int(A.shape[1]) + A.indices.astype(np.int64)
    keys.sort()
    return int(np.count_nonzero(np.diff(keys)) + 1) if keys.size else 0


def mma_work(counts: dict[int, int]) -> dict[int, int]:
    """{V: n8 columns of mma} = n_vectors x ceil(V / 8) (the Transpose Mapping Scheme puts V on the n8 side)."""
    return {V: int(n) * -(-int(V) // 8) for V, n in counts.items()}


def choose(nnz: int, shape, counts: dict[int, int]) -> tuple[int, str]:
    """(V, reason) from the candidates' vector counts: the least mma work, replaced by the largest V whose work is
    within ``WORK_SLACK`` of it (module docstring: why, and where the slack was measured)."""
    dense = int(shape[0]) * int(shape[1])
    sparsity = 1.0 - nnz / dense if dense else 1.0
    work = mma_work(counts)
    least = min(counts, key=lambda V: (work[V], -V))
    if work[least] == 0:  # no vectors at all: every V is free, take the largest
        return max(counts), "no stored entries: any V, the largest"
    ratio = {V: work[V] / work[least] for V in counts}
    best = max(V for V in counts if V >= least and ratio[V] <= WORK_SLACK)
    density = {V: nnz / (V * counts[V]) if counts[V] else 0.0 for V in counts}
    detail = (f"mma work (vectors x n8 columns) {work}, vector density "
              f"{ {V: round(d, 3) for V, d in sorted(density.items())} }, sparsity {sparsity:.3f}")
    if best == least:
        larger = sorted(V for V in counts if V > least)
        why = (f"least mma work; larger V pad more: work {', '.join(f'{V}: {ratio[V]:.2f}x' for V in larger)} "
               f"> {WORK_SLACK}x" if larger else "least mma work")
        return best, f"V = {best}: {why} ({detail})"
    return best, (f"V = {best}: its mma work is {ratio[best]:.2f}x the least (V = {least}), within {WORK_SLACK}x: "
                  f"densities alike, the larger V's parallelism wins (SSpMM Fig. 14) ({detail})")


def compress(A, precision=None, *, vectors=PAPER_CANDIDATES, vector: int | None = None,
             converter=None) -> tuple[CVSE, dict]:
    """Sparse Vector Compression of ``A``: CVSE at the chosen (or the given ``vector``) V, and a report with, per
    candidate V, n_vectors, padding (stored zeros), new sparsity and density improvement, plus the choice and why.
    ``converter(A, vector=V, to_storage=...)`` builds the CVSE (default the host's `csr_to_cvse`; the device
    operator passes the GPU one, kernels.formats.cvse.gpu, whose arrays are the same bits)."""
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
    X = (converter or csr_to_cvse)(A, vector=V, to_storage=to_storage)
    report = {"vector": V, "reason": reason, "nnz": nnz, "sparsity": 1.0 - nnz / dense if dense else 1.0,
              "padding": per_v[V]["padding"], "new_sparsity": per_v[V]["new_sparsity"], "candidates": per_v}
    return X, report
