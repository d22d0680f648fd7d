"""Resident (iterative) distributed SpMM: one Dask Actor per shard keeps A_k, B_k and C_k on its worker's device.

B and C are row-partitioned by the plan (shard k holds ``B[plan.shard_rows(k)]``, the rows a GNN layer's features
would have there). An iteration moves only halo rows: each shard receives from each peer the rows it references
(``plan.exchange_lists``), then runs its kernel on the extended B = [rows from lower peers | own rows | rows from
higher peers] and leaves C_k in place. ``step()`` feeds C back as the next B (square A; power-method-like use).

Data plane: on GPUs with one actor per worker, NCCL through CuPy (``cupy.cuda.nccl``: the unique id made by
rank 0, ``NcclCommunicator(P, uid, rank)`` created concurrently in every actor, grouped ``send``/``recv`` between
each pair of shards, device buffers). Otherwise (CPU, or NCCL unavailable) the actors pull the rows from each
other through Dask actor calls with NumPy arrays: same rows, same order, same results. The transport used and
the reason are in ``DistributedSpmm.transport``.

Batches: ``DistributedSpmm.iterate(n)`` runs n iterations inside ONE actor call per shard, so the driver's Dask
round trip (a few ms per call) is paid once per batch instead of once per iteration. NCCL: `ShardActor.iterate_many`
enqueues the n iterations on the GPU without a host sync between them (`tasks.distribute.nccl_loop`: fixed
buffers, CUDA-graph-replayed kernels, events read once at the end); the grouped send/recv keep the ranks in step.
Host transport:
`ShardActor.iterate_many_host` (async) publishes each iteration's send rows as host snapshots keyed by (batch,
iteration) and pulls the peers' rows with `pull_batched`, which waits until that peer has published the same
iteration; the kernel runs on the worker's actor thread, as a per-call `compute` does. Both give the same C as the
same number of `run`/`step` calls.

Overlap (`DistributedSpmm.set_overlap`): "rows" (the default of ``True``; `tasks.distribute.row_split`) computes the
boundary rows (those peers receive) first and moves the next iteration's halo, into a second extended B, while the
interior rows' kernel runs; every row once, C kept in the split's row order (undone by `get_C`/`get_C_rows`). On the
host transport it runs the same timeline (`_iterate_rows_host`) and gives the plain loop's C bitwise. "columns"
runs the own-column kernel beside the exchange and adds the halo-column kernel into C.
"""
from __future__ import annotations

import os
import time

import numpy as np

from configs.names import BASE_FORMAT
from tasks.distribute.oneshot import ShardRef
from tasks.distribute.plan import PartitionPlan, exchange_lists, shard_of
from tasks.distribute.host_batches import BATCH_ABORT_TIMEOUT_S, check_n_iters
from tasks.distribute.overlap_choice import auto_overlap
from tasks.distribute.overlap_choice import OVERLAP_DEFAULT, OVERLAP_MODES, overlap_mode  # noqa: F401 (re-exported)
from tasks.distribute.shard_actor import ShardActor

NCCL_INIT_TIMEOUT_S = 120
HALO_COPIES = ("ce", "nccl")  # how the overlaps move halo rows on NCCL: the copy engines (default), or NCCL
RELEASE_TIMEOUT_S = 60  # close(): how long the shards may take to free their state and destroy the communicator


