"""The catalog's GNN training hook (gnn.catalog.train_stored) on the CPU base install: a matrix without stored node
features and labels is skipped with the reason, and so is one with them when torch is missing."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from gnn.catalog import train_stored
from storage import BlockStore
from storage.features import write_node_array


def test_a_matrix_without_node_data_is_skipped(tmp_path):
    mstore = BlockStore(tmp_path).matrix("gen.toy")
    assert train_stored("gen.toy", str(tmp_path)) == {
        "skipped": "gen.toy has no stored node features and labels (IGB archives carry them)"}
    write_node_array(mstore, "feat", np.ones((4, 3), dtype=np.float32))  # features without labels: still skipped
    assert "no stored node features and labels" in train_stored("gen.toy", str(tmp_path))["skipped"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed: tests/flows train")
def test_without_torch_it_says_what_to_install(tmp_path):
    mstore = BlockStore(tmp_path).matrix("gen.toy")
    write_node_array(mstore, "feat", np.ones((4, 3), dtype=np.float32))
    write_node_array(mstore, "label_19", np.arange(4, dtype=np.int64))
    assert train_stored("gen.toy", str(tmp_path)) == {"skipped": "torch is not installed (pip install -e '.[gnn]')"}
