"""``overlap="auto"``: which overlap of the resident loop (`DistributedSpmm.set_overlap`) a partition gets, decided
from the partition alone, so that the same partition always gets the same choice and therefore the same C (the
overlaps sum in other orders than the plain loop for some formats; a choice by timing could flip between runs).

The rule follows what was measured on 2 and 4 H100s at N = 256 (docs/scale-out.md, 2026-11-28):

- a shard whose boundary rows (the own rows some peer receives) are a minority has an interior whose kernel hides
  the boundary rows' exchange: the row overlap (community order, SBM 100M: 0.878 at 2 GPUs, 0.824 at 4; the weak
  mesh in community order, whose boundary rows' kernel took 55% of the kernel time: 4.29 ms against 4.84 plain);
- where nearly every row is a boundary row (random labels, RCM on an SBM) there is no interior; the column overlap
  hides the copies behind the own-column kernel as long as a shard receives about as many halo rows as it owns
  (0.95 halo rows per own row at 2 GPUs: 0.820 against 0.713 plain, RCM 0.756 against 0.640);
- beyond that the copies outlast any kernel they could hide behind (2.85 halo rows per own row at 4 GPUs: plain
  0.448, columns 0.392, rows 0.364): no overlap.

On the host ("dask") transport the overlaps run their two parts one after the other (same result, no gain): off.
An overlap's split plans are built once per `DistributedSpmm`: worth it for an iterative caller, not for one product
(the pipeline's resident mode runs one and keeps the plain loop).
"""
from __future__ import annotations

import numpy as np

# What ``overlap=True`` means. The row split: every row of C is computed once (boundary rows first, their exchange
# beside the interior rows' kernel), so it adds no work to the plain loop but a second launch and a second B
# buffer. The column split computes each row in two kernels and adds the second into C: on 4 H100s (SBM, 25M nnz
# per GPU, N = 256) it was slower than the plain loop (5.4 / 6.1 ms against 4.5 / 5.2 ms at 2 / 4 GPUs,
# docs/scale-out.md), so it stays available by name only.
OVERLAP_DEFAULT = "rows"
OVERLAP_MODES = ("rows", "columns")


def overlap_mode(on) -> str | bool:
    """An overlap setting: "rows", "columns", True (= OVERLAP_DEFAULT) or False/None (off)."""
    if on is True or (isinstance(on, np.bool_) and bool(on)):
        return OVERLAP_DEFAULT
    if on is None or on is False or (isinstance(on, np.bool_) and not on):
        return False
    if isinstance(on, str) and on in OVERLAP_MODES:
        return on
    raise ValueError(f"overlap is {on!r}, expected 'rows', 'columns', True (= {OVERLAP_DEFAULT!r}), False or "
                     f"(DistributedSpmm) 'auto'")


AUTO_BOUNDARY_MAX = 0.6  # row overlap while every shard's boundary rows are at most this share of its own rows
AUTO_HALO_MAX = 1.5  # column overlap while every shard receives at most this many halo rows per own row


def halo_shape(plan, layouts: list[dict]) -> tuple[float, float]:
    """(largest boundary share, largest halo rows per own row) over the shards, from `exchange_lists` layouts:
    a shard's boundary rows are its own rows any peer receives, its halo rows the rows it receives."""
    P = plan.n_parts
    own = np.asarray(plan.row_stop, dtype=np.int64) - np.asarray(plan.row_start, dtype=np.int64)
    sent: list[list] = [[] for _ in range(P)]
    received = np.zeros(P, dtype=np.int64)
    for k, lay in enumerate(layouts):
        for p, idx, _ in lay["recv"]:
            sent[p].append(np.asarray(idx))
            received[k] += len(idx)
    boundary = np.array([np.unique(np.concatenate(s)).size if s else 0 for s in sent], dtype=np.int64)
    mine = np.maximum(own[:P], 1)
    return float(np.max(boundary / mine)), float(np.max(received / mine))


def auto_overlap(plan, layouts: list[dict], transport: str) -> tuple[str | bool, str]:
    """(overlap mode for `DistributedSpmm.set_overlap`, the reason in words) for ``overlap="auto"``."""
    if plan.n_parts < 2:
        return False, "one shard: nothing to exchange"
    if transport != "nccl":
        return False, f"the {transport} transport runs an overlap's parts one after the other"
    boundary, halo = halo_shape(plan, layouts)
    if boundary <= AUTO_BOUNDARY_MAX:
        return "rows", (f"boundary rows at most {boundary:.0%} of a shard's rows: the interior rows' kernel hides "
                        f"their exchange")
    if halo <= AUTO_HALO_MAX:
        return "columns", (f"{boundary:.0%} of a shard's rows are boundary rows, {halo:.2f} halo rows per own "
                           f"row: the own-column kernel hides the copies")
    return False, (f"{halo:.2f} halo rows per own row: the copies outlast any kernel they could hide behind")