class DistributedSpmm:
    """Resident SpMM over a cluster: ``DistributedSpmm(plan, client, M=... | store=...)``.

    ``run(B_parts)`` -> `CParts` (C left on the workers; ``.gather()`` fetches it in the original row order);
    ``step()`` runs again with C as the next B. ``iterate(n)`` (and ``step(n)``) run n iterations in one actor call
    per shard (see the module docstring). ``history`` holds one dict per iteration: ``exchange_ms`` (max over
    shards), ``kernel_ms`` (max), ``iteration_ms`` (driver wall time; for a batch, the batch's wall time / n),
    ``batched`` (False for `run`/`step`; True with ``batch_size``, ``batch_index``, ``batch_ms``, ``batch_loop_ms``,
    the slowest shard's time inside its call, and on NCCL ``batch_gap_ms``, the GPU's idle time between
    iterations), on NCCL ``exposed_ms`` (max over shards of the exchange time the kernels waited for) and
    ``iteration_gpu_ms`` (max over shards, CUDA events), with the "rows" overlap ``boundary_ms`` (max over shards
    of the boundary rows' kernel, part of ``kernel_ms``; batched on the host transport ``exposed_ms`` too),
    ``overlap`` (False, "rows" or "columns"), and per shard ``shards`` rows (halo bytes sent/received,
    exchange ms, kernel ms, and on NCCL exposed / advance / iteration GPU ms). ``transport``: "nccl" or "dask" plus
    ``transport_reason``. ``overlap``: see `set_overlap` ("auto" picks from the partition's halo: what an
    iterative caller wants; the default stays off, as the pipeline's resident mode runs one product, for which the
    overlap's split plans cannot pay back), ``overlap_reason`` why.
    ``repeats`` = 0 times the one kernel run of each iteration; ``spmm_kw`` goes to each shard's ``SpmmPlan``.
    ``prefetch_b`` (a `direct.DenseRef` of a stored B, square A): each shard starts reading its own rows of it while
    the setup goes on (`ShardActor`'s ``prefetch``); `ShardActor.load_B` then takes them.
    """

    def __init__(self, plan: PartitionPlan, client, *, M=None, store=None, perm_key: str = "none",
                 fmt: str = BASE_FORMAT, device: str = "auto", transport: str = "auto", repeats: int = 0,
                 spmm_kw: dict | None = None, overlap: bool | str = False, dtype: str = "float32",
                 halo_copy: str | None = None, prefetch_b=None):
        if M is None and store is None:
            raise ValueError("DistributedSpmm needs the shards: pass M= (in memory) or store= (Parquet)")
        self.halo_copy = (halo_copy or os.environ.get("TCSPMM_HALO_COPY") or HALO_COPIES[0]).lower()
        if self.halo_copy not in HALO_COPIES:  # before any actor exists
            raise ValueError(f"halo_copy / TCSPMM_HALO_COPY {self.halo_copy!r}: expected one of "
                             f"{', '.join(HALO_COPIES)}")
        from tasks.distribute.oneshot import _workers
        self.plan, self.client, self.repeats = plan, client, int(repeats)
        P = plan.n_parts
        layouts = [exchange_lists(plan, k) for k in range(P)]
        sends = [dict() for _ in range(P)]
        for k, lay in enumerate(layouts):
            for p, idx, _ in lay["recv"]:
                sends[p][k] = idx  # p sends these own rows to k, in k's receive order
        workers = _workers(client)
        self.workers = [workers[k % len(workers)] for k in range(P)]
        t0 = time.perf_counter()
        futures = []
        for k in range(P):
            if store is not None:
                shard = ShardRef(store, fmt, perm_key, int(plan.partptr[k]), int(plan.partptr[k + 1]))
            else:
                shard = client.scatter(shard_of(M, plan, k), workers=[self.workers[k]], hash=False)
            layout = client.scatter((plan.halo_cols[k], layouts[k], sends[k]), workers=[self.workers[k]],
                                    hash=False)
            prefetch = None if prefetch_b is None else (prefetch_b, plan.shard_rows(k))
            futures.append(client.submit(ShardActor, k, shard, layout, device, spmm_kw, dtype, prefetch, actor=True,
                                         workers=[self.workers[k]], pure=False))
        self.actors = [f.result() for f in futures]
        self._futures = futures
        t1 = time.perf_counter()
        # UCX comms move device arrays between GPUs (NVLink through CUDA IPC); over TCP they would be staged on the host
        self.device_rows = str(client.scheduler.address).startswith(("ucx://", "ucxx://"))
        _wait([a.set_peers(self.actors, self.device_rows) for a in self.actors])
        self.info = _wait([a.info() for a in self.actors])
        t2 = time.perf_counter()
        self.transport, self.transport_reason = self._pick_transport(transport)
        # where the setup went (ms): the actors (each loads its shard and builds its plan), peers and info calls,
        # the transport (NCCL's unique id and communicator init)
        self.setup_ms = {"actors_ms": (t1 - t0) * 1e3, "peers_ms": (t2 - t1) * 1e3,
                         "transport_ms": (time.perf_counter() - t2) * 1e3}
        self.halo_copy_reason = "the default" if self.halo_copy == HALO_COPIES[0] else "asked for"
        self._ce_dirty = True
        self.history: list = []
        self.overlap, self.overlap_reason = False, "off"
        self._layouts = layouts  # exchange_lists per shard: what overlap="auto" reads
        self._batches = 0  # batch ids for the host transport's batched exchange
        if (isinstance(overlap, str) and overlap == "auto") or overlap_mode(overlap):
            self.set_overlap(overlap)

    def set_overlap(self, on) -> None:
        """Overlap each iteration's halo exchange with a kernel (`ShardActor.set_overlap`): "rows" (the boundary
        rows' kernel first, their exchange beside the interior rows' kernel), "columns" (the own-column kernel
        beside the exchange, the halo-column kernel adding into C), True (= OVERLAP_DEFAULT, "rows": it adds no
        work), "auto" (chosen from the partition's halo, `tasks.distribute.overlap_choice`: the same partition,
        the same choice) or False. Builds the split plans on first use; ``info`` is refreshed (per shard
        ``overlap``, and for "rows" ``boundary_rows`` and ``interior_rows``); ``overlap_reason`` says why."""
        if isinstance(on, str) and on == "auto":
            mode, reason = self.auto_overlap()
        else:
            mode = overlap_mode(on)
            reason = "asked for" if mode else "off"
        _wait([a.set_overlap(mode) for a in self.actors])
        self.overlap, self.overlap_reason, self._ce_dirty = mode, reason, True
        self.info = _wait([a.info() for a in self.actors])

    def auto_overlap(self) -> tuple[str | bool, str]:
        """(mode, reason) that ``set_overlap("auto")`` applies for this partition and transport (not applied)."""
        return auto_overlap(self.plan, self._layouts, self.transport)

    def _pick_transport(self, transport: str) -> tuple[str, str]:
        if transport == "dask":
            return "dask", "requested"
        on_gpu = all(not i["gpu"].startswith("cpu:") for i in self.info)
        one_per_worker = len(set(self.workers)) == len(self.workers)
        if not on_gpu or not one_per_worker:
            if transport == "nccl":
                raise RuntimeError("transport='nccl' needs one GPU actor per worker")
            return "dask", "CPU workers" if not on_gpu else "more shards than workers"
        try:
            uid = self.actors[0].nccl_uid().result()
        except Exception as err:  # CuPy built without NCCL, or libnccl not found
            if transport == "nccl":
                raise
            return "dask", f"NCCL unavailable: {type(err).__name__}: {err}"
        try:
            _wait([a.init_nccl(uid, len(self.actors)) for a in self.actors], timeout=NCCL_INIT_TIMEOUT_S)
        except TimeoutError as err:  # the actors' threads stay blocked in init: no fallback on these actors
            self.close()
            raise RuntimeError(f"NCCL communicator init did not finish in {NCCL_INIT_TIMEOUT_S} s on workers "
                               f"{self.workers}; retry with transport='dask'") from err
        return "nccl", "one GPU per worker"

    def _connect_ce(self) -> None:
        """With ``halo_copy="ce"`` and an overlap on NCCL: (re)make the copy-engine exchange when a shard
        has none or reallocated its extended Bs (`ShardActor.ce_stale`): every shard exports, then maps the
        others' (`tasks.distribute.ce_exchange`). Where that fails (shards on several hosts, no IPC) the shards
        keep NCCL and ``halo_copy_reason`` says why."""
        if self.halo_copy != "ce" or self.overlap not in OVERLAP_MODES or len(self.actors) < 2 or not self._ce_dirty:
            return
        self._ce_dirty = False  # until B is loaded again (a new N reallocates the extended Bs)
        if not any(_wait([a.ce_stale() for a in self.actors])):
            return
        try:
            exports = _wait([a.ce_export(len(self.actors)) for a in self.actors])
            _wait([a.ce_connect(exports) for a in self.actors])
            self.halo_copy_reason = "copy engines over CUDA IPC, one node"
        except Exception as err:
            _wait([a.ce_drop() for a in self.actors])
            self.halo_copy = "nccl"
            self.halo_copy_reason = f"copy engines unavailable ({type(err).__name__}: {err}); NCCL kept"

    def scatter(self, B: np.ndarray) -> None:
        """Place B (original row order, [n_rows, N]) on the shards: shard k gets ``B[plan.shard_rows(k)]``."""
        self.load([np.asarray(B)[self.plan.shard_rows(k)] for k in range(self.plan.n_parts)])

    def load(self, B_parts: list) -> None:
        """Set each shard's own B rows (host arrays, or Dask futures of them)."""
        if len(B_parts) != self.plan.n_parts:
            raise ValueError(f"got {len(B_parts)} B parts, expected n_parts = {self.plan.n_parts}")
        _wait([a.set_B(b) for a, b in zip(self.actors, B_parts)])
        self._ce_dirty = True

    def run(self, B_parts: list | None = None) -> "CParts":
        """One iteration: halo exchange, then every shard's kernel. ``B_parts=None`` uses the resident B."""
        if B_parts is not None:
            self.load(B_parts)
        t0 = time.perf_counter()
        if self.transport == "nccl":
            self._connect_ce()
            ex, ker = zip(*_wait([a.iterate_nccl(self.repeats) for a in self.actors]))
        else:
            ex = _wait([a.exchange_host() for a in self.actors])
            ker = _wait([a.compute(self.repeats) for a in self.actors])
        wall_ms = (time.perf_counter() - t0) * 1e3
        shards = [{**e, **c, "worker": w} for e, c, w in zip(ex, ker, self.workers)]
        self._record(shards, wall_ms, batched=False)
        return CParts(self)

    def _record(self, shards: list, wall_ms: float, **extra) -> None:
        shards = [{**s, "gpu": self.info[s["shard"]]["gpu"]} for s in shards]
        worst = {key: max((s[key] for s in shards if key in s), default=None)
                 for key in ("exchange_ms", "kernel_ms", "exposed_ms", "iteration_gpu_ms", "boundary_ms", "pack_ms")}
        self.history.append({"iteration": len(self.history), "iteration_ms": wall_ms, "overlap": self.overlap,
                             **{k: (0.0 if v is None and k in ("exchange_ms", "kernel_ms") else v)
                                for k, v in worst.items()}, "shards": shards, **extra})

    def step(self, n: int = 1) -> "CParts":
        """C becomes B, then `run` (square A). ``n`` > 1: n such steps batched in one actor call per shard
        (``iterate(n)``); ``n`` = 1 keeps the one-call-per-iteration path."""
        if check_n_iters(n) > 1:
            return self.iterate(n)
        _wait([a.advance() for a in self.actors])
        return self.run()

    def iterate(self, n_iters: int, B_parts: list | None = None, *, advance: bool = True) -> "CParts":
        """``n_iters`` iterations in ONE actor call per shard (the driver round trip paid once per batch).

        ``advance=True``: a power iteration, the same C as ``n_iters`` `step` calls; with ``B_parts`` they are
        loaded first and the first iteration multiplies them (the same as ``run(B_parts)`` then ``n_iters - 1``
        steps). ``advance=False``: every iteration multiplies the resident B (the same C as ``n_iters`` `run`
        calls; for timing). Appends ``n_iters`` `history` entries (``batched`` True, ``iteration_ms`` = the batch's
        driver wall time / n) and returns the last iteration's `CParts`."""
        n = check_n_iters(n_iters)
        if B_parts is not None:
            self.load(B_parts)
        advance_first = bool(advance) and B_parts is None
        t0 = time.perf_counter()
        if self.transport == "nccl":
            self._connect_ce()
            res = _wait([a.iterate_many(n, advance_first, bool(advance), self.repeats) for a in self.actors])
        else:
            self._batches += 1
            futures = [a.iterate_many_host(n, self._batches, advance_first, bool(advance), self.repeats)
                       for a in self.actors]
            try:
                res = _wait(futures)
            except Exception:  # let the other shards end this batch (they raise too) before a next one starts
                for f in futures:
                    try:
                        f.result(timeout=BATCH_ABORT_TIMEOUT_S)
                    except Exception:
                        pass
                raise
        wall_ms = (time.perf_counter() - t0) * 1e3
        loop_ms = max((r["loop_ms"] for r in res), default=0.0)
        gap_ms = max((r.get("gap_ms", 0.0) for r in res), default=0.0)  # GPU idle between iterations (NCCL loop)
        for i in range(n):
            shards = [{**r["iterations"][i][0], **r["iterations"][i][1], "worker": w}
                      for r, w in zip(res, self.workers)]
            self._record(shards, wall_ms / n, batched=True, batch_size=n, batch_index=i, batch_ms=wall_ms,
                         batch_loop_ms=loop_ms, batch_gap_ms=gap_ms)
        return CParts(self)

    def __enter__(self) -> "DistributedSpmm":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Release the actors: every shard frees its device state and destroys its communicator at once
        (`ShardActor.release`), then the actors are dropped; also on leaving a ``with`` block."""
        if self.actors:
            try:
                _wait([a.release() for a in self.actors], timeout=RELEASE_TIMEOUT_S)
            except Exception:  # a failed worker has nothing left to release; the actors are dropped all the same
                pass
        self.client.cancel(self._futures)
        self.actors = []


class CParts:
    """C left on the workers after a `DistributedSpmm.run`; fetch with `gather` or `parts` before the next
    `run`/`step` replaces it (a stale handle raises RuntimeError instead of returning a later C)."""

    def __init__(self, owner: DistributedSpmm):
        self.owner = owner
        self.stats = owner.history[-1]
        self.iteration = self.stats["iteration"]

    def _check_current(self) -> None:
        latest = self.owner.history[-1]["iteration"] if self.owner.history else None
        if latest != self.iteration or not self.owner.actors:
            raise RuntimeError(f"C of iteration {self.iteration} was replaced by iteration {latest} (or the actors "
                               "were closed); gather it before the next run")

    def parts(self) -> list[np.ndarray]:
        """Host copies of the C row blocks, shard order (block k = C[plan.shard_rows(k)])."""
        self._check_current()
        return _wait([a.get_C() for a in self.owner.actors])

    def rows(self, rows) -> np.ndarray:
        """C[rows] for original row ids ``rows``, fetching only those rows from their shards (a spot check of a
        C too large to gather every time)."""
        self._check_current()
        rows = np.asarray(rows, dtype=np.int64)
        shard, index = self.owner.plan.locate(rows)
        ks = [k for k in range(self.owner.plan.n_parts) if np.any(shard == k)]
        got = _wait([self.owner.actors[k].get_C_rows(index[shard == k]) for k in ks])
        out = None
        for k, part in zip(ks, got):
            if out is None:
                out = np.empty((rows.shape[0], part.shape[1]), dtype=np.float32)
            out[shard == k] = part
        return out if out is not None else np.empty((0, 0), dtype=np.float32)

    def gather(self) -> np.ndarray:
        """C [n_rows, N] float32 in the ORIGINAL row order."""
        plan = self.owner.plan
        parts = self.parts()
        C = np.empty((plan.shape[0], parts[0].shape[1] if parts else 0), dtype=np.float32)
        for k, C_k in enumerate(parts):
            C[plan.shard_rows(k)] = C_k
        return C


def _wait(actor_futures: list, timeout: float | None = None) -> list:
    """Results of actor calls issued together (they run concurrently on their workers)."""
    return [f.result(timeout=timeout) for f in actor_futures]
