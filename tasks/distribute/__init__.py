"""Multi-GPU SpMM: partition plans, one-shot tasks, resident actors, the default Dask cluster.

- `make_plan(M, n_parts, perm=None) -> PartitionPlan` (plan.py, plain NumPy) and `persist_plan` (Parquet shards
  plus ``plans/<P>-<hash>.json``);
- `run_oneshot(plan, B, client, ...) -> (C, timings)` (oneshot.py): one pinned task per shard, C in original order;
- `run_oneshot_stored(plan, client, store, b=..., run_id=...)` (direct.py): the same without the driver in the data
  path (workers read shards and B rows from the store and write C blocks; `read_c` reads C back);
  `run_oneshot_exchanged` (exchanged.py, square A): B read once, each worker its own rows, the halo by the
  resident exchange;
- formats.py: what a format needs to run sharded (`shard_ops`; every registered format), halo_order.py: the row order
  for P > 1 shards by TC blocks and halo bytes (`choose_order`);
- `DistributedSpmm(plan, client, ...)` (resident.py; its `ShardActor` in shard_actor.py, host batches in
  host_batches.py): one actor per shard, halo exchange by NCCL or Dask;
  ``iterate(n)`` batches n iterations into one actor call per shard, on GPUs enqueued without a host sync between
  them (nccl_loop.py: fixed buffers, events read once per batch into kernel / exchange / exposed / gap ms);
  ``set_overlap("rows")`` hides the exchange behind the interior rows' kernel (row_split.py: boundary rows first);
- `cluster_client(address=None, n_workers=None)` (cluster.py): dask-cuda when GPUs are present (an RMM pool that
  CuPy allocates from, the tcp or ucx protocol: `gpu_cluster_options`), else CPU workers; halo_order.py's
  `auto_for_devices` is ``--reorder auto`` over several devices; `warm_cluster(client)` loads each worker's
  kernels before its first shard (device.warm_worker);
- `runs_rows`, `markdown_table`, `resident_rows` (report.py): timing tables for the runs table and artifacts;
- device.py (what a worker does on its GPU: timers, SpmmPlan, transfers) and synth.py (R-MAT/SBM graphs straight
  to ME-TCF with CuPy, for the scaling benchmark).

Imports stay light: Dask is imported by the functions that need it, never by workers' shard code paths here.
"""
from tasks.distribute.cluster import cluster_client, make_cluster, warm_cluster
from tasks.distribute.oneshot import ShardFailedError, ShardRef, run_oneshot, run_shard
from tasks.distribute.plan import PartitionPlan, make_plan, persist_plan, shard_of
from tasks.distribute.report import markdown_table, resident_rows, runs_rows
from tasks.distribute.resident import CParts, DistributedSpmm

__all__ = ["PartitionPlan", "make_plan", "persist_plan", "shard_of", "run_oneshot", "run_shard", "ShardRef",
           "ShardFailedError", "DistributedSpmm", "CParts", "cluster_client", "make_cluster", "warm_cluster",
           "runs_rows", "markdown_table", "resident_rows"]
