"""Strong scaling of SpMM over 1, 2 (and 4) GPUs: kernel-only, one-shot end-to-end, resident per iteration.

    python benchmarks/multi_gpu.py [--quick] [--nnz 100e6,500e6] [--kinds rmat,sbm] [--orders none,natural,tca]

For each generated matrix (R-MAT power-law and SBM communities, built on GPU 0 with CuPy, randomly relabelled as a
real input would be) and each row order (``none`` = as given; ``natural`` = the generator's own labels, the ideal
community order; ``tca`` = tasks.reorder's TCA; ``community`` = tasks.reorder's label-propagation communities, on
GPU 0), and P in the GPU counts:

- kernel-only: median of ``--repeats`` CUDA-event-timed runs per GPU inside the one-shot tasks; T_P = slowest
  GPU; efficiency T_1 / (P * T_P);
- one-shot end-to-end, from the shards' Parquet files to C gathered in the original row order, itemized: the
  driver's scatter (shards, B or halo rows) and gather, the max per GPU of load / remap / h2d / plan / d2h and of
  the whole worker task, and the rest (Dask scheduling and transfers); the timing repeats are subtracted;
- one-shot stored (``stored`` mode, issue 19): the driver out of the data path: B written once to the store
  (``b_write_ms``, not part of the run), each worker reads its shard and its B rows from Parquet and writes its
  block of C back (``tasks.distribute.direct``); itemized for the shard placed last: load, B read, remap, h2d,
  plan, first run (``stored_first_ms``: kernel selection included), d2h, C write, Dask overhead (submit-to-received
  minus the task), manifest commit; ``stored_e2e_ms`` =
  wall time minus the timed repeats (the first run, with any kernel selection, counts), ``stored_e2e_ratio`` =
  that over the P = 1 one (target <= 0.6 at P = 2). The workers are warmed once when the cluster starts
  (``tasks.distribute.warm_cluster``: kernels loaded, as in a long-lived cluster; ``cluster.warm`` holds its ms;
  ``--cold-workers`` leaves that to each worker's first shard);
  ``driver_bytes`` = what the driver pickled to and from the workers;
- one-shot over the exchange (``exchanged`` mode, `tasks.distribute.exchanged`): B read once, each worker its own
  rows, the halo by the resident exchange (NCCL), C blocks written by the workers; ``exchanged_e2e_ms`` (nothing
  to subtract: one kernel run), its ratio to the P = 1 one, and the slowest shard's setup (actors, plans,
  communicator), B read, h2d, exchange, kernel, d2h and C write;
- resident: ``--iters`` iterations (after one warm-up) of halo exchange (NCCL when available) + kernel, one
  driver call per iteration, per iteration ms and halo bytes per GPU; efficiency against the P = 1 iteration;
- resident batched: the same iterations as one batch of ``--iters`` in one actor call per GPU
  (``DistributedSpmm.iterate``, after a warm-up batch), so the Dask round trip is paid once per batch:
  ``resident_batched_iter_ms`` = batch wall time / ``--iters``, efficiency against the P = 1 batched iteration;
- at P > 1, with the overlapped halo exchange (the own-column kernel runs while NCCL moves the halo rows, the
  halo-column kernel then adds into C), per call and batched (``overlap`` mode, ``*_overlap*`` keys);
- at P > 1, batched with the row-split overlap (``rowoverlap`` mode, ``resident_batched_rowoverlap_*`` keys: the
  boundary rows' kernel first, their exchange for the next iteration beside the interior rows' kernel; each row
  computed once), with its breakdown (kernel, boundary kernel, exchange, exposed ms) and an advancing batch checked
  against a per-call iteration on the B it left (``resident_batched_rowoverlap_advance_rel_err``).

C of every P > 1 run (one-shot, resident, batched, overlapped) is checked against the single-GPU C (TF32:
relative Frobenius error < 1e-3) on ``--check-rows`` rows drawn at random (fetched from their shards with
`CParts.rows`: gathering a 4 GB C per check would take longer than the runs; 0 checks every row); a batch of 2
advancing iterations (C becomes B inside the call) is checked against a per-call iteration on the B it left.
Writes ``benchmarks/results/multi_gpu-<gpu>-x<count>-<date>.json`` and prints a table last.
``--cpu``: the same pipeline with NumPy on CPU workers and tiny sizes (a smoke test of the logic, no timings).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storage import BlockStore  # noqa: E402
from tasks.distribute import (DistributedSpmm, cluster_client, make_plan, persist_plan, run_oneshot,  # noqa: E402
                               warm_cluster)
from tasks.distribute.cluster import count_gpus  # noqa: E402
from tasks.distribute.direct import b_artifact, read_c, run_oneshot_stored, store_b  # noqa: E402
from tasks.distribute.exchanged import run_oneshot_exchanged  # noqa: E402
from tasks.distribute.device import cupy_allocator_name, to_host, worker_device  # noqa: E402
from kernels.formats.metcf.container import WINDOW, expand  # noqa: E402
from kernels.formats.metcf.synth import metcf_from_keys  # noqa: E402
from tasks.distribute.synth import mesh_keys, relabel, rmat_keys, sbm_keys  # noqa: E402

TF32_RTOL = 2e-3  # the TF32 accuracy contract: relative Frobenius error against float64 (README "Precision")
ERRS = ("oneshot_rel_err", "stored_rel_err", "exchanged_rel_err", "resident_rel_err", "resident_overlap_rel_err",
        "resident_batched_rel_err", "resident_batched_overlap_rel_err", "resident_batched_advance_rel_err",
        "resident_batched_rowoverlap_rel_err", "resident_batched_rowoverlap_advance_rel_err")  # each vs TF32_RTOL


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="one ~20M-nnz matrix per kind, fewer repeats")
    p.add_argument("--cpu", action="store_true", help="NumPy on CPU workers, tiny sizes (logic smoke test)")
    p.add_argument("--nnz", default="100e6", help="target nonzeros per matrix, comma-separated (50e6..500e6)")
    p.add_argument("--kinds", default="rmat,sbm", help="rmat, sbm, mesh (3D 27-point stencil)")
    p.add_argument("--orders", default="none,natural,community",
                   help="none, natural, tca (only up to --tca-max-nnz), community (label propagation), rcm")
    p.add_argument("--tca-max-nnz", type=float, default=150e6)
    p.add_argument("--check-windows", type=int, default=1024,
                   help="16-row windows of C compared with a float64 product per check (random, seeded)")
    p.add_argument("--gpus", default=None, help="GPU counts, default 1,2 (and 4 when present)")
    p.add_argument("--n-cols", type=int, default=256)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--iters", type=int, default=5, help="per-call resident iterations (one driver call each)")
    p.add_argument("--batch", type=int, default=20, help="iterations per batch (one actor call per GPU)")
    p.add_argument("--weak", type=float, default=None,
                   help="weak scaling: nonzeros per GPU (the matrix grows with P); resident modes only")
    p.add_argument("--cold-workers", action="store_true",
                   help="skip warm_cluster: each worker's first shard then loads its kernels (about 0.23 s)")
    p.add_argument("--protocol", default=None, help="Dask comm: tcp or ucx (default TCSPMM_DASK_PROTOCOL, tcp)")
    p.add_argument("--rmm-pool", default=None, help="RMM pool per worker (default TCSPMM_RMM_POOL, 0.5; off)")
    p.add_argument("--transport", default="auto", choices=("auto", "nccl", "dask"),
                   help="resident halo exchange: NCCL, or Dask actor calls (host rows over TCP, device rows over UCX)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--modes", default="oneshot,stored,exchanged,resident,batched,overlap,rowoverlap",
                   help="what to run per P: oneshot, stored (driver-free one-shot), exchanged (one-shot reading "
                        "B once, the halo exchanged), resident (per call), batched, "
                        "overlap (column split), rowoverlap (row split, batched); without oneshot the "
                        "P = 1 resident C is the reference the P > 1 results are checked against")
    p.add_argument("--budget-s", type=float, default=420.0,
                   help="start no new matrix variant after this many seconds (the JSON is rewritten after each)")
    p.add_argument("--no-autotune", dest="autotune", action="store_false",
                   help="no timing of candidate kernels per shard (each shard's cost model decides alone). By "
                        "default every shard's SpmmPlan keeps its default autotune, as users run it: a model that "
                        "picked metcf-balanced for one R-MAT shard and metcf-split for the other left the shards "
                        "3.03 and 2.46 ms (H100 x4, 2026-11-27)")
    p.add_argument("--out", default=None, help="JSON path (default benchmarks/results/multi_gpu-<machine>-<date>; "
                                                "with --weak multi_gpu_weak-..., the weak-scaling section's files)")
    p.add_argument("--data-root", default=None, help="block store for the shards (default: a temp folder)")
    args = p.parse_args(argv)
    if args.quick:
        args.nnz, args.repeats, args.iters, args.batch = "20e6", min(args.repeats, 10), min(args.iters, 3), \
            min(args.batch, 10)
    if args.cpu:
        args.nnz, args.n_cols, args.repeats, args.iters, args.batch = "2e5", min(args.n_cols, 32), 1, 2, 3
        args.weak = None if args.weak is None else 1e5
    return args


def make_graph(xp, kind: str, nnz: float, seed: int):
    """(natural-order keys, shape): R-MAT with edge factor 16..48 (few rows, so B and C stay a few GB at N=256);
    SBM with 100 blocks, degree 24, 2% of edges between blocks."""
    if kind == "rmat":
        scale = max(8, int(np.ceil(np.log2(nnz / 48 / 0.85))))  # ~15% of R-MAT draws are duplicates
        return rmat_keys(xp, scale, max(16, int(round(nnz / 2**scale / 0.85))), seed)
    if kind == "sbm":
        n = int(nnz / 24)  # 2% of edges leave their community: the halo a community order can save
        return sbm_keys(xp, n, 100, 23.5, 0.5, seed)
    if kind == "mesh":  # 3D 27-point stencil on a side^3 grid (natural order = lexicographic)
        return mesh_keys(xp, max(2, int(round((nnz / 27) ** (1 / 3)))))
    raise SystemExit(f"unknown kind {kind!r}; expected rmat, sbm or mesh")


def build_variants(xp, kind, nnz, orders, args):
    """Yield (order name, METCF of A[perm], perm or None, info) with A = the randomly relabelled graph."""
    t0 = time.perf_counter()
    keys, shape = make_graph(xp, kind, nnz, args.seed)
    n = shape[0]
    q = xp.asarray(np.random.default_rng(args.seed + 7).permutation(n))  # node v gets label q[v]
    A_keys = relabel(xp, keys, shape, q)
    del keys
    gen_s = time.perf_counter() - t0
    for order in orders:
        t0 = time.perf_counter()
        if order == "none":
            perm, k = None, A_keys
        elif order == "natural":  # position i holds A's row q[i], i.e. node i: the generator's own order
            perm = to_host(q).astype(np.int64)
            k = _rows_reordered(xp, A_keys, shape, perm)
        elif order in ("tca", "community", "rcm"):
            if order == "tca" and int(A_keys.shape[0]) > args.tca_max_nnz:
                print(f"  skip tca on {kind}: {int(A_keys.shape[0]):,} nnz > --tca-max-nnz", flush=True)
                continue
            perm = _reorder_perm(A_keys, shape, order, gpu=xp.__name__ == "cupy")
            k = _rows_reordered(xp, A_keys, shape, perm)
        else:
            raise SystemExit(f"unknown order {order!r}; expected none, natural, tca, community or rcm")
        reorder_s = time.perf_counter() - t0
        M = metcf_from_keys(xp, k, shape, seed=args.seed)
        del k
        _free(xp)
        info = {"kind": kind, "order": order, "shape": list(shape), "nnz": M.nnz, "n_blocks": M.n_blocks,
                "mean_nnz_tc": M.mean_nnz_tc, "gen_s": gen_s, "reorder_s": reorder_s,
                "convert_s": time.perf_counter() - t0 - reorder_s}
        yield order, M, perm, info


def _rows_reordered(xp, keys, shape, perm):
    """Keys of A[perm] (rows only): row perm[i] moves to i."""
    n_cols = int(shape[1])
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.shape[0])
    rows, cols = keys // n_cols, keys % n_cols
    return xp.sort(xp.asarray(inv)[rows] * n_cols + cols)


def _reorder_perm(keys, shape, method: str, gpu: bool):
    """tasks.reorder's ``method`` on the host CSR of the keys (community: its passes on GPU 0 when ``gpu``)."""
    import scipy.sparse as sp
    from tasks.reorder import reorder
    k = to_host(keys)
    rows, cols = np.divmod(k, shape[1])
    A = sp.csr_array((np.ones(k.shape[0], np.float32), (rows, cols)), shape=shape)
    return reorder(A, method, **({"device": "gpu" if gpu else "cpu"} if method == "community" else {}))


