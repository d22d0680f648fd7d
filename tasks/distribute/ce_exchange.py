"""The overlaps' halo exchange on the copy engines: CUDA IPC peer copies and stream memory operations.

Why: NCCL moves rows with kernels of its own, and beside the interior rows' SpMM kernel (which fills every SM) its
send/recv did not overlap at all: on 2 H100s (SBM, 25M nonzeros per GPU, N = 256) the row-overlapped loop took
4.61 ms against 4.55 ms without overlap, the exchange fully exposed (1.16 of 1.17 ms); ``NCCL_MIN_NCHANNELS=32``
changed nothing and ``NCCL_P2P_USE_CUDA_MEMCPY=1`` made the exchange 4.4 ms (docs/benchmarks.md, weak scaling).
A copy engine needs no SM: each sender writes its packed boundary rows straight into the receiver's extended B
with ``cudaMemcpyAsync`` over NVLink (peer memory opened with ``cudaIpcOpenMemHandle``), and the GPUs order
themselves with 32-bit flags in device memory, written and waited for by the streams (``cuStreamWriteValue32`` /
``cuStreamWaitValue32``), never by a host thread. One node only (IPC); the shards must run in lock step, which the
resident loop does (every shard enqueues the same iterations). The "rows" overlap sends into the receiver's next
extended B (two, swapped each iteration); the "columns" overlap into its one extended B, every iteration in the
prologue's form below (``next_buffer=False``, no swap: the done flag keeps a copy from landing before the receiver's
previous halo-column kernel finished).

The schedule, for global iteration g (counted from the exchange's setup, across batches) of shard k:

- each exchange k issues while enqueuing iteration g (the batch's prologue, or after the boundary rows' kernel)
  first waits on its s_comm until every receiver q posted ``done[k's slot on q] >= g`` (q finished iteration g - 1,
  the last reader of the buffer about to be overwritten), then copies its packed rows for q into q's buffer (the
  prologue: q's current extended B, else q's other one, the next iteration's) and posts ``ready = tag`` on q;
  ``tag`` = g + 1 for the prologue (it brings iteration g's halo), g + 2 after the boundary kernel (iteration
  g + 1's);
- before its boundary kernel, iteration g waits on s_comp until every sender p posted ``ready >= g + 1``;
- after its interior kernel and stores, iteration g posts ``done = g + 1`` on every sender p.

Flags only grow (a batch's last iteration issues no exchange, the next batch's prologue brings the halo of the
iteration after it), so a wait never sees a stale value it could mistake for the one it waits for. Which of q's
two buffers is "current" follows from the number of swaps, the same on every shard (lock step).

`CopyEngineHalo` holds the mapped peer pointers and issues these operations through ``ops`` (`CudaOps`; tests
stand in a recorder). Runs inside Dask workers; imports neither Prefect nor Dask.
"""
from __future__ import annotations

import ctypes
import os
import socket

import numpy as np

WAIT_GEQ = 0x0  # CU_STREAM_WAIT_VALUE_GEQ
MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: direction from the (unified) addresses
IPC_LAZY_PEER_ACCESS = 1  # cudaIpcMemLazyEnablePeerAccess


class CudaOps:
    """The device operations the exchange needs: IPC export / open / close, peer copies, stream memory ops."""

    def __init__(self):
        self._cuda = ctypes.CDLL("libcuda.so.1")
        for name in ("cuMemGetAddressRange_v2", "cuStreamWaitValue32_v2", "cuStreamWriteValue32_v2"):
            getattr(self._cuda, name)  # AttributeError here: a driver too old for stream memory operations
        self._cuda.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64),
                                                       ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
        for name in ("cuStreamWaitValue32_v2", "cuStreamWriteValue32_v2"):
            getattr(self._cuda, name).argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what}: CUDA driver error {rc}")

    def export(self, ptr: int) -> tuple[bytes, int, int]:
        """(IPC handle of the allocation holding ``ptr``, ``ptr``'s offset in it, the allocation's base here): pool
        memory is exported whole, and the base tells a peer that two buffers share one allocation."""
        import cupy
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        self._check(self._cuda.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), int(ptr)),
                    "cuMemGetAddressRange")
        return bytes(cupy.cuda.runtime.ipcGetMemHandle(int(base.value))), int(ptr) - int(base.value), int(base.value)

    def open(self, handle: bytes) -> int:
        import cupy
        return int(cupy.cuda.runtime.ipcOpenMemHandle(handle, IPC_LAZY_PEER_ACCESS))

    def close(self, base: int) -> None:
        import cupy
        cupy.cuda.runtime.ipcCloseMemHandle(int(base))

    def copy(self, dst: int, src: int, nbytes: int, stream) -> None:
        import cupy
        cupy.cuda.runtime.memcpyAsync(int(dst), int(src), int(nbytes), MEMCPY_DEFAULT, stream.ptr)

    def wait(self, stream, addr: int, value: int) -> None:
        self._check(self._cuda.cuStreamWaitValue32_v2(stream.ptr, int(addr), int(value) & 0xFFFFFFFF, WAIT_GEQ),
                    "cuStreamWaitValue32")

    def post(self, stream, addr: int, value: int) -> None:
        self._check(self._cuda.cuStreamWriteValue32_v2(stream.ptr, int(addr), int(value) & 0xFFFFFFFF, 0),
                    "cuStreamWriteValue32")


