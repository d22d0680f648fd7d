"""The names a user gives on the command line and in the API, known without importing the pipeline (seconds on a
busy machine: `--help` and a bad option answer at once). tests/flows/test_cli.py checks them against
tasks.reorder.METHODS and the format registry (kernels.formats.REGISTRY, which is the truth: a new format's folder
adds its name here too)."""
from __future__ import annotations

REORDER_METHODS = ("tca", "rowshuffle", "jaccard", "smat", "rcm", "degree", "community", "none")
FORMATS = ("metcf", "bcsr", "tiledcsr", "cvse")
DEFAULT_FORMAT = "metcf"  # --format's and SpmmPlan(format=...)'s default: ME-TCF, the first format
