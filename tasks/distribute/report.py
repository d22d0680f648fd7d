"""Per-GPU timing tables as the flow needs them: runs-table rows and a Markdown table (a Prefect artifact).

Plain functions over the timing dicts of `run_oneshot` and `DistributedSpmm.history`; no Prefect, no Dask.
"""
from __future__ import annotations

ONESHOT_COLUMNS = ("shard", "worker", "gpu", "kernel", "load_ms", "h2d_ms", "plan_ms", "kernel_ms", "d2h_ms",
                   "gather_ms", "bytes_in", "bytes_out", "attempts")


def runs_rows(timings: list[dict], *, run_id: str, matrix_id: str, n_cols_b: int, reorder: str,
              stage: str = "spmm-oneshot") -> list[dict]:
    """One ``storage.schemas.RUNS_SCHEMA`` row per shard: ``ms`` = the shard's median kernel ms, ``gflops`` from
    its nonzeros, everything else under ``extra`` (with ``n_parts``)."""
    rows = []
    for t in timings:
        ms = float(t["kernel_ms"])
        extra = {k: v for k, v in t.items() if k not in ("kernel_ms", "kernel", "gpu")}
        extra["n_parts"] = len(timings)
        rows.append({"run_id": run_id, "matrix_id": matrix_id, "stage": stage, "device": str(t.get("gpu")),
                     "kernel": str(t.get("kernel")), "ms": ms,
                     "gflops": 2.0 * t.get("nnz", 0) * n_cols_b / (ms * 1e6) if ms > 0 else None,
                     "n_cols_b": int(n_cols_b), "reorder": reorder, "error": None, "extra": extra})
    return rows


def markdown_table(timings: list[dict], columns=ONESHOT_COLUMNS) -> str:
    """A Markdown table of the per-shard timings, floats with 2 decimals, plus a summary line (slowest GPU)."""
    def cell(v):
        return f"{v:.2f}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(t.get(c, "")) for c in columns) + " |" for t in timings]
    if timings:
        slow = max(timings, key=lambda t: t["kernel_ms"])
        lines.append(f"\nslowest GPU: shard {slow['shard']} on {slow.get('gpu')} ({slow['kernel_ms']:.2f} ms "
                     f"kernel); wall {timings[0].get('wall_ms', 0.0):.0f} ms from submit to gathered C")
    return "\n".join(lines)


def resident_rows(history: list[dict]) -> list[dict]:
    """Flatten `DistributedSpmm.history` into one dict per (iteration, shard)."""
    return [{"iteration": h["iteration"], "iteration_ms": h["iteration_ms"], **s} for h in history
            for s in h["shards"]]
