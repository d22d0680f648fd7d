"""The SpMM stage: C = A @ B for a stored, converted matrix, on one device or sharded over a Dask cluster.

B is dense, row-major, drawn from ``np.random.default_rng(seed)`` (so runs are reproducible and never zeros).
C comes back in the original row order (``C[perm] = C_reordered``) and is checked against SciPy's float64 CSR
product in the same run; the relative error and the tolerance are part of the result.
"""
from __future__ import annotations

import time
import uuid

import numpy as np

from configs.errors import InputError
from configs.names import BASE_FORMAT, DEFAULT_FORMAT
from storage import BlockStore
from kernels.precision import precision as as_precision
from tasks.stages import _jsonable, auto_formats, dask_client, is_composite, load_composite

# TF32 inputs (10-bit mantissa) accumulated in fp32: about 1e-3 of ||ref||; fp32 CPU paths land far below. The
# half precisions' contract (kernels.precision): 1e-2 float16, 3e-2 bfloat16, on the CPU path too (rounded inputs).
REL_TOL = {"tf32": 2e-3, "fp32": 1e-5}


def dense_b(n_rows: int, n_cols: int, seed: int, dtype=np.float32) -> np.ndarray:
    """The dense right-hand side B [n_rows, n_cols], row-major, standard normal."""
    return np.random.default_rng(seed).standard_normal((n_rows, n_cols), dtype=np.float32).astype(dtype, copy=False)


def cusparse_baseline(A, B: np.ndarray, repeats: int, dtype: str = "float32") -> dict:
    """The strongest cuSPARSE CSR SpMM on A in ``dtype`` (CSR_ALG1/2/3 tried, row-major B; median of ``repeats``)."""
    import cupy

    from kernels.cusparse import CusparseSpmm

    prec = as_precision(dtype)
    op = CusparseSpmm(A, dtype=prec.name)
    try:
        timings = op.tune(cupy.asarray(prec.to_storage(B)), repeats=repeats)
    finally:
        op.close()
    return {"algorithm": timings["best"], "median_ms": timings["ms"][timings["best"]], "all_ms": timings["ms"]}


def _run_one_device(A, perm: np.ndarray, M, B: np.ndarray, device: str, repeats: int, dtype: str = "float32",
                    fmt: str = DEFAULT_FORMAT, deterministic: bool = True) -> tuple[np.ndarray, dict]:
    """The selector's path on the reordered matrix. With ``deterministic=False`` also cuSPARSE, and cuSPARSE on
    the ORIGINAL order where that is faster (a reordering that packs TC blocks can still cost cuSPARSE its cache
    locality), so the pipeline is never slower than what a user has without it; by default only our kernels run,
    which give bitwise-equal C from run to run (cuSPARSE's CSR SpMM does not), and cuSPARSE is timed as the
    baseline only."""
    from kernels.spmm import SpmmPlan

    prec = as_precision(dtype)
    plan = SpmmPlan(M if M is not None else A[perm], device=device, dtype=prec.name, format=fmt,
                    deterministic=deterministic, allow_overflow=True)  # the flow's check_precision stage decided
    C = np.empty((A.shape[0], B.shape[1]), dtype=np.float32)
    C[perm] = prec.to_float32(plan.run(B))  # back to the original row order
    bench = plan.benchmark(B, repeats=repeats)
    result = {"kernel": plan.choice.get("kernel"), "device": plan.choice.get("device", "cpu"),
              "kernel_ms": bench["median_ms"], "choice": plan.choice, "baseline": {}, "per_device": []}
    if plan.device != "gpu":
        return C, result
    baseline = result["baseline"]  # what a user has without us, and what the kernel alone is worth
    for key, matrix in (("original", A), ("reordered", A[perm])):
        baseline[key] = cusparse_baseline(matrix, B, repeats, prec.name)
        baseline[key]["speedup"] = baseline[key]["median_ms"] / bench["median_ms"]
    if not deterministic and baseline["original"]["median_ms"] < bench["median_ms"]:
        C = cusparse_product(A, B, baseline["original"]["algorithm"], prec.name)
        result["choice"] = {**plan.choice, "kernel": "cusparse-original-order",
                            "reason": f"cuSPARSE {baseline['original']['algorithm']} on the original order "
                                      f"({baseline['original']['median_ms']:.4g} ms) beat {plan.choice['kernel']} "
                                      f"on the reordered matrix ({bench['median_ms']:.4g} ms)"}
        result.update(kernel="cusparse-original-order", kernel_ms=baseline["original"]["median_ms"])
    return C, result


