"""Public reordering API: ``reorder``, ``reorder_checked``, ``auto_reorder``.

Direction, once: ``perm[new] = old``. ``A[perm]`` is the reordered matrix (rows only); results come back by
``C = empty; C[perm] = A[perm] @ B``. No function mutates A.
"""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from kernels.formats.metrics import markers_fit, tc_stats, window_counts
from tasks import progress
from tasks.reorder import community, greedy, simple, smat, tca

METHODS = ("tca", "rowshuffle", "jaccard", "smat", "rcm", "degree", "community", "none")
# auto_reorder's default candidates: the methods whose order had the fewest TC blocks somewhere. tca had them on
# every recorded generated matrix but banded ones (rcm there) and on all fixtures but two, where the identity
# stayed; rowshuffle (Tiled-CSR's objective, not TC blocks) never, jaccard (greedy clustering) once, by 2 blocks of
# 65k (DNN-style 2048 x 8192, 70 %, width 16), in 25 recorded (matrix, size) cases of benchmarks/results/reorder-*
# and 20 generated (matrix, width) cases on 2026-11-29 (docs/kernels-notes.md, session 31), while each cost about as
# much as tca (1.8 s at 10M nonzeros on 2 cores): ask for them, or for community (row-partition halos,
# multi-GPU: the most per nonzero), by name. degree (0.02 s) and rcm (0.5 s) stay: cheap, and rcm wins on bands.
AUTO_METHODS = ("tca", "rcm", "degree")

# Rough single-core cost per nonzero (ns), rounded up from benchmarks/reorder.py at 10M nnz on a loaded 2-core VM
# (rowshuffle 0.8 us, jaccard 0.8-1.0 us, rcm 0.6 us, tca 0.7-1.0 us with 1-2 threads, degree 35 ns; community
# 0.9 us at 2M and 3.1 us at 20M nnz on an SBM); auto_reorder skips a method whose estimate nnz * cost exceeds
# max_cost seconds.
COST_NS_PER_NNZ = {"none": 0.0, "degree": 40.0, "rcm": 700.0, "tca": 1000.0, "rowshuffle": 1000.0,
                   "jaccard": 1000.0, "smat": 2000.0, "community": 3100.0}


def canonical_csr(A) -> sp.csr_matrix:
    """CSR with sorted, duplicate-free rows (a copy when A is not already so; A is never modified)."""
    if not sp.issparse(A):
        raise TypeError(f"reorder needs a scipy.sparse matrix, got {type(A).__name__}")
    C = sp.csr_matrix(A)
    if not C.has_canonical_format:
        C = C.copy()
        C.sum_duplicates()
    return C


def reorder(A, method: str, *, seed: int = 0, client=None, **params) -> np.ndarray:
    """Row permutation of A by ``method`` (one of METHODS): int64 ``perm`` with ``perm[new] = old``.

    ``client``: a ``distributed.Client``; only ``tca`` uses it (block functions on workers, same result).
    ``params`` go to the method: tca (`tca.tca_order`: n_hashes, bands, band_rows, pair_window, cluster_rows,
    sm_count, hub_nnz, stats; block_rows, pair_shard, n_threads), rowshuffle (slot_rows, threshold, k_cols,
    bin_len), jaccard (tau, max_cluster, scan), community (max_iters, tol, device: "cpu" or "gpu").
    """
    if method not in METHODS:
        raise ValueError(f"unknown reorder method {method!r}; expected one of {', '.join(METHODS)}")
    A = canonical_csr(A)
    if method == "none":
        return simple.none_order(A)
    if method == "degree":
        return simple.degree_order(A)
    if method == "rcm":
        return simple.rcm_order(A)
    if method == "community":
        return community.community_order(A, seed=seed, **params)
    if method == "rowshuffle":
        return greedy.rowshuffle_order(A, **params)
    if method == "jaccard":
        return greedy.jaccard_order(A, seed=seed, **params)
    if method == "smat":  # SMaT / Sylos Labini, exact (tasks/reorder/smat.py); params: tau, width
        return smat.smat_order(A, **params)
    block_rows = params.pop("block_rows", 1 << 16)
    pair_shard = params.pop("pair_shard", 1 << 21)
    n_threads = params.pop("n_threads", None)  # local threads; ignored with a client (workers decide)
    if client is not None:
        from tasks.reorder.sharded import DaskBackend
        backend = DaskBackend(client, A.indptr, A.indices, block_rows=block_rows, pair_shard=pair_shard)
    else:
        backend = tca.LocalBackend(A.indptr, A.indices, block_rows=block_rows, pair_shard=pair_shard,
                                   n_threads=n_threads)
    try:
        return tca.tca_order(A.indptr, A.indices, A.shape[1], seed=seed, backend=backend, **params)
    finally:
        getattr(backend, "close", lambda: None)()


