"""The report stage: one table of each stage's wall time plus the SpMM's GFLOP/s, and the runs-table rows."""
from __future__ import annotations

import collections
import json

from storage import BlockStore

STAGES = ("fetch", "parse", "reorder", "convert", "spmm")
# What the printed table shows per stage (the runs table keeps everything in ``extra``).
DETAIL_KEYS = ("format", "dtype", "block_shape", "reused", "applied", "tc_blocks", "why", "n_tc_blocks", "mean_nnz_tc",
               "kernel_ms", "rel_err", "nnz", "shape",
               "cusparse_original_ms", "cusparse_reordered_ms", "devices", "halo_mb", "nonfinite_a", "nonfinite_c",
               "split")


def _before_after(order: dict, key: str) -> str | None:
    """``"before -> after"`` of a TC-block metric around the reordering (None when the stage did not report it)."""
    before, after = (order.get("before") or {}).get(key), (order.get("after") or {}).get(key)
    if before is None or after is None:
        return None
    return f"{before:.4g} -> {after:.4g}" if isinstance(before, float) else f"{before} -> {after}"


def _devices(per_device) -> str | None:
    """``"2 x NVIDIA H200"``: the devices a sharded SpMM ran on, one per shard (None for a one-device run)."""
    if not per_device:
        return None
    counts = collections.Counter(str(t.get("gpu")) for t in per_device)
    return ", ".join(f"{n} x {g}" for g, n in counts.items())


def _split(split: dict | None) -> str | None:
    """``"metcf 12 windows (192 rows, 5,000 nnz) + csr 8,000 rows (100,000 nnz)"``: a composite's two sides."""
    if not split:
        return None
    return (f"{split.get('tc_format')} {split.get('tc_windows', 0):.0f} windows ({split.get('tc_rows')} rows, "
            f"{split.get('tc_nnz'):,} nnz) + {split.get('cuda_format')} {split.get('cuda_rows')} rows "
            f"({split.get('cuda_nnz'):,} nnz)")


def stage_rows(run_id: str, matrix_id: str, results: dict) -> list[dict]:
    """Runs-table rows (one per stage) from the stage results the flow collected."""
    ingest, order, conv, mult = (results.get(k, {}) for k in ("ingest", "reorder", "convert", "spmm"))
    ms = {"fetch": ingest.get("fetch_ms"), "parse": ingest.get("parse_ms"), "reorder": order.get("ms"),
          "convert": conv.get("ms"), "spmm": mult.get("wall_ms")}
    extra = {
        "fetch": {"source_url": ingest.get("source_url"), "shape": ingest.get("shape"), "nnz": ingest.get("nnz")},
        "parse": {"reused": ingest.get("reused")},
        "reorder": {**{k: order.get(k) for k in ("method", "applied", "why", "reused", "before", "after", "methods")},
                    "tc_blocks": _before_after(order, "n_tc_blocks"),
                    "mean_nnz_tc": _before_after(order, "mean_nnz_tc")},
        "convert": {**{k: conv.get(k) for k in ("format", "dtype", "block_shape", "reused", "n_tc_blocks",
                                                "mean_nnz_tc", f"{conv.get('format')}_bytes", "csr_bytes",
                                                "formats")},  # <format>_bytes: each format's stats name its size
                    "split": _split(conv.get("split"))},
        "spmm": {**{k: mult.get(k) for k in ("dtype", "kernel_ms", "rel_err", "choice", "baseline", "per_device",
                                             "nonfinite_a", "nonfinite_c", "precision_check")},
                 "devices": _devices(mult.get("per_device")),
                 "halo_mb": (mult.get("sharded") or {}).get("halo_mb"),  # received per shard per iteration
                 **{f"cusparse_{key}_ms": base["median_ms"] for key, base in (mult.get("baseline") or {}).items()}},
    }
    return [
        {
            "run_id": run_id, "matrix_id": matrix_id, "stage": stage, "device": str(mult.get("device", "")),
            "kernel": str(mult.get("kernel", "")) if stage == "spmm" else "",
            "ms": float(ms[stage]) if ms[stage] is not None else float("nan"),
            "gflops": float(mult.get("gflops", float("nan"))) if stage == "spmm" else float("nan"),
            "n_cols_b": int(mult.get("n_cols_b", 0)), "reorder": str(order.get("applied", order.get("method", ""))),
            "error": "", "extra": json.dumps(extra[stage], default=str),
        }
        for stage in STAGES
    ]


def format_table(rows: list[dict]) -> str:
    """A fixed-width text table: stage, wall ms, GFLOP/s (SpMM only), kernel, detail."""
    lines = [f"{'stage':<9} {'wall ms':>10} {'GFLOP/s':>9}  {'kernel':<22} detail"]
    for row in rows:
        extra = json.loads(row["extra"])
        detail = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in extra.items()
                           if k in DETAIL_KEYS and v is not None)
        gflops = "" if row["gflops"] != row["gflops"] else f"{row['gflops']:.2f}"
        lines.append(f"{row['stage']:<9} {row['ms']:>10.1f} {gflops:>9}  {row['kernel']:<22} {detail}")
    return "\n".join(lines)


def write_report(data_root: str, rows: list[dict]) -> str:
    BlockStore(data_root).append_runs(rows)
    return format_table(rows)
