"""benchmarks/gnn.py's CPU-side pieces: case generation (seeded, reordered), versions, the table."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="needs torch: pip install -e '.[gnn]'")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gnn.py"


@pytest.fixture(scope="module")
def bench(load_script):
    return load_script(SCRIPT)


@pytest.fixture(scope="module")
def ep(bench):
    import gnn_epochs  # benchmarks/gnn_epochs.py, beside gnn.py (which put benchmarks/ on the path)

    return gnn_epochs


def test_cases_are_seeded_and_carry_community_labels(bench):
    A, perm, feats, labels, info = bench.make_case("sbm", "n=600&blocks=3&deg_in=6&deg_out=1&seed=2", 8, "rcm")
    again = bench.make_case("sbm", "n=600&blocks=3&deg_in=6&deg_out=1&seed=2", 8, "rcm")
    assert (A != again[0]).nnz == 0 and np.array_equal(feats, again[2])
    assert A.shape == (600, 600) and feats.shape == (600, 8) and np.bincount(labels).tolist() == [200] * 3
    assert info["reorder"].startswith("rcm") and (perm is None or sorted(perm) == list(range(600)))


def test_table_and_versions(bench):
    rows = [{"graph": "g", "nnz": 10, "model": "gcn", "hidden": 8, "precision": "float32", "ours_ms": 1.0,
             "pyg_ms": 2.0, "speedup": 2.0, "floor_ms": 0.8, "ceiling": 2.5, "forward_rel_err": 1e-3,
             "loss_max_rel_gap": 1e-4, "ours_test_acc": 0.5, "pyg_test_acc": 0.5},
            {"graph": "g", "nnz": 10, "model": "gat", "hidden": 8, "precision": "float16", "ours_ms": 1.0,
             "ours_test_acc": 0.5, "pyg_error": "RuntimeError: no half SpMM"}]
    lines = bench.table(rows).splitlines()
    assert "2.00x" in lines[2] and lines[3].split()[7] == "-"
    assert lines[2].split()[8:10] == ["0.80", "2.50x"] and lines[3].split()[8:10] == ["-", "-"]
    assert bench.versions()["torch"]
    assert bench.versions()["tcspmm_source_sha256"] == bench.source_digest()


def test_captured_step_columns(bench, ep):
    rows = [{"graph": "g", "nnz": 10, "model": "gcn", "hidden": 8, "precision": "float32", "ours_ms": 1.0,
             "pyg_ms": 2.0, "speedup": 2.0, "ours_graph_ms": 0.5, "pyg_graph_ms": 0.9, "speedup_graph": 1.8},
            {"graph": "g", "nnz": 10, "model": "gat", "hidden": 8, "precision": "float32", "ours_ms": 1.0,
             "ours_graph_error": "RuntimeError: operation not permitted when stream is capturing"}]
    head, _, gcn, gat = bench.table(rows).splitlines()
    assert head.split()[-3:] == ["gr", "x", "graph"] and gcn.split()[-3:] == ["0.50", "0.90", "1.80x"]
    assert gat.split()[-3:] == ["-", "-", "-"]
    eager_only = {k: v for k, v in rows[0].items() if not k.endswith(("_graph_ms", "_graph"))}
    assert "ours gr" not in bench.table([eager_only])
    # the replayed epochs only: the capture's epoch (1-based graph_from_epoch) and the eager ones left out
    assert ep.graphed_ms({"epoch_ms": [5.0, 4.0, 4.0, 9.0, 1.0, 3.0], "graph_from_epoch": 4}) == 2.0
    assert ep.graphed_ms({"epoch_ms": [5.0, 4.0], "graph_error": "x"}) is None


def test_every_row_times_the_dense_floor(bench, ep):
    """bench_model on the CPU (no PyG): ours and the same model with its sparse steps dropped, both timed; the
    ceiling (PyG's best over the floor) needs PyG's time."""
    import torch

    from gnn.models import split_masks

    A, perm, feats, labels, _ = bench.make_case("sbm", "n=300&blocks=3&deg_in=6&deg_out=1&seed=2", 8, "none")
    row = ep.bench_model("gcn", 8, A, perm, torch.from_numpy(feats), torch.from_numpy(labels),
                            split_masks(300, 0), 3, None, None)
    assert row["ours_ms"] > 0 and row["floor_ms"] > 0 and "ceiling" not in row and "floor_error" not in row
