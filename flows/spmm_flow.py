"""The tcspmm-spmm Prefect flow: one matrix through fetch, parse, reorder, convert, persist, SpMM and report.

Its command line is ``flows/spmm.py`` (``tcspmm``), which parses the options before this module (Prefect and the
pipeline) is imported. Wiring only: the stages live in ``tasks/``.
"""
from __future__ import annotations

import uuid

from prefect import flow

from configs.names import DEFAULT_FORMAT

from tasks import steps
from tasks.cli import data_root as resolve_data_root
from tasks.execute import check_format_devices, run_format
from tasks.stages import flow_cluster


@flow(name="tcspmm-spmm", log_prints=True)
def spmm_flow(matrix: str, n_cols_b: int = 128, dtype: str = "float32", reorder: str = "auto",
              fmt: str = DEFAULT_FORMAT, devices: str = "auto", mode: str = "oneshot", scheduler: str | None = None,
              seed: int = 0, data_root: str | None = None, save_c: bool = False, drop_zeros: bool = False,
              complex_mode: str | None = None, allow_overflow: bool = False, allow_nonfinite: bool = False,
              repeats: int = 20, nondeterministic: bool = False) -> dict:
    """C = A @ B for one matrix spec; returns each stage's result and the report table. ``dtype`` float32 (TF32),
    float16 or bfloat16; float16 refuses values it cannot hold unless ``allow_overflow``. ``nondeterministic``
    lets the SpMM fall back to cuSPARSE (faster on some matrices, not bitwise repeatable)."""
    root = resolve_data_root(data_root)
    check_format_devices(fmt, devices)  # before anything is fetched: a composite format runs on one device
    asked, fmt = fmt, run_format(fmt, devices)  # auto over several devices: the base format, which they shard
    run_id = uuid.uuid4().hex[:12]
    ingested = steps.ingest(matrix, root, drop_zeros, complex_mode, allow_nonfinite)
    matrix_id = ingested["matrix_id"]
    checked = steps.check_precision(matrix_id, root, dtype, allow_overflow)  # before anything is reordered
    with flow_cluster(scheduler, devices, ingested["nnz"]) as address:
        ordered = steps.reorder(matrix_id, reorder, root, seed, address, dtype, devices, n_cols_b)
        converted = steps.convert(matrix_id, ordered["perm_key"], root, fmt, dtype, address)
        multiplied = steps.spmm(matrix_id, ordered["perm_key"], converted["format_key"], root, n_cols_b, dtype,
                                devices, mode, seed, address, save_c, fmt, repeats, not nondeterministic,
                                list(converted["formats"]))
    multiplied["precision_check"] = checked
    if fmt != asked:
        converted["format_asked"] = f"{asked}: over several devices a sharded run takes {fmt}"
    results = {"ingest": ingested, "reorder": ordered, "convert": converted, "spmm": multiplied}
    table = steps.write_report(root, run_id, matrix_id, results)
    print(f"\ntcspmm run {run_id}: {matrix_id} {ingested['shape']} nnz={ingested['nnz']} N={n_cols_b}\n{table}")
    return {"run_id": run_id, "matrix_id": matrix_id, "table": table, **results}