def _free(xp):
    if xp.__name__ == "cupy":
        xp.get_default_memory_pool().free_all_blocks()


def rel_err(C, ref) -> float:
    """||C - ref||_F / ||ref||_F in float64, row chunks (C may be GBs)."""
    num = den = 0.0
    step = 1 << 18
    for r in range(0, C.shape[0], step):
        a, b = C[r:r + step].astype(np.float64), ref[r:r + step].astype(np.float64)
        num += float(((a - b) ** 2).sum())
        den += float((b ** 2).sum())
    return (num / den) ** 0.5 if den else float(num > 0)


def comm_env() -> dict:
    """The communication settings the run inherited (NCCL_*, UCX_*, TCSPMM_DASK_*, TCSPMM_RMM_*, TCSPMM_HALO_*):
    they change the halo exchange's times, so each result file records them."""
    return {k: v for k, v in sorted(os.environ.items())
            if k.startswith(("NCCL_", "UCX_", "TCSPMM_DASK_", "TCSPMM_RMM_", "TCSPMM_HALO_"))}


def reference_rows(M, perm, B, n_windows: int, seed: int):
    """(original row ids, their rows of C = A @ B in float64) for ``n_windows`` random 16-row windows of M (the
    ME-TCF of A[perm]), decoded from M's own arrays: the check every run's C is held to (TF32 contract)."""
    rng = np.random.default_rng(seed)
    wins = np.sort(rng.choice(M.n_windows, min(int(n_windows), M.n_windows), replace=False))
    rows_out, ref = [], []
    B64 = None
    for w in wins.tolist():
        r, c, v = expand(M, w, w + 1)
        pos = np.arange(w * WINDOW, min((w + 1) * WINDOW, M.shape[0]))
        block = np.zeros((pos.shape[0], B.shape[1]), dtype=np.float64)
        if r.shape[0]:
            B64 = B[c].astype(np.float64) * v.astype(np.float64)[:, None]
            np.add.at(block, r - w * WINDOW, B64)
        rows_out.append(pos if perm is None else np.asarray(perm)[pos])
        ref.append(block)
    return np.concatenate(rows_out).astype(np.int64), np.concatenate(ref)


