"""The host transport's batches of the shard actor (`tasks.distribute.shard_actor.ShardActor` inherits them): n
iterations in one actor call per shard without NCCL. Each shard publishes an iteration's send rows as host
snapshots keyed by (batch, iteration) and pulls its peers' rows with `pull_batched`, which waits until that peer
has published the same iteration; the kernels run on the worker's actor thread. A failed batch is told to the peers
(`abort_batch`) so none waits forever. The "rows" overlap (`_iterate_rows_host`) publishes the boundary rows as soon
as their kernel is done and pulls the next iteration's halo while the interior rows' kernel runs. Both give the
plain loop's C bit for bit. Runs inside Dask workers, in the worker's event loop (async methods) and its actor
thread.
"""
from __future__ import annotations

import asyncio
import time

import numpy as np

from tasks.distribute import device as dev

BATCH_ABORT_TIMEOUT_S = 30  # a failed host-transport batch: how long to tell the peers / wait for their calls


def check_n_iters(n_iters) -> int:
    """A batch size: an int >= 1 (bool and non-integral values are refused)."""
    if isinstance(n_iters, (bool, np.bool_)) or not isinstance(n_iters, (int, np.integer)):
        raise ValueError(f"n_iters must be an int >= 1, got {n_iters!r}")
    if n_iters < 1:
        raise ValueError(f"n_iters must be >= 1, got {n_iters}")
    return int(n_iters)


def _actor_executor():
    """The Dask worker's actor thread (where sync actor methods run), or None (asyncio's default) outside one."""
    try:
        from distributed import get_worker
        return get_worker().executors["actor"]
    except Exception:  # not on a worker, or a distributed without the actor executor
        return None


