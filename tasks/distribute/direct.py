"""One-shot SpMM without the driver in the data path: workers read A's shard and B's rows from the store and write
their block of C back; the driver sends window ranges and artifact names and receives timing dicts.

B: written ONCE to the store by whoever made it (``store_b``: the flow writes ``dense_b(seed)`` under
``inputs/b-n<N>-seed<seed>``, reused by later runs with the same N and seed), not generated on the workers from the
seed. Why: the flow's B is one ``standard_normal`` stream over the whole matrix, which cannot be cut into rows
without drawing all of it (the normal sampler consumes a variable number of raw draws per value), so every worker
would generate all of B to keep a few rows; a counter-based per-row draw would make a B different from the one the
flow checks against; and real right-hand sides (IGB node features, a GNN layer's input) are data in the store, not
seeds. Workers read only the Parquet row groups holding their halo rows (`read_rows`), or all of B when the halo
is nearly all of it; row groups are decoded from several threads straight into the worker's B
(`storage.results.read_dense`).

C: each worker writes its block as ``results/<run_id>/C-part-<r0>-<r1>.parquet`` files of at most
``BLOCK_FILE_VALUES`` values each (rows r0..r1 of the REORDERED matrix, inside the shard's contiguous rows; each
file atomic, written side by side from threads, the block's files all or none); after every shard succeeded the
driver lists the files in the manifest (``row_order`` and ``perm_key`` in the entry's ``source``), so a failed run
leaves no result, and `read_c` returns C in the original row order (``C[perm] = C_reordered``, rows put in place
as they are decoded). The store must be on a file system every worker sees (one host, or a shared mount across
nodes).
"""
from __future__ import annotations

import datetime as dt
import pickle
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from configs.errors import InputError
from configs.names import BASE_FORMAT
from storage import results as res_io
from storage.naming import validate_id
from storage.writes import write_files
from tasks.distribute import device as dev
from tasks.distribute.formats import shard_ops
from tasks.distribute.oneshot import (ShardRef, _worker_address, _workers, load_shard, oneshot_deadline_s,
                                      pending_shards, remap_halo, retry_worker)
from tasks.distribute.plan import PartitionPlan

B_PREFIX = "inputs/"
SEND_ALL_FRACTION = 0.5  # a shard whose halo is at least this share of B's rows reads all of B (whole files:
# no row-group selection or row gather, and the row groups a scattered halo touches are then most of them anyway)
BLOCK_FILE_VALUES = 1 << 22  # a worker's block of C in files of at most 16 MiB (float32): written side by side
# from threads; 134 MB (a 4-GPU shard of the 537 MB C) in 8 files, not 3 of the store's usual 64 MiB


def b_artifact(n_cols_b: int, seed: int) -> str:
    return f"{B_PREFIX}b-n{int(n_cols_b)}-seed{int(seed)}"


def store_b(mstore, B: np.ndarray, artifact: str, meta: dict | None = None) -> dict:
    """Write B [K, N] once under ``artifact`` (dense row blocks, float32); reused when a complete one of the same
    shape is stored. Returns ``{"artifact", "reused", "write_ms", "nbytes"}``."""
    B = np.ascontiguousarray(B, dtype=np.float32)
    t0 = time.perf_counter()
    entry = mstore.manifest.complete(artifact)
    if entry is not None and list(entry["meta"]["shape"]) == list(B.shape):
        return {"artifact": artifact, "reused": True, "write_ms": 0.0, "nbytes": int(B.nbytes)}
    # the store's one writer (atomic files, manifest entry last), as storage.features does for node arrays
    mstore._write_artifact(artifact, "dense", artifact, "C-part-*.parquet",
                           res_io.result_tables(B, None, meta or {}), threads=None,
                           **res_io.write_options(B.dtype, B.shape[1]))
    return {"artifact": artifact, "reused": False, "write_ms": (time.perf_counter() - t0) * 1e3,
            "nbytes": int(B.nbytes)}


def read_rows(mstore, artifact: str, rows: np.ndarray | None) -> tuple[np.ndarray, int]:
    """(rows ``rows`` (any order, repeats allowed: ``out[i] = B[rows[i]]``) of a stored dense artifact, or all of
    it for None; Parquet bytes decoded). Decodes only the row groups holding those rows, each once."""
    return res_io.read_dense(mstore.folder, mstore.manifest.require(artifact), rows)


