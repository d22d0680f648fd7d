"""One matrix through the pipeline: fetch, parse, reorder, convert, persist, SpMM, report.

    python flows/spmm.py --matrix HB/bcsstk17 -N 128 --reorder auto
    python flows/spmm.py --matrix 'gen:rmat?scale=16&edge_factor=16&seed=1' --devices all --mode resident

Runs as a Prefect flow (``flows/spmm_flow.py``) against a configured server (``PREFECT_API_URL``), ``make
serve``'s, or a temporary one of its own (``tasks/prefect_api.py``). This module is the command line: it parses
the options before Prefect or the pipeline are imported, so ``--help`` and a bad option answer at once.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from tasks import cli


def __getattr__(name: str):
    """``flows.spmm.spmm_flow``, imported on first use (it brings Prefect and the pipeline)."""
    if name == "spmm_flow":
        from flows.spmm_flow import spmm_flow

        return spmm_flow
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_parser() -> cli.Parser:
    """Every option is checked here, before Prefect or the pipeline start (types and choices from ``tasks.cli``)."""
    p = cli.Parser(prog="tcspmm", description=__doc__.split("\n")[0],
                   epilog="The result table (or --json) goes to stdout, logs to stderr. Bad input ends with one "
                          "line 'error: <source>: <problem>' and exit status 1 (2 for a bad option).")
    src = p.add_argument_group("input")
    src.add_argument("--matrix", required=True, help="Group/Name (SuiteSparse), "
                     "igb:tiny|small|medium, a .mtx/.mtx.gz/.tar.gz path, or gen:<kind>?k=v")
    src.add_argument("-N", "--n-cols", dest="n_cols_b", type=cli.positive_int, default=128,
                     help="columns of the dense B (default 128)")
    src.add_argument("--data-root", default=None, help="data root (default: $TCSPMM_DATA or ./data)")
    src.add_argument("--drop-zeros", action="store_true", help="drop explicit zeros of the .mtx")
    src.add_argument("--complex", dest="complex_mode", choices=["real", "abs"], default=None,
                     help="convert a complex matrix by its real part or modulus (default: refuse)")
    src.add_argument("--allow-nonfinite", action="store_true",
                     help="keep NaN/Inf values (default: refuse); the check then compares finite entries")
    src.add_argument("--memory-limit", type=cli.size_bytes, default=None,
                     help="refuse matrices whose parse needs more, e.g. 16G (default: what this machine has)")
    src.add_argument("--extract-cap", type=cli.size_bytes, default=None,
                     help="most any archive may unpack to, e.g. 100G (default 256G; configs/limits.yaml)")
    order = p.add_argument_group("reordering")
    order.add_argument("--reorder", default="auto", choices=[*cli.REORDER_METHODS, "auto"],
                       help="row reordering (default auto: the cheap method with the fewest TC blocks)")
    order.add_argument("--seed", type=cli.nonnegative_int, default=0, help="seed of B and of randomized reorderings")
    fmt = p.add_argument_group("format and precision")
    fmt.add_argument("--format", dest="fmt", default=cli.DEFAULT_FORMAT, metavar="FORMAT",
                     help=f"converted format (default {cli.DEFAULT_FORMAT}): auto (the format the cost model ranks "
                          f"first and {cli.BASE_FORMAT}, both timed, the faster kept), a registered one "
                          "(kernels/formats/<name>/) or hybrid (dense 16-row windows "
                          "on a Tensor Core format, the other rows on the CUDA-core CSR kernel; one device)")
    fmt.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"],
                     help="value type of A, B and C: float32 (TF32 Tensor Cores), float16 or bfloat16 "
                          "(FP32 accumulation)")
    fmt.add_argument("--allow-overflow", action="store_true",
                     help="run float16 even when values exceed its range or would round to zero (default: refuse)")
    dev = p.add_argument_group("devices")
    dev.add_argument("--devices", default="auto",
                     help="auto (one GPU if present, else CPU), cpu, all, or a count")
    dev.add_argument("--mode", default="oneshot", choices=["oneshot", "resident"], help="multi-device execution")
    dev.add_argument("--scheduler", default=None, help="address of an existing Dask scheduler (default: local)")
    dev.add_argument("--nondeterministic", action="store_true",
                     help="let the SpMM fall back to cuSPARSE where it is faster (C may then differ bitwise from "
                          "run to run; default: only our kernels, bitwise repeatable)")
    dev.add_argument("--repeats", type=cli.positive_int, default=20,
                     help="timed SpMM runs; GFLOP/s is from their median (default 20)")
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print the whole result as one JSON object on stdout")
    out.add_argument("--save-c", action="store_true", help="store C as Parquet blocks under results/")
    out.add_argument("--plot", type=Path, default=None, metavar="PNG",
                     help="also draw this run's chart (each stage's wall ms, the kernel and its GFLOP/s) to PNG")
    out.add_argument("-v", "--verbose", action="store_true", help="show Prefect's INFO logs on stderr")
    p.late_check("--matrix", "matrix", cli.matrix_spec)  # these import part of the pipeline
    p.late_check("--devices", "devices", cli.devices)
    p.late_check("--format", "fmt", cli.format_name)
    p.joint_check("--format/--devices", cli.format_devices)
    return p


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    as_json, verbose, plot = args.pop("json"), args.pop("verbose"), args.pop("plot")
    if plot is not None:
        from tasks.chart import unavailable

        if unavailable():
            print(f"error: --plot {plot}: {unavailable()}", file=sys.stderr)
            return 2
        if not plot.parent.is_dir():
            print(f"error: --plot {plot}: the folder {plot.parent} does not exist", file=sys.stderr)
            return 2
    for option, var in (("memory_limit", "TCSPMM_MEMORY_LIMIT"), ("extract_cap", "TCSPMM_EXTRACT_CAP")):
        value = args.pop(option)
        if value is not None:  # read by configs.limits wherever a size is checked
            os.environ[var] = value

    def emit(result):
        print(cli.spmm_result_text(result, as_json))
        if plot is not None:
            from tasks.chart import run_chart

            run_chart({**cli.run_outcome(result), "matrix": result.get("matrix_id")}, plot)

    def run():
        from flows.spmm_flow import spmm_flow

        return spmm_flow(**args)

    return cli.run_cli(run, verbose=verbose, emit=emit, prepare=lambda: __import__("flows.spmm_flow"),
                       data_root=args["data_root"])


if __name__ == "__main__":
    sys.exit(main())
