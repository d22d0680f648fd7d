"""The copy-engine halo exchange's schedule (tasks/distribute/ce_exchange.py) without a GPU: a small model of
streams (in-order queues; a flag wait blocks its stream), unified device memory and peer copies runs the operations
`CopyEngineHalo` issues in the order `nccl_loop.DeviceLoop.enqueue_rows` issues them, for shards in lock step, in
many seeded interleavings of the streams. Each kernel checks that it reads every peer's rows of its own iteration
(a copy that came early would overwrite rows still being read, one that came late would leave the previous ones),
and every batch must finish (no wait for a flag nobody posts). The real operations run in test_multi_gpu.py."""
from __future__ import annotations

import random
import types

import numpy as np
import pytest

from tasks.distribute.ce_exchange import CopyEngineHalo


class Memory:
    """Device memory of every GPU in one address space (what UVA and IPC mappings give)."""

    def __init__(self):
        self.blocks, self.next = {}, 1 << 20

    def alloc(self, n_words: int) -> int:
        base, self.next = self.next, self.next + 4 * n_words + 4096
        self.blocks[base] = np.zeros(n_words, dtype=np.uint32)
        return base

    def at(self, addr: int, n_words: int = 1) -> np.ndarray:
        for base, arr in self.blocks.items():
            if base <= addr < base + 4 * arr.size:
                i = (addr - base) // 4
                assert i + n_words <= arr.size, "access past an allocation"
                return arr[i:i + n_words]
        raise AssertionError(f"address {addr:#x} is in no allocation")


class Stream:
    def __init__(self, name):
        self.name, self.ops = name, []

    @property
    def ptr(self):
        return id(self)


