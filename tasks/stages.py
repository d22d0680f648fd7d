"""The pipeline's stages as plain functions over the block store.

Each stage takes ids, keys and paths, reads its input from the store, writes its output to the store and returns a
small dict (what the next stage needs plus what the report shows). A stage whose output is already complete in the
store returns at once with ``reused=True``: a second run with unchanged inputs recomputes nothing.

No Prefect here (``tasks/steps.py`` wraps these as Prefect tasks); Dask only through a scheduler address that the
flow owns.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Iterator

import numpy as np

from configs.errors import InputError
from configs.names import BASE_FORMAT, DEFAULT_FORMAT
from storage import BlockStore, perm_key as make_perm_key
from storage.naming import dumps
from tasks import progress



@contextlib.contextmanager
def dask_client(address: str | None) -> Iterator[object | None]:
    """A client for the flow's cluster (``None`` address: no Dask, run in-process)."""
    if not address:
        yield None
        return
    from distributed import Client

    # as_current: Dask actors (resident SpMM) find their client through get_client(); scoped to this thread, so
    # concurrent subflows of the catalog flow keep their own clients.
    with Client(address, set_as_default=False, timeout="60s") as client, client.as_current():
        yield client


# A run on one device starts no Dask cluster below this many nonzeros: its stages then run in the process (TCA on
# threads, the conversion whole), with the same results; starting and stopping 2 worker processes costs 3-6 s on
# 2 cores, more than those stages take there. The convert stage shards from here too (tasks.convert).
CLUSTER_MIN_NNZ = 8_000_000


def needs_cluster(devices: str | int, nnz: int | None) -> bool:
    """Whether a run on ``devices`` of a matrix with ``nnz`` nonzeros (None: not known yet) gains from a local
    Dask cluster: several devices always, one device only from ``TCSPMM_CLUSTER_MIN_NNZ`` (default
    `CLUSTER_MIN_NNZ`) nonzeros."""
    if str(devices) not in ("auto", "cpu", "1"):
        return True
    threshold = int(os.environ.get("TCSPMM_CLUSTER_MIN_NNZ") or CLUSTER_MIN_NNZ)
    return nnz is None or nnz >= threshold


@contextlib.contextmanager
def flow_cluster(scheduler: str | None, devices: str | int = "auto", nnz: int | None = None) -> Iterator[str | None]:
    """The flow's Dask cluster, as a scheduler address: ``scheduler`` when given (left running); None (no cluster:
    the stages run in the process) when `needs_cluster` says a local one would not pay; else a local cluster
    started here and stopped on exit: one worker per GPU (dask-cuda) for ``--devices all`` or a count when GPUs
    are present, else CPU worker processes (for sharded reordering and conversion)."""
    if scheduler:
        yield scheduler
        return
    if not needs_cluster(devices, nnz):
        yield None
        return
    from tasks.distribute.cluster import make_cluster

    single = str(devices) in ("auto", "cpu", "1")
    n_workers = min(os.cpu_count() or 1, 8) if single else (None if devices == "all" else int(devices))
    # The scheduler's and workers' INFO lines would bury the report; warnings still show. Worker processes read
    # the level from the environment when they import distributed; this process's loggers are set here.
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    import distributed  # noqa: F401  (configures its loggers on import)

    for name in ["distributed", *(n for n in logging.root.manager.loggerDict if n.startswith("distributed."))]:
        logging.getLogger(name).setLevel(max(logging.getLogger(name).level, logging.WARNING))  # a quieter one stays
    with make_cluster(n_workers, gpu=False if single else None, silence_logs=logging.WARNING) as cluster:
        yield cluster.scheduler_address


@contextlib.contextmanager
def build_once(mstore, artifact: str) -> Iterator[bool]:
    """Yield True when ``artifact`` is intact in the store (reuse it); else hold the right to build it
    (``MatrixStore.building``) and yield whether a concurrent run stored it meanwhile. Of two runs of one matrix
    the first builds, the second waits and reuses; a damaged artifact is rebuilt from its source."""
    if mstore.intact(artifact):
        yield True
        return
    with mstore.building(artifact):
        yield mstore.manifest.complete(artifact) is not None and not mstore.verify(artifact)


def _elapsed_ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1e3


