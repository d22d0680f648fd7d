"""`flows/spmm.py --format tiledcsr` end to end on the CPU (the Tiled-CSR NumPy twin for 16-bit precisions, the
float32 CSR product for float32): stored in the store's tiledcsr layout, reused on a second run, reordered by the
paper's row shuffle; and the command line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flows.spmm import spmm_flow
from kernels.formats import get
from storage import BlockStore

REPO = Path(__file__).resolve().parents[2]
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
    X = get("tiledcsr").from_arrays(store.read_format("tiledcsr", out["convert"]["format_key"]))
    X.validate(full=True)
    assert X.width == width and X.data.dtype == np.dtype({"float32": "float32", "float16": "float16",
                                                          "bfloat16": "uint16"}[dtype])
    A = store.read_csr()
    perm = store.read_perm(out["reorder"]["perm_key"])
    assert X.nnz == A.nnz and X.shape == A.shape
    R, Ap = get("tiledcsr").to_csr(X), A[perm]
    np.testing.assert_array_equal(R.indptr, Ap.indptr)
    np.testing.assert_array_equal(R.indices, Ap.indices)
    np.testing.assert_allclose(R.data, Ap.data, rtol=0 if dtype == "float32" else 2 ** -8)  # 16-bit: rounded once
    again = spmm_flow(matrix=GEN, n_cols_b=24, reorder="rowshuffle", fmt="tiledcsr", dtype=dtype, devices="cpu",
                      data_root=str(data_root), repeats=2)
    assert again["convert"]["reused"] and again["spmm"]["rel_err"] <= tol


def test_cli_format_tiledcsr(data_root):
    env = {**os.environ, "TCSPMM_DATA": str(data_root), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(REPO / "flows" / "spmm.py"), "--matrix", GEN, "-N", "16",
                           "--format", "tiledcsr", "--dtype", "float16", "--reorder", "degree", "--devices", "cpu",
                           "--repeats", "2", "--json", "--data-root", str(data_root)],
                          capture_output=True, text=True, env=env, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["convert"]["format"] == "tiledcsr" and result["spmm"]["rel_err"] <= 1e-2
