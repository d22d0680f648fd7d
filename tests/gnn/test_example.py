"""examples/train_gcn.py end to end on the CPU: the stages, node data, and a few epochs of GCN and GAT."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="needs torch: pip install -e '.[gnn]'")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_gcn.py"


@pytest.fixture(scope="module")
def example(load_script):
    return load_script(EXAMPLE)


def test_sbm_labels_follow_the_generator_communities(example):
    feats, labels = example.sbm_node_data("gen:sbm?n=10&blocks=3&seed=4", 10, n_features=5)
    assert labels.tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2] and feats.shape == (10, 5)
    assert example.sbm_spec("gen:sbm?n=10&shuffle=1").endswith("shuffle=0")


def test_sbm_training_learns_the_communities(example, data_root):
    mid = example.prepare("gen:sbm?n=2000&blocks=4&deg_in=8&deg_out=1&seed=3", data_root, reorder="rcm")
    rows = example.train(mid, data_root, epochs=15, hidden=16, heads=2)
    assert [r["model"] for r in rows] == ["gcn", "gat"]
    for r in rows:
        assert r["perm"].startswith("rcm-") and r["losses"][-1] < r["losses"][0]
        assert r["test_acc"] > 0.9  # 4 well-separated communities with informative features
    assert "gcn" in example.table(rows).splitlines()[2]


def test_igb_tiny_trains_on_its_stored_features_with_the_gcn_variant(example, data_root):
    mid = example.prepare("igb:tiny", data_root, reorder="none", stored_gcn=True)
    assert mid == "igb.tiny.gcn"
    rows = example.train(mid, data_root, epochs=3, hidden=16, heads=2, models=("gcn",))
    assert rows[0]["nodes"] == 19717 and np.isfinite(rows[0]["final_loss"])
    assert 0.0 <= rows[0]["test_acc"] <= 1.0