def bench_variant(client, M, perm, info, B, gpu_counts, store, args, log, rows, on_row):
    """All P for one matrix variant: each row appended to ``rows``, then ``on_row()`` (the JSON is rewritten per
    row, so a call cut off by its time limit keeps what it measured)."""
    check, C1 = reference_rows(M, perm, B, args.check_windows, args.seed + 11)  # float64 rows every run is held to
    spmm_kw = {} if args.autotune else {"autotune": False}  # {}: SpmmPlan's defaults, as users get them
    plans = {P: make_plan(M, P, perm=perm) for P in gpu_counts}
    key = f"{info['order']}-bench"
    modes = set(args.modes.split(","))
    t0 = time.perf_counter()
    if modes & {"oneshot", "stored", "exchanged"}:  # one-shot reads the shards from Parquet; resident from M
        persist_plan(M, plans[max(gpu_counts)], store, key, n_cols_b=args.n_cols)  # finest shards; others: ranges
    persist_s = time.perf_counter() - t0
    b_info = store_b(store, B, b_artifact(B.shape[1], args.seed)) if modes & {"stored", "exchanged"} else None
    T1 = R1 = RB1 = E1 = X1 = None
    for P in gpu_counts:
        plan = plans[P]
        row = {**info, "P": P, "persist_s": persist_s, "shard_blocks": plan.n_blocks.tolist(),
               "remote_halo_rows": [int(plan.remote_mask(k).sum()) for k in range(P)] if plan.square else None}
        try:
            if "oneshot" in modes:
                bench_oneshot(plan, B, client, store, key, args, spmm_kw, row, P, T1, C1, check)
                T1 = row["kernel_ms"] if P == 1 else T1
            if "stored" in modes:
                bench_stored(plan, client, store, key, b_info, args, spmm_kw, row, P, E1, C1, check)
                E1 = row["stored_e2e_ms"] if P == 1 else E1
            if "exchanged" in modes and plan.square:
                bench_exchanged(plan, client, store, key, b_info, spmm_kw, row, P, X1, C1, check)
                X1 = row["exchanged_e2e_ms"] if P == 1 else X1
            if modes & {"resident", "batched", "overlap", "rowoverlap"}:
                R1, RB1 = bench_resident(plan, client, M, B, spmm_kw, row, P, C1, R1, RB1, check, modes, args, log)
        except Exception as err:  # keep going: one failing configuration must not hide the others
            row["error"] = f"{type(err).__name__}: {err}"
            log(traceback.format_exc())
        rows.append(row)
        on_row()
        log(json.dumps({k: v for k, v in row.items() if not isinstance(v, list)}, default=str))


