"""The names a user gives on the command line and in the API, known without importing the pipeline (seconds on a
busy machine: `--help` and a bad option answer at once). tests/flows/test_cli.py checks them against
tasks.reorder.METHODS and the format registry. The formats themselves are not listed: ``--format`` is checked
against kernels.formats.REGISTRY after the other options (tasks.cli.format_name), so a new format's folder and its
register line are all it takes."""
from __future__ import annotations

REORDER_METHODS = ("tca", "rowshuffle", "jaccard", "smat", "rcm", "degree", "community", "none")
DEFAULT_FORMAT = "metcf"  # --format's and SpmmPlan(format=...)'s default: ME-TCF, the first format
