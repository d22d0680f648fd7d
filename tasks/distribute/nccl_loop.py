"""The resident iteration on GPUs over NCCL, enqueued without a host sync per iteration.

One iteration of shard k (`enqueue`), on two CUDA streams of the shard's actor::

    s_comp:  [advance: own rows of B <- C] e_adv ........ own-column kernel e_own | wait e_x | halo kernel e_end
    s_comm:            wait e_adv | pack send rows | grouped NCCL send/recv e_x

With ``overlap`` off, the whole-shard kernel runs after ``wait e_x`` instead of the two split kernels. Every
buffer is allocated once (the packed send rows, C, the extended B), so each `SpmmPlan.run` call repeats one bound
call on the same pointers and is replayed as a CUDA graph from its third call. The stream order makes the next
iteration safe without a sync: its advance (s_comp) follows this iteration's halo kernel, and its receive
(s_comm) waits for that advance, so no halo row is overwritten while a kernel still reads it.

`IterationEvents` keeps the CUDA events of each iteration; they are read once, after the batch's one
``synchronize``, into per-iteration milliseconds: ``advance_ms``, ``exchange_ms`` (s_comm: pack + NCCL, which
includes waiting for a late peer), ``kernel_ms`` (the kernels' own time), ``exposed_ms`` (how long s_comp waited for
the halo rows: exchange not hidden by the own-column kernel), ``iteration_ms`` (first event to last of the
iteration) and, per batch, ``gap_ms`` (GPU time between iterations: host launch latency that the GPU waited for).
Runs inside Dask workers; imports neither Prefect nor Dask.
"""
from __future__ import annotations

import numpy as np


def nccl_type(dtype):
    """NCCL element type for a send/recv of ``dtype`` (bfloat16 bits travel as 2-byte float16 units: send/recv
    copy bytes and never interpret them)."""
    from cupy.cuda import nccl
    return nccl.NCCL_FLOAT32 if np.dtype(dtype).itemsize == 4 else nccl.NCCL_FLOAT16


class IterationEvents:
    """The seven CUDA events of one enqueued iteration (see the module docstring)."""

    __slots__ = ("start", "adv", "x_start", "x", "own", "wait", "end")

    def __init__(self):
        import cupy
        for name in self.__slots__:
            setattr(self, name, cupy.cuda.Event())

    def times(self, overlap: bool) -> dict:
        """Milliseconds of the iteration's parts; call after its last event completed."""
        from cupy.cuda import get_elapsed_time as ms
        kernel = ms(self.wait, self.end) + (ms(self.adv, self.own) if overlap else 0.0)
        return {"advance_ms": ms(self.start, self.adv), "exchange_ms": ms(self.x_start, self.x),
                "kernel_ms": kernel, "exposed_ms": ms(self.own if overlap else self.adv, self.wait),
                "iteration_ms": ms(self.start, self.end)}


class DeviceLoop:
    """Shard k's resident iteration on its GPU: the streams, the fixed send and C buffers, and `enqueue`.

    ``shard`` is the `ShardActor` (it owns B_ext, the plans, the NCCL communicator and the layout)."""

    def __init__(self, shard):
        import cupy
        self.shard = shard
        # Blocking streams: anything a library still runs on the legacy default stream stays ordered. (NCCL moves
        # the halo with kernels of its own: beside the own-column SpMM a 2 ms exchange took 10 ms on H100s, 100M-nnz
        # SBM, 2 GPUs, with the comm stream at the device's highest priority as at the default one; measured, so the
        # plain stream stays. docs/benchmarks.md, "Scale-out".)
        self.s_comp, self.s_comm = cupy.cuda.Stream(), cupy.cuda.Stream()
        self.send_bufs: dict = {}
        self.C = None

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
        """Issue one iteration on the streams (no host sync); C is ``self.C`` once its ``end`` event completes."""
        import cupy
        from cupy.cuda import nccl
        sh = self.shard
        C = self._buffers()
        ev = IterationEvents()
        ev.start.record(self.s_comp)
        if advance:
            with self.s_comp:
                sh.advance_from(C)
        ev.adv.record(self.s_comp)
        self.s_comm.wait_event(ev.adv)
        ev.x_start.record(self.s_comm)
        if sh.comm is not None and (sh.sends or sh.recv):
            with self.s_comm:
                own = sh.own_rows()
                for p, idx in sh.sends.items():
                    cupy.take(own, idx, axis=0, out=self.send_bufs[p])
                nccl.groupStart()
                for p, buf in self.send_bufs.items():
                    sh.comm.send(buf.data.ptr, buf.size, nccl_type(buf.dtype), p, self.s_comm.ptr)
                for p, n, start in sh.recv:
                    view = sh.B_ext[start:start + n]  # contiguous rows of a C-ordered buffer
                    sh.comm.recv(view.data.ptr, view.size, nccl_type(view.dtype), p, self.s_comm.ptr)
                nccl.groupEnd()
        ev.x.record(self.s_comm)
        with self.s_comp:
            if overlap:  # reads only own rows: no conflict with the rows being received
                sh.plan_own.run(sh.b_in(sh.own_cols), C)
            ev.own.record(self.s_comp)
            self.s_comp.wait_event(ev.x)
            ev.wait.record(self.s_comp)
            if overlap:
                sh.plan_rem.run(sh.b_in(sh.rem_cols), C, accumulate=True)
            else:
                sh.plan.run(sh.b_in(), C)
        ev.end.record(self.s_comp)
        return ev

    def release(self) -> None:
        """Wait for the streams and drop the buffers (before the communicator is destroyed)."""
        self.s_comm.synchronize()
        self.s_comp.synchronize()
        self.C, self.send_bufs = None, {}

    def run(self, n_iters: int, advance_first: bool, advance_rest: bool, overlap: bool) -> tuple[list, float]:
        """``n_iters`` enqueued back to back, one sync at the end. Returns (per-iteration times, gap ms)."""
        evs = [self.enqueue(advance_first if i == 0 else advance_rest, overlap) for i in range(int(n_iters))]
        evs[-1].end.synchronize()  # synchronize! (one per batch)
        times = [e.times(overlap) for e in evs]
        from cupy.cuda import get_elapsed_time
        span = get_elapsed_time(evs[0].start, evs[-1].end)
        return times, max(0.0, float(span - sum(t["iteration_ms"] for t in times)))
