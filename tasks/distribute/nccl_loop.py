"""The resident iteration on GPUs over NCCL, enqueued without a host sync per iteration.

One iteration of shard k (`enqueue`), on two CUDA streams of the shard's actor::

    s_comp:  [advance: own rows of B <- C] e_adv ........ own-column kernel e_own | wait e_x | halo kernel e_end
    s_comm:            wait e_adv | pack send rows | grouped NCCL send/recv e_x

With ``overlap`` off, the whole-shard kernel runs after ``wait e_x`` instead of the two split kernels (this is the
"columns" overlap). Every buffer is allocated once (the packed send rows, C, the extended B), so each
`SpmmPlan.run` call repeats one bound call on the same pointers and is replayed as a CUDA graph from its third call.
The stream order makes the next iteration safe without a sync: its advance (s_comp) follows this iteration's halo
kernel, and its receive (s_comm) waits for that advance, so no halo row is overwritten while a kernel still reads it.

The "rows" overlap (`enqueue_rows`; `tasks.distribute.row_split`): the boundary rows (those peers receive) are
computed first, and the NEXT iteration's exchange runs beside this iteration's interior rows. Two extended Bs, X
(``B_ext``, this iteration's) and Y (``B_alt``, the next one's); C in the split's row order, [boundary | interior]::

    s_comp:  [i = 0: advance C -> X; e_adv] wait e_x(i) | boundary kernel C[:nb] = A_bnd X | bnd rows C -> Y e_bnd
             | interior kernel C[nb:] = A_int X | interior rows C -> Y | (swap: Y is the next iteration's X)
    s_comm:  [i = 0: wait e_adv | pack X's own rows | NCCL into X's halo e_x(0)]
             wait e_bnd | pack Y's own rows | grouped NCCL send/recv into Y's halo  e_x(i + 1)

Y's own rows are the next B: with advancing iterations each part's rows of C, rounded to the precision, are stored
into them right after that part's kernel (row scatters: B keeps its natural row order); without advancing, the
first iteration copies X's own rows into Y once. The last iteration of a batch issues no exchange and no stores
(the batch ends as the plain loop does: ``B_ext`` is the last iteration's B, C its product); the first gets its
halo with the prologue exchange, which is therefore exposed once per batch. Every row of C is written by one
kernel, no accumulate pass. Why it is race-free without a sync:

- the receive into Y's halo (s_comm, after e_bnd) never touches X, which the interior kernel reads; the pack reads
  Y's boundary rows, stored before e_bnd, while s_comp stores Y's interior rows (disjoint rows);
- iteration i + 1 reads Y only after ``wait e_x(i + 1)`` (its halo) on s_comp, behind the interior stores;
- iteration i + 1 writes X (now its Y): the stores on s_comp, behind iteration i's kernels that read X; the receive
  on s_comm waits e_bnd(i + 1), recorded on s_comp after iteration i's interior kernel; halo-order formats read a
  gathered copy of X made on s_comp before the boundary kernel, so they follow the same order;
- C: iteration i + 1's boundary kernel overwrites C[:nb] after iteration i's stores read it (same stream); the
  send buffers are rewritten by the next pack on s_comm after the previous grouped send completed (same stream).

With the copy engines (the default halo copy; `tasks.distribute.ce_exchange`) there is no NCCL kernel: the
prologue packs on s_comp, every later pack runs on a third stream at the device's highest priority (s_pack: wait
e_bnd | pack Y's boundary rows), beside the interior kernel, and the peer copies on s_comm wait for it. Each
iteration's first s_comp step waits for the latest pack, so iteration i + 2's stores into Y (or the next batch's
advance) come after the pack of iteration i read it; for a shard that receives nothing this wait is the only order
between them (tests/tasks/distribute/test_ce_exchange.py models both). The send buffers are rewritten by a pack
only after the previous copies left them (the pack waits for them).

`IterationEvents` keeps the CUDA events of each iteration; they are read once, after the batch's one
``synchronize``, into per-iteration milliseconds: ``advance_ms``, ``exchange_ms`` (s_comm: pack + NCCL, which
includes waiting for a late peer), ``kernel_ms`` (the kernels' own time), ``exposed_ms`` (how long s_comp waited for
the halo rows: exchange not hidden by the own-column kernel), ``iteration_ms`` (first event to last of the
iteration) and, per batch, ``gap_ms`` (GPU time between iterations: host launch latency that the GPU waited for).
"rows" (`RowEvents`): ``exchange_ms`` is the exchange that brought the iteration's halo (issued in the previous
iteration, or the prologue), ``exposed_ms`` how long s_comp waited for it, ``kernel_ms`` both kernels,
``boundary_ms`` the boundary rows' kernel alone, ``advance_ms`` the C -> next-B stores (and the prologue's advance),
``pack_ms`` (copy engines) the pack on s_pack, off the iteration's path when the interior kernel outlasts it.
Runs inside Dask workers; imports neither Prefect nor Dask.
"""
from __future__ import annotations

