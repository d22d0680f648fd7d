"""The tcspmm-catalog Prefect flow: every matrix of ``configs/catalog.yaml`` through the spmm flow, a few at a time.

Its command line is ``flows/catalog.py``, which parses the options before this module (Prefect and the pipeline) is
imported; the deployment's entrypoint ``flows/catalog.py:catalog_flow`` reaches this flow through that module.
Wiring only: the stages live in ``tasks/``.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from configs import load_catalog
from flows.spmm_flow import spmm_flow
from tasks import cli, progress
from tasks.cli import data_root as resolve_data_root
from tasks.stages import flow_cluster


@task(name="train gnn", cache_policy=NO_CACHE)
def train_gnn_task(matrix_id: str, data_root: str, epochs: int = 50) -> dict:
    """The downstream GNN job on a stored matrix (gnn.catalog.train_stored: 2-layer GCN and GAT); skipped, with the
    reason, when torch is missing or the matrix has no node features and labels (IGB archives carry them)."""
    from gnn.catalog import train_stored

    return train_stored(matrix_id, data_root, epochs=epochs)


@flow(name="tcspmm-catalog", log_prints=True)
def catalog_flow(catalog: str | None = None, n_cols_b: int = 128, reorder: str = "auto", devices: str = "auto",
                 scheduler: str | None = None, concurrency: int = 2, data_root: str | None = None,
                 repeats: int = 20, train_gnn: bool = False, gnn_epochs: int = 50) -> dict:
    """Run every catalog entry; returns ``{spec: outcome}``, an outcome being ``cli.run_outcome`` (run id, each
    stage's wall ms, kernel, median kernel ms, GFLOP/s) or ``{"error": message}``. ``train_gnn``: then the
    downstream GNN job (2-layer GCN and GAT, ``gnn.catalog.train_stored``) on every matrix that stored node
    features, its result under the outcome's ``"gnn"``. ``scheduler`` (default: ``TCSPMM_SCHEDULER``, else a local cluster
    started here): the Dask cluster every matrix runs on, e.g. separately started ``dask scheduler`` and
    ``dask cuda worker`` processes, one per GPU."""
    scheduler = scheduler or os.environ.get("TCSPMM_SCHEDULER") or None
    root = resolve_data_root(data_root)
    specs = load_catalog(catalog)
    outcome: dict[str, dict] = {}
    with flow_cluster(scheduler, devices) as address, ThreadPoolExecutor(max(1, concurrency)) as pool:
        futures = {spec: pool.submit(spmm_flow, matrix=spec, n_cols_b=n_cols_b, reorder=reorder, devices=devices,
                                     scheduler=address, data_root=root, repeats=repeats) for spec in specs}
        for spec, future in progress.track(futures.items(), f"catalog: {len(specs)} matrices", unit="matrices"):
            try:
                outcome[spec] = cli.run_outcome(future.result())
            except Exception as err:  # one matrix's failure must not hide the others' results
                outcome[spec] = {"error": str(err)}
    if train_gnn:
        for spec, out in outcome.items():
            if "error" not in out:
                out["gnn"] = train_gnn_task(out["matrix_id"], root, gnn_epochs)
    print(cli.catalog_summary(outcome))
    failed = [s for s, o in outcome.items() if "error" in o]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(specs)} catalog matrices failed: {', '.join(failed)}")
    return outcome
