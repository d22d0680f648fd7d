"""`flows/spmm.py --format tiledcsr` end to end on the CPU (the Tiled-CSR NumPy twin for 16-bit precisions, the
float32 CSR product for float32): stored in the store's tiledcsr layout, reused on a second run, reordered by the
paper's row shuffle; and the command line."""
from __future__ import annotations

import json

import numpy as np
import pytest

from flow_cases import assert_stored_format, run_cli
from flows.spmm import spmm_flow
from storage import BlockStore

GEN = "gen:sbm?n=1500&blocks=15&p_in=0.05&p_out=0.0005&seed=5"


@pytest.mark.parametrize("dtype, tol", [("float32", 2e-3), ("float16", 1e-2), ("bfloat16", 3e-2)])
def test_tiledcsr_runs_end_to_end(prefect_harness, data_root, dtype, tol):
    out = spmm_flow(matrix=GEN, n_cols_b=24, reorder="rowshuffle", fmt="tiledcsr", dtype=dtype, devices="cpu",
                    data_root=str(data_root), repeats=2)
    width = 8 if dtype == "float32" else 16
    assert out["convert"]["format"] == "tiledcsr" and out["convert"]["block_shape"] == [16, width]
    assert 0 < out["convert"]["effective_rate"] <= 1 and out["convert"]["gain_over_srbcrs"] > 0
    assert out["spmm"]["rel_err"] <= tol
    store = BlockStore(data_root).matrix(out["matrix_id"])
    A = store.read_csr()
    perm = store.read_perm(out["reorder"]["perm_key"])
    X = assert_stored_format(store, "tiledcsr", out["convert"]["format_key"], A[perm], dtype)
    X.validate(full=True)
    assert X.width == width and X.data.dtype == np.dtype({"float32": "float32", "float16": "float16",
                                                          "bfloat16": "uint16"}[dtype])
    assert X.nnz == A.nnz and X.shape == A.shape
    again = spmm_flow(matrix=GEN, n_cols_b=24, reorder="rowshuffle", fmt="tiledcsr", dtype=dtype, devices="cpu",
                      data_root=str(data_root), repeats=2)
    assert again["convert"]["reused"] and again["spmm"]["rel_err"] <= tol


def test_cli_format_tiledcsr(data_root):
    proc = run_cli(["--matrix", GEN, "-N", "16", "--format", "tiledcsr", "--dtype", "float16", "--reorder",
                    "degree", "--devices", "cpu", "--repeats", "2", "--json", "--data-root", str(data_root)],
                   {"TCSPMM_DATA": str(data_root)}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["convert"]["format"] == "tiledcsr" and result["spmm"]["rel_err"] <= 1e-2