def _run_sharded(mstore, format_key: str, perm: np.ndarray, M, B: np.ndarray, devices, mode: str, scheduler: str,
                 repeats: int, dtype: str = "float32", seed: int = 0) -> tuple[np.ndarray, dict]:
    """Row-window shards of ``M`` (any format `tasks.distribute.formats` can shard, any precision) over the
    cluster's workers (one per GPU), one-shot or resident; C in original order.

    One-shot keeps the driver out of the data path: B is written once to the store (reused by later runs with the
    same N and seed), every worker reads its shard and its B rows and writes its C block, and the driver reads C
    back from the store only for the correctness check, after the timed run. Resident: the actors read their
    shards from the store; B and C go through the driver (scatter, gather), one iteration."""
    from tasks.distribute import DistributedSpmm, make_plan, persist_plan
    from tasks.distribute.direct import b_artifact, read_c, run_oneshot_stored, store_b
    from tasks.distribute.formats import format_name

    fmt = format_name(M)
    with dask_client(scheduler) as client:
        n_parts = len(client.scheduler_info()["workers"]) if devices == "all" else int(devices)
        plan = make_plan(M, n_parts, perm=perm)
        # Each shard in its own Parquet file: a worker reads only its shard.
        shard_key = f"{format_key}-p{n_parts}"
        persist_plan(M, plan, mstore, shard_key, fmt=fmt)
        itemsize = int(np.dtype(as_precision(dtype).storage_dtype).itemsize)
        sharded = {"format": fmt, "dtype": dtype, "halo_rows": [int(c.shape[0]) for c in plan.halo_cols]}
        if plan.square:  # what a resident iteration exchanges: the rows another shard owns
            sharded["remote_halo_rows"] = [int(plan.remote_mask(k).sum()) for k in range(n_parts)]
            sharded["halo_mb"] = [round(float(b) / 2**20, 3) for b in
                                  plan.halo_bytes(B.shape[1], itemsize, remote_only=True)]
        if mode == "resident":
            dist = DistributedSpmm(plan, client, store=mstore, perm_key=shard_key, fmt=fmt, repeats=repeats,
                                   dtype=dtype)
            try:
                dist.scatter(B)
                C = dist.run().gather()
                timings = [{**t, "halo_rows": dist.info[t["shard"]]["halo_rows"]} for t in dist.history[-1]["shards"]]
                sharded["transport"] = dist.transport
            finally:
                dist.close()
        else:
            b_info = store_b(mstore, B, b_artifact(B.shape[1], seed), {"seed": int(seed), "generator": "dense_b"})
            run_id = f"sharded-{uuid.uuid4().hex[:12]}"
            timings = run_oneshot_stored(plan, client, mstore, b=b_info["artifact"], perm_key=shard_key, fmt=fmt,
                                         run_id=run_id, repeats=repeats, dtype=dtype)
            t0 = time.perf_counter()
            C = read_c(mstore, run_id, plan.perm)  # the check's copy, not part of the run
            sharded.update(b_store=b_info, result_run_id=run_id, check_read_ms=(time.perf_counter() - t0) * 1e3,
                           driver_bytes=sum(t["driver_bytes_out"] + t["driver_bytes_in"] for t in timings))
            for t in timings:
                t.pop("records", None)
    result = {"kernel": ",".join(sorted({str(t.get("kernel")) for t in timings})), "device": f"{n_parts} workers",
              "kernel_ms": max(t["kernel_ms"] for t in timings), "choice": {"mode": mode, "n_parts": n_parts},
              "baseline": {}, "per_device": timings, "sharded": sharded}
    return C, result