import numpy as np

from tasks.distribute import device as dev


def nccl_type(dtype):
    """NCCL element type for a send/recv of ``dtype`` (bfloat16 bits travel as 2-byte float16 units: send/recv
    copy bytes and never interpret them)."""
    from cupy.cuda import nccl
    return nccl.NCCL_FLOAT32 if np.dtype(dtype).itemsize == 4 else nccl.NCCL_FLOAT16


class IterationEvents:
    """The CUDA events of one enqueued iteration (see the module docstring); ``pk0``/``pk1`` the copy-engine
    exchange's pack on s_pack (``packed`` once recorded)."""

    __slots__ = ("start", "adv", "x_start", "x", "own", "wait", "end", "pk0", "pk1", "packed")

    def __init__(self):
        import cupy
        for name in self.__slots__[:-1]:
            setattr(self, name, cupy.cuda.Event())
        self.packed = False

    def times(self, overlap: bool) -> dict:
        """Milliseconds of the iteration's parts; call after its last event completed."""
        from cupy.cuda import get_elapsed_time as ms
        kernel = ms(self.wait, self.end) + (ms(self.adv, self.own) if overlap else 0.0)
        return {"advance_ms": ms(self.start, self.adv), "exchange_ms": ms(self.x_start, self.x),
                "kernel_ms": kernel, "exposed_ms": ms(self.own if overlap else self.adv, self.wait),
                "iteration_ms": ms(self.start, self.end),
                **({"pack_ms": ms(self.pk0, self.pk1)} if self.packed else {})}


class RowEvents:
    """The CUDA events of one "rows" iteration (module docstring); ``x_start``/``x`` time the exchange that brings
    its halo, recorded on s_comm by the previous iteration (or the first's prologue); ``pk0``/``pk1`` the
    copy-engine exchange's pack on its own stream (``packed`` once recorded)."""

    __slots__ = ("start", "adv", "x_start", "x", "wait", "go", "bnd", "bnd_adv", "int", "end", "pk0", "pk1",
                 "packed")

    def __init__(self):
        import cupy
        for name in self.__slots__[:-1]:
            setattr(self, name, cupy.cuda.Event())
        self.packed = False

    def times(self) -> dict:
        from cupy.cuda import get_elapsed_time as ms
        boundary = ms(self.go, self.bnd)
        return {"advance_ms": ms(self.start, self.adv) + ms(self.bnd, self.bnd_adv) + ms(self.int, self.end),
                "exchange_ms": ms(self.x_start, self.x), "kernel_ms": boundary + ms(self.bnd_adv, self.int),
                "boundary_ms": boundary, "exposed_ms": ms(self.wait, self.go),
                "iteration_ms": ms(self.start, self.end),
                **({"pack_ms": ms(self.pk0, self.pk1)} if self.packed else {})}