def write_block(mstore, run_id: str, r0: int, C_k: np.ndarray) -> list[dict]:
    """Write rows r0.. of C (one shard's block) as Parquet files of ``results/<run_id>`` (at most
    ``BLOCK_FILE_VALUES`` values each, written side by side, all or none); their manifest records ([] for no
    rows)."""
    C_k = np.ascontiguousarray(C_k)
    if C_k.shape[0] == 0:
        return []
    n_cols = int(C_k.shape[1])
    parts = [(f"results/{run_id}/{rel}", rng, table) for rel, rng, table in
             res_io.result_tables(C_k, max(1, BLOCK_FILE_VALUES // max(1, n_cols)), {}, row0=r0)]
    return write_files(mstore.folder, parts, threads=None, **res_io.write_options(C_k.dtype, n_cols))


def commit_product(mstore, run_id: str, records: list, plan: PartitionPlan, *, b: str, perm_key: str,
                   source: dict | None = None) -> dict:
    """List the workers' C files as artifact ``results/<run_id>`` (after every shard succeeded): ``plan``'s
    product with stored B ``b``, its source naming the plan, the shards' perm key, B and C's row order (what
    `read_c` needs), plus ``source``."""
    records = sorted(records, key=lambda r: r["range"][0])
    source = {"plan": plan.fingerprint(), "n_parts": plan.n_parts, "perm_key": perm_key, "b": b,
              "row_order": "reordered" if plan.perm is not None else "original", **(source or {})}
    entry = {"kind": "result", "files": records, "written_at": dt.datetime.now(dt.timezone.utc).isoformat(),
             "meta": {"format": "dense", "shape": [int(plan.shape[0]), b_cols_of(mstore, b)],
                      "dtypes": {"value": "float32"}, "ranges": [r["range"] for r in records], "source": source}}
    with mstore.manifest.update() as m:
        m["artifacts"][f"results/{run_id}"] = entry
    return entry


def read_c(mstore, run_id: str, perm: np.ndarray | None = None) -> np.ndarray:
    """A stored sharded result in the ORIGINAL row order (``perm``: the run's reordering, ``perm[new] = old``;
    required when the entry says its rows are reordered)."""
    entry = mstore.manifest.require(f"results/{validate_id(run_id, 'run_id')}")
    if entry["meta"]["source"].get("row_order") != "reordered":
        return mstore.read_result(run_id)
    if perm is None:
        raise InputError(f"result {run_id} is stored in the reordered row order: pass its perm")
    return mstore.read_result(run_id, perm)


@dataclass(frozen=True)
class DenseRef:
    """A stored dense artifact (B) a worker reads rows of."""

    store: object
    artifact: str


def run_stored_shard(k: int, shard: ShardRef, b: DenseRef, out: tuple, *, repeats: int = 20, device: str = "auto",
                     spmm_kw: dict | None = None, dtype: str = "float32") -> dict:
    """Shard k from the store to the store: read its windows, its B rows, run the kernel, write its C block.
    ``out`` = (run_id, first reordered row). B's rows are read on a thread while the shard is remapped and its plan
    built (``b_ms``: the read, ``b_wait_ms``: what was left of it after the plan). Returns the timings dict
    (``records``: the C files' manifest records); nothing of A, B or C travels back."""
    t_shard = time.perf_counter()
    on_gpu = dev.worker_device(device)
    S, load_ms, a_bytes = load_shard(shard)
    t0 = time.perf_counter()
    cols = shard_ops(S).halo(S, 0, int(S.n_blocks))
    n_b = int(b.store.manifest.require(b.artifact)["meta"]["shape"][0])
    read_all = cols.shape[0] >= SEND_ALL_FRACTION * n_b
    halo_ms = (time.perf_counter() - t0) * 1e3
    # B's rows are read (Arrow's threads decode, off the GIL) while this thread remaps the shard and builds its plan
    with ThreadPoolExecutor(1, thread_name_prefix="tcspmm-b-rows") as pool:
        b_read = pool.submit(_timed, read_rows, b.store, b.artifact, None if read_all else cols)
        t0 = time.perf_counter()
        if not read_all:
            S = remap_halo(S, cols)
        remap_ms = (time.perf_counter() - t0) * 1e3 + halo_ms
        t0 = time.perf_counter()
        plan = dev.make_spmm_plan(S, on_gpu, dtype, spmm_kw=dev.oneshot_spmm_kw(spmm_kw))
        plan_ms = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        (B_rows, b_bytes), b_ms = b_read.result()
        b_wait_ms = (time.perf_counter() - t0) * 1e3
    with dev.Timer(on_gpu) as h2d:
        B_dev = dev.to_device(B_rows, on_gpu)
    t0 = time.perf_counter()
    C_dev, kernel_ms, first_ms = dev.time_kernel(plan, B_dev, on_gpu, max(int(repeats), 1))
    timing_ms = (time.perf_counter() - t0) * 1e3
    with dev.Timer(on_gpu) as d2h:
        C = dev.to_host(C_dev).astype(np.float32, copy=False)
    choice = str(plan.choice.get("kernel"))
    plan_parts = {name: float(v) for name, v in getattr(plan, "timings", {}).items() if isinstance(v, (int, float))}
    del C_dev, B_dev, plan
    dev.release_device_memory(on_gpu)
    t0 = time.perf_counter()
    run_id, r0 = out
    records = write_block(shard.store, run_id, int(r0), C)
    write_ms = (time.perf_counter() - t0) * 1e3
    return {"shard": int(k), "worker": _worker_address(), "gpu": dev.device_name(on_gpu), "kernel": choice,
            "dtype": dtype, "load_ms": load_ms, "b_ms": b_ms, "b_wait_ms": b_wait_ms, "remap_ms": remap_ms,
            "h2d_ms": h2d.ms, "plan_ms": plan_ms, "plan_parts": plan_parts, "kernel_ms": kernel_ms,
            "timing_ms": timing_ms, "first_ms": first_ms, "d2h_ms": d2h.ms, "write_ms": write_ms,
            "shard_ms": (time.perf_counter() - t_shard) * 1e3, "a_bytes_read": int(a_bytes),
            "b_bytes_read": int(b_bytes), "c_bytes_written": sum(int(r["size"]) for r in records),
            "b_rows": int(B_rows.shape[0]), "b_read_all": bool(read_all), "halo_rows": int(cols.shape[0]),
            "n_blocks": int(S.n_blocks), "nnz": int(S.nnz), "repeats": int(repeats), "records": records}


def _timed(fn, *args):
    """(fn(*args), its wall ms)."""
    t0 = time.perf_counter()
    return fn(*args), (time.perf_counter() - t0) * 1e3


def run_oneshot_stored(plan: PartitionPlan, client, store, *, b: str, perm_key: str, fmt: str = BASE_FORMAT,
                       run_id: str, repeats: int = 20, device: str = "auto", spmm_kw: dict | None = None,
                       dtype: str = "float32", source: dict | None = None, shard_fn=None) -> list[dict]:
    """C = A @ B with the driver out of the data path; C lands in ``store`` as ``results/<run_id>`` (read it with
    `read_c`). ``store``: a ``storage.MatrixStore`` holding the shards (``persist_plan``: ``fmt``/``perm_key``)
    and B (``store_b``: artifact ``b``). Faults as `run_oneshot`: a failed shard is resubmitted once on another
    worker; twice failed raises ``ShardFailedError`` and removes the C files written so far.

    Returns one timings dict per shard (`run_stored_shard`'s plus ``attempts``, ``done_ms`` (received, from the
    first submit), ``overhead_ms`` (its submit-to-received time minus ``shard_ms``: scheduling and the small
    transfers), ``driver_bytes_out``/``driver_bytes_in`` (pickled task arguments / result of that shard),
    ``wall_ms`` and ``commit_ms`` (the manifest entry)).
    """
    from distributed import as_completed

    if b_rows_of(store, b) != plan.shape[1]:
        raise InputError(f"stored B {b} has {b_rows_of(store, b)} rows, expected A's {plan.shape[1]} columns")
    fn = shard_fn or run_stored_shard
    deadline_s = oneshot_deadline_s()  # a bad TCSPMM_ONESHOT_TIMEOUT_S fails before any work is sent
    workers = _workers(client)
    bref = DenseRef(store, b)
    t_start = time.perf_counter()
    sent: dict = {}

    def submit(k: int, worker: str):
        args = (k, ShardRef(store, fmt, perm_key, int(plan.partptr[k]), int(plan.partptr[k + 1])), bref,
                (run_id, int(plan.row_start[k])))
        sent[k] = (len(pickle.dumps(args)), time.perf_counter())
        return client.submit(fn, *args, repeats=repeats, device=device, spmm_kw=spmm_kw, dtype=dtype,
                             workers=[worker], allow_other_workers=True, pure=False,
                             key=f"spmm-stored-{k}-{time.monotonic_ns()}")

    owner, attempts, futures = {}, [0] * plan.n_parts, []
    for k in range(plan.n_parts):
        f = submit(k, workers[k % len(workers)])
        owner[f.key], attempts[k] = (k, workers[k % len(workers)]), 1
        futures.append(f)
    timings: list = [None] * plan.n_parts
    ac = as_completed(futures, loop=client.loop, timeout=deadline_s)
    try:
        for f in pending_shards(ac, owner, futures, client, plan, deadline_s):
            k, w = owner.pop(f.key)
            try:
                t = f.result()
            except Exception as err:
                w2 = retry_worker(err, f, k, w, attempts, owner, futures, client, plan)
                g = submit(k, w2)
                owner[g.key], attempts[k] = (k, w2), attempts[k] + 1
                futures.append(g)
                ac.add(g)
                continue
            now = time.perf_counter()
            t.update(attempts=attempts[k], done_ms=(now - t_start) * 1e3,
                     overhead_ms=(now - sent[k][1]) * 1e3 - t["shard_ms"], driver_bytes_out=sent[k][0],
                     driver_bytes_in=len(pickle.dumps(t)))
            timings[k] = t
            f.release()
    except BaseException:
        shutil.rmtree(store.folder / "results" / run_id, ignore_errors=True)  # no manifest entry: no result
        raise
    wall_ms = (time.perf_counter() - t_start) * 1e3
    t0 = time.perf_counter()
    commit_product(store, run_id, [r for t in timings for r in t["records"]], plan, b=b, perm_key=perm_key,
                   source=source)
    commit_ms = (time.perf_counter() - t0) * 1e3
    for t in timings:
        t.update(wall_ms=wall_ms, commit_ms=commit_ms)
    return timings


def b_rows_of(store, artifact: str) -> int:
    return int(store.manifest.require(artifact)["meta"]["shape"][0])


def b_cols_of(store, artifact: str) -> int:
    return int(store.manifest.require(artifact)["meta"]["shape"][1])
