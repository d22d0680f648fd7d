"""One-shot distributed SpMM: one task per shard, pinned one per worker, C gathered in the original row order.

Each task (``run_shard``, module-level and pure: a shard reference or the shard's arrays, plus the B rows it
references) loads its shard, moves it to its worker's GPU, builds ``kernels.spmm.SpmmPlan`` there (so every GPU
runs its own kernel selector), times the kernel, and returns its block of C as a host array with a timings dict.

Faults: tasks are submitted without Dask retries; the driver resubmits a failed shard once on another worker with
freshly scattered inputs (a shard's inputs are durable: its Parquet file, or the driver's arrays), and a shard that
fails twice raises `ShardFailedError` naming the shard and the worker. A product not finished within
``TCSPMM_ONESHOT_TIMEOUT_S`` seconds (default 3600; `oneshot_deadline_s`) raises `ShardFailedError` naming the shards
still out and their workers (a worker whose task thread blocks would otherwise hold the driver forever). C is
written to Parquet only after every shard succeeded (``store.write_result``: atomic per block, manifest last), so
a failed run leaves no C behind.
"""
from __future__ import annotations

import os
import socket
import time
from concurrent.futures import CancelledError
from dataclasses import dataclass

import numpy as np

from configs.errors import InputError
from configs.names import BASE_FORMAT
from tasks.distribute import device as dev
from tasks.distribute.plan import PartitionPlan, shard_of


class ShardFailedError(InputError, RuntimeError):
    """A shard failed on two workers. Both an ``InputError`` (the CLI prints the one-line message and exits 1)
    and a ``RuntimeError`` (it is a run-time failure, not bad input)."""


@dataclass(frozen=True)
class ShardRef:
    """Where a worker reads its shard: windows [w0, w1) of ``fmt``/``perm_key`` in a ``storage.MatrixStore``."""

    store: object
    fmt: str
    perm_key: str
    w0: int
    w1: int


def load_shard(shard) -> tuple[object, float, int]:
    """(the shard's format object, load ms, bytes read) from a ShardRef (Parquet, its window range only) or an
    in-memory object."""
    t0 = time.perf_counter()
    if isinstance(shard, ShardRef):
        from kernels.formats import get
        S = get(shard.fmt).from_arrays(shard.store.read_format(shard.fmt, shard.perm_key, shard.w0, shard.w1))
    else:
        S = shard
    return S, (time.perf_counter() - t0) * 1e3, S.nbytes


def run_shard(k: int, shard, B_rows: np.ndarray, cols: np.ndarray | None, *, repeats: int = 20,
              device: str = "auto", spmm_kw: dict | None = None, dtype: str = "float32"
              ) -> tuple[np.ndarray, dict]:
    """C_k = A_k @ B for shard k; returns (C_k host array [rows of shard k, N], timings dict).

    ``B_rows``: all of B when ``cols`` is None, else ``B[cols]`` (the shard's halo rows, ``cols`` sorted), in
    which case the shard's columns are renamed to positions in ``cols`` before the kernel runs. ``spmm_kw`` goes
    to ``SpmmPlan`` (a one-shot runs without autotune unless it asks: `device.oneshot_spmm_kw`). ``kernel_ms``
    is the median of ``repeats`` runs after a warm-up.
    ``dtype``: the precision (the shard's values are stored in it; B is rounded to it on the way in, C float32).
    """
    t_shard = time.perf_counter()
    on_gpu = dev.worker_device(device)
    S, load_ms, bytes_read = load_shard(shard)
    t0 = time.perf_counter()
    if cols is not None:
        S = remap_halo(S, cols)
    remap_ms = (time.perf_counter() - t0) * 1e3
    with dev.Timer(on_gpu) as h2d:
        B_dev = dev.to_device(np.ascontiguousarray(B_rows, dtype=np.float32), on_gpu)
    t0 = time.perf_counter()
    plan = dev.make_spmm_plan(S, on_gpu, dtype, spmm_kw=dev.oneshot_spmm_kw(spmm_kw))
    plan_ms = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    C_dev, kernel_ms, first_ms = dev.time_kernel(plan, B_dev, on_gpu, max(int(repeats), 1))
    timing_ms = (time.perf_counter() - t0) * 1e3  # the warm-up (and any autotune) plus the timed repeats
    with dev.Timer(on_gpu) as d2h:
        C = dev.to_host(C_dev)
    choice = str(plan.choice.get("kernel"))
    del C_dev, B_dev, plan
    dev.release_device_memory(on_gpu)
    timings = {"shard": int(k), "worker": _worker_address(), "host": socket.gethostname(),
               "gpu": dev.device_name(on_gpu), "kernel": choice, "load_ms": load_ms,
               "remap_ms": remap_ms, "h2d_ms": h2d.ms, "plan_ms": plan_ms, "kernel_ms": kernel_ms,
               "timing_ms": timing_ms, "first_ms": first_ms, "d2h_ms": d2h.ms,
               "shard_ms": (time.perf_counter() - t_shard) * 1e3,
               "bytes_in": int(bytes_read + B_rows.nbytes), "bytes_out": int(C.nbytes), "n_blocks": S.n_blocks,
               "nnz": S.nnz, "b_rows": int(B_rows.shape[0]), "repeats": int(repeats)}
    return C, timings