def variant_id(matrix_id: str, *, drop_zeros: bool = False, complex_mode: str | None = None) -> str:
    """The stored matrix's id: the source's id plus the parse options that change its values, so a matrix parsed
    with ``--complex abs`` is never reused for ``--complex real`` (or for no conversion, which must still refuse)."""
    return matrix_id + (f".complex-{complex_mode}" if complex_mode else "") + (".nozeros" if drop_zeros else "")


def ingest(spec: str, data_root: str, *, drop_zeros: bool = False, complex_mode: str | None = None,
           allow_nonfinite: bool = False) -> dict:
    """Fetch ``spec`` (cached download or generator) and store its canonical CSR; reuse it when already stored.
    NaN/Inf values are refused unless ``allow_nonfinite`` (a stored matrix that holds some, too)."""
    from tasks.features import ingest_node_data
    from tasks.fetch import fetch
    from tasks.parse import load_matrix

    t0 = time.perf_counter()
    raw = fetch(spec, Path(data_root))
    fetch_ms = _elapsed_ms(t0)
    matrix_id = variant_id(raw.matrix_id, drop_zeros=drop_zeros, complex_mode=complex_mode)
    mstore = BlockStore(data_root).matrix(matrix_id)
    t1 = time.perf_counter()
    with build_once(mstore, "csr") as reused:
        if not reused:
            with progress.task(f"parse {spec}"):  # extraction and downloads draw their own bars
                parsed = load_matrix(raw, drop_zeros=drop_zeros, complex_mode=complex_mode, data_root=data_root,
                                     allow_nonfinite=allow_nonfinite)
            mstore.write_csr(parsed.csr, {**parsed.meta, "matrix_id": matrix_id, "drop_zeros": drop_zeros,
                                          "complex_mode": complex_mode})
    meta = mstore.csr_meta()
    nonfinite = int(meta.get("source", {}).get("nonfinite_entries") or 0)
    if nonfinite and not allow_nonfinite:
        raise InputError(f"{spec}: the stored matrix {matrix_id} holds {nonfinite:,} values that are not finite "
                         f"(NaN or Inf); pass --allow-nonfinite to use it")
    node = ingest_node_data(raw, Path(data_root), matrix_id)  # IGB features and labels (reused when stored)
    return {
        **node,
        "matrix_id": matrix_id,
        "spec": spec,
        "source_url": raw.source_url,
        "shape": tuple(int(s) for s in meta["shape"]),
        "nnz": int(meta["nnz"]),
        "fetch_ms": fetch_ms,
        "parse_ms": _elapsed_ms(t1),
        "reused": reused,
        "nonfinite_entries": nonfinite,
    }