def bench_resident(plan, client, M, B, spmm_kw, row, P, C1, R1, RB1, check, modes, args, log):
    """Resident iterations at P GPUs: per call (always), batched, overlapped (per ``modes``), into ``row``.
    ``C1``: the float64 rows at ``check``; ``R1``, ``RB1``: the P = 1 per-call and batched ms (set here at P = 1);
    returns (R1, RB1)."""
    ds = DistributedSpmm(plan, client, M=M, spmm_kw=spmm_kw, transport=args.transport)
    try:
        ds.scatter(B)
        ds.run()  # warm-up: kernel selection / autotune for this N
        for _ in range(args.iters):
            parts = ds.run()
        hist = ds.history[1:]
        it = float(np.median([h["iteration_ms"] for h in hist]))
        R1 = it if P == 1 else R1
        last = hist[-1]["shards"]
        # what overlap="auto" (the pipeline's resident mode) picks for this partition, beside the modes timed here
        row["overlap_auto"], row["overlap_auto_reason"] = ds.auto_overlap()
        row.update(transport=ds.transport, transport_reason=ds.transport_reason, iter_ms=it,
                   iter_exchange_ms=float(np.median([h["exchange_ms"] for h in hist])),
                   iter_kernel_ms=float(np.median([h["kernel_ms"] for h in hist])),
                   iter_eff=(R1 / (P * it)) if R1 else None,
                   kernels=row.get("kernels") or [s["kernel"] for s in last],
                   halo_recv_bytes=[s["halo_bytes_recv"] for s in last],
                   halo_sent_bytes=[s["halo_bytes_sent"] for s in last])
        row["resident_rel_err"] = rel_err(parts.rows(check), C1)
        row["checked_rows"] = int(check.shape[0])
        if "batched" in modes:
            rb = bench_batched(ds, row, RB1, P, C1, check, args, log)
            RB1 = rb if P == 1 else RB1
        if P > 1 and "overlap" in modes:
            bench_overlap(ds, row, R1, P, C1, check, args, log)
            if "batched" in modes:  # the split plans are set: a batch of overlapped iterations
                bench_batched(ds, row, RB1, P, C1, check, args, log, key="resident_batched_overlap")
        if P > 1 and "rowoverlap" in modes:
            bench_rowoverlap(ds, row, RB1, P, C1, check, args, log)
        if P > 1 and modes & {"overlap", "rowoverlap"}:
            check_batched_advance(ds, row, check, log)  # last: it moves the resident B on
    finally:
        ds.close()
    return R1, RB1


def bench_oneshot(plan, B, client, store, key, args, spmm_kw, row, P, T1, C1, check):
    """One-shot from the shards' Parquet to C gathered in the original row order: kernel-only (efficiency against
    ``T1``, the P = 1 kernel ms) and end-to-end timings into ``row``; C's ``check`` rows against float64 ``C1``."""
    C, tm = run_oneshot(plan, B, client, store=store, perm_key=key, repeats=args.repeats, spmm_kw=spmm_kw)
    kernel = max(t["kernel_ms"] for t in tm)
    T1 = kernel if P == 1 else T1
    # The shard placed last ends the run: its path is scatter -> its task -> its gather; its timed repeats are not
    # part of a one-shot product (the other shards' overlapped them), its first run is (the product, with any
    # kernel selection or autotune a user's call pays).
    last = max(tm, key=lambda t: t["done_ms"])
    timed = repeats_ms(last)
    e2e = tm[0]["wall_ms"] - timed
    worker = last["shard_ms"] - timed
    row.update(scatter_ms=tm[0]["scatter_ms"], remap_ms=max(t["remap_ms"] for t in tm), worker_ms=worker,
               last_gather_ms=last["gather_ms"],
               # the rest of the last shard's path: Dask scheduling, inputs to the worker, C_k serialized back
               other_ms=last["done_ms"] - timed - tm[0]["scatter_ms"] - worker - last["gather_ms"])
    row.update(kernel_ms=kernel, kernel_ms_per_gpu=[t["kernel_ms"] for t in tm],
               kernel_eff=(T1 / (P * kernel)) if T1 else None, e2e_ms=e2e,
               kernels=[t["kernel"] for t in tm], gpus=[t["gpu"] for t in tm],
               bytes_in=[t["bytes_in"] for t in tm], send_all=[t["send_all"] for t in tm],
               **{f"{s}_ms": max(t[f"{s}_ms"] for t in tm) for s in ("load", "h2d", "plan", "d2h")},
               gather_ms=sum(t["gather_ms"] for t in tm))
    row["oneshot_rel_err"] = rel_err(C[check], C1)


