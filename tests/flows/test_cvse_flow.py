"""`flows/spmm.py --format cvse` end to end on the CPU (the CVSE NumPy twin): the DNN-style generator pruned at
V x 1, Sparse Vector Compression's choice of V recorded (no padding on a V-pruned weight), stored in the store's
cvse layout and reused on a second run; and the command line."""
from __future__ import annotations

import json

import pytest

from flow_cases import assert_stored_format, run_cli
from flows.spmm import spmm_flow
from storage import BlockStore

GEN = "gen:dlmc?rows=200&cols=136&sparsity=0.8&vector=8&seed=3"  # 200 rows: the last vector row is short


@pytest.mark.parametrize("dtype, tol", [("float32", 2e-3), ("float16", 1e-2), ("bfloat16", 3e-2)])
def test_cvse_runs_end_to_end(prefect_harness, data_root, dtype, tol):
    out = spmm_flow(matrix=GEN, n_cols_b=24, reorder="none", fmt="cvse", dtype=dtype, devices="cpu",
                    data_root=str(data_root), repeats=2)
    conv = out["convert"]
    assert conv["format"] == "cvse" and conv["vector"] == 8 and conv["padding"] == 0  # SVC keeps the pruning's V
    assert out["spmm"]["rel_err"] <= tol
    store = BlockStore(data_root).matrix(out["matrix_id"])
    assert_stored_format(store, "cvse", conv["format_key"], store.read_csr(), dtype)
    again = spmm_flow(matrix=GEN, n_cols_b=24, reorder="none", fmt="cvse", dtype=dtype, devices="cpu",
                      data_root=str(data_root), repeats=2)
    assert again["convert"]["reused"] and again["spmm"]["rel_err"] <= tol


def test_cli_format_cvse(data_root):
    proc = run_cli(["--matrix", GEN, "-N", "16", "--format", "cvse", "--dtype", "float16", "--reorder", "none",
                    "--devices", "cpu", "--repeats", "2", "--json", "--data-root", str(data_root)],
                   {"TCSPMM_DATA": str(data_root)}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["convert"]["format"] == "cvse" and result["spmm"]["rel_err"] <= 1e-2
