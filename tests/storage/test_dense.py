"""Dense blocks (storage.results): version 2 (a flat ``values`` column, row groups of whole rows) reads back bitwise
whole, by rows in any order, and put back through a permutation, from one thread or several; version-1 files (one
``fixed_size_list`` row per array row, as written before 2026-11-28) still read the same; a set of files is
written all or none; identical arrays give identical bytes.

    A: 7 x 5 (remainders everywhere), files of 3 rows: [0, 3) [3, 6) [6, 7); row groups of 2 rows
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from configs.errors import InputError, StorageError
from storage import parquet_io as pio
from storage import results as res_io
from storage.features import read_node_array
from storage.schemas import DENSE_VERSION, arrow_type, with_meta
from storage.writes import write_files

SHAPE, BLOCK_ROWS, GROUP_ROWS = (7, 5), 3, 2


def array(dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(7).standard_normal(SHAPE).astype(dtype)


def write_v2(m, name: str, A: np.ndarray, threads=None) -> dict:
    return m._write_artifact(name, "dense", name, "C-part-*.parquet", res_io.result_tables(A, BLOCK_ROWS, {}),
                             threads=threads, **res_io.write_options(A.dtype, A.shape[1], GROUP_ROWS))


def write_v1(m, name: str, A: np.ndarray, meta: dict | None = None) -> dict:
    """The writer before 2026-11-28: one Parquet row per array row, a fixed_size_list<dtype, N> column, snappy,
    statistics (storage.results.result_tables and pio.write_table's defaults then)."""
    n_rows, n_cols = A.shape
    ranges = [[a, min(a + BLOCK_ROWS, n_rows)] for a in range(0, n_rows, BLOCK_ROWS)]
    schema = pa.schema([pa.field("values", pa.list_(arrow_type(A.dtype), n_cols), nullable=False)])
    common = {"format": "dense", "shape": [n_rows, n_cols], "dtypes": {"value": A.dtype.name}, "ranges": ranges,
              "source": meta or {}}
    parts = [(f"C-part-{a}-{b}.parquet", (a, b),
              pa.Table.from_arrays([pa.FixedSizeListArray.from_arrays(pa.array(A[a:b].reshape(-1)), n_cols)],
                                   schema=with_meta(schema, {**common, "range": [a, b]}, version=1)))
             for a, b in ranges]
    return m._write_artifact(name, "dense", name, "C-part-*.parquet", parts, row_group_size=GROUP_ROWS)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("writer", [write_v1, write_v2])
def test_whole_rows_and_permuted_reads_are_bitwise(store, writer, threads):
    m = store.matrix("d")
    A = array()
    entry = writer(m, "inputs/a", A)
    assert [f["range"] for f in entry["files"]] == [[0, 3], [3, 6], [6, 7]]
    got, nbytes = res_io.read_dense(m.folder, entry, threads=threads)
    assert got.dtype == A.dtype and got.tobytes() == A.tobytes() and nbytes > 0
    rows = np.array([6, 0, 0, 4, 2, 6, 5])  # unsorted, repeated, first and last rows
    assert res_io.read_dense(m.folder, entry, rows, threads=threads)[0].tobytes() == A[rows].tobytes()
    sorted_rows = np.array([1, 2, 5])
    part, part_bytes = res_io.read_dense(m.folder, entry, sorted_rows, threads=threads)
    assert part.tobytes() == A[sorted_rows].tobytes() and 0 < part_bytes < nbytes  # 2 of the 4 row groups
    perm = np.random.default_rng(1).permutation(SHAPE[0])
    C = np.empty_like(A)
    C[perm] = A
    assert res_io.read_dense(m.folder, entry, perm=perm, threads=threads)[0].tobytes() == C.tobytes()
    assert res_io.read_dense(m.folder, entry, np.array([], dtype=np.int64))[0].shape == (0, SHAPE[1])


def test_version_2_files(store):
    """A flat column of the dtype, whole rows per row group, no compression for floats, snappy for integers, no
    statistics; the file's metadata gives the version and the values per row."""
    m = store.matrix("d")
    for A, codec in ((array(), "UNCOMPRESSED"), ((array() * 9).astype(np.int16), "SNAPPY")):
        entry = write_v2(m, f"inputs/{A.dtype.name}", A)
        pf = pio.open_file(m.folder / entry["files"][0]["path"])
        assert pf.schema_arrow.field("values").type == pa.from_numpy_dtype(A.dtype)
        md = pf.metadata
        assert [md.row_group(g).num_rows for g in range(md.num_row_groups)] == [GROUP_ROWS * 5, 5]
        col = md.row_group(0).column(0)
        assert col.compression == codec and not col.is_stats_set
        meta = entry["meta"]
        assert meta["version"] == DENSE_VERSION and meta["n_cols"] == 5 and meta["shape"] == [7, 5]
        assert res_io.read_result(m.folder, entry).tobytes() == A.tobytes()


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int64, np.uint8, np.bool_])
def test_dtypes_round_trip(store, dtype):
    m = store.matrix("d")
    A = array(np.float32) > 0 if dtype is np.bool_ else (array(np.float64) * 50).astype(dtype)
    m.write_result("r", A, block_rows=BLOCK_ROWS)
    got = m.read_result("r")
    assert got.dtype == A.dtype and got.tobytes() == A.tobytes()