def reorder_checked(A, method: str, *, seed: int = 0, client=None, stats_before: dict | None = None,
                    width: int = 8, **params) -> tuple[np.ndarray, dict, dict, bool]:
    """``reorder`` with the guarantee that TC blocks never grow.

    Returns (perm, stats_before, stats_after, applied). ``applied`` is True only when the method strictly lowers
    `tc_stats`' n_tc_blocks of 16 x ``width`` blocks (8: TF32, 16: FP16/BF16); otherwise perm is the identity
    and stats_after == stats_before.
    """
    A = canonical_csr(A)
    before = stats_before if stats_before is not None else tc_stats(A, width=width)
    perm = reorder(A, method, seed=seed, client=client, **params)
    after = tc_stats(A[perm], width=width) if method != "none" else before
    if after["n_tc_blocks"] < before["n_tc_blocks"]:
        return perm, before, after, True
    return simple.none_order(A), before, before, False


def auto_reorder(A, *, candidates=None, seed: int = 0, client=None, max_cost: float = 300.0,
                 params: dict | None = None, width: int = 8) -> tuple[str, np.ndarray, dict]:
    """Pick the method with the fewest TC blocks among ``candidates`` cheap enough for A.

    A method is skipped when its estimated single-core time nnz * COST_NS_PER_NNZ exceeds ``max_cost`` seconds.
    ``none`` is kept unless a method strictly lowers n_tc_blocks. ``params``: {method: kwargs}. Returns
    (method, perm, report); report = {"chosen", "reason", "methods": {name: {n_tc_blocks, mean_nnz_tc, seconds}
    or {skipped: why}}}. Blocks are 16 x ``width`` (the objective: 8 for TF32, 16 for FP16/BF16); each entry also
    gives MeanNnzTC at the other width (``mean_nnz_tc_8`` / ``mean_nnz_tc_16``).
    """
    A = canonical_csr(A)
    candidates = list(candidates) if candidates is not None else list(AUTO_METHODS)
    params = params or {}
    base = _score(A, width)
    methods = {"none": {**base, "seconds": 0.0}}
    best, best_perm, best_blocks = "none", simple.none_order(A), base["n_tc_blocks"]
    for m in progress.track(candidates, f"reorder auto: {A.nnz:,} nnz", unit="methods"):
        if m == "none":
            continue
        if m not in METHODS:
            raise ValueError(f"unknown reorder method {m!r}; expected one of {', '.join(METHODS)}")
        est = A.nnz * COST_NS_PER_NNZ[m] * 1e-9
        if est > max_cost:
            methods[m] = {"skipped": f"estimated {est:.0f} s > max_cost {max_cost:.0f} s for nnz={A.nnz}"}
            continue
        t0 = time.perf_counter()
        perm = reorder(A, m, seed=seed, client=client, **params.get(m, {}))
        seconds = time.perf_counter() - t0
        s = methods[m] = {**_score(A[perm], width), "seconds": seconds}
        if s["n_tc_blocks"] < best_blocks:
            best, best_perm, best_blocks = m, perm, s["n_tc_blocks"]
    if best == "none":
        reason = f"no candidate lowered TC blocks below none ({base['n_tc_blocks']})"
    else:
        reason = f"{best}: {best_blocks} TC blocks vs {base['n_tc_blocks']} for none (fewest among candidates)"
    return best, best_perm, {"chosen": best, "reason": reason, "methods": methods}


def _score(A, width: int) -> dict:
    """What auto_reorder records of A in its row order: TC blocks of 16 x ``width`` (its objective) and MeanNnzTC,
    MeanNnzTC at both widths (8: TF32 m16n8k8, 16: FP16/BF16 m16n8k16: ``mean_nnz_tc_8`` / ``mean_nnz_tc_16``) and
    SMaT's BCSR blocks at ``width`` (`smat.bcsr_score`'s fields). One marker pass counts all of it
    (kernels.formats.metrics.window_counts: 16-row windows are SMaT's block rows too); where the markers do not
    fit, tc_stats at each width and bcsr_score. 9.9M nonzeros (SBM, 2-core host): 0.12 s a candidate, where the
    three separate counts and their three copies of A[perm] took ~1.4 s (2026-11-29)."""
    other = 16 if width == 8 else 8
    nnz = int(A.nnz)
    if smat.BLOCK_ROWS == 16 and markers_fit(A.shape, nnz):
        distinct, blocks, _ = window_counts(A, window=16, widths=(width, other))
        n_tc = {w: int((-(-distinct // w)).sum()) for w in (width, other)}
        bcsr = smat.bcsr_summary(blocks[width], width)
    else:
        n_tc = {w: tc_stats(A, width=w)["n_tc_blocks"] for w in (width, other)}
        bcsr = smat.bcsr_score(A, width)
    mean = {w: nnz / n_tc[w] if n_tc[w] else 0.0 for w in (width, other)}
    return {"n_tc_blocks": n_tc[width], "mean_nnz_tc": mean[width], f"mean_nnz_tc_{width}": mean[width],
            f"mean_nnz_tc_{other}": mean[other], **bcsr}