def repeats_ms(t: dict) -> float:
    """A one-shot shard's timed repeats (its timing less the first run): not part of the product, whose first run
    (with any kernel selection or autotune a user's call pays) is."""
    return t["timing_ms"] - t["first_ms"]


def bench_stored(plan, client, store, key, b_info, args, spmm_kw, row, P, E1, C1, check):
    """Driver-free one-shot (shards and B rows read by the workers, C blocks written by them): the breakdown of
    the shard placed last into ``row``; C's ``check`` rows against float64 ``C1``."""
    run_id = f"bench-{P}-{time.monotonic_ns()}"
    tm = run_oneshot_stored(plan, client, store, b=b_info["artifact"], perm_key=key, run_id=run_id,
                            repeats=args.repeats, spmm_kw=spmm_kw)
    last = max(tm, key=lambda t: t["done_ms"])
    e2e = tm[0]["wall_ms"] - repeats_ms(last) + tm[0]["commit_ms"]
    row.update(stored_e2e_ms=e2e, stored_e2e_ratio=(e2e / E1) if E1 else None, b_write_ms=b_info["write_ms"],
               stored_kernel_ms=max(t["kernel_ms"] for t in tm), stored_commit_ms=tm[0]["commit_ms"],
               driver_bytes=sum(t["driver_bytes_out"] + t["driver_bytes_in"] for t in tm),
               stored_b_rows=[t["b_rows"] for t in tm], stored_b_read_all=[t["b_read_all"] for t in tm],
               stored_first_ms=last["first_ms"],  # the product's first run: kernel selection / autotune included
               stored_plan_parts=last.get("plan_parts", {}),  # the plan's own timings (s): conversion + upload, ...
               **{f"stored_{s}_ms": last.get(f"{s}_ms") for s in ("load", "b", "b_wait", "remap", "h2d", "plan", "d2h",
                                                                  "write", "overhead")})
    C = read_c(store, run_id, plan.perm)  # the check's copy, after the timed run
    row["stored_rel_err"] = rel_err(C[check], C1)


def bench_exchanged(plan, client, store, key, b_info, spmm_kw, row, P, X1, C1, check):
    """One-shot over the halo exchange (B read once: own rows per worker, the halo over NCCL): end to end and the
    slowest shard's parts into ``row``; C's ``check`` rows against float64 ``C1``."""
    run_id = f"bench-x{P}-{time.monotonic_ns()}"
    tm = run_oneshot_exchanged(plan, client, store, b=b_info["artifact"], perm_key=key, run_id=run_id,
                               spmm_kw=spmm_kw)
    e2e = tm[0]["wall_ms"] + tm[0]["commit_ms"]
    row.update(exchanged_e2e_ms=e2e, exchanged_e2e_ratio=(e2e / X1) if X1 else None,
               exchanged_setup_ms=tm[0]["setup_ms"], exchanged_b_rows=[t["b_rows"] for t in tm],
               **{f"exchanged_setup_{k}": v for k, v in (tm[0].get("setup_parts") or {}).items()},
               **{f"exchanged_{s}_ms": max(t[f"{s}_ms"] for t in tm)
                  for s in ("load", "plan", "b", "b_wait", "h2d", "exchange", "kernel", "d2h", "write")})
    C = read_c(store, run_id, plan.perm)  # the check's copy, after the timed run
    row["exchanged_rel_err"] = rel_err(C[check], C1)


def bench_batched(ds, row, RB1, P, C1, check, args, log, key="resident_batched"):
    """``--batch`` resident iterations in one actor call per shard (after a warm-up batch), each multiplying the
    resident B like the per-call loop (advance=False: the same work, B left as it was), with ``ds``'s overlap
    setting; results under ``<key>_*``: ``iter`` = the batch's driver wall time / n (one Dask round trip per
    batch included), ``loop`` = the slowest shard's time inside its call / n (the steady state of a long run),
    each with its efficiency against ``RB1`` (the P = 1 pair), and `breakdown`. Returns RB1 (None on failure)."""
    n = args.batch
    try:
        ds.iterate(n, advance=False)  # warm-up batch (graph capture of the fixed-buffer kernels)
        parts = ds.iterate(n, advance=False)
        hist = ds.history[-n:]
        it = hist[-1]["batch_ms"] / n
        loop = hist[-1]["batch_loop_ms"] / n
        RB1 = (it, loop) if P == 1 else RB1
        row.update({f"{key}_iters": n, f"{key}_iter_ms": it, f"{key}_iter_eff": (RB1[0] / (P * it)) if RB1 else None,
                    f"{key}_loop_ms": loop, f"{key}_loop_eff": (RB1[1] / (P * loop)) if RB1 else None,
                    **breakdown(hist, key)})
        row[f"{key}_rel_err"] = rel_err(parts.rows(check), C1)
        return RB1
    except Exception as err:  # the per-call resident numbers stand on their own
        row[f"{key.removeprefix('resident_')}_error"] = f"{type(err).__name__}: {err}"
        log(traceback.format_exc())
        return None