def flags_for(n_ranks: int, xp=None):
    """Shard k's flag words: ``ready[p]`` (written by sender p) then ``done[q]`` (written by receiver q)."""
    xp = np if xp is None else xp
    return xp.zeros(2 * int(n_ranks), dtype=np.uint32)


class CopyEngineHalo:
    """Shard ``k``'s side of the exchange: what it exports, the peers' mapped addresses, and the schedule's
    operations (module docstring). ``sends`` {q: own rows q receives}, ``recv`` [(p, n rows, first ext row)]."""

    def __init__(self, k: int, n_ranks: int, sends: dict, recv: list, ops=None):
        self.k, self.n_ranks = int(k), int(n_ranks)
        self.sends = {int(q): int(n) for q, n in sends.items()}
        self.recv = [(int(p), int(n), int(start)) for p, n, start in recv]
        self.ops = CudaOps() if ops is None else ops
        self.iteration = 0  # global iteration g (the next one to enqueue)
        self.parity = 0  # swaps since the export, mod 2: buffer 0 is the extended B current at the export
        self.flags = None
        self.buffers: tuple = ()
        self.targets: dict = {}  # q -> ([q's buffer 0, buffer 1] address of k's first halo row there, q's ready[k])
        self.done_slots: dict = {}  # p -> address of done[k] on p
        self._opened: dict = {}  # (peer, its allocation base) -> mapped base here

    # ---- setup ------------------------------------------------------------------------------------------------
    def export(self, buffers: tuple, flags, row_bytes: int) -> dict:
        """What peers need to write into this shard: its two extended Bs (current first), its flag words (zeroed
        by the caller), where each sender's rows start, the bytes of one row, and the host (IPC is one node)."""
        self.buffers, self.flags, self.row_bytes = tuple(buffers), flags, int(row_bytes)
        self.iteration, self.parity = 0, 0
        return {"k": self.k, "host": socket.gethostname(), "pid": os.getpid(), "row_bytes": self.row_bytes,
                "buffers": [self.ops.export(b) for b in self.buffers], "flags": self.ops.export(flags.data.ptr),
                "recv": {p: (n, start) for p, n, start in self.recv}}

    def _map(self, peer: int, exported) -> int:
        """A peer's address in this process (each of its allocations opened once: buffers may share a pool's)."""
        handle, offset, base = exported
        key = (int(peer), int(base))
        if key not in self._opened:
            self._opened[key] = self.ops.open(bytes(handle))
        return self._opened[key] + int(offset)

    def connect(self, exports: list) -> None:
        """Map every peer this shard sends to or receives from (``exports``: every shard's `export`, rank order).
        Raises when a peer is on another host or disagrees on the rows (the caller keeps NCCL then)."""
        host = socket.gethostname()
        for q, n in self.sends.items():
            ex = exports[q]
            if ex["host"] != host:
                raise RuntimeError(f"copy-engine halo: shard {q} runs on {ex['host']}, shard {self.k} on {host} "
                                   "(CUDA IPC needs one node)")
            got, start = ex["recv"].get(self.k, (None, None))
            if got != n or ex["row_bytes"] != self.row_bytes:
                raise RuntimeError(f"copy-engine halo: shard {q} expects {got} rows of {ex['row_bytes']} bytes "
                                   f"from shard {self.k}, which sends {n} of {self.row_bytes}")
            bufs = [self._map(q, b) + start * self.row_bytes for b in ex["buffers"]]
            self.targets[q] = (bufs, self._map(q, ex["flags"]) + 4 * self.k)
        for p, _, _ in self.recv:
            self.done_slots[p] = self._map(p, exports[p]["flags"]) + 4 * (self.n_ranks + self.k)

    def flag_addr(self, slot: int) -> int:
        return int(self.flags.data.ptr) + 4 * int(slot)

    # ---- the schedule -----------------------------------------------------------------------------------------
    def send(self, s_comm, packed: dict, next_buffer: bool) -> None:
        """On ``s_comm`` (after the caller's wait for the packed rows): for every receiver q, wait until q
        finished iteration g - 1, copy ``packed[q]`` into q's current (prologue) or next extended B, post its
        ready tag (g + 1, or g + 2 for the next iteration's halo)."""
        g = self.iteration
        which = self.parity ^ int(next_buffer)
        tag = g + 1 + int(next_buffer)
        for q, (bufs, ready) in self.targets.items():
            self.ops.wait(s_comm, self.flag_addr(self.n_ranks + q), g)
            buf = packed[q]
            self.ops.copy(bufs[which], buf.data.ptr, buf.nbytes, s_comm)
            self.ops.post(s_comm, ready, tag)

    def wait_halo(self, s_comp) -> None:
        """On ``s_comp``, before iteration g's first kernel: every sender's rows for it have landed."""
        for p, _, _ in self.recv:
            self.ops.wait(s_comp, self.flag_addr(p), self.iteration + 1)

    def finish(self, s_comp, swapped: bool) -> None:
        """After iteration g's last kernel and stores on ``s_comp``: post done = g + 1 on every sender, count the
        iteration and the swap."""
        self.iteration += 1
        for p, addr in self.done_slots.items():
            self.ops.post(s_comp, addr, self.iteration)
        self.parity ^= int(swapped)

    def release(self) -> None:
        """Unmap the peers' memory (after this shard's streams finished)."""
        for base in self._opened.values():
            try:
                self.ops.close(base)
            except Exception:  # a peer's memory already gone: nothing to unmap
                pass
        self._opened, self.targets, self.done_slots = {}, {}, {}


