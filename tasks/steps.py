"""Prefect task wrappers around the plain stages: a few typed lines each.

Caching: the block store is the cache (each stage returns at once when its output is complete there, checked
against the manifest), so Prefect's own result cache is off (``NO_CACHE``): a second, Prefect-side cache could
return keys whose files were since deleted. No Prefect retries: the download retries transient HTTP errors itself
(``tasks/fetch/http.py``, with backoff), and bad input (a malformed file, an unknown id, a checksum mismatch) must
fail at once rather than three times.
"""
from __future__ import annotations

from prefect import task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from configs.names import DEFAULT_FORMAT

from tasks import execute, report, stages


@task(name="ingest", cache_policy=NO_CACHE)
def ingest(spec: str, data_root: str, drop_zeros: bool = False, complex_mode: str | None = None,
           allow_nonfinite: bool = False) -> dict:
    return stages.ingest(spec, data_root, drop_zeros=drop_zeros, complex_mode=complex_mode,
                         allow_nonfinite=allow_nonfinite)


@task(name="reorder", cache_policy=NO_CACHE)
def reorder(matrix_id: str, method: str, data_root: str, seed: int, scheduler: str | None,
            dtype: str = "float32", devices: str = "auto", n_cols_b: int = 128) -> dict:
    return stages.reorder(matrix_id, method, data_root, seed=seed, scheduler=scheduler, dtype=dtype, devices=devices,
                          n_cols_b=n_cols_b)


@task(name="check precision", cache_policy=NO_CACHE)
def check_precision(matrix_id: str, data_root: str, dtype: str, allow_overflow: bool) -> dict:
    return stages.check_precision(matrix_id, data_root, dtype, allow_overflow=allow_overflow)


@task(name="convert", cache_policy=NO_CACHE)
def convert(matrix_id: str, perm_key: str, data_root: str, fmt: str, dtype: str, scheduler: str | None) -> dict:
    return stages.convert(matrix_id, perm_key, data_root, fmt=fmt, dtype=dtype, scheduler=scheduler)


@task(name="spmm", cache_policy=NO_CACHE)
def spmm(matrix_id: str, perm_key: str, format_key: str, data_root: str, n_cols_b: int, dtype: str,
         devices: str, mode: str, seed: int, scheduler: str | None, save_c: bool, fmt: str = DEFAULT_FORMAT,
         repeats: int = 20, deterministic: bool = True, stored_formats: list[str] | None = None) -> dict:
    return execute.run_spmm(matrix_id, perm_key, format_key, data_root, n_cols_b=n_cols_b, dtype=dtype,
                            devices=devices, mode=mode, seed=seed, scheduler=scheduler, save_c=save_c, fmt=fmt,
                            repeats=repeats, deterministic=deterministic, stored_formats=stored_formats)


@task(name="report", cache_policy=NO_CACHE)
def write_report(data_root: str, run_id: str, matrix_id: str, results: dict) -> str:
    rows = report.stage_rows(run_id, matrix_id, results)
    table = report.write_report(data_root, rows)
    create_table_artifact(
        key=f"spmm-{matrix_id.lower().replace('.', '-').replace('_', '-')}"[:64],
        table=[{k: row[k] for k in ("stage", "ms", "gflops", "kernel", "device", "reorder")} for row in rows],
        description=f"tcspmm run {run_id} on {matrix_id}: wall time per stage and the SpMM's GFLOP/s",
    )
    return table
