"""The scheduled job: every matrix of ``configs/catalog.yaml`` through the spmm flow, a few at a time.

    python flows/catalog.py [--catalog configs/catalog.yaml] [--concurrency 2]
    prefect deployment run 'tcspmm-catalog/nightly'      # against a server started by `make serve`

Each matrix is a subflow run of ``tcspmm-spmm``; they share one Dask cluster (started here, or ``--scheduler``),
so heavy block work from concurrent subflows is scheduled together (``TCSPMM_SCHEDULER`` names a running
cluster for the scheduled deployment, which passes no ``--scheduler``). A matrix that fails is reported and does not
stop the others; the flow fails at the end if any did. The summary gives each matrix's stage times and GFLOP/s.
"""
from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from configs import load_catalog
from flows.spmm import spmm_flow
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
    downstream GNN job (2-layer GCN and GAT, ``gnn.catalog.train_stored``) on every matrix that stored node features, its
    result under the outcome's ``"gnn"``. ``scheduler`` (default: ``TCSPMM_SCHEDULER``, else a local cluster
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


def build_parser() -> cli.Parser:
    p = cli.Parser(prog="flows/catalog.py", description=__doc__.split("\n")[0],
                   epilog="The summary (or --json) goes to stdout, logs to stderr.")
    p.add_argument("--catalog", default=None, help="catalog YAML (default: configs/catalog.yaml)")
    p.add_argument("-N", "--n-cols", dest="n_cols_b", type=cli.positive_int, default=128,
                   help="columns of the dense B (default 128)")
    p.add_argument("--reorder", default="auto", choices=[*cli.REORDER_METHODS, "auto"],
                   help="row reordering (default auto)")
    p.add_argument("--devices", default="auto", help="auto, cpu, all, or a count")
    p.add_argument("--scheduler", default=None, help="address of an existing Dask scheduler (default: "
                   "TCSPMM_SCHEDULER, else a local cluster)")
    p.add_argument("--concurrency", type=cli.positive_int, default=2, help="matrices run at once (default 2)")
    p.add_argument("--repeats", type=cli.positive_int, default=20, help="timed SpMM runs per matrix (default 20)")
    p.add_argument("--train-gnn", action="store_true",
                   help="then train the 2-layer GCN and GAT on every matrix with node features (needs torch)")
    p.add_argument("--gnn-epochs", type=cli.positive_int, default=50, help="epochs of --train-gnn (default 50)")
    p.add_argument("--data-root", default=None, help="data root (default: $TCSPMM_DATA or ./data)")
    p.add_argument("--json", action="store_true", help="print the outcome as one JSON object on stdout")
    p.add_argument("-v", "--verbose", action="store_true", help="show Prefect's INFO logs on stderr")
    p.late_check("--devices", "devices", cli.devices)
    return p


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    as_json, verbose = args.pop("json"), args.pop("verbose")
    emit = (lambda out: print(json.dumps(out, default=str))) if as_json else \
        (lambda out: print(cli.catalog_summary(out)))
    return cli.run_cli(lambda: catalog_flow(**args), verbose=verbose, emit=emit, data_root=args["data_root"])


if __name__ == "__main__":
    sys.exit(main())
