"""The default Dask cluster: one worker per GPU with dask-cuda, else CPU worker processes; or an existing one.

The flow owns the cluster's lifetime through `cluster_client` (a context manager): it starts the cluster, yields a
connected ``distributed.Client``, and closes both on exit (or only the client when it connected to ``address``).
"""
from __future__ import annotations

import contextlib
import os
import re
from typing import Iterator


# NVLink multicast stays off on the shared GPU hosts (a program using it can take a host's GPUs out of service):
# set for this process and passed explicitly to every worker process we start.
SAFE_GPU_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def count_gpus() -> int:
    """Visible CUDA GPUs (NVML through dask-cuda, else CuPy), 0 when there are none or no driver."""
    try:
        from dask_cuda.utils import get_n_gpus
        return int(get_n_gpus())
    except Exception:  # no dask_cuda, no NVML, no driver
        pass
    try:
        import cupy
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def has_dask_cuda() -> bool:
    try:
        import dask_cuda  # noqa: F401
        return True
    except Exception:  # dask_cuda raises more than ImportError when CUDA libraries are missing
        return False


PROTOCOLS = ("tcp", "ucx")
DEFAULT_RMM_POOL = "0.5"  # of each GPU's memory, grown up to all of it on demand (dask-cuda's maximum default)


def gpu_cluster_options(protocol: str | None = None, rmm_pool: str | None = None,
                        env: dict | None = None) -> dict:
    """dask-cuda options as its users set them: the comm ``protocol`` (``TCSPMM_DASK_PROTOCOL``: tcp, the default,
    or ucx, which needs distributed-ucxx) and an RMM pool per worker that CuPy allocates from (``TCSPMM_RMM_POOL``:
    a fraction of the GPU's memory like 0.5, the default, or a size like 20GB; ``0`` or ``off``: no pool, CuPy's own
    allocator). The pool is only asked for where rmm imports. ValueError in one line for a bad value."""
    env = os.environ if env is None else env
    protocol = (protocol or env.get("TCSPMM_DASK_PROTOCOL") or "tcp").lower()
    if protocol not in PROTOCOLS:
        raise ValueError(f"TCSPMM_DASK_PROTOCOL / protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    pool = str(rmm_pool if rmm_pool is not None else env.get("TCSPMM_RMM_POOL", DEFAULT_RMM_POOL)).strip()
    opts: dict = {"protocol": protocol}
    if pool.lower() in ("0", "off", "none", ""):
        return opts
    if re.fullmatch(r"0?\.\d+", pool):
        size: float | str = float(pool)
        if not 0 < size < 1:
            raise ValueError(f"TCSPMM_RMM_POOL / rmm_pool {pool!r}: a fraction must lie in (0, 1)")
    elif re.fullmatch(r"\d+(\.\d+)?\s*[KMGT]i?B", pool, flags=re.IGNORECASE):
        size = pool
    else:
        raise ValueError(f"TCSPMM_RMM_POOL / rmm_pool {pool!r}: expected a fraction in (0, 1) like 0.5, a size "
                         "like 20GB, or off")
    if has_rmm():
        opts.update(rmm_pool_size=size, rmm_allocator_external_lib_list=["cupy"])
    return opts


def has_rmm() -> bool:
    try:
        import rmm  # noqa: F401
        return True
    except Exception:  # rmm raises more than ImportError without its CUDA libraries
        return False


def make_cluster(n_workers: int | None = None, *, gpu: bool | None = None, protocol: str | None = None,
                 rmm_pool: str | None = None, **kwargs):
    """A new local cluster. ``gpu=None`` picks ``dask_cuda.LocalCUDACluster`` (one worker per GPU; dask-cuda sets
    each worker's ``CUDA_VISIBLE_DEVICES``) when GPUs are present and dask_cuda imports, else a CPU
    ``distributed.LocalCluster`` (processes, ``threads_per_worker=1``). ``n_workers``: GPUs to use (the first
    n) or CPU worker processes (default: the CPU count). The comm protocol (``protocol`` or
    ``TCSPMM_DASK_PROTOCOL``) applies to both; on GPUs `gpu_cluster_options` adds the RMM pool (CuPy allocating
    from it). Extra ``kwargs`` go to the cluster class."""
    n_gpus = count_gpus() if gpu is not False else 0
    if gpu is None:
        gpu = n_gpus > 0 and has_dask_cuda()
    # memory_limit=0: no Dask memory manager. Workers hold whole B/C blocks on purpose, and some hosts report a
    # small MemTotal at start (memory grows on use), which would make "auto" limits spill, pause or kill workers.
    opts = {"dashboard_address": None, "memory_limit": 0, **kwargs}
    if gpu:
        os.environ.update(SAFE_GPU_ENV)  # inherited by the worker processes started below
        if n_gpus == 0:
            raise RuntimeError("make_cluster(gpu=True) needs a CUDA GPU, found 0")
        n = min(int(n_workers or n_gpus), n_gpus)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        devices = visible.split(",")[:n] if visible else [str(i) for i in range(n)]
        if not has_dask_cuda():
            return gpu_spec_cluster(devices, **opts)
        from dask_cuda import LocalCUDACluster
        # device_memory_limit=0: no device->host spilling of worker data (our arrays live in tasks and actors).
        opts.setdefault("device_memory_limit", 0)
        opts = {**gpu_cluster_options(protocol, rmm_pool), **opts}
        return LocalCUDACluster(CUDA_VISIBLE_DEVICES=",".join(devices), n_workers=n, threads_per_worker=1, **opts)
    from distributed import LocalCluster
    opts.setdefault("protocol", gpu_cluster_options(protocol, rmm_pool="off")["protocol"])
    return LocalCluster(n_workers=int(n_workers or os.cpu_count() or 1), processes=True, threads_per_worker=1,
                        **opts)


def gpu_spec_cluster(devices: list[str], **kwargs):
    """Fallback without dask-cuda: one Nanny-managed worker per GPU, each started with its own
    ``CUDA_VISIBLE_DEVICES`` (the GPU first, as dask-cuda orders it), one thread, no dashboard."""
    from distributed import Nanny, Scheduler, SpecCluster

    memory_limit = kwargs.pop("memory_limit", 0)
    workers = {f"gpu-{d}": {"cls": Nanny, "options": {
        "nthreads": 1, "host": "127.0.0.1", "memory_limit": memory_limit,
        "env": {**SAFE_GPU_ENV, "CUDA_VISIBLE_DEVICES": ",".join([d, *[x for x in devices if x != d]])}}}
        for d in devices}
    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1",
                                               "dashboard_address": kwargs.pop("dashboard_address", None)}}
    return SpecCluster(workers=workers, scheduler=scheduler, **kwargs)


@contextlib.contextmanager
def cluster_client(address: str | None = None, n_workers: int | None = None, *, gpu: bool | None = None,
                   **kwargs) -> Iterator:  # kwargs: make_cluster's (protocol, rmm_pool, cluster options)
    """Yield a ``distributed.Client``: connected to ``address`` when given (the cluster is left running), else
    to a new `make_cluster` cluster that is closed on exit. Waits until ``n_workers`` workers are up."""
    from distributed import Client

    if address is not None:
        with Client(address) as client:
            if n_workers:
                client.wait_for_workers(int(n_workers))
            yield client
        return
    with make_cluster(n_workers, gpu=gpu, **kwargs) as cluster, Client(cluster) as client:
        client.wait_for_workers(len(cluster.workers))
        yield client


def warm_cluster(client, formats=None, dtypes=("float32",)) -> dict:
    """Run `device.warm_worker` on every worker at once (formats default: the base one, which sharded runs
    take); {worker: its result}. A long-lived cluster pays it once; without it each worker's first shard does
    (about 0.23 s of its plan on the H100 x4)."""
    from configs.names import BASE_FORMAT
    from tasks.distribute.device import warm_worker

    return client.run(warm_worker, tuple(formats or (BASE_FORMAT,)), tuple(dtypes))
