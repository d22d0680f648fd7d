"""Which row order to shard: fewest TC blocks per GPU, then the smallest halo exchange (``--devices`` > 1).

On one GPU `tasks.reorder.auto_reorder` keeps the order with the fewest TC blocks. Over P GPUs a resident
iteration costs the slowest shard's kernel plus its halo exchange, and on 2 H200s (110M nnz, N = 256) the
community order (halo 4.5x smaller than unordered) reached 0.76 of ideal against 0.68 for TCA, which packs more
blocks but leaves the halo as large as unordered. `choose_order` therefore keeps the candidates whose largest shard
is within ``block_slack`` of the best one's TC blocks and, among those, takes the smallest largest remote halo
(bytes per iteration: rows x N x the precision's itemsize). The estimate is the plan's own (`make_plan` splits
windows by TC blocks; `PartitionPlan.halo_bytes(remote_only=True)`) computed from the CSR, without converting.
Plain NumPy/SciPy.
"""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from storage.indexing import segment_ids
from tasks.distribute.plan import WINDOW, split_windows

BLOCK_SLACK = 1.10  # a 10% larger slowest-shard kernel is accepted for a smaller halo (H200 x2 numbers above)


def halo_estimate(A, perm: np.ndarray | None, n_parts: int, *, width: int = 8) -> dict:
    """Shards of ``A[perm]`` as `make_plan` cuts them (windows balanced by 16 x ``width`` TC blocks); per shard its
    TC blocks and its remote halo rows (distinct B rows it reads that another shard owns). Square A."""
    A = sp.csr_array(A)
    n = int(A.shape[0])
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"the halo exchange needs a square A, got shape {A.shape}")
    perm = np.arange(n, dtype=np.int64) if perm is None else np.asarray(perm, dtype=np.int64)
    Ar = A[perm]
    inv = np.empty(n, dtype=np.int64)
    inv[perm] = np.arange(n, dtype=np.int64)
    rows = segment_ids(Ar.indptr)
    window = rows // WINDOW
    n_windows = -(-n // WINDOW)
    keys = np.unique(window * n + Ar.indices.astype(np.int64))  # distinct (window, column) pairs
    blocks = -(-np.bincount(keys // n, minlength=n_windows) // int(width))
    partptr = split_windows(blocks.astype(np.float64), n_parts)
    bounds = np.minimum(partptr * WINDOW, n)
    shard_blocks, remote = [], []
    for k in range(n_parts):
        r0, r1 = int(bounds[k]), int(bounds[k + 1])
        cols = np.unique(Ar.indices[Ar.indptr[r0]:Ar.indptr[r1]].astype(np.int64))
        pos = inv[cols]
        remote.append(int(np.count_nonzero((pos < r0) | (pos >= r1))))
        shard_blocks.append(int(blocks[partptr[k]:partptr[k + 1]].sum()))
    return {"partptr": partptr.tolist(), "tc_blocks": shard_blocks, "remote_halo_rows": remote}


def choose_order(A, perms: dict, n_parts: int, n_cols_b: int, itemsize: int = 4, *, width: int = 8,
                 block_slack: float = BLOCK_SLACK) -> tuple[str, dict]:
    """The order (a key of ``perms``: name -> perm, None for the given order) to shard over ``n_parts`` devices,
    and a report per order: TC blocks per shard, remote halo rows and bytes per shard, and why."""
    report = {}
    for name, perm in perms.items():
        est = halo_estimate(A, perm, n_parts, width=width)
        est["halo_bytes"] = [r * int(n_cols_b) * int(itemsize) for r in est["remote_halo_rows"]]
        report[name] = est
    best_blocks = min(max(r["tc_blocks"]) for r in report.values())
    close = [m for m, r in report.items() if max(r["tc_blocks"]) <= block_slack * best_blocks]
    chosen = min(close, key=lambda m: (max(report[m]["halo_bytes"]), max(report[m]["tc_blocks"])))
    why = (f"{chosen}: largest shard {max(report[chosen]['tc_blocks'])} TC blocks (within {block_slack:g}x of the "
           f"fewest, {best_blocks}) and the smallest largest halo, {max(report[chosen]['halo_bytes']):,} bytes per "
           f"iteration at N = {n_cols_b}, {itemsize} bytes per value")
    return chosen, {"chosen": chosen, "reason": why, "n_parts": int(n_parts), "orders": report}


SHARD_ORDERS = ("community", "rcm")  # what `auto_reorder` does not try but a sharded run may want: smaller halos


def auto_for_devices(A, n_parts: int, n_cols_b: int, itemsize: int, *, seed: int = 0, client=None,
                     params: dict | None = None, width: int = 8, max_cost: float = 300.0) -> tuple:
    """``--reorder auto`` over ``n_parts`` devices: `auto_reorder`'s fewest-TC-blocks order, ``community`` and
    ``rcm`` (when cheap enough for A, as `auto_reorder` judges cost) and the given order, then `choose_order`.
    Returns (method, perm, report): the report has `auto_reorder`'s ``methods``, the per-order shard estimates
    under ``halo`` and the reason."""
    from kernels.formats.metrics import tc_stats
    from tasks.reorder import auto_reorder, reorder
    from tasks.reorder.api import COST_NS_PER_NNZ

    best, best_perm, report = auto_reorder(A, seed=seed, client=client, params=params, width=width,
                                           max_cost=max_cost)
    perms = {"none": None, best: best_perm}
    for m in SHARD_ORDERS:
        if m in perms:
            continue
        est = A.nnz * COST_NS_PER_NNZ.get(m, 0.0) * 1e-9
        if est > max_cost:
            report["methods"][m] = {"skipped": f"estimated {est:.0f} s > max_cost {max_cost:.0f} s"}
            continue
        t0 = time.perf_counter()
        perms[m] = reorder(A, m, seed=seed, client=client, **(params or {}).get(m, {}))
        if "n_tc_blocks" not in report["methods"].get(m, {}):  # auto_reorder does not try community
            report["methods"][m] = {**tc_stats(sp.csr_array(A)[perms[m]], width=width),
                                    "seconds": time.perf_counter() - t0}
    chosen, halo = choose_order(A, perms, n_parts, n_cols_b, itemsize, width=width)
    perm = perms[chosen] if perms[chosen] is not None else np.arange(A.shape[0], dtype=np.int64)
    report.update(chosen=chosen, reason=f"{n_parts} devices: {halo['reason']} (fewest blocks alone: {best})",
                  halo=halo)
    return chosen, perm, report
