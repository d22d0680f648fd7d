"""The scheduled job: every matrix of ``configs/catalog.yaml`` through the spmm flow, a few at a time.

    python flows/catalog.py [--catalog configs/catalog.yaml] [--concurrency 2]
    prefect deployment run 'tcspmm-catalog/nightly'      # against a server started by `make serve`

Each matrix is a subflow run of ``tcspmm-spmm``; they share one Dask cluster (started here, or ``--scheduler``),
so heavy block work from concurrent subflows is scheduled together. A matrix that fails is reported and does not
stop the others; the flow fails at the end if any did.
"""
from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor

from prefect import flow

from configs import load_catalog
from flows.spmm import spmm_flow
from tasks.cli import data_root as resolve_data_root, run_cli
from tasks.stages import flow_cluster


@flow(name="tcspmm-catalog", log_prints=True)
def catalog_flow(catalog: str | None = None, n_cols_b: int = 128, reorder: str = "auto", devices: str = "auto",
                 scheduler: str | None = None, concurrency: int = 2, data_root: str | None = None) -> dict:
    """Run every catalog entry; returns ``{spec: run_id or error}``."""
    root = resolve_data_root(data_root)
    specs = load_catalog(catalog)
    outcome: dict[str, str] = {}
    with flow_cluster(scheduler, devices) as address, ThreadPoolExecutor(max(1, concurrency)) as pool:
        futures = {spec: pool.submit(spmm_flow, matrix=spec, n_cols_b=n_cols_b, reorder=reorder, devices=devices,
                                     scheduler=address, data_root=root) for spec in specs}
        for spec, future in futures.items():
            try:
                outcome[spec] = future.result()["run_id"]
            except Exception as err:  # one matrix's failure must not hide the others' results
                outcome[spec] = f"error: {err}"
    failed = {s: o for s, o in outcome.items() if o.startswith("error:")}
    print("\n".join(f"{spec:<60} {o}" for spec, o in outcome.items()))
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(specs)} catalog matrices failed: {', '.join(failed)}")
    return outcome


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="flows/catalog.py", description=__doc__.split("\n")[0])
    p.add_argument("--catalog", default=None, help="catalog YAML (default: configs/catalog.yaml)")
    p.add_argument("-N", "--n-cols", dest="n_cols_b", type=int, default=128)
    p.add_argument("--reorder", default="auto")
    p.add_argument("--devices", default="auto")
    p.add_argument("--scheduler", default=None)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--data-root", default=None)
    args = vars(p.parse_args(argv))
    return run_cli(lambda: catalog_flow(**args))


if __name__ == "__main__":
    sys.exit(main())
