"""gnn.to_pyg / to_torch_csr / to_dgl: PyG-style tensors sharing the store's buffers (zero-copy on the CPU)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch", reason="needs torch: pip install -e '.[gnn]'")
# torch 2.11 notes once per process that sparse invariant checks are off when an op (to_dense) meets a CSR tensor
# built without an explicit choice elsewhere; gnn.to_torch_csr makes its choice (the store's CSR is canonical)
pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled:UserWarning")

import gnn  # noqa: E402
from storage import BlockStore  # noqa: E402
from storage.features import write_node_array  # noqa: E402


@pytest.fixture
def stored(tmp_path):
    #   A = [[0, 2, 0, 0],     edges (src -> dst): 1 -> 0 (w 2), 0 -> 2, 1 -> 2, 3 -> 3
    #        [0, 0, 0, 0],
    #        [1, 3, 0, 0],
    #        [0, 0, 0, 5]]
    A = sp.csr_array(np.array([[0, 2, 0, 0], [0, 0, 0, 0], [1, 3, 0, 0], [0, 0, 0, 5]], np.float32))
    m = BlockStore(tmp_path).matrix("g4")
    m.write_csr(A)
    write_node_array(m, "feat", np.arange(8, dtype=np.float32).reshape(4, 2))
    write_node_array(m, "label", np.array([0, 1, 1, 0]))
    return gnn.load("g4", tmp_path), A


def test_to_pyg_shares_memory_and_orients_edges_source_to_target(stored):
    g, A = stored
    data = gnn.to_pyg(g)
    ei = data.edge_index.as_tensor() if hasattr(data.edge_index, "as_tensor") else data.edge_index
    assert ei.tolist() == [[1, 0, 1, 3], [0, 2, 2, 3]]
    assert data.edge_weight.tolist() == [2, 1, 3, 5]
    assert data.num_nodes == 4 and data.y.tolist() == [0, 1, 1, 0]
    assert data.x.data_ptr() == g.x.ctypes.data  # zero-copy: the tensor is the store's array
    adj_t = data.adj_t
    assert adj_t.layout == torch.sparse_csr and adj_t.col_indices().data_ptr() == g.adj.indices.ctypes.data
    np.testing.assert_array_equal(adj_t.to_dense().numpy(), A.toarray())


def test_to_pyg_edge_index_is_a_sorted_pyg_edge_index(stored):
    pytest.importorskip("torch_geometric", reason="needs PyG: pip install -e '.[gnn]'")
    from torch_geometric import EdgeIndex

    data = gnn.to_pyg(stored[0])
    assert isinstance(data.edge_index, EdgeIndex) and data.edge_index.sort_order == "col"
    assert data.edge_index.sparse_size() == (4, 4)


def _dgl_or_skip():
    """DGL where one built for this torch imports; else skip, saying why (README "DGL": PyPI's newest DGL, 2.1.0,
    ships GraphBolt for torch 2.0-2.2 only, and its import fails next to the project's torch)."""
    try:
        import dgl
        return dgl
    except Exception as err:
        pytest.skip(f"no DGL that imports next to torch {torch.__version__}: {type(err).__name__}: "
                    f"{str(err).splitlines()[0] if str(err) else ''} (README, \"DGL\")")


def test_to_dgl(stored):
    _dgl_or_skip()
    g = gnn.to_dgl(stored[0])
    src, dst = g.edges()
    assert src.tolist() == [1, 0, 1, 3] and dst.tolist() == [0, 2, 2, 3]
    assert g.ndata["label"].tolist() == [0, 1, 1, 0] and g.edata["w"].tolist() == [2, 1, 3, 5]


def _dgl_import_fails(monkeypatch, err: Exception) -> None:
    import builtins

    real = builtins.__import__

    def failing(name, *args, **kw):
        if name == "dgl":
            raise err
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", failing)


def test_to_dgl_without_dgl_names_the_requirement(stored, monkeypatch):
    _dgl_import_fails(monkeypatch, ImportError("no dgl"))
    with pytest.raises(ImportError, match="gnn.to_dgl needs DGL built for torch"):
        gnn.to_dgl(stored[0])


def test_to_dgl_with_a_dgl_for_another_torch_names_the_mismatch(stored, monkeypatch):
    """DGL 2.1.0 (PyPI's newest) next to a newer torch fails its own import with FileNotFoundError (no GraphBolt
    library for this torch): one ImportError line naming torch's version and DGL's error."""
    _dgl_import_fails(monkeypatch, FileNotFoundError("Cannot find DGL C++ graphbolt library at "
                                                     ".../libgraphbolt_pytorch_2.11.0.so"))
    with pytest.raises(ImportError, match=r"built for torch .*FileNotFoundError: Cannot find DGL C\+\+ graphbolt"):
        gnn.to_dgl(stored[0])