def remap_halo(S, cols: np.ndarray):
    """S with its columns renamed to their positions in ``cols`` (its sorted halo), width ``len(cols)``."""
    from tasks.distribute.formats import shard_ops
    return shard_ops(S).remap(S, cols, np.arange(cols.shape[0], dtype=np.int64), cols.shape[0])


def _worker_address() -> str:
    try:
        from distributed import get_worker  # only inside a worker; keeps this module importable without Dask
        return get_worker().address
    except (ImportError, ValueError):
        return "local"


WORKERS_WAIT_S = 30.0  # how long an empty cluster is given to (re)connect a worker before it is refused


def _workers(client, wait_s: float = WORKERS_WAIT_S) -> list[str]:
    """The cluster's worker addresses, sorted. None connected: wait up to ``wait_s`` for one (a worker that missed
    its heartbeats on a loaded machine drops out and reconnects; seen once in the CPU suite on a 2-core machine,
    between a one-shot and the resident actors of one test), then refuse in one line."""
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    if not workers and wait_s > 0:
        try:
            client.wait_for_workers(1, timeout=wait_s)
        except TimeoutError:
            pass
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    if not workers:
        raise InputError(f"the Dask cluster has no workers (none connected within {wait_s:g} s); start some or "
                         "pass n_workers")
    return workers


ONESHOT_TIMEOUT_S = 3600.0  # a one-shot product's deadline unless TCSPMM_ONESHOT_TIMEOUT_S says otherwise


def oneshot_deadline_s(env=None) -> float:
    """Seconds a one-shot product may take (``TCSPMM_ONESHOT_TIMEOUT_S``, default 3600); ValueError in one line for
    a value that is not a positive number."""
    raw = (os.environ if env is None else env).get("TCSPMM_ONESHOT_TIMEOUT_S")
    if raw is None:
        return ONESHOT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"TCSPMM_ONESHOT_TIMEOUT_S {raw!r}: expected a positive number of seconds")
    return value


def pending_shards(ac, owner: dict, futures: list, client, plan: PartitionPlan, deadline_s: float):
    """The shards of ``owner`` ({key: (shard, worker)}) as ``ac`` completes them; at the deadline their futures
    are cancelled and ShardFailedError names the shards still out and their workers."""
    from distributed import TimeoutError as DaskTimeout

    it = iter(ac)
    while True:
        try:
            f = next(it)
        except StopIteration:
            return
        except (DaskTimeout, TimeoutError) as err:
            late = sorted(owner.values())
            client.cancel([x for x in futures if x.key in owner])
            where = ", ".join(f"shard {k} (windows {int(plan.partptr[k])}..{int(plan.partptr[k + 1])}) on {w}"
                              for k, w in late)
            raise ShardFailedError(f"one-shot not finished after {deadline_s:g} s: {where} still running; a worker "
                                   "may be blocked or lost (its log says why); TCSPMM_ONESHOT_TIMEOUT_S sets the "
                                   "deadline") from err
        yield f


def retry_worker(err, f, k: int, w: str, attempts: list, owner: dict, futures: list, client,
                 plan: PartitionPlan) -> str:
    """A shard task ``f`` (shard k, on worker w) failed with ``err``: release it; a second failure cancels the
    other shards and raises ShardFailedError; otherwise return the worker its retry goes to (another alive one)."""
    f.release()
    if attempts[k] >= 2:
        client.cancel([x for x in futures if x.key in owner])
        why = ("its worker died or lost the shard's inputs; " if isinstance(err, CancelledError)
               or type(err).__name__ == "KilledWorker" else "")
        raise ShardFailedError(f"shard {k} (windows {int(plan.partptr[k])}..{int(plan.partptr[k + 1])}) "
                               f"failed twice, last on worker {w}: {why}{type(err).__name__}: {err}") from err
    alive = [x for x in _workers(client) if x != w] or _workers(client)
    return alive[k % len(alive)]