def breakdown(hist: list, key: str) -> dict:
    """Why a batch's iteration takes what it takes, medians over its iterations: per-shard kernel ms and the
    imbalance (slowest / mean), exchange ms (pack + NCCL or the host pull), exposed exchange (what the kernels
    waited for the halo), advance (C -> B), the GPU's idle time between iterations (launch gaps), halo MB received
    per shard; with the row overlap the boundary kernel, and on the copy engines the pack beside the interior
    kernel (``_pack_ms``)."""
    shards = [h["shards"] for h in hist]
    per_shard = np.median([[s["kernel_ms"] for s in sh] for sh in shards], axis=0)
    med = lambda k: float(np.median([max(s.get(k) or 0.0 for s in sh) for sh in shards]))  # noqa: E731
    return {f"{key}_kernel_ms_per_gpu": per_shard.tolist(),
            f"{key}_imbalance": float(per_shard.max() / per_shard.mean()) if per_shard.mean() > 0 else 1.0,
            f"{key}_kernel_ms": float(per_shard.max()), f"{key}_exchange_ms": med("exchange_ms"),
            f"{key}_exposed_ms": med("exposed_ms"), f"{key}_advance_ms": med("advance_ms"),
            f"{key}_gap_ms": float(hist[-1].get("batch_gap_ms") or 0.0) / len(hist),
            f"{key}_halo_mb": [s["halo_bytes_recv"] / 2**20 for s in shards[-1]],
            **{f"{key}_{k}": med(k) for k in ("boundary_ms", "pack_ms") if any(k in s for s in shards[-1])}}


def bench_rowoverlap(ds, row, RB1, P, C1, check, args, log) -> None:
    """Batched iterations with the row-split overlap (`DistributedSpmm.set_overlap("rows")`) under
    ``resident_batched_rowoverlap_*`` (`bench_batched`, its breakdown with ``_boundary_ms``), and each shard's
    boundary rows (``rowoverlap_boundary_rows``: the rows peers receive, computed first)."""
    try:
        ds.set_overlap("rows")
        row["rowoverlap_boundary_rows"] = [i.get("boundary_rows") for i in ds.info]
    except Exception as err:  # the other modes' numbers stand on their own
        row["batched_rowoverlap_error"] = f"{type(err).__name__}: {err}"
        log(traceback.format_exc())
        return
    bench_batched(ds, row, RB1, P, C1, check, args, log, key="resident_batched_rowoverlap")
    row.update(rowoverlap_halo_copy=ds.halo_copy, rowoverlap_halo_copy_reason=ds.halo_copy_reason)


def check_batched_advance(ds, row, check, log) -> None:
    """A batch of 2 advancing iterations (C becomes B, halo exchange, kernel, all inside one call per shard) ends
    with C = A @ B_left, B_left the B it advanced to; a per-call `run` then multiplies that same B with a fresh
    exchange: the two C must agree (an in-batch exchange or kernel reading rows from before the advance would
    not). With the row-split overlap set, its advancing batch is checked first the same way (its next iteration's
    halo travels during the interior kernel, into the other extended B). The whole chain against NumPy is in
    tests/tasks/distribute (CPU) and test_multi_gpu.py (2 GPUs)."""
    if ds.overlap == "rows":
        try:
            C_rows = ds.iterate(2).rows(check)
            ds.set_overlap(False)
            row["resident_batched_rowoverlap_advance_rel_err"] = rel_err(C_rows, ds.run().rows(check))
        except Exception as err:
            row["batched_rowoverlap_error"] = f"{type(err).__name__}: {err}"
            log(traceback.format_exc())
    try:
        if ds.overlap:
            ds.set_overlap(False)
        C_batched = ds.iterate(2).rows(check)
        row["resident_batched_advance_rel_err"] = rel_err(C_batched, ds.run().rows(check))
    except Exception as err:
        row["batched_error"] = f"{type(err).__name__}: {err}"
        log(traceback.format_exc())


def bench_overlap(ds, row, R1, P, C1, check, args, log) -> None:
    """Resident iterations with the halo exchange overlapped by the own-column kernel (the column split)."""
    try:
        ds.set_overlap("columns")
        ds.run()  # warm-up of the two split plans
        for _ in range(args.iters):
            parts = ds.run()
        hist = ds.history[-args.iters:]
        it = float(np.median([h["iteration_ms"] for h in hist]))
        row.update(iter_ms_overlap=it, iter_eff_overlap=(R1 / (P * it)) if R1 else None,
                   iter_compute_ms_overlap=float(np.median([h["kernel_ms"] for h in hist])),
                   iter_exchange_ms_overlap=float(np.median([h["exchange_ms"] for h in hist])))
        row["resident_overlap_rel_err"] = rel_err(parts.rows(check), C1)
    except Exception as err:  # the plain resident numbers stand on their own
        row["overlap_error"] = f"{type(err).__name__}: {err}"
        log(traceback.format_exc())


def versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("numpy", "scipy", "pyarrow", "cupy", "dask", "distributed", "dask_cuda", "rmm", "ucxx", "torch"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:
            out[mod] = None
    return out


ROW = "resident_batched_rowoverlap"  # the row-split overlap's keys


def _mega(n) -> str:
    return f"{n / 1e6:.0f}M" if n >= 1e7 else f"{n / 1e6:.2f}M"


def fmt_table(rows) -> str:
    head = ("kind", "order", "nnz", "P", "kern ms", "eff", "e2e ms", "st.e2e", "st.ratio", "x.e2e", "x.ratio",
            "iter ms", "it eff", "ovl eff", "loop ms", "loop eff", "ovl loop", "ovl l.eff", "row loop", "row l.eff",
            "row exp", "row bnd", "imbal", "xchg", "exposed", "gap", "via", "halo MB/gpu", "err")
    lines = [" | ".join(f"{h:>9}" for h in head)]
    f = lambda v, p=1: "-" if v is None else (f"{v:.{p}f}" if isinstance(v, float) else str(v))  # noqa: E731
    for r in rows:
        if "error" in r:
            lines.append(" | ".join(f"{x:>9}" for x in (r["kind"], r["order"], _mega(r["nnz"]),
                                                        r["P"])) + " | ERROR " + r["error"][:120])
            continue
        halo = max(r.get("halo_recv_bytes") or [0]) / 2**20
        err = max(r.get(k) or 0.0 for k in ERRS)
        b = "resident_batched_overlap" if r.get("resident_batched_overlap_loop_ms") else "resident_batched"
        vals = (r["kind"], r["order"], _mega(r["nnz"]), r["P"], f(r.get("kernel_ms"), 2),
                f(r.get("kernel_eff"), 3), f(r.get("e2e_ms"), 0), f(r.get("stored_e2e_ms"), 0),
                f(r.get("stored_e2e_ratio"), 2), f(r.get("exchanged_e2e_ms"), 0), f(r.get("exchanged_e2e_ratio"), 2),
                f(r.get("iter_ms"), 2), f(r.get("iter_eff"), 3),
                f(r.get("iter_eff_overlap"), 3), f(r.get("resident_batched_loop_ms"), 2),
                f(r.get("resident_batched_loop_eff"), 3), f(r.get("resident_batched_overlap_loop_ms"), 2),
                f(r.get("resident_batched_overlap_loop_eff"), 3), f(r.get(f"{ROW}_loop_ms"), 2),
                f(r.get(f"{ROW}_loop_eff"), 3), f(r.get(f"{ROW}_exposed_ms"), 2), f(r.get(f"{ROW}_boundary_ms"), 2),
                f(r.get(f"{b}_imbalance"), 2),
                f(r.get(f"{b}_exchange_ms"), 2), f(r.get(f"{b}_exposed_ms"), 2), f(r.get(f"{b}_gap_ms"), 3),
                r.get("transport", "-"), f"{halo:.1f}", f"{err:.1e}")
        lines.append(" | ".join(f"{v:>9}" for v in vals))
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    if args.cpu:
        xp, n_gpus = np, 0
    else:
        import cupy as xp
        n_gpus = count_gpus()
        if n_gpus == 0:
            raise SystemExit("no CUDA GPU found; use --cpu for the logic smoke test")
    gpu_names = [] if args.cpu else [str(xp.cuda.runtime.getDeviceProperties(i)["name"].decode())
                                      for i in range(n_gpus)]  # one entry per visible GPU
    gpu_counts = [int(x) for x in args.gpus.split(",")] if args.gpus else \
        [p for p in (1, 2, 4) if p <= max(n_gpus, 2 if args.cpu else 1)]
    log_lines: list[str] = []

    def log(msg):
        log_lines.append(msg)
        print(msg, file=sys.stderr, flush=True)

    root = Path(args.data_root) if args.data_root else Path(tempfile.mkdtemp(prefix="tcspmm-mgpu-"))
    rows, skipped = [], []
    cluster: dict = {}

    def write_json():
        doc = {"benchmark": "multi_gpu", "command": " ".join([sys.executable, *sys.argv]),
               "date": dt.datetime.now(dt.timezone.utc).isoformat(), "machine": platform.node(),
               "gpus": gpu_names or sorted({g for r in rows for g in r.get("gpus", [])}), "versions": versions(),
               "args": vars(args), "env": comm_env(), "wall_s": time.perf_counter() - started, "rows": rows,
               "skipped": skipped,
               "cluster": cluster, "targets": {"iter_eff_2gpu_100M": 0.85, "iter_eff_4gpu_100M": 0.70,
                                               "oneshot_e2e_ratio_2gpu": 0.6, "oneshot_e2e_ratio_4gpu": 0.35}}
        machine = "cpu" if args.cpu else (f"{doc['gpus'][0].replace(' ', '_')}-x{n_gpus}" if doc["gpus"]
                                          else platform.node())
        out = Path(args.out) if args.out else Path(__file__).parent / "results" / \
            f"{'multi_gpu_weak' if args.weak else 'multi_gpu'}-{machine}-{dt.date.today().isoformat()}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        return out, doc

    cluster_kw = {} if args.cpu else {"protocol": args.protocol, "rmm_pool": args.rmm_pool}
    with cluster_client(n_workers=max(gpu_counts), gpu=not args.cpu, **cluster_kw) as client:
        cluster = {"address": client.scheduler.address, "options": cluster_kw,
                   # as every shard task and actor sees it (worker_device: CuPy's pool in front of RMM's)
                   "allocator": client.run(lambda: (worker_device("gpu"), cupy_allocator_name())[1])
                   if not args.cpu else None}
        if not args.cold_workers:  # a long-lived cluster's workers have their kernels loaded (warm_cluster)
            t0 = time.perf_counter()
            cluster["warm"] = warm_cluster(client)
            cluster["warm_wall_ms"] = (time.perf_counter() - t0) * 1e3
        log(f"cluster: {len(client.scheduler_info()['workers'])} workers, GPU counts {gpu_counts}, {cluster}")
        if args.weak:
            weak_scaling(client, xp, gpu_counts, root, args, log, rows, skipped, started, write_json)
        for kind in args.kinds.split(",") if not args.weak else []:
            for nnz in (float(x) for x in args.nnz.split(",")):
                if time.perf_counter() - started > args.budget_s:
                    skipped.append(f"{kind} {nnz:.0e}: over --budget-s {args.budget_s:.0f}")
                    log(f"skip {skipped[-1]}")
                    continue
                store = BlockStore(root).matrix(f"gen.{kind}.{int(nnz)}")
                for order, M, perm, info in build_variants(xp, kind, nnz, args.orders.split(","), args):
                    log(f"{kind} {order}: {M.shape[0]:,} rows, {M.nnz:,} nnz, {M.n_blocks:,} TC blocks "
                        f"(gen {info['gen_s']:.1f}s, convert {info['convert_s']:.1f}s)")
                    B = to_host(xp.random.default_rng(args.seed).standard_normal((M.shape[1], args.n_cols),
                                                                                   dtype=xp.float32))
                    _free(xp)
                    bench_variant(client, M, perm, info, B, gpu_counts, store, args, log, rows, write_json)
                    del M, B
                    write_json()
                    if time.perf_counter() - started > args.budget_s:
                        skipped.append(f"{kind} {nnz:.0e}: orders after {order} over --budget-s")
                        log(f"skip {skipped[-1]}")
                        break
    out, doc = write_json()
    bad = [r for r in rows if any(f"{e}error" in r for e in ("", "batched_", "batched_overlap_", "overlap_",
                                                             "batched_rowoverlap_"))
           or max(r.get(k) or 0.0 for k in ERRS) > TF32_RTOL]
    print(f"\nwrote {out} ({doc['wall_s']:.0f} s); {len(bad)} failing rows; skipped: {skipped or 'none'}")
    print(fmt_table(rows))
    if args.weak:
        print("\nweak scaling (" + f"{args.weak / 1e6:g}M nnz per GPU; efficiency T_1 / T_P of the batched loop)")
        print(weak_table(rows))
    return 1 if bad else 0


def weak_scaling(client, xp, gpu_counts, root, args, log, rows, skipped, started, write_json) -> None:
    """``--weak``: for each kind and P, a matrix of about P x ``--weak`` nonzeros, resident modes at that P only
    (rows tagged ``weak``); `weak_table` compares each P's batched loop ms with P = 1's."""
    args.modes = ",".join(m for m in args.modes.split(",") if m in ("resident", "batched", "overlap", "rowoverlap"))
    for kind in args.kinds.split(","):
        for P in gpu_counts:
            if time.perf_counter() - started > args.budget_s:
                skipped.append(f"weak {kind} P={P}: over --budget-s {args.budget_s:.0f}")
                continue
            store = BlockStore(root).matrix(f"gen.{kind}.weak{P}")
            for order, M, perm, info in build_variants(xp, kind, args.weak * P, args.orders.split(","), args):
                log(f"weak {kind} {order} P={P}: {M.shape[0]:,} rows, {M.nnz:,} nnz")
                B = to_host(xp.random.default_rng(args.seed).standard_normal((M.shape[1], args.n_cols),
                                                                               dtype=xp.float32))
                _free(xp)
                bench_variant(client, M, perm, {**info, "weak": True}, B, [P], store, args, log, rows, write_json)
                del M, B


def weak_table(rows) -> str:
    """Per kind and order: P, nnz, batched loop ms (the fastest of plain and the two overlaps where they ran),
    T_1 / T_P."""
    lines = ["kind | order | P | nnz | loop ms | weak eff"]
    base = {}
    for r in sorted((r for r in rows if r.get("weak")), key=lambda r: (r["kind"], r["order"], r["P"])):
        ms = min((r[k] for k in ("resident_batched_loop_ms", "resident_batched_overlap_loop_ms", f"{ROW}_loop_ms")
                  if r.get(k)),
                 default=None)
        if r["P"] == 1:
            base[(r["kind"], r["order"])] = ms
        t1 = base.get((r["kind"], r["order"]))
        eff = f"{t1 / ms:.3f}" if t1 and ms else "-"
        lines.append(f"{r['kind']} | {r['order']} | {r['P']} | {_mega(r['nnz'])} | "
                     f"{'-' if ms is None else f'{ms:.2f}'} | {eff}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
