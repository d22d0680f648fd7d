"""Matrices for the hybrid tests (CPU and GPU): each names the split the cost model is expected to choose."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from tasks.fetch.generators import generate


def power_law():
    """R-MAT at scale 13 in its natural order: hub windows among sparse ones. The fitted constants put every window
    on CUDA cores, as measured (formats-nvidia-h200-2026-11-29-s35.json, R-MAT scale 16 as given, N = 128: the
    hybrid 0.0415 ms, the CSR kernel alone 0.0416); the forced splits below still run it scattered."""
    return sp.csr_array(generate("rmat", "scale=13&edge_factor=16&seed=1"))


# R-MAT (scale 14) with a planted community in natural order: its last 1024 rows (64 windows) all linked to one run
# of 256 columns; the cost model sends 63 of those windows to Tensor Cores and the rest to CUDA cores in every
# precision (one window's R-MAT hubs make its block the TC part's peak)
DENSE_CORE = "scale=14&members=1024&targets=256&shuffle=0&seed=1"
DENSE_CORE_SPEC = f"gen:core?{DENSE_CORE}"  # the same as the CLI and the stages take it


def dense_core():
    """A power-law graph with a dense community (``gen:core``, `DENSE_CORE`: 16384 x 16384, 490,466 nnz)."""
    return sp.csr_array(generate("core", DENSE_CORE))


def dense_head():
    """  rows 0..47     ###########   (dense 48 x 512 block: three TC windows in one run)
         rows 48..3047  .  .   .     (one nonzero per row, empty rows among them)
    The TC part is one row range, written straight into C."""
    rng = np.random.default_rng(3)
    head = sp.csr_array(rng.standard_normal((48, 512)).astype(np.float32))
    n = 3000
    cols = rng.integers(0, 512, n)
    vals = rng.standard_normal(n).astype(np.float32)
    vals[::7] = 0.0
    tail = sp.csr_array((vals, (np.arange(n), cols)), shape=(n, 512))
    tail.eliminate_zeros()  # every 7th row empty
    return sp.csr_array(sp.vstack([head, tail]))


def all_dense():
    """Every window dense (37 x 96: a partial last window): all rows on Tensor Cores."""
    return sp.csr_array(np.random.default_rng(4).standard_normal((37, 96)).astype(np.float32))


def all_sparse():
    """R-MAT at scale 12: every window on CUDA cores."""
    return sp.csr_array(generate("rmat", "scale=12&edge_factor=16&seed=2"))


def wide():
    """Rectangular, more columns than rows, a dense head and a sparse rest (33 x 5000)."""
    rng = np.random.default_rng(5)
    A = sp.random(33, 5000, density=0.001, random_state=6, format="lil", dtype=np.float32)
    A[:16, :2048] = rng.standard_normal((16, 2048))
    return sp.csr_array(A)


def tall():
    """Rectangular, more rows than columns (5003 x 40), hub rows at the top, empty rows further down."""
    rng = np.random.default_rng(7)
    A = sp.random(5003, 40, density=0.02, random_state=8, format="lil", dtype=np.float32)
    A[:32] = rng.standard_normal((32, 40))
    A[1000:1500] = 0
    A = sp.csr_array(A)
    A.eliminate_zeros()
    return A


CASES = {"power_law": power_law, "dense_core": dense_core, "dense_head": dense_head, "all_dense": all_dense,
         "all_sparse": all_sparse, "wide": wide, "tall": tall, "nnz0": lambda: sp.csr_array((40, 30), dtype=np.float32)}


def every_third(n):
    return np.arange(n) % 3 == 0


def run_of(lo, hi):
    return lambda n: (np.arange(n) >= lo) & (np.arange(n) < hi)


# (matrix, TC windows) splits forced past the cost model, so that each composition is run whatever the fitted
# constants prefer: scattered windows (the workspace copy), one run at the top or in the middle (C's slice), all,
# none, and a partial last window among the TC ones
FORCED = {
    "scattered": (power_law, every_third),
    "head_run": (dense_head, run_of(0, 3)),
    "middle_run": (tall, run_of(100, 102)),
    "all_tc": (wide, lambda n: np.ones(n, dtype=bool)),
    "no_tc": (all_dense, lambda n: np.zeros(n, dtype=bool)),
    "last_partial": (tall, lambda n: np.arange(n) % 2 == 1),  # 5003 rows: window 312 (partial) is odd
    "nnz0": (CASES["nnz0"], every_third),
}
