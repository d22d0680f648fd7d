"""One-shot SpMM that reads B once: each worker reads only its own rows of B from the store, the rows it needs from
the other shards arrive by the resident halo exchange (NCCL between GPUs, Dask actor calls between CPU workers),
and each worker writes its block of C back. Square A only (B's rows are partitioned like A's).

Why: in the driver-free one-shot (`direct.run_oneshot_stored`) every worker reads the B rows its shard references
from Parquet; on R-MAT in the given order that is half or more of B on every worker, so reading B did not scale
(R-MAT 21M, 537 MB of B, 4 H100s: 1.6-2.0 s at 1, 2 and 4 GPUs, the workers sharing one disk; docs/scale-out.md).
Here the store is read once in total, 1/P of B per worker, and the halo moves device to device.

The price is the actors' setup (`DistributedSpmm`: shard load, plan, the NCCL communicator), which the timings
return as ``setup_ms``; each worker reads its rows of B beside it, on a thread of its own (``prefetch_b``); a failed
shard fails the product (no per-shard retry as in `run_oneshot_stored`), and its C files are removed, so a failed
run leaves no result. Results as `direct.run_oneshot_stored`: ``results/<run_id>`` in the reordered row order, read
back with `direct.read_c`.
"""
from __future__ import annotations

import shutil
import time

from configs.errors import InputError
from configs.names import BASE_FORMAT
from tasks.distribute import device as dev
from tasks.distribute.direct import DenseRef, b_rows_of, commit_product
from tasks.distribute.plan import PartitionPlan
from tasks.distribute.resident import DistributedSpmm, _wait


def run_oneshot_exchanged(plan: PartitionPlan, client, store, *, b: str, perm_key: str, fmt: str = BASE_FORMAT,
                          run_id: str, device: str = "auto", spmm_kw: dict | None = None, dtype: str = "float32",
                          source: dict | None = None) -> list[dict]:
    """C = A @ B with B read once from ``store`` (artifact ``b``, `direct.store_b`) and the shards of
    ``persist_plan`` (``fmt``/``perm_key``); C lands as ``results/<run_id>``. One timings dict per shard: ``b_ms``
    (its own B rows from Parquet, read beside the setup), ``b_wait_ms`` (what was left of that read once the
    setup was done), ``h2d_ms``, ``exchange_ms`` (the halo rows from its peers), ``kernel_ms``,
    ``d2h_ms``, ``write_ms``, ``load_ms`` (its shard), the shared ``setup_ms`` (actors, plans, communicator;
    ``setup_parts``: `DistributedSpmm.setup_ms`),
    ``wall_ms`` (everything up to the written blocks) and ``commit_ms`` (the manifest entry), bytes and rows."""
    if not plan.square:
        raise InputError(f"the one-shot over the halo exchange needs a square A (B partitioned like A's rows); "
                         f"got {plan.shape[0]} x {plan.shape[1]}: use run_oneshot_stored")
    if b_rows_of(store, b) != plan.shape[1]:
        raise InputError(f"stored B {b} has {b_rows_of(store, b)} rows, expected A's {plan.shape[1]} columns")
    bref = DenseRef(store, b)
    t_start = time.perf_counter()
    try:
        with DistributedSpmm(plan, client, store=store, perm_key=perm_key, fmt=fmt, device=device,  # B read
                             spmm_kw=dev.oneshot_spmm_kw(spmm_kw), dtype=dtype, prefetch_b=bref) as ds:  # beside setup
            setup_ms, setup_parts = (time.perf_counter() - t_start) * 1e3, dict(ds.setup_ms)
            loads = _wait([a.load_B(bref, plan.shard_rows(k)) for k, a in enumerate(ds.actors)])
            ds.run()  # halo exchange, then every shard's kernel (one run: the product, not a timing loop)
            runs = ds.history[-1]["shards"]
            writes = _wait([a.write_C(store, run_id, int(plan.row_start[k])) for k, a in enumerate(ds.actors)])
            info = ds.info
        wall_ms = (time.perf_counter() - t_start) * 1e3
    except BaseException:
        shutil.rmtree(store.folder / "results" / run_id, ignore_errors=True)  # no manifest entry: no result
        raise
    t0 = time.perf_counter()
    commit_product(store, run_id, [r for w in writes for r in w["records"]], plan, b=b, perm_key=perm_key,
                   source={"b_read": "own rows, halo exchanged", **(source or {})})
    commit_ms = (time.perf_counter() - t0) * 1e3
    by_shard = {r["shard"]: r for r in runs}
    return [{"shard": k, "worker": info[k]["worker"], "gpu": info[k]["gpu"], "dtype": dtype,
             "kernel": by_shard[k].get("kernel"), "load_ms": info[k]["load_ms"], "plan_ms": info[k]["plan_ms"],
             "setup_ms": setup_ms, "setup_parts": setup_parts,
             **{key: loads[k][key] for key in ("b_ms", "b_wait_ms", "h2d_ms", "b_rows", "b_bytes_read")},
             "exchange_ms": by_shard[k].get("exchange_ms", 0.0), "kernel_ms": by_shard[k]["kernel_ms"],
             "transport": by_shard[k].get("transport"), "halo_rows": info[k]["halo_rows"],
             **{key: writes[k][key] for key in ("d2h_ms", "write_ms", "c_bytes_written", "records")},
             "wall_ms": wall_ms, "commit_ms": commit_ms} for k in range(plan.n_parts)]
