"""Node arrays in the block store (storage.features), IGB features/labels at ingest and the GCN variant
(tasks.features), and ``gnn.load``. NumPy only: these run in CI with the base install."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import gnn
from configs.errors import InputError, StorageError
from storage import BlockStore
from storage.features import has_node_array, node_array_names, read_node_array, write_node_array
from tasks import features as tfeat
from tasks import stages


def small_matrix(store, matrix_id="m", n=10):
    A = sp.random_array((n, n), density=0.3, random_state=0, format="csr", dtype=np.float32)
    store.matrix(matrix_id).write_csr(A)
    return A


def test_node_arrays_round_trip_bit_exact_in_blocks(tmp_path):
    store = BlockStore(tmp_path)
    small_matrix(store, n=10)
    m = store.matrix("m")
    feat = np.random.default_rng(0).standard_normal((10, 7)).astype(np.float32)
    labels = np.arange(10, dtype=np.int64) % 3
    write_node_array(m, "feat", feat, block_rows=3)  # 4 files: remainders hit
    write_node_array(m, "label", labels)
    assert len(m.manifest.require("nodes/feat")["files"]) == 4
    np.testing.assert_array_equal(read_node_array(m, "feat"), feat)
    got = read_node_array(m, "label")
    assert got.dtype == np.int64 and got.shape == (10,)
    np.testing.assert_array_equal(got, labels)
    perm = np.random.default_rng(1).permutation(10)
    np.testing.assert_array_equal(read_node_array(m, "feat", perm=perm), feat[perm])
    assert node_array_names(m) == ["feat", "label"]


def test_node_array_with_wrong_row_count_is_refused(tmp_path):
    store = BlockStore(tmp_path)
    small_matrix(store, n=10)
    with pytest.raises(InputError, match="has 9 rows, expected the matrix's 10 nodes"):
        write_node_array(store.matrix("m"), "feat", np.zeros((9, 2), np.float32))
    assert not has_node_array(store.matrix("m"), "feat")


def test_a_damaged_node_array_is_not_complete(tmp_path):
    store = BlockStore(tmp_path)
    small_matrix(store, n=10)
    m = store.matrix("m")
    write_node_array(m, "feat", np.ones((10, 2), np.float32))
    path = m.folder / m.manifest.require("nodes/feat")["files"][0]["path"]
    path.write_bytes(path.read_bytes()[:-3])
    assert not has_node_array(m, "feat") and node_array_names(m) == []
    with pytest.raises(StorageError):
        read_node_array(m, "feat")


def test_igb_ingest_stores_features_and_integer_labels(data_root):
    out = stages.ingest("igb:tiny", str(data_root))
    assert sorted(out["node_arrays"]) == ["feat", "label_19", "label_2K"]
    assert stages.ingest("igb:tiny", str(data_root))["reused"]  # a second ingest rewrites nothing
    m = BlockStore(data_root).matrix("igb.tiny")
    feat = read_node_array(m, "feat")
    n = out["shape"][0]
    assert feat.shape == (n, 32) and feat.dtype == np.float32
    y = read_node_array(m, "label_19")
    assert y.dtype == np.int64 and y.min() >= 0 and y.max() < 19
    src = tfeat.igb_node_paths(_raw(data_root), data_root)
    np.testing.assert_array_equal(feat, np.load(src["feat"]))
    np.testing.assert_array_equal(y, np.load(src["label_19"]).astype(np.int64))


def _raw(data_root):
    from tasks.fetch import fetch

    return fetch("igb:tiny", data_root)


def test_labels_must_be_integral():
    assert tfeat.as_labels(np.array([1.0, np.nan, 3.0]), "x").tolist() == [1, -1, 3]
    with pytest.raises(InputError, match="x: labels are not integral"):
        tfeat.as_labels(np.array([1.5]), "x")


def test_gcn_variant_is_stored_reordered_converted_and_loaded_with_base_node_data(data_root):
    out = stages.ingest("gen:sbm?n=300&blocks=3&p_in=0.05&p_out=0.002&seed=2&shuffle=0", str(data_root))
    mid = out["matrix_id"]
    A = BlockStore(data_root).matrix(mid).read_csr()
    write_node_array(BlockStore(data_root).matrix(mid), "label", np.arange(300) // 100)
    var = tfeat.gcn_variant(mid, data_root)
    assert var["matrix_id"] == mid + ".gcn" and not var["reused"]
    assert tfeat.gcn_variant(mid, data_root)["reused"]
    np.testing.assert_allclose(BlockStore(data_root).matrix(var["matrix_id"]).read_csr().toarray(),
                               gnn.gcn_norm(A).toarray(), rtol=1e-6)
    order = stages.reorder(var["matrix_id"], "rcm", str(data_root))
    conv = stages.convert(var["matrix_id"], order["perm_key"], str(data_root))
    assert conv["reused"] is False
    g = gnn.load(var["matrix_id"], data_root)
    assert g.normalized and g.perm_key == order["perm_key"] and g.label == "label"
    np.testing.assert_array_equal(g.perm, BlockStore(data_root).matrix(var["matrix_id"]).read_perm(g.perm_key))
    np.testing.assert_array_equal(g.y, np.arange(300) // 100)


def test_load_gives_edge_index_in_pyg_orientation(data_root):
    store = BlockStore(data_root)
    #   A = [[0, 2, 0],      edges 1 -> 0 (weight 2), 0 -> 2, 1 -> 2
    #        [0, 0, 0],
    #        [1, 3, 0]]
    A = sp.csr_array(np.array([[0, 2, 0], [0, 0, 0], [1, 3, 0]], np.float32))
    store.matrix("tri").write_csr(A)
    g = gnn.load("tri", data_root)
    assert g.perm is None and g.x is None and g.y is None
    np.testing.assert_array_equal(g.edge_index, [[1, 0, 1], [0, 2, 2]])
    np.testing.assert_array_equal(g.edge_index, store.matrix("tri").read_edge_index())
    with pytest.raises(InputError, match="no complete permutation 'rcm-x'"):
        gnn.load("tri", data_root, perm="rcm-x")
    with pytest.raises(InputError, match="has no node array 'label'"):
        gnn.load("tri", data_root, label="label")


def test_storage_one_liner_reads_a_node_array(tmp_path):
    import storage

    store = BlockStore(tmp_path)
    small_matrix(store, n=10)
    write_node_array(store.matrix("m"), "label", np.arange(10))
    np.testing.assert_array_equal(storage.load_node_array("m", "label", tmp_path), np.arange(10))
