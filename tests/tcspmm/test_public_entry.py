"""``import tcspmm`` is the public entry: it re-exports SpmmPlan, spmm and the loaders, and is declared in the
package list that ``pip install`` uses; importing it needs no GPU and no Prefect."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import scipy.sparse as sp

import tcspmm
from kernels.spmm import SpmmPlan
from storage import load_csr

REPO = Path(__file__).resolve().parents[2]


def test_reexports_the_same_objects():
    assert tcspmm.SpmmPlan is SpmmPlan and tcspmm.load_csr is load_csr
    assert set(tcspmm.__all__) >= {"SpmmPlan", "spmm", "load_csr", "load_edge_index", "load_node_array"}
    A = sp.csr_array(np.eye(5, dtype=np.float32))
    np.testing.assert_array_equal(tcspmm.spmm(A, np.ones((5, 2), np.float32), device="cpu"), np.ones((5, 2)))


def test_installed_with_the_project():
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "tcspmm*" in cfg["tool"]["setuptools"]["packages"]["find"]["include"]
    assert cfg["project"]["version"] == tcspmm.__version__


def test_import_pulls_neither_prefect_nor_cupy():
    code = "import sys, tcspmm; print('prefect' in sys.modules, 'cupy' in sys.modules, 'dask' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split() == ["False", "False", "False"]
