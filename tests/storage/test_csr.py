"""CSR blocks: bit-exact round trips, row-range reads that touch only overlapping blocks, COO and edge_index."""
import numpy as np
import pytest
import scipy.sparse as sp
from storage_helpers import assert_same_csr, canonical, random_csr

import storage
from configs.errors import InputError, StorageError
from storage import parquet_io


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rectangular_with_empty_rows_round_trip(store, dtype):
    A = random_csr(37, 53, 0.2, dtype=dtype, empty_rows=(0, 5, 6, 36))
    m = store.matrix("rect")
    m.write_csr(A, {"source_url": "https://example.org/a.mtx", "sha256": "ab" * 32})
    assert m.has_csr()
    assert_same_csr(m.read_csr(), A)
    meta = m.csr_meta()
    assert meta["shape"] == [37, 53] and meta["nnz"] == A.nnz
    assert meta["source"]["source_url"] == "https://example.org/a.mtx"
    assert meta["dtypes"] == {"index": "int32", "value": np.dtype(dtype).name}


def test_nnz_zero(store):
    A = canonical(sp.csr_array((5, 7), dtype=np.float32))
    m = store.matrix("empty")
    m.write_csr(A)
    assert_same_csr(m.read_csr(), A)
    assert m.read_edge_index().shape == (2, 0)
    assert m.read_csr_rows(1, 4).shape == (3, 7)


def test_zero_rows(store):
    A = canonical(sp.csr_array((0, 4), dtype=np.float64))
    m = store.matrix("norows")
    m.write_csr(A)
    assert_same_csr(m.read_csr(), A)


def test_many_blocks_and_limits(store):
    # 333 rows, a hub row wider than a block (row 7), block limits that hit remainders
    A = random_csr(333, 101, 0.05, seed=3).tolil()
    A[7, :] = np.arange(1, 102)
    A = canonical(A)
    m = store.matrix("blocks")
    entry = m.write_csr(A, max_block_nnz=40, max_block_rows=25, row_group_size=16)
    ranges = [f["range"] for f in entry["files"]]
    assert len(ranges) > 5 and ranges[0][0] == 0 and ranges[-1][1] == 333
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    for (r0, r1), f in zip(ranges, entry["files"]):
        nnz = int(A.indptr[r1] - A.indptr[r0])
        assert r1 - r0 <= 25 and (nnz <= 40 or r1 - r0 == 1)
        assert f["path"] == f"csr/part-{r0}-{r1}.parquet"
    assert [7, 8] in ranges  # the hub row alone
    assert_same_csr(m.read_csr(), A)
    row, col, data = m.read_coo()
    C = A.tocoo()
    np.testing.assert_array_equal(row, C.row)
    np.testing.assert_array_equal(col, C.col)
    np.testing.assert_array_equal(data, C.data)


def test_int64_indices(store):
    n_cols = 2**31 + 10
    row = np.array([0, 0, 2, 3])
    col = np.array([1, 2**31 + 5, 7, 2**31 + 9])
    A = canonical(sp.coo_array((np.array([1.5, -2.0, 3.0, 4.0]), (row, col)), shape=(4, n_cols)).tocsr())
    assert A.indices.dtype == np.int64
    m = store.matrix("wide")
    m.write_csr(A)
    assert m.csr_meta()["dtypes"]["index"] == "int64"
    assert_same_csr(m.read_csr(), A)
    assert_same_csr(m.read_csr_rows(0, 3), canonical(A[0:3]))
    np.testing.assert_array_equal(m.read_edge_index(), [[1, 2**31 + 5, 7, 2**31 + 9], [0, 0, 2, 3]])


def test_read_rows_opens_only_overlapping_blocks(store, monkeypatch):
    A = random_csr(200, 60, 0.1, seed=5, empty_rows=(49, 50, 51))
    m = store.matrix("rows")
    entry = m.write_csr(A, max_block_rows=50, max_block_nnz=10**6, row_group_size=32)
    assert [f["range"] for f in entry["files"]] == [[0, 50], [50, 100], [100, 150], [150, 200]]
    opened = []
    real_open = parquet_io.open_file
    monkeypatch.setattr(parquet_io, "open_file", lambda p: opened.append(p.name) or real_open(p))
    for r0, r1, files in [(45, 55, ["part-0-50.parquet", "part-50-100.parquet"]), (50, 100, ["part-50-100.parquet"]),
                          (0, 200, [f"part-{a}-{a + 50}.parquet" for a in range(0, 200, 50)]), (120, 120, [])]:
        opened.clear()
        B = m.read_csr_rows(r0, r1)
        assert opened == files
        assert_same_csr(B, canonical(A[r0:r1]))
    # row-group pruning: one row of a 50-row block decodes fewer row groups than the block holds
    opened.clear()
    m.read_csr_rows(120, 121)
    n_groups = parquet_io.open_file(m.folder / "csr/part-100-150.parquet").metadata.num_row_groups
    assert n_groups > 1 and m.last_read["row_groups"] < n_groups
    with pytest.raises(InputError, match="outside"):
        m.read_csr_rows(10, 201)


def test_edge_index_orientation(store):
    # A[dst, src]:   row 0 = [. 2 .]   -> edge 1 -> 0 (source = column 1, destination = row 0)
    #                row 1 = [. . .]
    #                row 2 = [3 . 4]   -> edges 0 -> 2 and 2 -> 2
    A = canonical(sp.csr_array(np.array([[0, 2, 0], [0, 0, 0], [3, 0, 4]], dtype=np.float32)))
    store.matrix("g").write_csr(A)
    ei = storage.load_edge_index("g", data_root=store.root)
    assert ei.dtype == np.int64
    np.testing.assert_array_equal(ei, [[1, 0, 2], [0, 2, 2]])
    x = np.array([10.0, 20.0, 30.0])
    out = np.zeros(3)
    np.add.at(out, ei[1], A.data * x[ei[0]])  # PyG scatter: message from source, summed at destination
    np.testing.assert_allclose(out, A @ x)


def test_load_csr_uses_env_root(store, monkeypatch):
    A = random_csr(9, 9, 0.3)
    store.matrix("envm").write_csr(A)
    monkeypatch.setenv("TCSPMM_DATA", str(store.root))
    assert_same_csr(storage.load_csr("envm"), A)


def test_missing_and_bad_ids(store):
    m = store.matrix("nothing")
    assert not m.has_csr()
    with pytest.raises(StorageError, match="matrix 'nothing' not found"):  # never stored: not found (issue 16)
        m.read_csr()
    for bad in ["a/b", "..", "", "x y", "é"]:
        with pytest.raises(InputError, match="not valid"):
            store.matrix(bad)