def reorder(matrix_id: str, method: str, data_root: str, *, seed: int = 0, scheduler: str | None = None,
            sm_count: int = 132, dtype: str = "float32", devices: str | int = "auto", n_cols_b: int = 128) -> dict:
    """Compute (or reuse) the row permutation; never apply one that increases the TC block count over ``none``.
    The block count is of the precision's TC blocks (16 x 8 for float32, 16 x 16 for float16/bfloat16). ``auto``
    over several ``devices`` (a count, or ``all``: the cluster's workers) of a square matrix also weighs the halo
    each shard must receive (`tasks.distribute.halo_order.auto_for_devices`; the report's ``halo``)."""
    from kernels.precision import precision
    from tasks.reorder import METHODS, auto_reorder, reorder_checked

    if method not in (*METHODS, "auto"):
        raise InputError(f"--reorder {method!r} is not a method; choose one of {', '.join((*METHODS, 'auto'))}")
    params = {"seed": seed, "sm_count": sm_count} if method in ("tca", "auto") else {"seed": seed}
    extra = {"sm_count": sm_count} if method == "tca" else {}
    if method == "community":  # label propagation on the GPU when there is one (seconds at 100M nnz, not minutes);
        from kernels.spmm import gpu_available  # the devices draw differently: each gets its own stored order

        params["device"] = extra["device"] = "gpu" if gpu_available() else "cpu"
    prec = precision(dtype)
    width = prec.block_width
    if width != 8:  # TF32 keys stay as they were, so stores written before widths existed are reused
        params["tc_width"] = width
    mstore = BlockStore(data_root).matrix(matrix_id)
    n_parts = _shard_count(devices, scheduler) if method == "auto" else 1
    shape = mstore.csr_meta()["shape"] if n_parts > 1 else None
    if n_parts > 1 and shape[0] == shape[1]:
        params["n_parts"] = n_parts  # the halo depends on the shard count; the choice does not depend on N
    key = make_perm_key(method, params)
    t0 = time.perf_counter()
    with build_once(mstore, f"perm/{key}") as reused:
        if reused:
            meta = mstore.perm_meta(key)
            return {"perm_key": key, "method": method, "reused": True, "ms": _elapsed_ms(t0),
                    **meta.get("report", {})}
        A = mstore.read_csr()
        with dask_client(scheduler) as client, progress.task(f"reorder {matrix_id} ({method})"):
            if method == "auto" and "n_parts" in params:
                from kernels.spmm import gpu_available
                from tasks.distribute.halo_order import auto_for_devices

                applied, perm, report = auto_for_devices(
                    A, n_parts, n_cols_b, int(np.dtype(prec.storage_dtype).itemsize), seed=seed, client=client,
                    params={"tca": {"sm_count": sm_count},
                            "community": {"device": "gpu" if gpu_available() else "cpu"}}, width=width)
                report["why"] = report.pop("reason")
                report["before"], report["after"] = report["methods"]["none"], report["methods"].get(applied)
            elif method == "auto":
                applied, perm, report = auto_reorder(A, seed=seed, client=client, width=width,
                                                     params={"tca": {"sm_count": sm_count}})
                report["why"] = report.pop("reason")
                report["before"], report["after"] = report["methods"]["none"], report["methods"][applied]
            else:
                perm, before, after, ok = reorder_checked(A, method, seed=seed, client=client, width=width, **extra)
                applied = method if ok else "none"
                report = {"before": before, "after": after,
                          "why": "applied" if ok else f"{method} did not reduce TC blocks; kept the input order"}
        report = {"applied": applied, **report}
        mstore.write_perm(key, perm, {"method": method, "params": params, "report": _jsonable(report)})
    return {"perm_key": key, "method": method, "reused": False, "ms": _elapsed_ms(t0), **_jsonable(report)}


def _shard_count(devices: str | int, scheduler: str | None) -> int:
    """How many shards a run on ``devices`` makes: the count, or with ``all`` the cluster's workers (1 without)."""
    if isinstance(devices, int) or str(devices).isdigit():
        return int(devices)
    if str(devices) == "all" and scheduler:
        with dask_client(scheduler) as client:
            return len(client.scheduler_info()["workers"])
    return 1


def check_precision(matrix_id: str, data_root: str, dtype: str = "float32", *, allow_overflow: bool = False) -> dict:
    """Refuse a matrix whose values ``dtype`` cannot hold (float16: |x| > 65504, or many values that would round to
    zero) before anything is reordered or converted for the run; the report keeps the counts."""
    from kernels.precision import check_range, precision

    prec = precision(dtype)
    if not prec.half:
        return {"dtype": dtype}
    A = BlockStore(data_root).matrix(matrix_id).read_csr()
    return {"dtype": dtype, **check_range(A.data, prec, f"{matrix_id} ({dtype})", allow_overflow=allow_overflow)}