def cusparse_product(A, B: np.ndarray, algorithm: str, dtype: str = "float32") -> np.ndarray:
    """C = A @ B by cuSPARSE's ``algorithm`` in ``dtype`` (row-major B and C), back on the host as float32."""
    import cupy

    from kernels.cusparse import CusparseSpmm

    prec = as_precision(dtype)
    op = CusparseSpmm(A, dtype=prec.name)
    try:
        C = op.run(cupy.asarray(prec.to_storage(B)), algorithm=algorithm)
        return prec.to_float32(cupy.asnumpy(C))  # synchronize!
    finally:
        op.close()


def load_format(mstore, fmt, format_key: str, A=None, perm=None, prec=None):
    """A stored format of a matrix as its host object (``Format.from_arrays``), as each shard's worker rebuilds its
    own; ``fmt`` a registered name or record. A composite (the hybrid) is rebuilt from its stored split and the
    reordered ``A[perm]`` at ``prec`` (float32 values, as the convert stage split it)."""
    from kernels.formats import get

    fmt = get(fmt) if isinstance(fmt, str) else fmt
    if not is_composite(fmt):
        return fmt.from_arrays(mstore.read_format(fmt.name, format_key))
    M = A[perm] if perm is not None else A
    return load_composite(mstore, fmt, format_key, M.astype(np.float32) if M.dtype != np.float32 else M, prec)


def check_format_devices(fmt: str, devices: str | int) -> None:
    """InputError in one line when ``fmt`` is a composite (``kernels.hybrid.COMPOSITES``) and ``devices`` more
    than one: a composite's split is of the whole matrix, it has no row-window shards."""
    from kernels.hybrid import COMPOSITES

    devices = parse_devices(devices)
    if fmt in COMPOSITES and devices not in ("auto", "cpu", 1):
        raise InputError(f"--format {fmt} --devices {devices}: {COMPOSITES[fmt].one_device_why}; run it with "
                         f"--devices auto, cpu or 1, or shard a registered format")


def run_format(fmt: str, devices: str | int) -> str:
    """The format the convert and SpMM stages take for ``fmt`` on ``devices``: ``auto`` over several devices is the
    base format (a sharded auto run shards it: `run_spmm`), so that the convert stage does not convert and store
    a ranked format no shard reads; anything else as given."""
    if fmt == "auto" and parse_devices(devices) not in ("auto", "cpu", 1):
        return BASE_FORMAT
    return fmt


def parse_devices(devices: str | int) -> str | int:
    """``auto`` (one GPU when present, else CPU), ``cpu``, ``all`` (every GPU / worker) or a positive count."""
    if isinstance(devices, int) or str(devices).isdigit():
        count = int(devices)
        if count < 1:
            raise InputError(f"--devices {devices}: need at least 1 device")
        return count
    if devices not in ("auto", "cpu", "all"):
        raise InputError(f"--devices {devices!r}: expected auto, cpu, all or a count")
    return devices


