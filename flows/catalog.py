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
import sys

from tasks import cli


def __getattr__(name: str):
    """``flows.catalog.catalog_flow`` (the deployment's entrypoint), imported on first use (it brings Prefect and
    the pipeline)."""
    if name == "catalog_flow":
        from flows.catalog_flow import catalog_flow

        return catalog_flow
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    def run():
        from flows.catalog_flow import catalog_flow

        return catalog_flow(**args)

    return cli.run_cli(run, verbose=verbose, emit=emit, prepare=lambda: __import__("flows.catalog_flow"),
                       data_root=args["data_root"])


if __name__ == "__main__":
    sys.exit(main())
