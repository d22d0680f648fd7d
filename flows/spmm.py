"""One matrix through the pipeline: fetch, parse, reorder, convert, persist, SpMM, report.

    python flows/spmm.py --matrix HB/bcsstk17 -N 128 --reorder auto
    python flows/spmm.py --matrix 'gen:rmat?scale=16&edge_factor=16&seed=1' --devices all --mode resident

Runs as a Prefect flow with no server (a temporary local API) unless PREFECT_API_URL names one. Wiring only: the
stages live in ``tasks/``.
"""
from __future__ import annotations

import argparse
import sys
import uuid

from prefect import flow

from tasks import steps
from tasks.cli import data_root as resolve_data_root, run_cli
from tasks.stages import flow_cluster


@flow(name="tcspmm-spmm", log_prints=True)
def spmm_flow(matrix: str, n_cols_b: int = 128, dtype: str = "float32", reorder: str = "auto",
              fmt: str = "metcf", devices: str = "auto", mode: str = "oneshot", scheduler: str | None = None,
              seed: int = 0, data_root: str | None = None, save_c: bool = False, drop_zeros: bool = False,
              complex_mode: str | None = None, allow_overflow: bool = False) -> dict:
    """C = A @ B for one matrix spec; returns each stage's result and the report table. ``dtype`` float32 (TF32),
    float16 or bfloat16; float16 refuses values it cannot hold unless ``allow_overflow``."""
    root = resolve_data_root(data_root)
    run_id = uuid.uuid4().hex[:12]
    ingested = steps.ingest(matrix, root, drop_zeros, complex_mode)
    matrix_id = ingested["matrix_id"]
    checked = steps.check_precision(matrix_id, root, dtype, allow_overflow)  # before anything is reordered
    with flow_cluster(scheduler, devices) as address:
        ordered = steps.reorder(matrix_id, reorder, root, seed, address, dtype)
        converted = steps.convert(matrix_id, ordered["perm_key"], root, fmt, dtype, address)
        multiplied = steps.spmm(matrix_id, ordered["perm_key"], converted["format_key"], root, n_cols_b, dtype,
                                devices, mode, seed, address, save_c, fmt)
    multiplied["precision_check"] = checked
    results = {"ingest": ingested, "reorder": ordered, "convert": converted, "spmm": multiplied}
    table = steps.write_report(root, run_id, matrix_id, results)
    print(f"\ntcspmm run {run_id}: {matrix_id} {ingested['shape']} nnz={ingested['nnz']} N={n_cols_b}\n{table}")
    return {"run_id": run_id, "matrix_id": matrix_id, "table": table, **results}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flows/spmm.py", description=__doc__.split("\n")[0])
    p.add_argument("--matrix", required=True, help="Group/Name (SuiteSparse), igb:tiny|small|medium, "
                   "a .mtx/.mtx.gz/.tar.gz path, or gen:<kind>?k=v")
    p.add_argument("-N", "--n-cols", dest="n_cols_b", type=int, default=128, help="columns of the dense B")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"],
                   help="value type of A, B and C: float32 (TF32 Tensor Cores), float16 or bfloat16 (FP32 accumulation)")
    p.add_argument("--allow-overflow", action="store_true",
                   help="run float16 even when values exceed its range or would round to zero (default: refuse)")
    p.add_argument("--reorder", default="auto", help="tca|rowshuffle|jaccard|rcm|degree|community|none|auto")
    p.add_argument("--format", dest="fmt", default="metcf", help="converted format (metcf)")
    p.add_argument("--devices", default="auto", help="auto (one GPU if present, else CPU), cpu, all, or a count")
    p.add_argument("--mode", default="oneshot", choices=["oneshot", "resident"], help="multi-device execution")
    p.add_argument("--scheduler", default=None, help="address of an existing Dask scheduler (default: local)")
    p.add_argument("--seed", type=int, default=0, help="seed of B and of randomized reorderings")
    p.add_argument("--data-root", default=None, help="data root (default: $TCSPMM_DATA or ./data)")
    p.add_argument("--save-c", action="store_true", help="store C as Parquet blocks under results/")
    p.add_argument("--drop-zeros", action="store_true", help="drop explicit zeros of the .mtx")
    p.add_argument("--complex", dest="complex_mode", choices=["real", "abs"], default=None,
                   help="convert a complex matrix by its real part or modulus (default: refuse)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    return run_cli(lambda: spmm_flow(**args))


if __name__ == "__main__":
    sys.exit(main())