def run_spmm(matrix_id: str, perm_key: str, format_key: str, data_root: str, *, n_cols_b: int = 128,
             dtype: str = "float32", devices: str | int = "auto", mode: str = "oneshot", seed: int = 0,
             scheduler: str | None = None, repeats: int = 20, save_c: bool = False, fmt: str = DEFAULT_FORMAT,
             deterministic: bool = True, stored_formats: list[str] | None = None) -> dict:
    """Run one SpMM and return timings, the kernel chosen, the baseline's time and the correctness check.
    ``stored_formats``: the convert stage's formats in its order (for ``auto``: ranked), so that a sharded auto run
    need not rank the reordered matrix again (None: it does, with the same result)."""
    if n_cols_b < 1:
        raise InputError(f"-N {n_cols_b}: the dense B needs at least one column")
    devices = parse_devices(devices)
    mstore = BlockStore(data_root).matrix(matrix_id)
    A = mstore.read_csr()
    perm = mstore.read_perm(perm_key)
    from kernels.formats import REGISTRY
    from kernels.hybrid import plan_candidates

    prec = as_precision(dtype)
    formats = plan_candidates(fmt, prec.name)
    check_format_devices(fmt, devices)
    # One format: its stored object (a composite: rebuilt from its stored split and the reordered CSR); auto over
    # several: SpmmPlan converts the reordered CSR to each on the device
    M = load_format(mstore, formats[0], format_key, A, perm, prec) if len(formats) == 1 else None
    B = dense_b(A.shape[1], n_cols_b, seed)
    t0 = time.perf_counter()
    if devices in ("auto", "cpu", 1):
        C, result = _run_one_device(A, perm, M, B, "cpu" if devices == "cpu" else "auto", repeats, prec.name, fmt,
                                    deterministic)
        for f in formats:  # a composite's split as it ran: the stored one, or the one an auto plan built and chose
            split = M.summary() if M is not None and is_composite(f) else (result["choice"] or {}).get(f.name)
            if is_composite(f) and split is not None:
                result["split"] = {"composite": f.name, **split}
    else:
        if scheduler is None:
            raise InputError(f"--devices {devices}: sharded SpMM needs the flow's Dask cluster")
        from tasks.distribute.formats import shard_ops

        if M is None:  # --format auto: the base format where the ranking kept it (it always does: the anchor),
            # else the first registered format the ranking kept that shards (the convert stage stored exactly
            # those; each worker's selector then picks that format's kernel for its shard). The ranking is of the
            # whole matrix, not of a shard, and the scale-out was measured on the base format (docs/scale-out.md)
            ranked = ([REGISTRY[n] for n in stored_formats if n in REGISTRY] if stored_formats else
                      [f for f in auto_formats(A[perm], formats, prec.name)[0] if f.name in REGISTRY])
            if not ranked:
                raise InputError(f"--format auto --devices {devices}: the ranking kept only "
                                 f"{', '.join(stored_formats or ())}, which runs on one device; pass a registered "
                                 f"--format")
            shardable = sorted([f for f in ranked if f.shard is not None] or ranked,
                               key=lambda f: f.name != BASE_FORMAT)
            M = load_format(mstore, shardable[0], format_key, A, perm, prec)
        shard_ops(M)  # one line naming the format when it cannot run sharded
        C, result = _run_sharded(mstore, format_key, perm, M, B, devices, mode, scheduler, repeats, prec.name, seed)
    result["wall_ms"] = (time.perf_counter() - t0) * 1e3
    result["repeats"] = repeats  # kernel_ms (and GFLOP/s) is the median of this many timed runs
    ref = A.astype(np.float64) @ B.astype(np.float64)
    # A kept with NaN/Inf (--allow-nonfinite): compare the entries whose reference is finite, count the others
    finite = np.isfinite(ref)
    if prec.half:  # float16 run with --allow-overflow: entries that overflowed are not compared, only counted
        from kernels.precision import check_range

        if check_range(A.data, prec, matrix_id, allow_overflow=True)["overflow"]:
            finite &= np.isfinite(C)
    nonfinite_c = int(finite.size - np.count_nonzero(finite))
    C_cmp, ref = (np.where(finite, C, 0), np.where(finite, ref, 0)) if nonfinite_c else (C, ref)
    rel_err = float(np.linalg.norm(C_cmp - ref) / max(np.linalg.norm(ref), np.finfo(np.float64).tiny))
    if prec.half:
        tol = prec.tolerance
    else:
        tol = REL_TOL["tf32"] if "cpu" not in str(result["kernel"]) else REL_TOL["fp32"]
    if not np.isfinite(rel_err) or rel_err > tol:
        raise RuntimeError(f"{matrix_id}: SpMM result differs from the float64 reference: "
                           f"relative error {rel_err:.3g} > {tol:g} (kernel {result['kernel']})")
    flops = 2.0 * A.nnz * n_cols_b
    if nonfinite_c:
        result.update(nonfinite_a=int(A.nnz - np.count_nonzero(np.isfinite(A.data))), nonfinite_c=nonfinite_c)
    result.update(rel_err=rel_err, tolerance=tol, n_cols_b=n_cols_b, nnz=int(A.nnz), dtype=prec.name,
                  gflops=flops / (result["kernel_ms"] * 1e6) if result["kernel_ms"] > 0 else float("nan"))
    if save_c:
        run_id = uuid.uuid4().hex[:12]
        mstore.write_result(run_id, C)
        result["result_run_id"] = run_id
    return _jsonable(result)