def test_node_arrays_written_before_still_read(store):
    m = store.matrix("d")
    A = array()
    write_v1(m, "nodes/feat", A, {"node_array": "feat", "ndim": 2})
    assert read_node_array(m, "feat").tobytes() == A.tobytes()
    perm = np.array([3, 1, 6, 0, 2, 5, 4])
    assert read_node_array(m, "feat", perm).tobytes() == A[perm].tobytes()


def test_identical_arrays_give_identical_files(store):
    m = store.matrix("d")
    A = array()
    first = write_v2(m, "inputs/a", A, threads=1)
    second = write_v2(m, "inputs/b", A.copy(), threads=4)
    assert [f["sha256"] for f in first["files"]] == [f["sha256"] for f in second["files"]]


def test_refused_reads(store):
    m = store.matrix("d")
    A = array()
    entry = write_v2(m, "inputs/a", A)
    with pytest.raises(InputError, match="rows 0..7 requested from a dense array of 7 rows"):
        res_io.read_dense(m.folder, entry, np.array([0, 7]))
    with pytest.raises(InputError, match=r"perm has shape \(6,\), expected \(7,\)"):
        res_io.read_dense(m.folder, entry, perm=np.arange(6))
    # a flat file whose row groups cut rows (not written by the store): refused, not misread
    m._write_artifact("inputs/cut", "dense", "inputs/cut", "C-part-*.parquet", res_io.result_tables(A, None, {}),
                      row_group_size=7)
    with pytest.raises(StorageError, match="a row group holds 7 values, not whole rows of 5"):
        res_io.read_dense(m.folder, m.manifest.require("inputs/cut"))


def test_failed_write_leaves_no_file(store, monkeypatch):
    """Three files written at once, the second fails: the error is raised, nothing of the three is left."""
    m = store.matrix("d")
    A = array()
    parts = list(res_io.result_tables(A, BLOCK_ROWS, {}))
    real = pio.write_table

    def second_fails(target, table, **kw):
        if target.name.startswith("C-part-3-"):
            raise OSError("injected")
        real(target, table, **kw)
    monkeypatch.setattr(pio, "write_table", second_fails)
    home = m.folder / "inputs" / "a"
    with pytest.raises(OSError, match="injected"):
        write_files(m.folder, [(f"inputs/a/{rel}", rng, t) for rel, rng, t in parts], threads=3,
                    **res_io.write_options(A.dtype, 5))
    assert not home.exists() or list(home.iterdir()) == []


def test_map_threads_runs_every_call_and_raises_the_first_failure():
    assert pio.map_threads(lambda x: x * x, range(10), 4) == [x * x for x in range(10)]

    def fails_at_3(x):
        if x >= 3:
            raise ValueError(f"item {x}")
        return x
    with pytest.raises(ValueError, match="item 3"):
        pio.map_threads(fails_at_3, range(8), 1)
    with pytest.raises(ValueError, match="item"):
        pio.map_threads(fails_at_3, range(8), 4)


def test_io_threads_from_the_environment(monkeypatch):
    monkeypatch.setenv("TCSPMM_IO_THREADS", "3")
    assert pio.io_threads() == 3
    monkeypatch.setenv("TCSPMM_IO_THREADS", "zero")
    with pytest.raises(ValueError, match="TCSPMM_IO_THREADS is 'zero', expected a positive integer"):
        pio.io_threads()
    monkeypatch.delenv("TCSPMM_IO_THREADS")
    assert 1 <= pio.io_threads() <= pio.IO_THREADS_MAX


def test_a_dask_worker_style_process_decodes_on_io_threads(tmp_path):
    """A Dask nanny starts workers with OMP_NUM_THREADS=1, which sizes Arrow's decode pool to one thread; the first
    file the store opens raises it to io_threads (TCSPMM_IO_THREADS=3 here), never lowers it (=1 stays 2)."""
    import os
    import subprocess
    import sys

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": np.arange(10)}), path)
    code = ("import pyarrow as pa; from storage import parquet_io as pio; before = pa.cpu_count(); "
            f"pio.read(pio.open_file({str(path)!r})); print(before, pa.cpu_count())")
    repo = str(Path(__file__).resolve().parents[2])
    for io, want in (("3", "1 3"), ("1", "2 2")):
        omp = "1" if io == "3" else "2"
        env = {**os.environ, "OMP_NUM_THREADS": omp, "TCSPMM_IO_THREADS": io, "PYTHONPATH": repo}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=repo,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == want.split()
