"""Summarize benchmarks/results/*.json into docs/benchmarks.md; every number is read from the files or computed.

    python benchmarks/summarize.py [--results benchmarks/results] [--out docs/benchmarks.md]

Per family (spmm, calibration, reorder, multi_gpu, convert, parse): the newest file by its recorded date (reorder:
the newest per tag, as a 16-core 100M run and a small-size run are separate files; *-v0.json files are only
mentioned as an earlier kernel version) with machine, versions, exact command and date, a table of its rows and a
Targets table computed from them. A family or target without data says "not run". The doc is written atomically.
Each family's section lives in a summarize_*.py beside this script (what they share: summarize_common.py); this one
orders them, renders the doc and its charts.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the summarize_*.py sections, beside this script

from storage.atomic import atomic_path  # noqa: E402

import plots  # noqa: E402  (benchmarks/plots.py: charts beside the doc, optional matplotlib)
import summarize_common as common  # noqa: E402  (what every section shares: each takes it as ``h``)
from summarize_bcsr import bcsr_section  # noqa: E402  (benchmarks/ is the script folder)
from summarize_cpu import cpu_section  # noqa: E402
from summarize_csr import csr_section  # noqa: E402
from summarize_cvse import cvse_section, svc_slack_section  # noqa: E402
from summarize_formats import formats_section  # noqa: E402
from summarize_gnn import gnn_section  # noqa: E402
from summarize_host import bindings_section, host_section  # noqa: E402
from summarize_precision import precision_section, seam_section  # noqa: E402
from startup_summary import startup_section  # noqa: E402
from summarize_ab import ab_section  # noqa: E402
from summarize_rank import rank_section  # noqa: E402
from summarize_plan import plan_section  # noqa: E402
from summarize_sddmm import sddmm_section  # noqa: E402
from summarize_store_io import store_io_section  # noqa: E402
from summarize_weak import weak_section  # noqa: E402
from summarize_spmm import calibration_section, spmm_section  # noqa: E402
from summarize_reorder import reorder_section  # noqa: E402
from summarize_mgpu import multi_gpu_section  # noqa: E402
from summarize_common import absent, env, f, mnnz, older_note, pick, reproduce, table  # noqa: E402


# ---------------------------------------------------------------------------------------------- convert, parse

def convert_section(runs, v0, older) -> list[str]:
    if not runs:
        return absent("convert", "CSR → ME-TCF conversion")
    run = runs[0]
    gpu = any("gpu_ms" in r for r in run.rows)
    out = ["## CSR → ME-TCF conversion", ""] + env(run)
    out += table(("size", "matrix", "nnz", "CPU s", "Mnnz/s", "peak MB", "inverse s", "MeanNnzTC", "TC blocks",
                  "blocks/window max", "ME-TCF/CSR bytes") + (("GPU ms",) if gpu else ()),
                 [(r["size"], f"`{r['matrix']}`", mnnz(r["nnz"]), f(r["cpu_s"], 3), f(r["cpu_mnnz_per_s"]),
                   f(r["cpu_peak_mb"], 0), f(r["inverse_s"], 3), f(r["mean_nnz_tc"]), r["n_blocks"],
                   r["blocks_per_window_max"], f(r["metcf_over_csr"], 3)) + ((f(r.get("gpu_ms")),) if gpu else ())
                  for r in run.rows])
    return out + older_note(older) + ["No targets are defined for this benchmark.", "", reproduce("convert", run), ""]


def parse_section(runs, v0, older) -> list[str]:
    if not runs:
        return absent("parse", "MatrixMarket parse throughput")
    run = runs[0]
    out = ["## MatrixMarket parse throughput", ""] + env(run)
    out += table(("matrix", "nnz", "text MB", "fast_matrix_market.read_coo s (MB/s)", "read_mtx s (MB/s)",
                  "threads", "best of"),
                 [(f"`{r['matrix']}`", mnnz(r["nnz"]), f(r["text_mb"], 1),
                   f"{r['fmm_read_coo_s']} ({r['fmm_mb_per_s']})", f"{r['read_mtx_s']} ({r['read_mtx_mb_per_s']})",
                   r.get("threads"), r.get("repeats")) for r in run.rows])
    return out + older_note(older) + ["No targets are defined for this benchmark.", "", reproduce("parse", run), ""]


SECTIONS = {"spmm": spmm_section, "precision": lambda *a: precision_section(*a, h=common),
            "seam-ab": lambda *a: seam_section(*a, h=common),
            "gnn": lambda *a: gnn_section(*a, h=common),
            "bcsr": lambda *a: bcsr_section(*a, h=common),
            "formats": lambda *a: formats_section(*a, h=common),
            "cvse": lambda *a: cvse_section(*a, h=common),
            "svc-slack": lambda *a: svc_slack_section(*a, h=common),
            "sddmm": lambda *a: sddmm_section(*a, h=common),
            "calibration": calibration_section, "reorder": reorder_section, "multi_gpu": multi_gpu_section,
            "multi_gpu_weak": lambda *a: weak_section(*a, h=common),
            "host-overhead": lambda *a: host_section(*a, h=common),
            "csr_rows": lambda *a: csr_section(*a, h=common),
            "bindings": lambda *a: bindings_section(*a, h=common),
            "convert": convert_section, "parse": parse_section,
            "cpu_spmm": lambda *a: cpu_section(*a, h=common),
            "startup": lambda *a: startup_section(*a, h=common),
            "store_io": lambda *a: store_io_section(*a, h=common),
            "rank-check": lambda *a: rank_section(*a, h=common),
            "plan-time": lambda *a: plan_section(*a, h=common),
            "ab": lambda *a: ab_section(*a, h=common)}


def render(results: Path) -> str:
    out = ["# Benchmarks", "",
           "Generated by `benchmarks/summarize.py` from the JSON files in `benchmarks/results/`; do not edit by hand "
           "(rerun `python benchmarks/summarize.py`). Every number below is read from those files or computed from "
           "them; a benchmark or target without data says \"not run\".", ""]
    for family, section in SECTIONS.items():
        out += section(*pick(results, family))
    return "\n".join(out).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks.md")
    args = ap.parse_args(argv)
    text = render(args.results)
    why_not = plots.unavailable()  # charts are optional: the tables are written either way
    charts = None if why_not else plots.render(
        {fam: [row for run in pick(args.results, fam)[0] for row in run.rows]
         for fam in {family for family, *_ in plots.CHARTS.values()}}, args.out.parent)
    if why_not:
        print(f"summarize: no charts: {why_not}", file=sys.stderr)
    text = plots.insert(text, plots.section(charts, why_not))
    with atomic_path(args.out) as tmp:  # temp file beside the target, fsync, rename
        tmp.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