class DeviceLoop:
    """Shard k's resident iteration on its GPU: the streams, the fixed send and C buffers, and `enqueue`.

    ``shard`` is the `ShardActor` (it owns B_ext, the plans, the NCCL communicator and the layout)."""

    def __init__(self, shard):
        import cupy
        self.shard = shard
        # Blocking streams: anything a library still runs on the legacy default stream stays ordered. (NCCL moves
        # the halo with kernels of its own: beside the own-column SpMM a 2 ms exchange took 10 ms on H100s, 100M-nnz
        # SBM, 2 GPUs. A comm stream "at the highest priority" measured the same, but the helper of that run asked
        # CuPy 14 for a priority range it does not have and fell back to a plain stream, so priority for NCCL's
        # kernels is untested; the copy engines (no SM) made the question moot. docs/scale-out.md.)
        self.s_comp, self.s_comm = cupy.cuda.Stream(), cupy.cuda.Stream()
        self.send_bufs: dict = {}
        self.C = None
        self._last_send = None  # the event after the latest copy-engine sends (`_pack` waits for it)
        self.s_pack = None  # the copy-engine exchange's pack after the boundary kernel (`_pack_stream`)
        self._packed = None  # the event after the latest pack on s_pack (every later s_comp step waits for it)

    def _buffers(self):
        import cupy
        sh = self.shard
        n_cols = int(sh.B_ext.shape[1])
        if self.C is None or self.C.shape != (sh.n_own, n_cols):
            self.C = cupy.empty((sh.n_own, n_cols), dtype=np.float32)
            self.send_bufs = {p: cupy.empty((int(idx.shape[0]), n_cols), dtype=sh.B_ext.dtype)
                              for p, idx in sh.sends.items()}
        return self.C

    def enqueue(self, advance: bool, overlap: bool) -> IterationEvents:
        """Issue one iteration on the streams (no host sync); C is ``self.C`` once its ``end`` event completes.
        With the copy engines (the "columns" overlap only) the halo lands in the one extended B: each sender's copy
        waits until its receiver finished the previous iteration's halo-column kernel (`CopyEngineHalo`'s flags,
        ``next_buffer=False``: the prologue's form every iteration)."""
        sh = self.shard
        C = self._buffers()
        ev = IterationEvents()
        ce = sh.ce if overlap else None
        self._wait_packed()
        ev.start.record(self.s_comp)
        if advance:
            with self.s_comp:
                sh.advance_from(C)
        ev.adv.record(self.s_comp)
        if ce is not None:
            self._pack_and_send(ev.adv, ev, ev, sh.B_ext, next_buffer=False)
        else:
            self._exchange(ev.adv, ev, sh.B_ext)
        with self.s_comp:
            if overlap:  # reads only own rows: no conflict with the rows being received
                sh.plan_own.run(sh.b_in(sh.own_cols), C)
            ev.own.record(self.s_comp)
            if ce is not None:
                ce.wait_halo(self.s_comp)
            else:
                self.s_comp.wait_event(ev.x)
            ev.wait.record(self.s_comp)
            if overlap:
                sh.plan_rem.run(sh.b_in(sh.rem_cols), C, accumulate=True)
            else:
                sh.plan.run(sh.b_in(), C)
        if ce is not None:
            ce.finish(self.s_comp, swapped=False)  # before `end`: the batch's sync covers the posts
        ev.end.record(self.s_comp)
        sh.C, sh.c_split = C, False
        return ev

    def _exchange(self, after, ev, B) -> None:
        """On s_comm, once ``after`` (an s_comp event) completed: pack the own rows of extended B ``B`` each peer
        needs and the grouped NCCL send/recv, the received rows landing in ``B``'s halo; ``ev.x_start``/``ev.x``
        around it (recorded also when this shard exchanges nothing)."""
        from cupy.cuda import nccl
        sh = self.shard
        self.s_comm.wait_event(after)
        ev.x_start.record(self.s_comm)
        if sh.comm is not None and (sh.sends or sh.recv):
            self._pack(B, self.s_comm)
            with self.s_comm:
                nccl.groupStart()
                for p, buf in self.send_bufs.items():
                    sh.comm.send(buf.data.ptr, buf.size, nccl_type(buf.dtype), p, self.s_comm.ptr)
                for p, n, start in sh.recv:
                    view = B[start:start + n]  # contiguous rows of a C-ordered buffer
                    sh.comm.recv(view.data.ptr, view.size, nccl_type(view.dtype), p, self.s_comm.ptr)
                nccl.groupEnd()
        ev.x.record(self.s_comm)

    def enqueue_rows(self, evs: list, i: int, advance_first: bool, advance_rest: bool) -> None:
        """Issue iteration ``i`` of a "rows" batch (``evs``: one `RowEvents` per iteration of the batch; the
        module docstring has the timeline); C (split order) is ``self.C`` once ``evs[i].end`` completes."""
        sh = self.shard
        split = sh.row_split
        C = self._buffers()
        ev, last = evs[i], i + 1 == len(evs)
        store_next = not last and advance_rest
        ce = sh.ce  # copy engines instead of NCCL (tasks.distribute.ce_exchange): pack on s_pack, copy on s_comm
        self._wait_packed()
        ev.start.record(self.s_comp)
        if i == 0:
            with self.s_comp:
                if advance_first:
                    sh.advance_from(C)
                if not last and not advance_rest:  # the next iterations multiply this same B
                    sh.own_rows(sh.alt_B())[...] = sh.own_rows()
                if ce is not None:
                    self._pack(sh.B_ext, self.s_comp)
            ev.adv.record(self.s_comp)
            if ce is not None:
                self._send_ce(ev.adv, ev, next_buffer=False)
            else:
                self._exchange(ev.adv, ev, sh.B_ext)
        else:
            ev.adv.record(self.s_comp)
        ev.wait.record(self.s_comp)
        if ce is not None:
            ce.wait_halo(self.s_comp)
        else:
            self.s_comp.wait_event(ev.x)
        ev.go.record(self.s_comp)
        with self.s_comp:
            B_in = sh.b_in()
            split.run("boundary", B_in, C)
            ev.bnd.record(self.s_comp)
            if store_next:
                split.store(sh.own_rows(sh.alt_B()), C, "boundary")
            ev.bnd_adv.record(self.s_comp)
        if not last:
            if ce is not None:  # the pack beside the interior kernel, on a high-priority stream: off the path
                self._pack_and_send(ev.bnd_adv, ev, evs[i + 1], sh.alt_B(), next_buffer=True)
            else:
                self._exchange(ev.bnd_adv, evs[i + 1], sh.alt_B())
        with self.s_comp:
            split.run("interior", B_in, C)
            ev.int.record(self.s_comp)
            if store_next:
                split.store(sh.own_rows(sh.alt_B()), C, "interior")
        if ce is not None:
            ce.finish(self.s_comp, swapped=not last)  # before `end`: the batch's sync covers the posts
        ev.end.record(self.s_comp)
        sh.C, sh.c_split = C, True
        if not last:
            sh.swap_B()

    def _wait_packed(self) -> None:
        """s_comp waits for the latest pack on s_pack: it read a buffer a later store or advance may write (the
        rows overlap's iteration i + 2, the next batch, or the columns overlap's next advance); done long before,
        as a rule, and for a shard that receives nothing the only order between the two."""
        if self._packed is not None:
            self.s_comp.wait_event(self._packed)
            self._packed = None

    def _pack_and_send(self, after, ev, ev_x, B, next_buffer: bool) -> None:
        """The copy-engine exchange once ``after`` (an s_comp event) completed: the pack of ``B``'s own rows on
        s_pack (``ev.pk0``/``pk1``), then the peer copies on s_comm (``ev_x.x_start``/``x``)."""
        s_pack = self._pack_stream()
        s_pack.wait_event(after)
        ev.pk0.record(s_pack)
        self._pack(B, s_pack)
        ev.pk1.record(s_pack)
        ev.packed, self._packed = True, ev.pk1
        self._send_ce(ev.pk1, ev_x, next_buffer)

    def _pack_stream(self):
        """The pack's stream, at the device's highest priority: its row-gather blocks are scheduled ahead of the
        interior kernel's waiting blocks, so the copies start early. (NCCL's kernels, which wait for peers inside
        the kernel, did not overlap beside the SpMM at any priority; a gather has no such wait.)"""
        if self.s_pack is None:
            self.s_pack = dev.high_priority_stream()
        return self.s_pack

    def _pack(self, B, stream) -> None:
        """The own rows of extended B ``B`` each peer receives, into the send buffers, on ``stream`` (NCCL: s_comm;
        the copy engines: s_comp for the batch's prologue, else s_pack) once the copies of the previous pack left
        them (s_comm, ``_last_send``). It reads only boundary rows: the interior rows' stores beside it write the
        others."""
        sh = self.shard  # the send buffers: made by `_buffers` at the top of `enqueue_rows`
        if self._last_send is not None:
            stream.wait_event(self._last_send)
        own = sh.own_rows(B)
        with stream:
            for p, idx in sh.sends.items():
                dev.gather_rows(own, idx, self.send_bufs[p])

    def _send_ce(self, after, ev, next_buffer: bool) -> None:
        """On s_comm once ``after`` (recorded after `_pack`) completed: the copy-engine sends
        (`CopyEngineHalo.send`) between ``ev.x_start`` and ``ev.x``."""
        self.s_comm.wait_event(after)
        ev.x_start.record(self.s_comm)
        self.shard.ce.send(self.s_comm, self.send_bufs, next_buffer)
        ev.x.record(self.s_comm)
        self._last_send = ev.x

    def synchronize(self) -> None:
        """Wait for every stream of the loop (the pack's, once made, the exchange's and the kernels')."""
        for stream in (self.s_pack, self.s_comm, self.s_comp):
            if stream is not None:
                stream.synchronize()

    def release(self) -> None:
        """Wait for the streams and drop the buffers (before the communicator is destroyed)."""
        self.synchronize()
        self.C, self.send_bufs, self._last_send, self._packed = None, {}, None, None

    def run(self, n_iters: int, advance_first: bool, advance_rest: bool, overlap) -> tuple[list, float]:
        """``n_iters`` enqueued back to back, one sync at the end (``overlap``: False, "columns" or "rows").
        Returns (per-iteration times, gap ms)."""
        n = int(n_iters)
        if overlap == "rows":
            evs = [RowEvents() for _ in range(n)]
            for i in range(n):
                self.enqueue_rows(evs, i, advance_first, advance_rest)
        else:
            evs = [self.enqueue(advance_first if i == 0 else advance_rest, bool(overlap)) for i in range(n)]
        evs[-1].end.synchronize()  # synchronize! (one per batch)
        times = [e.times() if overlap == "rows" else e.times(bool(overlap)) for e in evs]
        from cupy.cuda import get_elapsed_time
        span = get_elapsed_time(evs[0].start, evs[-1].end)
        return times, max(0.0, float(span - sum(t["iteration_ms"] for t in times)))