class HostBatches:
    """The host-transport batch methods of `ShardActor` (they use its state: sends, recv, peers, plans, B, C)."""

    async def iterate_many_host(self, n_iters: int, batch: int, advance_first: bool = False,
                                advance_rest: bool = True, repeats: int = 0) -> dict:
        """Host ("dask") transport: ``n_iters`` iterations in this one call. Each iteration: advance when asked,
        publish host copies of the rows every peer needs (once the peers took the previous iteration's: at most one
        iteration pending), pull this iteration's rows from every peer (`pull_batched` waits for the peer to publish
        them), then `compute` on the worker's actor thread (where a per-call `compute` runs). ``batch``: an id the
        driver increases per batch, the same on all actors, which are called concurrently. A shard that fails marks
        the batch failed on every peer (`abort_batch`), so that no peer waits forever for its rows."""
        n = check_n_iters(n_iters)
        cond = self._condition()
        loop = asyncio.get_running_loop()
        pool = _actor_executor()
        batch = int(batch)
        async with cond:
            self._batch = batch
            self._outbox.clear()  # what an earlier, failed batch left
            cond.notify_all()
        its, t0 = [], time.perf_counter()
        try:
            if self.overlap == "rows":
                await self._iterate_rows_host(n, batch, advance_first, advance_rest, its)
            else:
                for i in range(n):
                    self._check_batch(batch)
                    if advance_first if i == 0 else advance_rest:
                        await loop.run_in_executor(pool, self.advance)
                    await self._publish(batch, i)
                    t1 = time.perf_counter()
                    parts = await asyncio.gather(*(self.peers[p].pull_batched(self.k, batch, i) for p, _, _ in self.recv))
                    self._check_batch(batch)
                    for (p, n_rows, start), rows in zip(self.recv, parts):
                        self.B_ext[start:start + n_rows] = dev.to_device(rows, self.on_gpu)
                    ex = self._exchange_stats((time.perf_counter() - t1) * 1e3, "dask")
                    its.append((ex, await loop.run_in_executor(pool, self.compute, repeats)))
        except BaseException as err:
            reason = f"{type(err).__name__}: {err}"
            async with cond:
                first = batch not in self._failed
                self._failed.setdefault(batch, f"shard {self.k}: {reason}")
                cond.notify_all()
            if first:  # this shard is where the batch failed: tell the peers (they are waiting on its rows)
                calls = [q.abort_batch(batch, self._failed[batch]) for j, q in enumerate(self.peers) if j != self.k]
                try:
                    await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), BATCH_ABORT_TIMEOUT_S)
                except Exception:  # a peer that cannot be reached is not waiting on anything here
                    pass
            raise
        return self._batch_stats(its, (time.perf_counter() - t0) * 1e3)

    async def _iterate_rows_host(self, n: int, batch: int, advance_first: bool, advance_rest: bool,
                                 its: list) -> None:
        """`iterate_many_host` with the "rows" overlap, the `nccl_loop` timeline with host rows: iteration 0 gets
        its halo first (exposed); then each iteration runs the boundary rows' kernel on the actor thread, stores
        those rows of the next B into the other extended B (``alt_B``) and publishes them at once, and pulls the
        peers' rows of the next iteration into ``alt_B``'s halo in the event loop while the interior rows' kernel
        runs on the actor thread (on ``B_ext``, which nothing writes meanwhile); then the interior rows of the next
        B, the wait for the pull (``exposed_ms``) and the swap. Same C, bitwise, as the plain loop."""
        loop, pool = asyncio.get_running_loop(), _actor_executor()
        split, pending = self.row_split, None

        def kernel(part: str, store: bool, C, B_in):  # on the actor thread
            with dev.Timer(self.on_gpu) as t:
                B_in = self.b_in() if B_in is None else B_in  # halo-order formats: gathered once per iteration
                split.run(part, B_in, C)
            if store:
                split.store(self.own_rows(self.alt_B()), C, part)
            return B_in, t.ms

        try:
            for i in range(n):
                self._check_batch(batch)
                last = i + 1 == n
                if i == 0:
                    if advance_first:
                        await loop.run_in_executor(pool, self.advance)
                    if not last and not advance_rest:  # the next iterations multiply this same B
                        self.own_rows(self.alt_B())[...] = self.own_rows()
                    await self._publish(batch, 0)
                    t1 = time.perf_counter()
                    await self._pull_into(batch, 0, self.B_ext)
                    ex_ms = exposed_ms = (time.perf_counter() - t1) * 1e3
                C = self._overlap_out()
                B_in, bnd_ms = await loop.run_in_executor(pool, kernel, "boundary", not last and advance_rest, C,
                                                          None)
                if not last:
                    await self._publish(batch, i + 1, self.own_rows(self.alt_B()))
                    pending = asyncio.ensure_future(self._timed_pull(batch, i + 1, self.alt_B()))
                _, int_ms = await loop.run_in_executor(pool, kernel, "interior", not last and advance_rest, C, B_in)
                self.C, self.c_split = C, True
                ex = {**self._exchange_stats(ex_ms, "dask"), "overlap": "rows", "exposed_ms": exposed_ms}
                its.append((ex, {"shard": self.k, "kernel_ms": bnd_ms + int_ms, "boundary_ms": bnd_ms,
                                 "kernel": self._kernels()}))
                if not last:
                    t1 = time.perf_counter()
                    ex_ms = await pending
                    pending, exposed_ms = None, (time.perf_counter() - t1) * 1e3
                    self.swap_B()
        finally:
            if pending is not None:  # a failed iteration: the pull ends (rows, or the batch's failure) unwaited
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)

    async def _pull_into(self, batch: int, i: int, B) -> None:
        """Iteration ``i``'s rows from every peer (`pull_batched`) into the halo rows of extended B ``B``."""
        parts = await asyncio.gather(*(self.peers[p].pull_batched(self.k, batch, i) for p, _, _ in self.recv))
        self._check_batch(batch)
        for (p, n_rows, start), rows in zip(self.recv, parts):
            B[start:start + n_rows] = dev.to_device(rows, self.on_gpu)

    async def _timed_pull(self, batch: int, i: int, B) -> float:
        t0 = time.perf_counter()
        await self._pull_into(batch, i, B)
        return (time.perf_counter() - t0) * 1e3

    async def pull_batched(self, dst: int, batch: int, i: int) -> np.ndarray:
        """Host rows shard ``dst`` needs for iteration ``i`` of ``batch``; waits until they are published."""
        cond = self._condition()
        async with cond:
            def ready():  # published, failed, or this shard already past that batch
                return (batch, i) in self._outbox or batch in self._failed or \
                    (self._batch is not None and self._batch > batch)
            await cond.wait_for(ready)
            if (batch, i) not in self._outbox:
                raise RuntimeError(self._failed.get(batch, f"shard {self.k}: batch {batch} is over "
                                                           f"(now in batch {self._batch})"))
            pending = self._outbox[(batch, i)]
            rows = pending.pop(dst)
            if not pending:
                del self._outbox[(batch, i)]
                cond.notify_all()
            return rows

    async def abort_batch(self, batch: int, reason: str) -> None:
        """Mark ``batch`` failed (a peer failed in it): this shard's waits in that batch raise."""
        cond = self._condition()
        async with cond:
            self._failed.setdefault(int(batch), reason)
            for old in [b for b in self._failed if b < int(batch) - 8]:
                del self._failed[old]
            cond.notify_all()

    async def _publish(self, batch: int, i: int, own=None) -> None:
        """Host copies of the rows each peer needs for iteration ``i`` (from ``own``, default the current own
        rows), once the peers took iteration ``i - 1``'s."""
        cond = self._condition()
        async with cond:
            await cond.wait_for(lambda: (batch, i - 1) not in self._outbox or batch in self._failed
                                or self._batch != batch)
            self._check_batch(batch)
            if self.sends:
                own = self.own_rows() if own is None else own
                self._outbox[(batch, i)] = {p: self._rows_out(own[idx]) for p, idx in self.sends.items()}
                cond.notify_all()

    def _check_batch(self, batch: int) -> None:
        if batch in self._failed:
            raise RuntimeError(f"batch {batch} failed: {self._failed[batch]}")
        if self._batch != batch:
            raise RuntimeError(f"shard {self.k}: batch {batch} was superseded by batch {self._batch}")

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:  # made inside the worker's event loop, where every async method runs
            self._cond = asyncio.Condition()
        return self._cond
