"""benchmarks/multi_gpu.py on CPU workers (``--cpu``: NumPy shards, tiny sizes): every mode runs, every C is held
to float64 on sampled windows, the breakdown and the weak-scaling table are filled. Timings are not judged here."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def _bench_module():
    """benchmarks/multi_gpu.py as a module of its own name (benchmarks/ is not put on sys.path: its gnn.py would
    shadow the gnn package for every test collected after this one)."""
    spec = importlib.util.spec_from_file_location("bench_multi_gpu", REPO / "benchmarks" / "multi_gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(tmp_path, *args) -> dict:
    out = tmp_path / "mg.json"
    proc = subprocess.run([sys.executable, "benchmarks/multi_gpu.py", "--cpu", *args, "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_strong_scaling_on_cpu_workers_checks_every_mode(tmp_path):
    doc = _run(tmp_path, "--kinds", "mesh", "--orders", "none,rcm")
    rows = doc["rows"]
    assert {(r["order"], r["P"]) for r in rows} == {("none", 1), ("none", 2), ("rcm", 1), ("rcm", 2)}
    for r in rows:
        assert "error" not in r and r["checked_rows"] > 0
        for key in ("oneshot_rel_err", "stored_rel_err", "exchanged_rel_err", "resident_rel_err",
                    "resident_batched_rel_err"):
            assert 0 < r[key] < 1e-5, (key, r[key])  # float32 on the CPU against float64
        assert len(r["resident_batched_kernel_ms_per_gpu"]) == r["P"]
        assert len(r["exchanged_b_rows"]) == r["P"] and sum(r["exchanged_b_rows"]) == r["shape"][1]  # B read once
        assert r["exchanged_e2e_ms"] > 0 and (r["P"] == 1) == (r["exchanged_e2e_ratio"] is None)
    two = [r for r in rows if r["P"] == 2]
    assert all(r["resident_batched_overlap_rel_err"] < 1e-5 and r["resident_batched_advance_rel_err"] < 1e-6
               for r in two)
    for r in two:  # the row-split overlap: checked, its breakdown filled, its advancing batch equal to a plain run
        assert r["resident_batched_rowoverlap_rel_err"] < 1e-5
        assert r["resident_batched_rowoverlap_advance_rel_err"] == 0.0  # CPU: bitwise the plain loop
        assert r["resident_batched_rowoverlap_loop_ms"] > 0 and r["resident_batched_rowoverlap_boundary_ms"] >= 0
        assert len(r["rowoverlap_boundary_rows"]) == 2
    assert all("resident_batched_rowoverlap_loop_ms" not in r for r in rows if r["P"] == 1)
    none, rcm = (next(r for r in two if r["order"] == o) for o in ("none", "rcm"))
    assert max(rcm["halo_recv_bytes"]) < max(none["halo_recv_bytes"])  # a mesh's bandwidth order shrinks the halo


def test_weak_scaling_grows_the_matrix_with_the_device_count(tmp_path):
    doc = _run(tmp_path, "--weak", "1e5", "--kinds", "sbm", "--orders", "natural")
    rows = sorted(doc["rows"], key=lambda r: r["P"])
    assert [r["P"] for r in rows] == [1, 2] and all(r.get("weak") for r in rows)
    assert 1.6 < rows[1]["nnz"] / rows[0]["nnz"] < 2.4
    assert all(r["resident_batched_rel_err"] < 1e-5 for r in rows)


def test_reference_rows_equal_a_dense_product():
    import scipy.sparse as sp

    from kernels.formats.metcf.container import csr_to_metcf
    reference_rows = _bench_module().reference_rows
    A = sp.random(100, 90, density=0.1, random_state=np.random.default_rng(1), format="csr", dtype=np.float32)
    perm = np.random.default_rng(2).permutation(100)
    M = csr_to_metcf(sp.csr_array(A)[perm])
    B = np.random.default_rng(3).standard_normal((90, 5)).astype(np.float32)
    rows, ref = reference_rows(M, perm, B, 3, seed=4)
    assert rows.shape[0] == ref.shape[0] > 16 and np.unique(rows).shape[0] == rows.shape[0]  # 3 windows
    np.testing.assert_allclose(ref, (A.astype(np.float64) @ B.astype(np.float64))[rows], rtol=1e-12, atol=1e-12)
