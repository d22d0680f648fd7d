"""The shard actor of the resident SpMM (`tasks.distribute.resident`): shard k on one Dask worker keeps A_k (renamed
into its extended-B rows), the extended B and C_k on the worker's device and runs the iterations there, over NCCL
(`tasks.distribute.nccl_loop`) or the host transport (Dask actor calls, batched by (batch, iteration)), plain or
overlapped ("rows": `tasks.distribute.row_split`; "columns"). `resident.DistributedSpmm` drives one per shard.
Runs inside Dask workers.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tasks.distribute import device as dev
from tasks.distribute.ce_exchange import CopyEngineShard
from tasks.distribute.direct import read_rows, write_block
from tasks.distribute.formats import shard_ops
from tasks.distribute.host_batches import HostBatches, check_n_iters
from tasks.distribute.oneshot import load_shard
from tasks.distribute.overlap_choice import OVERLAP_MODES, overlap_mode


class ShardActor(HostBatches, CopyEngineShard):
    """Shard k on one worker: A_k renamed into its extended-B rows, the extended B buffer, C_k.

    The extended B holds the precision's storage dtype (float32, float16, bfloat16 bits), so the halo exchange
    moves 2 bytes per value in half precision; C_k is float32 and rounded to the precision when it becomes B."""

    def __init__(self, k: int, shard, layout: tuple, device: str = "auto", spmm_kw: dict | None = None,
                 dtype: str = "float32", prefetch: tuple | None = None):
        """``layout`` = (halo_cols, `exchange_lists` dict, sends {peer: own rows to send, in the peer's order}).
        ``prefetch`` = (`direct.DenseRef`, rows): this shard's own rows of a stored B, read on a thread of their
        own from here on, beside the shard's load, its plan and the communicator's setup; `load_B` of the same
        rows takes them."""
        from kernels.precision import precision
        halo_cols, layout, sends = layout
        self.k = int(k)
        self._b_prefetch = None
        if prefetch is not None:
            pool = ThreadPoolExecutor(1, thread_name_prefix=f"tcspmm-b-{self.k}")
            self._b_prefetch = (prefetch[0].artifact, np.asarray(prefetch[1], dtype=np.int64),
                                pool.submit(read_own_rows, *prefetch))
            pool.shutdown(wait=False)  # the thread ends with its read
        self.prec = precision(dtype)
        self.on_gpu = dev.worker_device(device)
        S, self.load_ms, _ = load_shard(shard)
        self.ops = shard_ops(S)
        ext_index = np.asarray(layout["ext_index"], dtype=np.int64)
        if self.ops.any_order:  # the format takes any column ids: A_k reads the extended B directly
            S = self.ops.remap(S, halo_cols, ext_index, layout["n_ext"])
            self.gather, self.ext_cols = None, ext_index
        else:  # columns stay in halo order: gather the extended B's rows into that order before each kernel
            S = self.ops.remap(S, halo_cols, np.arange(halo_cols.shape[0], dtype=np.int64), halo_cols.shape[0])
            self.gather, self.ext_cols = dev.to_device(ext_index, self.on_gpu), ext_index
        self.n_own, self.off, self.n_ext = S.shape[0], layout["own_offset"], layout["n_ext"]
        self.recv = [(int(p), int(idx.shape[0]), int(start)) for p, idx, start in layout["recv"]]
        self._sends_host = {int(p): np.asarray(idx, dtype=np.int64) for p, idx in sends.items()}
        self.sends = {p: dev.to_device(idx, self.on_gpu) for p, idx in self._sends_host.items()}
        t0 = time.perf_counter()
        self.plan = dev.make_spmm_plan(S, self.on_gpu, self.prec.name, spmm_kw=spmm_kw)
        self.plan_ms = (time.perf_counter() - t0) * 1e3  # built, not yet decided (the first run picks the kernel)
        self.kernel = str(self.plan.choice.get("kernel"))
        self.S, self.spmm_kw = S, spmm_kw  # kept to build the own/remote split on demand
        self.overlap, self.plan_own, self.plan_rem, self._device_loop, self._c_buf = False, None, None, None, None
        self.own_cols = self.rem_cols = None
        # "rows" overlap: the row split, the second extended B (its halo is received while the interior kernel still
        # reads the current one), and whether C is in the split's row order (`row_split.RowSplit`)
        self.row_split, self.B_alt, self.c_split = None, None, False
        self.B_ext = self.C = self._b_loc = None
        self.peers: list = []
        self.device_rows = False
        self.comm = None
        self.ce = None  # the overlaps' copy-engine exchange (`ce_exchange.CopyEngineHalo`) once connected
        self._ce_mode = None  # the overlap mode it was exported for
        # Batched host exchange (`iterate_many_host`): {(batch, iteration): {dst: host rows}} still to be pulled,
        # the current batch id, {batch: why it failed}, and the condition guarding them (made in the event loop).
        self._outbox: dict = {}
        self._batch, self._failed, self._cond = None, {}, None

    # ---- setup ------------------------------------------------------------------------------------------------
    def info(self) -> dict:
        from tasks.distribute.oneshot import _worker_address
        return {"shard": self.k, "worker": _worker_address(), "gpu": dev.device_name(self.on_gpu),
                "kernel": self.kernel, "load_ms": self.load_ms, "plan_ms": self.plan_ms, "n_own": self.n_own,
                "n_ext": self.n_ext,
                "halo_rows": self.n_ext - self.n_own, "dtype": self.prec.name, "format": self.ops.name,
                "gathers_halo": self.gather is not None, "overlap": self.overlap,
                **(self.row_split.info() if self.row_split is not None else {})}

    def set_peers(self, peers: list, device_rows: bool = False) -> None:
        """The peer actors; ``device_rows``: the host transport hands peers device arrays (a UCX comm moves them
        GPU to GPU) instead of host copies (what TCP would copy through the host anyway)."""
        self.peers, self.device_rows = list(peers), bool(device_rows) and self.on_gpu

    def _rows_out(self, rows):
        return rows if self.device_rows else dev.to_host(rows)

    def nccl_uid(self):
        """A fresh NCCL unique id (rank 0 makes it; raises when CuPy has no NCCL)."""
        from cupy.cuda import nccl
        return nccl.get_unique_id()

    def init_nccl(self, uid, n_ranks: int) -> None:
        """Join the communicator; blocks until all ranks have joined (call on every actor concurrently)."""
        import os

        from cupy.cuda import nccl

        from tasks.distribute.cluster import SAFE_GPU_ENV
        os.environ.update(SAFE_GPU_ENV)  # NCCL reads NCCL_NVLS_ENABLE=0 at communicator creation: no multicast
        self.comm = nccl.NcclCommunicator(int(n_ranks), uid, self.k)

    def set_B(self, B_k) -> None:
        """Own rows of B [n_own, N] (host or device array, float values; rounded to the precision here);
        allocates the extended B on first use / new N."""
        B_k = dev.to_device(np.asarray(B_k, dtype=np.float32) if not hasattr(B_k, "__cuda_array_interface__")
                            else B_k, self.on_gpu)
        if B_k.shape[0] != self.n_own:
            raise ValueError(f"shard {self.k}: B part has {B_k.shape[0]} rows, expected {self.n_own}")
        if self.B_ext is None or self.B_ext.shape[1] != B_k.shape[1]:
            xp = _xp(self.on_gpu)
            self.B_ext = xp.zeros((self.n_ext, B_k.shape[1]), dtype=self.prec.storage_dtype)
            self._b_loc = None if self.gather is None else \
                xp.zeros((int(self.gather.shape[0]), B_k.shape[1]), dtype=self.prec.storage_dtype)
        self.B_ext[self.off:self.off + self.n_own] = dev.to_storage(B_k.astype(np.float32, copy=False), self.prec)

    def load_B(self, b, rows: np.ndarray) -> dict:
        """Own rows of B read from the store by this worker (``b``: a `direct.DenseRef`; ``rows``: their rows of
        the stored B, in this shard's order): the one-shot over the exchange reads only this share of B, the
        peers' rows come with the halo exchange. Returns the read's and the upload's times and bytes."""
        rows = np.asarray(rows, dtype=np.int64)
        t0 = time.perf_counter()
        pre, self._b_prefetch = self._b_prefetch, None
        if pre is not None and pre[0] == b.artifact and np.array_equal(pre[1], rows):
            B_k, nbytes, b_ms = pre[2].result()  # read beside the setup (prefetch): wait for what is left of it
        else:
            B_k, nbytes, b_ms = read_own_rows(b, rows)
        wait_ms = (time.perf_counter() - t0) * 1e3
        with dev.Timer(self.on_gpu) as h2d:
            self.set_B(B_k)
        return {"shard": self.k, "b_ms": b_ms, "b_wait_ms": wait_ms, "h2d_ms": h2d.ms,
                "b_rows": int(rows.shape[0]), "b_bytes_read": int(nbytes)}

    def write_C(self, store, run_id: str, r0: int) -> dict:
        """This shard's block of C (rows r0.. of the reordered matrix) into the store as files of
        ``results/<run_id>`` (`direct.write_block`); its files' manifest records ([] for no rows) and times."""
        with dev.Timer(self.on_gpu) as d2h:
            C = self.get_C()
        t0 = time.perf_counter()
        records = write_block(store, run_id, int(r0), C)
        return {"shard": self.k, "d2h_ms": d2h.ms, "write_ms": (time.perf_counter() - t0) * 1e3, "records": records,
                "c_bytes_written": sum(int(r["size"]) for r in records)}

    def set_overlap(self, on) -> None:
        """How an iteration hides its halo exchange (`overlap_mode`; True = OVERLAP_DEFAULT, "rows", see there).

        "rows": A_k split by rows (`row_split.RowSplit`): the boundary rows' kernel first, then their exchange
        (for the next iteration, into the second extended B) beside the interior rows' kernel; each row once.
        "columns": A_k split into the columns of its own rows and the halo columns (two plans) so that the own
        part's kernel runs while the halo rows are in flight; C_k = A_own B_own, then C_k += A_halo B_halo (the
        second kernel adds into C_k as it stores: no extra pass over C). Builds the split's plans on first use."""
        mode = overlap_mode(on)
        if mode == "rows" and self.row_split is None:
            from tasks.distribute.row_split import RowSplit
            self.row_split = RowSplit(self.S, self._sends_host, self.prec, self.on_gpu, self.spmm_kw)
        self.overlap = mode
        if self.overlap == "columns" and self.plan_own is None:
            ext = np.arange(self.n_ext) if self.gather is None else self.ext_cols  # ext row of each A_k column
            own = (ext >= self.off) & (ext < self.off + self.n_own)
            parts = [self.ops.split(self.S, keep, self.prec) for keep in (own, ~own)]
            self.plan_own, self.plan_rem = (dev.make_spmm_plan(p, self.on_gpu, self.prec.name, spmm_kw=self.spmm_kw)
                                            for p in parts)
            self.own_cols = None if self.gather is None else dev.to_device(np.flatnonzero(own), self.on_gpu)
            self.rem_cols = None if self.gather is None else dev.to_device(np.flatnonzero(~own), self.on_gpu)

    def advance(self) -> None:
        """C becomes the next B (square A), rounded to the precision."""
        if self.C is None:
            raise RuntimeError(f"shard {self.k}: no C to advance from: run an iteration first")
        self.advance_from(self.C)

    def advance_from(self, C) -> None:
        """Own rows of B <- C (float32 [n_own, N]; in the row split's order when ``c_split``) in the precision's
        storage, on the current stream."""
        if self.c_split:
            self.row_split.store(self.own_rows(), C)
        else:
            self.B_ext[self.off:self.off + self.n_own] = dev.to_storage(C, self.prec)

    def b_in(self, cols=None):
        """What A_k multiplies: the extended B, or (halo-order formats) its rows gathered into A_k's column order;
        ``cols`` gathers only those of A_k's columns (the overlap's own part before the halo has arrived)."""
        if self.gather is None:
            return self.B_ext
        if cols is None:
            dev.gather_rows(self.B_ext, self.gather, self._b_loc)
        else:
            self._b_loc[cols] = self.B_ext[self.gather[cols]]
        return self._b_loc

    # ---- exchange -----------------------------------------------------------------------------------------------
    def own_rows(self, B=None):
        """The own rows (a view) of the extended B, or of ``B`` (the "rows" overlap's other buffer)."""
        B = self.B_ext if B is None else B
        return B[self.off:self.off + self.n_own]

    def alt_B(self):
        """The second extended B of the "rows" overlap (allocated on first use / new N): the next iteration's
        halo is received into it while this iteration's interior kernel reads ``B_ext``."""
        if self.B_alt is None or self.B_alt.shape != self.B_ext.shape:
            self.B_alt = _xp(self.on_gpu).zeros(self.B_ext.shape, dtype=self.B_ext.dtype)
        return self.B_alt

    def swap_B(self) -> None:
        """The other extended B becomes the current one (the next iteration's; a host-side pointer swap)."""
        self.B_ext, self.B_alt = self.alt_B(), self.B_ext

    async def pull(self, dst: int):
        """The own rows shard ``dst`` needs, in ``dst``'s receive order (a host copy, or with ``device_rows`` a
        device array)."""
        return self._rows_out(self.own_rows()[self.sends[dst]])

    async def exchange_host(self) -> dict:
        """Pull every peer's rows concurrently through Dask actor calls into the extended B."""
        t0 = time.perf_counter()
        parts = await asyncio.gather(*(self.peers[p].pull(self.k) for p, _, _ in self.recv))
        for (p, n, start), rows in zip(self.recv, parts):
            self.B_ext[start:start + n] = dev.to_device(rows, self.on_gpu)
        return self._exchange_stats((time.perf_counter() - t0) * 1e3, "dask")

    def _exchange_stats(self, ms: float, transport: str) -> dict:
        row_bytes = self.B_ext.dtype.itemsize * self.B_ext.shape[1]  # 2 bytes per value in half precision
        return {"shard": self.k, "exchange_ms": ms, "transport": transport,
                "halo_rows_recv": sum(n for _, n, _ in self.recv),
                "halo_bytes_recv": sum(n for _, n, _ in self.recv) * row_bytes,
                "halo_bytes_sent": sum(int(i.shape[0]) for i in self.sends.values()) * row_bytes}

    # ---- compute ------------------------------------------------------------------------------------------------
    def compute(self, repeats: int = 0) -> dict:
        """C_k = A_k @ extended B: one timed run (``repeats`` > 0: a warm-up then the median of that many).
        With overlap set (host transport) the two parts run one after the other: same result, tests the split
        ("rows": C in the split's row order, ``boundary_ms`` the boundary rows' kernel)."""
        if self.overlap == "rows":
            B_in, C = self.b_in(), self._overlap_out()
            with dev.Timer(self.on_gpu) as tb:
                self.row_split.run("boundary", B_in, C)
            with dev.Timer(self.on_gpu) as ti:
                self.row_split.run("interior", B_in, C)
            self.C, self.c_split = C, True
            return {"shard": self.k, "kernel_ms": tb.ms + ti.ms, "boundary_ms": tb.ms, "kernel": self._kernels()}
        if self.overlap:
            with dev.Timer(self.on_gpu) as t:
                B_in = self.b_in()
                C = self.plan_own.run(B_in, self._overlap_out())
                self.plan_rem.run(B_in, C, accumulate=True)
            self.C, self.c_split, kernel_ms = C, False, t.ms
        else:
            with dev.Timer(self.on_gpu) as g:
                B_in = self.b_in()
            self.C, kernel_ms, _ = dev.time_kernel(self.plan, B_in, self.on_gpu, repeats)
            self.c_split = False
            kernel_ms += g.ms if self.gather is not None else 0.0
        return {"shard": self.k, "kernel_ms": kernel_ms, "kernel": self._kernels()}

    def iterate_nccl(self, repeats: int = 0) -> tuple[dict, dict]:
        """One iteration in one actor call (one driver round trip): the `DeviceLoop` iteration (NCCL exchange,
        then the kernel, or with overlap the own-column kernel while NCCL moves the halo), synchronized.
        ``repeats`` > 0 (kernel-only timing): the exchange, then `compute`'s median of that many runs."""
        if repeats > 0 and not self.overlap:
            times, _ = self._loop().run(1, False, False, False)
            ex = self._exchange_stats(times[0]["exchange_ms"], "nccl")
            return ex, self.compute(repeats)
        its, _ = self._nccl_iterations(1, False, False)
        return its[0]

    def _loop(self):
        from tasks.distribute.nccl_loop import DeviceLoop
        if self._device_loop is None:
            self._device_loop = DeviceLoop(self)
        return self._device_loop

    def _nccl_iterations(self, n: int, advance_first: bool, advance_rest: bool) -> tuple[list, float]:
        """n `DeviceLoop` iterations (one sync): [(exchange stats, compute stats)] per iteration and the gap ms."""
        loop = self._loop()
        if advance_first and self.C is not loop.C:  # the last C came from `compute`, not from the loop's buffer
            self.advance()  # on the legacy stream, which the loop's blocking streams wait for
            advance_first = False
        times, gap_ms = loop.run(n, advance_first, advance_rest, self.overlap)
        kernel = self._kernels()
        via = "ce" if self.ce is not None and self.overlap in OVERLAP_MODES else "nccl"
        its = [({**self._exchange_stats(t["exchange_ms"], via), "overlap": self.overlap,
                 "exposed_ms": t["exposed_ms"], "advance_ms": t["advance_ms"],
                 **({"pack_ms": t["pack_ms"]} if "pack_ms" in t else {})},
                {"shard": self.k, "kernel_ms": t["kernel_ms"], "iteration_gpu_ms": t["iteration_ms"],
                 "kernel": kernel, **({"boundary_ms": t["boundary_ms"]} if "boundary_ms" in t else {})})
               for t in times]
        return its, gap_ms

    def _overlap_out(self):
        """C_k's buffer for the split kernels, kept across iterations (both kernels write into it)."""
        shape = (self.n_own, self.B_ext.shape[1])
        if self._c_buf is None or self._c_buf.shape != shape:
            self._c_buf = _xp(self.on_gpu).empty(shape, dtype=np.float32)
        return self._c_buf

    # ---- batches: several iterations in one actor call -----------------------------------------------------------
    def iterate_many(self, n_iters: int, advance_first: bool = False, advance_rest: bool = True,
                     repeats: int = 0) -> dict:
        """NCCL transport: ``n_iters`` iterations in this one call, each (advance when asked: ``advance_first`` for
        the first, ``advance_rest`` for the others) then the halo exchange and the kernel(s), all enqueued on the
        GPU by `nccl_loop.DeviceLoop` with one sync at the end and timed with CUDA events (``gap_ms``: GPU time
        between iterations). Call it on every actor concurrently with the same arguments: NCCL's matching
        send/recv keep the ranks in step, iteration by iteration. ``repeats`` is ignored (kernel-only timing is
        `iterate_nccl`'s)."""
        n = check_n_iters(n_iters)
        if self.comm is None:
            raise RuntimeError(f"shard {self.k}: iterate_many needs the NCCL communicator; use iterate_many_host")
        t0 = time.perf_counter()
        its, gap_ms = self._nccl_iterations(n, advance_first, advance_rest)
        return {**self._batch_stats(its, (time.perf_counter() - t0) * 1e3), "gap_ms": gap_ms}

    def _batch_stats(self, its: list, loop_ms: float) -> dict:
        ex = [e["exchange_ms"] for e, _ in its]
        ker = [c["kernel_ms"] for _, c in its]
        return {"shard": self.k, "n_iters": len(its), "iterations": its, "exchange_ms": ex, "kernel_ms": ker,
                "total_exchange_ms": float(sum(ex)), "total_kernel_ms": float(sum(ker)), "loop_ms": loop_ms}

    def _kernels(self) -> str:
        if self.overlap == "rows":
            return self.row_split.kernels()
        if self.overlap:
            return f"{self.plan_own.choice.get('kernel')}+{self.plan_rem.choice.get('kernel')}"
        return str(self.plan.choice.get("kernel"))

    def release(self) -> None:
        """Free this shard's device state and destroy its NCCL communicator. `DistributedSpmm.close` calls it on
        every shard at once before dropping the actors: a communicator left to the garbage collector is destroyed
        whenever its actor happens to be collected, and a destroy that waits for a peer's blocked the worker (the
        next actor on it never started: H100 x4, the GPU tests after a batched run)."""
        if self._device_loop is not None:
            self._device_loop.release()
        self.ce_drop()
        self._device_loop = None
        if self.comm is not None:
            self.comm.destroy()
            self.comm = None
        if self.row_split is not None:
            self.row_split.release()
        self.B_ext = self.B_alt = self.C = self._b_loc = self._c_buf = self.row_split = None
        self.plan = self.plan_own = self.plan_rem = None
        dev.release_device_memory(self.on_gpu)

    def get_C(self) -> np.ndarray:
        """Host C_k (float32, the plans' out_dtype) in the shard's row order (a row split's order undone)."""
        return self.row_split.natural(self.C) if self.c_split else dev.to_host(self.C)

    def get_C_rows(self, index: np.ndarray) -> np.ndarray:
        """Host copy of C_k[index] (rows of this shard's block)."""
        index = np.asarray(index, dtype=np.int64)
        if self.c_split:
            index = self.row_split.pos[index]
        return dev.to_host(self.C[dev.to_device(index, self.on_gpu)])

    def get_B(self) -> np.ndarray:
        """Own rows of B as float32 (exact: widened from the precision's storage)."""
        return self.prec.to_float32(dev.to_host(self.own_rows()))



def read_own_rows(b, rows: np.ndarray) -> tuple[np.ndarray, int, float]:
    """(rows ``rows`` of the stored dense B ``b`` (a `direct.DenseRef`) in the given order, Parquet bytes read, ms):
    each row group holding them decoded once, its rows put in ``rows``' order as it is decoded."""
    t0 = time.perf_counter()
    B_k, nbytes = read_rows(b.store, b.artifact, np.asarray(rows, dtype=np.int64))
    return B_k, nbytes, (time.perf_counter() - t0) * 1e3


def _xp(on_gpu: bool):
    if on_gpu:
        import cupy
        return cupy
    return np
