"""Partition plan: P contiguous shards of row windows balanced by TC blocks, with each shard's halo of B rows.

Plain NumPy (no Dask): the driver makes the plan once; workers only read their shard.

Conventions (docs/architecture.md): ``perm[new] = old``; the ME-TCF ``M`` is of the (possibly reordered) matrix
``A[perm]``, so window w holds reordered rows ``16w .. 16w+15`` while its columns (``sparse_a_to_b``) are original
column ids, i.e. original rows of B. Shard k owns windows ``partptr[k]:partptr[k+1]`` (a window is never split)
and reordered rows ``row_start[k]:row_stop[k]``.

Resident mode (square A): B and C are row-partitioned by the same plan *in the reordered order*: shard k holds
``B[perm[row_start[k]:row_stop[k]]]``. The owner of original row j of B is therefore the shard holding reordered
position ``inv_perm[j]``; that is what ``halo_owner`` records (``-1`` for a rectangular A, which has no owner).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from kernels.formats.blocks import WINDOW
from storage.indexing import index_dtype

PLAN_VERSION = 1


@dataclass(frozen=True)
class PartitionPlan:
    """Shards of a tiled format (any with ShardOps: `tasks.distribute.formats`) over row windows; "blocks" are its
    tiles and "nonzeros" its per-tile items (BCSR: the h x w stored values of its blocks; CVSE: its V x 1 vectors
    are the tiles, their V values the items).

    - ``partptr`` [P + 1] int64: shard k owns windows ``partptr[k]:partptr[k+1]``; ``partptr[0] = 0``,
      ``partptr[P] = n_windows``, non-decreasing (a shard may be empty when P > n_windows).
    - ``row_start``/``row_stop`` [P] int64: reordered rows of each shard (half-open), ``min(16 * partptr, M)``.
    - ``block_ptr``/``nnz_ptr`` [P + 1] int64: TC blocks / nonzeros of each shard (slices of the format's arrays).
    - ``n_blocks``, ``nnz``, ``nbytes`` [P] int64: per-shard TC blocks, nonzeros, bytes of its format arrays.
    - ``halo_cols``: list of P sorted int64 arrays, the distinct original columns of B the shard references
      (``sparse_a_to_b`` of its blocks without -1).
    - ``halo_owner``: list of P int64 arrays aligned with ``halo_cols``: the shard owning that row of B in
      resident mode (``-1`` when A is rectangular). ``halo_local`` gives the row's index inside its owner's block.
    - ``perm``: the reordering of M's rows (``perm[new] = old``) or None for natural order.
    """

    shape: tuple[int, int]
    partptr: np.ndarray
    row_start: np.ndarray
    row_stop: np.ndarray
    block_ptr: np.ndarray
    nnz_ptr: np.ndarray
    n_blocks: np.ndarray
    nnz: np.ndarray
    nbytes: np.ndarray
    halo_cols: list = field(repr=False)
    halo_owner: list = field(repr=False)
    halo_local: list = field(repr=False)
    perm: np.ndarray | None = field(default=None, repr=False)
    balance_by: str = "blocks"

    @property
    def n_parts(self) -> int:
        return int(self.partptr.shape[0]) - 1

    @property
    def n_rows(self) -> np.ndarray:
        return self.row_stop - self.row_start

    @property
    def square(self) -> bool:
        return int(self.shape[0]) == int(self.shape[1])

    def shard_rows(self, k: int) -> np.ndarray:
        """Original row ids of shard k's rows (where its block of C lands: ``C[shard_rows(k)] = C_k``)."""
        r0, r1 = int(self.row_start[k]), int(self.row_stop[k])
        return np.arange(r0, r1, dtype=np.int64) if self.perm is None else self.perm[r0:r1]

    def locate(self, rows) -> tuple[np.ndarray, np.ndarray]:
        """(shard, index inside that shard's block of C) of original row ids ``rows``: the inverse of
        `shard_rows`, so ``C_k[index] = C[rows]`` where shard = k."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= self.shape[0]):
            raise IndexError(f"row ids must lie in [0, {self.shape[0]}), got {rows.min()}..{rows.max()}")
        pos = rows
        if self.perm is not None:  # original row perm[i] sits at reordered position i
            inv = np.empty_like(self.perm)
            inv[self.perm] = np.arange(self.perm.shape[0], dtype=self.perm.dtype)
            pos = inv[rows]
        shard = np.searchsorted(self.row_start, pos, side="right") - 1  # empty shards are skipped: later start
        return shard, pos - self.row_start[shard]

    def remote_mask(self, k: int) -> np.ndarray:
        """Halo entries of shard k owned by another shard (what a resident exchange moves)."""
        return self.halo_owner[k] != k

    def halo_bytes(self, n_cols_b: int, itemsize: int = 4, *, remote_only: bool = False) -> np.ndarray:
        """Bytes of B rows each shard needs [P]: all its halo rows, or (``remote_only``) only those another shard
        owns (the resident exchange volume)."""
        counts = [int(m.sum()) if remote_only else int(c.shape[0])
                  for c, m in zip(self.halo_cols, (self.remote_mask(k) for k in range(self.n_parts)))]
        return np.asarray(counts, dtype=np.int64) * int(n_cols_b) * int(itemsize)

    def send_all(self, n_cols_b: int, itemsize: int = 4) -> np.ndarray:
        """Per shard, True when sending all of B is no more bytes than its halo rows plus their index [P]."""
        idx = np.dtype(index_dtype(self.shape[1])).itemsize
        halo = self.halo_bytes(n_cols_b, itemsize) + np.asarray([c.shape[0] for c in self.halo_cols]) * idx
        return halo >= int(self.shape[1]) * int(n_cols_b) * int(itemsize)

    def fingerprint(self) -> str:
        """12 hex of sha256 over shape, partptr and perm: names ``plans/<P>-<hash>.json``."""
        h = hashlib.sha256(np.asarray(self.shape, dtype=np.int64).tobytes())
        h.update(self.partptr.astype(np.int64).tobytes())
        if self.perm is not None:
            h.update(self.perm.astype(np.int64).tobytes())
        return h.hexdigest()[:12]

    def summary(self, n_cols_b: int | None = None, itemsize: int = 4) -> dict:
        """JSON-ready description (what ``plans/<P>-<hash>.json`` holds; halos are recomputable, not stored)."""
        out = {"version": PLAN_VERSION, "shape": [int(s) for s in self.shape], "n_parts": self.n_parts,
               "balance_by": self.balance_by, "partptr": self.partptr.tolist(), "row_start": self.row_start.tolist(),
               "row_stop": self.row_stop.tolist(), "n_blocks": self.n_blocks.tolist(), "nnz": self.nnz.tolist(),
               "nbytes": self.nbytes.tolist(), "halo_rows": [int(c.shape[0]) for c in self.halo_cols],
               "remote_halo_rows": [int(self.remote_mask(k).sum()) for k in range(self.n_parts)],
               "reordered": self.perm is not None, "fingerprint": self.fingerprint()}
        if n_cols_b is not None:
            out["n_cols_b"] = int(n_cols_b)
            out["halo_bytes"] = self.halo_bytes(n_cols_b, itemsize).tolist()
            out["send_all"] = self.send_all(n_cols_b, itemsize).tolist()
        return out


def _bytes_per_window(M) -> np.ndarray:
    """Bytes of each window's share of the format's arrays, float64 [n_windows]."""
    from tasks.distribute.formats import shard_ops
    ops = shard_ops(M)
    tiles = np.asarray(ops.tiles(M), dtype=np.int64)
    n = tiles.shape[0] - 1
    return ops.nbytes(M, np.arange(n + 1, dtype=np.int64), tiles, ops.items(M, tiles)).astype(np.float64)


def split_windows(weights: np.ndarray, n_parts: int) -> np.ndarray:
    """``partptr`` [P + 1] over windows: cut the cumulative weight at the boundary nearest each ``k * total / P``.

    Every shard weighs at most ``total / P + max(weights)`` (the cut is within one window of its target).
    """
    if n_parts < 1:
        raise ValueError(f"n_parts is {n_parts}, expected >= 1")
    n = int(weights.shape[0])
    cum = np.zeros(n + 1, dtype=np.float64)
    np.cumsum(weights, out=cum[1:])
    targets = cum[-1] * np.arange(1, n_parts, dtype=np.float64) / n_parts
    right = np.searchsorted(cum, targets, side="left")  # first boundary with cum >= target
    left = np.maximum(right - 1, 0)
    right = np.minimum(right, n)
    nearest = np.where(targets - cum[left] <= cum[right] - targets, left, right)
    nearest = np.maximum.accumulate(nearest) if nearest.shape[0] else nearest
    return np.concatenate([[0], nearest, [n]]).astype(np.int64)


def make_plan(M, n_parts: int, *, perm: np.ndarray | None = None, balance_by: str = "blocks") -> PartitionPlan:
    """Split M's row windows into ``n_parts`` contiguous shards balanced by tiles (TC blocks) or ``"bytes"``.

    M: a converted object of a format that can run sharded (`tasks.distribute.formats.shard_ops`; InputError in one
    line for the others). ``block_ptr``/``nnz_ptr`` are then the format's tile and item offsets. ``perm``
    (``perm[new] = old``, the reordering M was built from) only affects where C lands and who owns which B row in
    resident mode; the shards themselves depend on M alone. Does not mutate M.
    """
    from tasks.distribute.formats import shard_ops
    ops = shard_ops(M)
    tiles = np.asarray(ops.tiles(M), dtype=np.int64)
    if balance_by == "blocks":
        weights = np.diff(tiles).astype(np.float64)
    elif balance_by == "bytes":
        weights = _bytes_per_window(M)
    else:
        raise ValueError(f"balance_by is {balance_by!r}, expected 'blocks' or 'bytes'")
    n_rows, n_cols = (int(s) for s in M.shape)
    if perm is not None:
        perm = np.asarray(perm, dtype=np.int64)
        if perm.shape != (n_rows,):
            raise ValueError(f"perm has shape {perm.shape}, expected ({n_rows},) = (n_rows,)")
    partptr = split_windows(weights, n_parts)
    rows = np.minimum(partptr * WINDOW, n_rows)
    block_ptr = tiles[partptr]
    nnz_ptr = ops.items(M, block_ptr)
    n_blocks, nnz = np.diff(block_ptr), np.diff(nnz_ptr)
    nbytes = ops.nbytes(M, partptr, block_ptr, nnz_ptr)
    halo_cols, halo_owner, halo_local = [], [], []
    if n_rows == n_cols:
        inv = np.empty(n_rows, dtype=np.int64)
        inv[perm if perm is not None else np.arange(n_rows)] = np.arange(n_rows, dtype=np.int64)
    for k in range(n_parts):
        cols = ops.halo(M, int(block_ptr[k]), int(block_ptr[k + 1]))
        halo_cols.append(cols)
        if n_rows == n_cols:
            pos = inv[cols]  # reordered position of each needed B row
            owner = np.searchsorted(rows, pos, side="right") - 1
            # Empty shards share a row_start with the next one: searchsorted(side="right") already skips them.
            halo_owner.append(owner.astype(np.int64))
            halo_local.append(pos - rows[owner])
        else:
            halo_owner.append(np.full(cols.shape[0], -1, dtype=np.int64))
            halo_local.append(np.full(cols.shape[0], -1, dtype=np.int64))
    return PartitionPlan((n_rows, n_cols), partptr, rows[:-1].copy(), rows[1:].copy(), block_ptr, nnz_ptr,
                         n_blocks, nnz, np.asarray(nbytes, dtype=np.int64), halo_cols, halo_owner, halo_local, perm,
                         balance_by)


def shard_of(M, plan: PartitionPlan, k: int):
    """Shard k of M (a converted object of any shardable format) as a standalone object of shape (rows of shard k, K);
    columns stay global. Views where possible; equal to the store's window-range read of the shard."""
    from tasks.distribute.formats import shard_ops
    return shard_ops(M).take(M, int(plan.partptr[k]), int(plan.partptr[k + 1]), int(plan.block_ptr[k]),
                             int(plan.block_ptr[k + 1]), int(plan.row_stop[k] - plan.row_start[k]))




def exchange_lists(plan: PartitionPlan, k: int) -> dict:
    """Resident layout of shard k's extended B (own rows plus the halo rows received from peers).

    Rows received from peers with a lower rank come first, then k's own rows, then rows from higher ranks; each
    peer's rows are contiguous and ascending in the peer's local index. Without a reordering this makes the
    extended index increasing in the original column, so the renamed shard stays in canonical ME-TCF order.
    Returns a dict: ``recv`` list of (peer, local rows at the peer [n], first row in the extended B), ``own_offset``,
    ``n_ext`` (rows of the extended B) and ``ext_index`` [len(halo_cols[k])] (each halo column's extended row).
    """
    if not plan.square:
        raise ValueError(f"resident mode needs a square A, got shape {plan.shape}")
    owner, local = plan.halo_owner[k], plan.halo_local[k]
    n_own = int(plan.row_stop[k] - plan.row_start[k])
    remote = owner != k
    order = np.flatnonzero(remote)[np.lexsort((local[remote], owner[remote]))]
    n_lower = int(np.count_nonzero(owner[remote] < k))
    pos = np.arange(order.shape[0], dtype=np.int64)
    pos[n_lower:] += n_own  # own rows sit between the lower and the higher peers
    ext = np.empty(owner.shape[0], dtype=np.int64)
    ext[~remote] = local[~remote] + n_lower
    ext[order] = pos
    peers, starts = np.unique(owner[order], return_index=True)
    bounds = np.append(starts, order.shape[0])
    recv = [(int(p), local[order[s:e]], int(pos[s])) for p, s, e in zip(peers, bounds[:-1], bounds[1:])]
    return {"recv": recv, "own_offset": n_lower, "n_ext": n_own + int(order.shape[0]), "ext_index": ext}


def persist_plan(M, plan: PartitionPlan, store, perm_key: str, *, fmt: str | None = None,
                 n_cols_b: int | None = None, meta: dict | None = None):
    """Write each shard as its own ME-TCF Parquet file (``store.write_format(..., window_ranges=partptr)``) and
    the plan as ``<matrix folder>/plans/<P>-<fingerprint>.json`` (atomic). Returns the JSON path.

    ``store`` is a ``storage.MatrixStore``. The JSON names the format artifact so a worker reads only its shard
    with ``store.read_format(fmt, perm_key, partptr[k], partptr[k + 1])``.
    """
    from storage.atomic import atomic_write_bytes
    from storage.naming import dumps

    from tasks.distribute.formats import format_name
    fmt = fmt or format_name(M)
    store.write_format(fmt, perm_key, M, meta or {}, window_ranges=plan.partptr)
    doc = {**plan.summary(n_cols_b), "fmt": fmt, "perm_key": perm_key, "matrix_id": store.matrix_id}
    path = store.folder / "plans" / f"{plan.n_parts}-{plan.fingerprint()}.json"
    atomic_write_bytes(path, (dumps(doc) + "\n").encode())
    return path