class ModelOps:
    """`CudaOps` over `Memory`: operations are queued on their stream and run by `run_streams`."""

    def __init__(self, mem: Memory):
        self.mem, self.opened = mem, []

    def export(self, ptr):
        base = next(b for b, a in self.mem.blocks.items() if b <= ptr < b + 4 * a.size)
        return (str(base).encode(), ptr - base, base)

    def open(self, handle):
        self.opened.append(handle)
        return int(handle.decode())

    def close(self, base):
        pass

    def copy(self, dst, src, nbytes, stream):
        def go():
            self.mem.at(dst, nbytes // 4)[...] = self.mem.at(src, nbytes // 4)
        stream.ops.append((lambda: True, go))

    def wait(self, stream, addr, value):
        stream.ops.append((lambda: int(self.mem.at(addr)[0]) >= value, lambda: None))

    def post(self, stream, addr, value):
        def go():
            self.mem.at(addr)[0] = value
        stream.ops.append((lambda: True, go))


def run_streams(streams, rng, until=None) -> None:
    """Run queued operations, each step one runnable head op of a random stream, until ``until()`` (default: all
    queues empty)."""
    until = until or (lambda: not any(s.ops for s in streams))
    while not until():
        ready = [s for s in streams if s.ops and s.ops[0][0]()]
        assert ready, "deadlock: " + ", ".join(s.name for s in streams if s.ops)
        s = rng.choice(ready)
        s.ops.pop(0)[1]()


class Event:
    def __init__(self):
        self.done = False


def record(stream, ev):
    ev.done = False

    def go():
        ev.done = True
    stream.ops.append((lambda: True, go))


def wait_event(stream, ev):
    stream.ops.append((lambda: ev.done, lambda: None))


def value(k, g):
    return 1000 * (g + 1) + k + 1  # shard k's own rows in iteration g


class ModelShard:
    """One shard: two extended Bs [halo from each peer | own rows], flags, send buffers, its streams."""

    def __init__(self, k, P, mem, rows, senders=None, receivers=None):
        self.k, self.P, self.mem, self.rows = k, P, mem, rows
        peers = [p for p in range(P) if p != k]
        senders = peers if senders is None else senders  # the peers k receives from / sends to
        receivers = peers if receivers is None else receivers
        self.recv = [(p, rows, i * rows) for i, p in enumerate(senders)]  # (peer, n rows, first row)
        self.own_start = len(senders) * rows
        n_ext = self.own_start + rows
        self.bufs = [mem.alloc(n_ext), mem.alloc(n_ext)]  # B_ext, B_alt (one 4-byte word per row)
        self.cur = 0  # which of bufs is B_ext
        self.flags = types.SimpleNamespace(data=types.SimpleNamespace(ptr=mem.alloc(2 * P)))
        self.send = {q: types.SimpleNamespace(data=types.SimpleNamespace(ptr=mem.alloc(rows)), nbytes=4 * rows)
                     for q in receivers}
        self.s_comp, self.s_comm, self.s_pack = Stream(f"comp{k}"), Stream(f"comm{k}"), Stream(f"pack{k}")
        self.last_send = self.packed = None
        self.ce = CopyEngineHalo(k, P, {q: rows for q in receivers}, self.recv, ops=ModelOps(mem))

    def own(self, which, g):  # store iteration g's own rows into buffer ``which`` (s_comp)
        def go():
            self.mem.at(self.bufs[which] + 4 * self.own_start, self.rows)[...] = value(self.k, g)
        self.s_comp.ops.append((lambda: True, go))

    def pack(self, which, stream):  # own rows of buffer ``which`` -> every send buffer (after the last sends)
        if self.last_send is not None:
            wait_event(stream, self.last_send)

        def go():
            rows = self.mem.at(self.bufs[which] + 4 * self.own_start, self.rows)
            for buf in self.send.values():
                self.mem.at(buf.data.ptr, self.rows)[...] = rows
        stream.ops.append((lambda: True, go))

    def kernel(self, which, g, seen):  # a kernel reading buffer ``which``'s halo in iteration g (s_comp)
        def go():
            for p, n, start in self.recv:
                got = set(self.mem.at(self.bufs[which] + 4 * start, n).tolist())
                seen.append((self.k, g, p, got == {value(p, g)}, got))
        self.s_comp.ops.append((lambda: True, go))

    def send_ce(self, after, next_buffer):  # DeviceLoop._send_ce
        wait_event(self.s_comm, after)
        self.ce.send(self.s_comm, self.send, next_buffer)
        self.last_send = Event()
        record(self.s_comm, self.last_send)


def enqueue_rows(sh, n, g0, seen, wait_packed=True):
    """`DeviceLoop.enqueue_rows` for one batch of ``n`` advancing iterations with the copy-engine exchange: the
    prologue packs on s_comp, every later pack on s_pack beside the interior kernel, and each iteration's s_comp
    work waits for the latest pack (``wait_packed=False``: the race that wait prevents)."""
    for i in range(n):
        g, last = g0 + i, i + 1 == n
        if sh.packed is not None and wait_packed:
            wait_event(sh.s_comp, sh.packed)
            sh.packed = None
        if i == 0:
            sh.own(sh.cur, g)  # the batch's first B (advance)
            sh.pack(sh.cur, sh.s_comp)
            adv = Event()
            record(sh.s_comp, adv)
            sh.send_ce(adv, next_buffer=False)
        sh.ce.wait_halo(sh.s_comp)
        sh.kernel(sh.cur, g, seen)  # boundary rows' kernel
        nxt = 1 - sh.cur
        if not last:
            sh.own(nxt, g + 1)  # boundary rows of C -> the next B
            bnd = Event()
            record(sh.s_comp, bnd)
            wait_event(sh.s_pack, bnd)
            sh.pack(nxt, sh.s_pack)
            sh.packed = Event()
            record(sh.s_pack, sh.packed)
            sh.send_ce(sh.packed, next_buffer=True)
        sh.kernel(sh.cur, g, seen)  # interior rows' kernel (reads the same halo)
        sh.ce.finish(sh.s_comp, swapped=not last)
        if not last:
            sh.cur = nxt


def enqueue_columns(sh, n, g0, seen, wait_packed=True):
    """`DeviceLoop.enqueue` with the "columns" overlap on the copy engines, ``n`` advancing iterations: one extended
    B, never swapped; the advance, the pack on s_pack, the copies into each receiver's one buffer, the own-column
    kernel (reads no halo), the wait for the halo, the halo-column kernel, done posted."""
    for i in range(n):
        g = g0 + i
        if sh.packed is not None and wait_packed:
            wait_event(sh.s_comp, sh.packed)
            sh.packed = None
        sh.own(sh.cur, g)  # advance: this iteration's own rows
        adv = Event()
        record(sh.s_comp, adv)
        wait_event(sh.s_pack, adv)
        sh.pack(sh.cur, sh.s_pack)
        sh.packed = Event()
        record(sh.s_pack, sh.packed)
        sh.send_ce(sh.packed, next_buffer=False)
        sh.ce.wait_halo(sh.s_comp)
        sh.kernel(sh.cur, g, seen)  # halo-column kernel
        sh.ce.finish(sh.s_comp, swapped=False)


def run_batches(P, seed, wait_packed=True, one_way=False, enqueue=enqueue_rows):
    """Batches of several sizes on P model shards (``one_way``: two shards, 0 only sends to 1, so nothing on
    shard 0's s_comp waits for a peer); (shards, every kernel's halo check, iterations run)."""
    mem = Memory()
    shards = ([ModelShard(0, 2, mem, 3, senders=[], receivers=[1]), ModelShard(1, 2, mem, 3, senders=[0], receivers=[])]
              if one_way else [ModelShard(k, P, mem, rows=3) for k in range(P)])
    two = enqueue is enqueue_rows  # the rows overlap's two extended Bs; the columns overlap's one, exported twice
    exports = [sh.ce.export(tuple(sh.bufs) if two else (sh.bufs[0], sh.bufs[0]), sh.flags, row_bytes=4)
               for sh in shards]
    for sh in shards:
        sh.ce.connect(exports)
    rng, seen, g = random.Random(seed), [], 0
    streams = [s for sh in shards for s in (sh.s_comp, sh.s_comm, sh.s_pack)]
    for n in (3, 1, 4, 2):  # batches of several sizes; the flags keep growing across them
        for sh in shards:  # lock step: every shard enqueues the same batch (no host sync inside it)
            enqueue(sh, n, g, seen, wait_packed)
        # the batch ends with each shard's host waiting for its s_comp only: s_comm / s_pack may still run
        run_streams(streams, rng, until=lambda: not any(sh.s_comp.ops for sh in shards))
        g += n
    run_streams(streams, rng)
    return shards, seen, g


@pytest.mark.parametrize("P", [2, 3])
@pytest.mark.parametrize("seed", range(12))
def test_every_kernel_reads_its_own_iterations_halo_in_any_interleaving(P, seed):
    shards, seen, g = run_batches(P, seed)
    bad = [s for s in seen if not s[3]]
    assert not bad, bad[:3]
    assert len(seen) == 2 * P * (P - 1) * g  # two kernels per iteration, each reading every peer's rows
    assert all(sh.ce.iteration == g for sh in shards)
    assert all(sh.bufs[sh.cur] == sh.ce.buffers[sh.ce.parity] for sh in shards)  # parity follows the swaps


@pytest.mark.parametrize("seed", range(6))
def test_a_shard_that_only_sends_waits_for_its_pack(seed):
    """Shard 0 sends and receives nothing: no peer's flag holds its s_comp back, so only its wait for the pack on
    s_pack keeps iteration i + 2's store from overwriting rows the pack of iteration i has not read yet."""
    shards, seen, g = run_batches(2, seed, one_way=True)
    assert seen and all(ok for *_, ok, _ in seen) and len(seen) == 2 * g


def test_the_model_catches_the_race_without_that_wait():
    """The same model without the wait: some interleaving lets shard 1 read rows of a later iteration."""
    assert any(not ok for seed in range(40) for *_, ok, _ in run_batches(2, seed, False, one_way=True)[1])


@pytest.mark.parametrize("P", [2, 3])
@pytest.mark.parametrize("seed", range(8))
def test_the_columns_overlap_on_one_buffer_reads_its_own_iterations_halo(P, seed):
    """The "columns" overlap's single extended B: a copy for iteration g + 1 never lands before the receiver's
    halo-column kernel of iteration g finished (the done flag), in any interleaving."""
    shards, seen, g = run_batches(P, seed, enqueue=enqueue_columns)
    assert all(ok for *_, ok, _ in seen) and len(seen) == P * (P - 1) * g
    assert all(sh.ce.parity == 0 and sh.ce.iteration == g for sh in shards)


def test_connect_refuses_another_host_and_a_row_count_mismatch(monkeypatch):
    mem = Memory()
    shards = [ModelShard(k, 2, mem, rows=3) for k in range(2)]
    exports = [sh.ce.export(tuple(sh.bufs), sh.flags, row_bytes=4) for sh in shards]
    with pytest.raises(RuntimeError, match="CUDA IPC needs one node"):
        shards[0].ce.connect([exports[0], {**exports[1], "host": "elsewhere"}])
    with pytest.raises(RuntimeError, match="expects 2 rows"):
        shards[0].ce.connect([exports[0], {**exports[1], "recv": {0: (2, 0)}}])


def test_each_peer_allocation_is_opened_once():
    """Two buffers in one pool allocation are mapped with one open (a second open of a handle would fail)."""
    mem = Memory()
    shards = [ModelShard(k, 2, mem, rows=3) for k in range(2)]
    pool = mem.alloc(64)  # shard 1's buffers and flags inside one allocation, as from a memory pool
    shards[1].bufs = [pool, pool + 4 * 16]
    shards[1].flags = types.SimpleNamespace(data=types.SimpleNamespace(ptr=pool + 4 * 40))
    exports = [sh.ce.export(tuple(sh.bufs), sh.flags, row_bytes=4) for sh in shards]
    shards[0].ce.connect(exports)
    assert len(shards[0].ce.ops.opened) == 1
    bufs, ready = shards[0].ce.targets[1]
    assert bufs == [pool + 4 * 0, pool + 4 * 16] and ready == pool + 4 * 40


def test_an_unknown_halo_copy_is_refused_before_any_actor_exists(monkeypatch):
    from tasks.distribute import DistributedSpmm

    with pytest.raises(ValueError, match="halo_copy / TCSPMM_HALO_COPY 'dma': expected one of ce, nccl"):
        DistributedSpmm(None, None, M=object(), halo_copy="dma")  # no plan, no client: nothing was touched
    monkeypatch.setenv("TCSPMM_HALO_COPY", "DMA")
    with pytest.raises(ValueError, match="'dma'"):
        DistributedSpmm(None, None, M=object())