def run_oneshot(plan: PartitionPlan, B: np.ndarray, client, *, M=None, store=None,
                perm_key: str = "none", fmt: str = BASE_FORMAT, out: str | None = None, repeats: int = 20,
                device: str = "auto", shard_fn=None, meta: dict | None = None, spmm_kw: dict | None = None,
                dtype: str = "float32") -> tuple[np.ndarray, list[dict]]:
    """C = A @ B over the cluster, C in the ORIGINAL row order (``C[plan.shard_rows(k)] = C_k``).

    Shards come from ``store`` (a ``storage.MatrixStore`` holding ``fmt``/``perm_key`` written with
    ``persist_plan``; each worker reads only its file) or, without a store, from ``M`` (each shard scattered once
    to its worker). ``out``: a run id; C is then also written with ``store.write_result(out, C)`` after every shard
    succeeded. ``shard_fn`` replaces `run_shard` (same signature; fault injection in tests); ``spmm_kw`` goes to
    every shard's ``SpmmPlan``.

    Returns ``(C float32 [M, N], timings)``: one dict per shard (see `run_shard`: load, remap, h2d, plan, kernel
    median, timing = warm-up + timed repeats, d2h, shard = all of it on the worker) plus driver-side ``attempts``,
    ``gather_ms`` (fetching its block and placing it into C), ``done_ms`` (when it was placed, from the first
    scatter), ``send_all``, ``scatter_ms`` (the driver's time
    scattering shards and B or halo rows, all shards), ``wall_ms`` (from the first scatter to the last block
    placed) and ``write_ms`` (0 without ``out``).
    """
    from distributed import as_completed  # the driver's import; workers never need it

    B = np.asarray(B)
    if B.ndim != 2 or B.shape[0] != plan.shape[1]:
        raise InputError(f"B has shape {B.shape}, expected ({plan.shape[1]}, N) for A of shape {plan.shape}")
    if store is None and M is None:
        raise InputError("run_oneshot needs the shards: pass store= (Parquet) or M= (in memory)")
    if out is not None and store is None:
        raise InputError("run_oneshot(out=...) writes C through a store: pass store=")
    fn = shard_fn or run_shard
    deadline_s = oneshot_deadline_s()  # a bad TCSPMM_ONESHOT_TIMEOUT_S fails before any work is sent
    workers = _workers(client)
    send_all = plan.send_all(B.shape[1], B.dtype.itemsize)
    B32 = np.ascontiguousarray(B, dtype=np.float32)
    t_start = time.perf_counter()
    full_b: dict = {}  # worker -> future of all of B, shared by that worker's shards on their first attempt

    def inputs(k: int, worker: str, retry: bool):
        """Shard k's inputs scattered to ``worker`` (fresh keys on a retry, so it never reuses lost data)."""
        if store is not None:
            shard = ShardRef(store, fmt, perm_key, int(plan.partptr[k]), int(plan.partptr[k + 1]))
        else:
            shard = client.scatter(shard_of(M, plan, k), workers=[worker], hash=False)
        if send_all[k]:
            if retry or worker not in full_b:
                full_b[worker] = client.scatter(B32, workers=[worker], hash=False)
            return shard, full_b[worker], None
        cols = plan.halo_cols[k]  # scattered too: a graph carrying MBs of arrays makes Dask warn and slows it
        rows, cols = client.scatter([B32[cols], cols], workers=[worker], hash=False)
        return shard, rows, cols

    scatter_ms = [0.0]  # driver time spent scattering shards and B (or halo rows) to the workers

    def submit(k: int, worker: str, retry: bool = False):
        t0 = time.perf_counter()
        shard, rows, cols = inputs(k, worker, retry)
        scatter_ms[0] += (time.perf_counter() - t0) * 1e3
        kw = {"dtype": dtype} if dtype != "float32" else {}  # fault-injecting shard_fns take the old signature
        return client.submit(fn, k, shard, rows, cols, repeats=repeats, device=device, spmm_kw=spmm_kw, **kw,
                             workers=[worker],
                             allow_other_workers=True, pure=False, key=f"spmm-shard-{k}-{time.monotonic_ns()}")

    owner: dict = {}
    attempts = [0] * plan.n_parts
    futures = []
    for k in range(plan.n_parts):
        w = workers[k % len(workers)]
        f = submit(k, w)
        owner[f.key], attempts[k] = (k, w), 1
        futures.append(f)
    C = np.empty((plan.shape[0], B.shape[1]), dtype=np.float32)
    timings: list = [None] * plan.n_parts
    ac = as_completed(futures, loop=client.loop, timeout=deadline_s)  # the passed client, not a default one
    for f in pending_shards(ac, owner, futures, client, plan, deadline_s):
        k, w = owner.pop(f.key)
        t0 = time.perf_counter()
        try:
            C_k, t = f.result()  # fetches C_k from the worker
        except Exception as err:  # a task error, a killed worker, or lost inputs
            w2 = retry_worker(err, f, k, w, attempts, owner, futures, client, plan)
            g = submit(k, w2, retry=True)
            owner[g.key], attempts[k] = (k, w2), attempts[k] + 1
            futures.append(g)
            ac.add(g)
            continue
        C[plan.shard_rows(k)] = C_k
        t.update(attempts=attempts[k], gather_ms=(time.perf_counter() - t0) * 1e3, send_all=bool(send_all[k]),
                 done_ms=(time.perf_counter() - t_start) * 1e3)
        timings[k] = t
        f.release()
    wall_ms = (time.perf_counter() - t_start) * 1e3
    write_ms = 0.0
    if out is not None:
        t0 = time.perf_counter()
        store.write_result(out, C, meta={"plan": plan.fingerprint(), "n_parts": plan.n_parts, **(meta or {})})
        write_ms = (time.perf_counter() - t0) * 1e3
    for t in timings:
        t.update(wall_ms=wall_ms, write_ms=write_ms, scatter_ms=scatter_ms[0])
    return C, timings