def convert(matrix_id: str, perm_key: str, data_root: str, *, fmt: str = DEFAULT_FORMAT, dtype: str = "float32",
            scheduler: str | None = None) -> dict:
    """Convert the reordered matrix to ``fmt`` (a registered format, ``hybrid``, or ``auto``: the formats an auto
    plan builds, `auto_formats`) at ``dtype`` and store it in row-window-range blocks (reused when stored). Large
    matrices are converted in window-aligned row blocks on the flow's Dask workers. A composite (the hybrid) stores
    its split instead (`store_composite`). Returns the first format's key and stats, with ``formats`` mapping every
    stored format to its key (for ``auto``, ``format_ranking``; with a hybrid, ``split``: its windows, rows and nnz
    on each side and the TC format)."""
    from kernels.hybrid import plan_candidates
    from kernels.precision import precision
    from tasks.convert import SHARD_MIN_NNZ, convert_on_cluster

    prec = precision(dtype)
    formats = plan_candidates(fmt, prec.name)
    mstore = BlockStore(data_root).matrix(matrix_id)
    fkey = f"{perm_key}-{dtype}"
    t0 = time.perf_counter()
    results, A, ranking, composite = {}, None, None, {}
    if len(formats) > 1:
        A = reordered_csr(mstore, perm_key)
        formats, ranking = auto_formats(A, formats, prec.name)
    for f in formats:
        with build_once(mstore, f"formats/{f.name}/{fkey}") as reused:
            if reused:
                meta = mstore.format_meta(f.name, fkey)
                results[f.name] = {"reused": True, **(meta.get("source") or meta).get("stats", {})}
                continue
            if A is None:
                A = reordered_csr(mstore, perm_key)
            if is_composite(f):
                with progress.task(f"split {matrix_id} for {f.name} {dtype}"):
                    stats = store_composite(mstore, f, fkey, A, prec, perm_key)
                results[f.name] = {"reused": False, **stats}
                continue
            with dask_client(scheduler if A.nnz >= SHARD_MIN_NNZ else None) as client, \
                    progress.task(f"convert {matrix_id} to {f.name} {dtype}"):
                obj = f.convert(A, prec) if client is None else convert_on_cluster(A, client, f, prec)
            stats = _jsonable({**f.stats(obj, A.indptr.nbytes + A.indices.nbytes + A.data.nbytes),
                               "block_shape": [16, f.block_width[prec.name]]})
            mstore.write_format(f.name, fkey, obj, {"perm_key": perm_key, "dtype": dtype, "stats": stats,
                                                    "value_types": {f.layout.value_column: prec.name}})
            results[f.name] = {"reused": False, **stats}
    for f in formats:  # the report's view of a composite's split, stored or reused (at most one composite)
        if is_composite(f):
            composite["split"] = {"composite": f.name, **(results[f.name].get("split") or {})}
    first = formats[0].name
    return {"format": first, "format_key": fkey, "dtype": dtype, "formats": {n: fkey for n in results},
            **({"format_ranking": _jsonable(ranking)} if ranking else {}), **composite, "ms": _elapsed_ms(t0),
            **{k: v for k, v in results[first].items() if k != "split"}}


def is_composite(f) -> bool:
    """Whether ``f`` is a plan composed of registered formats (``kernels.hybrid.Composite``), stored as its split."""
    from kernels.hybrid import Composite

    return isinstance(f, Composite)


def store_composite(mstore, f, fkey: str, A, prec, perm_key: str) -> dict:
    """Split the reordered ``A`` for composite ``f`` at ``prec`` and store the split (``f.record``: a label per
    16-row window and its parameters) as ``formats/<f.name>/<fkey>``; the SpMM stage rebuilds the composite from it
    and the stored CSR (`load_composite`). Returns the stats the report shows (``split``: the parts' windows, rows,
    nnz and the TC format)."""
    from storage.splits import write_split

    labels, meta = f.record(A, prec)
    stats = _jsonable({"split": meta["summary"], "csr_bytes": int(A.indptr.nbytes + A.indices.nbytes
                                                                   + A.data.nbytes)})
    write_split(mstore, f.name, fkey, labels, {**meta, "perm_key": perm_key, "dtype": prec.name, "stats": stats})
    return stats


def load_composite(mstore, f, format_key: str, A, prec):
    """The composite ``f`` the convert stage stored for the reordered ``A`` (float32 values, as it converted)."""
    from storage.splits import read_split

    labels, meta = read_split(mstore, f.name, format_key)
    return f.rebuild(A, prec, labels, meta)


def reordered_csr(mstore, perm_key: str):
    """The stored matrix in the order ``perm_key`` names, float32 values."""
    A = mstore.read_csr()
    A = A[mstore.read_perm(perm_key)]
    return A.astype(np.float32) if A.dtype != np.float32 else A


def auto_formats(A, formats: list, precision: str) -> tuple[list, dict | None]:
    """``--format auto``: the formats a plan of ``SpmmPlan(format="auto")`` builds for the reordered ``A`` (the
    base format among them), ranked by their cost estimates (``kernels.formats.ranking.select``, deterministic: the
    convert and run stages agree); these are the ones converted and stored, and a sharded run takes the base format
    (`tasks.execute.run_spmm`). One candidate: it."""
    if len(formats) <= 1:
        return list(formats), None
    from kernels.formats.ranking import AUTO_CANDIDATES, select
    return select(A, formats, precision, AUTO_CANDIDATES, anchor=BASE_FORMAT)


def _jsonable(obj):
    """Plain JSON types for reports (NumPy scalars and arrays become Python numbers and lists), through the
    store's own JSON encoding so both agree."""
    return json.loads(dumps(obj))
