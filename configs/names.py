"""The names a user gives on the command line and in the API, known without importing the pipeline (seconds on a
busy machine: `--help` and a bad option answer at once). tests/flows/test_cli.py checks them against
tasks.reorder.METHODS and the format registry. The formats themselves are not listed: ``--format`` is checked
against kernels.formats.REGISTRY after the other options (tasks.cli.format_name), so a new format's folder and its
register line are all it takes."""
from __future__ import annotations

REORDER_METHODS = ("tca", "rowshuffle", "jaccard", "smat", "rcm", "degree", "community", "none")
BASE_FORMAT = "metcf"  # ME-TCF, the first format: always among what "auto" builds and times (so auto never loses
# to it beyond timing noise), the format a sharded "auto" run and the per-shard functions take, the CPU path's
DEFAULT_FORMAT = "auto"  # --format's and SpmmPlan(format=...)'s default (issue 32): the cost model's first format
# and BASE_FORMAT, built and timed; on the H200 never slower than BASE_FORMAT alone beyond timing noise
# (benchmarks/results/host-overhead-nvidia-h200-2026-11-28-auto-vs-default-ordered*.json)
