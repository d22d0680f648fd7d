"""Permutations, dense results and the runs table."""
import json
import threading

import numpy as np
import pyarrow as pa
import pytest

from configs.errors import InputError
from storage import parquet_io, perm_key
from storage.schemas import RUNS_SCHEMA, file_meta


def test_perm_key_is_canonical():
    a = perm_key("tca", {"k": 4, "bands": np.int64(8), "thr": 0.5})
    b = perm_key("tca", {"thr": np.float64(0.5), "bands": 8, "k": 4})
    assert a == b and a.startswith("tca-") and len(a) == len("tca-") + 12
    assert perm_key("tca", {"k": 5}) != perm_key("tca", {"k": 4}) != perm_key("rcm", {"k": 4})
    assert perm_key("none") == perm_key("none", {})
    with pytest.raises(InputError):
        perm_key("a/b", {})


def test_perm_round_trip(store):
    m = store.matrix("p")
    key = perm_key("rowshuffle", {"seed": 3})
    assert m.read_perm(key) is None and not m.has_perm(key)
    perm = np.random.default_rng(3).permutation(1000).astype(np.int32)
    m.write_perm(key, perm, {"method": "rowshuffle", "params": {"seed": 3}})
    got = m.read_perm(key)
    assert got.dtype == np.int64 and m.has_perm(key)
    np.testing.assert_array_equal(got, perm)
    meta = m.perm_meta(key)
    assert meta["direction"] == "perm[new]=old" and meta["method"] == "rowshuffle" and meta["params"] == {"seed": 3}
    fm = file_meta(parquet_io.open_file(m.folder / f"perm/{key}.parquet").schema_arrow)
    assert fm["direction"] == "perm[new]=old" and fm["n"] == 1000
    m.write_perm("empty-0", np.empty(0, np.int64))
    assert m.read_perm("empty-0").shape == (0,)


@pytest.mark.parametrize("bad", [np.array([0, 0, 1]), np.array([0, 3, 1]), np.array([[0, 1]]), np.array([0.0, 1.0])])
def test_perm_rejects_non_permutations(store, bad):
    with pytest.raises(InputError):
        store.matrix("p").write_perm("x-1", bad)


@pytest.mark.parametrize("dtype,n_cols,block_rows", [(np.float32, 7, 16), (np.float64, 1, None), (np.float32, 512, 5)])
def test_result_round_trip(store, dtype, n_cols, block_rows):
    C = np.random.default_rng(0).standard_normal((50, n_cols)).astype(dtype)
    m = store.matrix("r")
    entry = m.write_result("run-1", C, block_rows=block_rows)
    if block_rows:
        assert len(entry["files"]) == -(-50 // block_rows)
    got = m.read_result("run-1")
    assert got.dtype == C.dtype and got.shape == C.shape and got.tobytes() == C.tobytes()
    assert m.has_result("run-1") and not m.has_result("run-2")


def test_result_rejects_1d(store):
    with pytest.raises(InputError, match="2-D"):
        store.matrix("r").write_result("x", np.zeros(4))


def test_runs_append_concurrently(store):
    def worker(tid):
        for i in range(15):
            store.append_runs([{"run_id": f"t{tid}-{i}", "matrix_id": "m", "stage": s, "device": "cpu",
                                "kernel": "ref", "ms": 1.5 * i, "gflops": 2.0, "n_cols_b": 32, "reorder": "none",
                                "extra": {"tid": tid}} for s in ("convert", "execute")])

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    table = store.read_runs()
    assert table.schema.equals(RUNS_SCHEMA) and table.num_rows == 60
    assert len(set(zip(table["run_id"].to_pylist(), table["stage"].to_pylist()))) == 60
    assert {json.loads(e)["tid"] for e in table["extra"].to_pylist()} == {0, 1}
    assert table["error"].null_count == 60
    assert table["timestamp"].type == pa.timestamp("us", tz="UTC")


def test_runs_empty_and_bad_keys(store):
    assert store.read_runs().num_rows == 0
    assert store.append_runs([]) is None
    with pytest.raises(InputError, match="unknown keys"):
        store.append_runs([{"run_id": "a", "gflop": 3.0}])