class CopyEngineShard:
    """The shard actor's side of the copy-engine exchange (`tasks.distribute.shard_actor.ShardActor` mixes it in):
    export its halo buffers and flags, connect the peers', tell a stale exchange, drop it. Reads the actor's
    ``k``, ``on_gpu``, ``B_ext``, ``sends``, ``recv``, ``overlap``, ``alt_B()`` and ``_device_loop``; keeps
    ``ce`` (the connected `CopyEngineHalo`, or None) and ``_ce_mode`` (the overlap it was exported for)."""

    def ce_export(self, n_ranks: int) -> dict:
        """Start the copy-engine halo exchange (`tasks.distribute.ce_exchange`): zero this shard's flag words and
        export the extended Bs the halo lands in (the "rows" overlap's two; the "columns" overlap's one, twice:
        it never swaps) and the flags (IPC handles); every shard's export then goes to `ce_connect`. Needs B
        (`set_B`), an overlap mode and the NCCL path's GPU actor; call between batches, on every shard."""
        import cupy

        if not self.on_gpu or self.B_ext is None:
            raise RuntimeError(f"shard {self.k}: the copy-engine exchange needs a GPU shard with B loaded (set_B)")
        self.ce_drop()
        ce = CopyEngineHalo(self.k, n_ranks, {q: int(i.shape[0]) for q, i in self.sends.items()}, self.recv)
        flags = flags_for(n_ranks, cupy)
        row_bytes = self.B_ext.dtype.itemsize * self.B_ext.shape[1]
        out = ce.export(self._ce_pair(), flags, row_bytes)
        cupy.cuda.Device().synchronize()  # the zeroed flags are in place before any peer can write them
        self.ce, self._ce_mode = ce, self.overlap
        return out

    def ce_connect(self, exports: list) -> None:
        """Map the peers' buffers and flags (`CopyEngineHalo.connect`); from here the overlap moves its
        halo with peer copies instead of NCCL."""
        self.ce.connect(exports)

    def ce_stale(self) -> bool:
        """Whether the exchange must be (re)made: none yet, or an extended B was reallocated since the export (a
        new N), which would leave the peers writing into memory this shard no longer reads."""
        if self.ce is None or self.B_ext is None or self._ce_mode != self.overlap:
            return True
        # the exported pair, swapped ``parity`` times since (the columns overlap never swaps)
        return self._ce_pair() != (self.ce.buffers if not self.ce.parity else self.ce.buffers[::-1])

    def _ce_pair(self) -> tuple[int, int]:
        """Where the halo lands: the rows overlap's two extended Bs (current first; the second allocated on first
        use), the columns overlap's one, twice."""
        second = self.alt_B() if self.overlap == "rows" else self.B_ext
        return self.B_ext.data.ptr, second.data.ptr

    def ce_drop(self) -> None:
        """Back to NCCL for every exchange (after the streams finished)."""
        if self.ce is not None:
            if self._device_loop is not None:
                self._device_loop.synchronize()
            self.ce.release()
            self.ce = None
