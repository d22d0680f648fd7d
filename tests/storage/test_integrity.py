"""Killed writers, corrupt files, full disks, concurrent manifest writers."""
import errno
import threading

import numpy as np
import pyarrow.parquet as pq
import pytest
from storage_helpers import assert_same_csr, csr_to_metcf, random_csr

import storage.writes
from configs.errors import StorageError
from storage import parquet_io, perm_key


def _files(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


class Killed(Exception):
    pass


def kill_after(monkeypatch, module, name, n_ok):
    real = getattr(module, name)
    calls = []

    def fake(*args, **kwargs):
        calls.append(1)
        if len(calls) > n_ok:
            raise Killed(f"killed at call {len(calls)}")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, fake)


@pytest.mark.parametrize("where,n_ok", [(parquet_io, 0), (parquet_io, 3), (storage.writes, 5)])
def test_killed_csr_write_is_incomplete_then_repaired(store, monkeypatch, where, n_ok):
    A = random_csr(120, 40, 0.1, seed=1)
    m = store.matrix("killed")
    m.write_csr(A, max_block_rows=20)  # a complete old version, replaced below
    assert m.has_csr()
    name = "write_table" if where is parquet_io else "file_record"  # file_record runs after each block is written
    with monkeypatch.context() as mp:
        kill_after(mp, where, name, n_ok)
        with pytest.raises(Killed):
            m.write_csr(A, max_block_rows=20)
    assert not m.has_csr()
    with pytest.raises(StorageError, match="not complete"):
        m.read_csr()
    csr_dir = m.folder / "csr"
    (csr_dir / ".tmp-part-0-20.parquet.abc123").write_bytes(b"half a file")  # a temp left by a killed rename
    m.write_csr(A, max_block_rows=30)  # different blocks: every file of the killed attempt is stale
    assert m.has_csr()
    assert _files(csr_dir) == sorted(f"part-{a}-{a + 30}.parquet" for a in range(0, 120, 30))
    assert_same_csr(m.read_csr(), A)


def test_killed_format_and_perm_writes(store, monkeypatch):
    M = csr_to_metcf(random_csr(64, 30, 0.1, seed=2))
    m = store.matrix("kf")
    m.write_perm("none-0", np.arange(64))
    with monkeypatch.context() as mp:
        kill_after(mp, parquet_io, "write_table", 1)
        with pytest.raises(Killed):
            m.write_format("metcf", "none-0", M, window_ranges=[0, 1, 2, 4])
        with pytest.raises(Killed):
            m.write_perm("rcm-1", np.arange(64))
    assert not m.has_format("metcf", "none-0") and m.read_perm("rcm-1") is None
    assert m.has_perm("none-0")  # the other artifact survived
    m.write_format("metcf", "none-0", M, window_ranges=[0, 4])
    assert _files(m.folder / "formats/metcf/none-0") == ["part-0-4.parquet"]
    assert m.has_format("metcf", "none-0")


def _flip(path, pos):
    raw = bytearray(path.read_bytes())
    raw[pos] ^= 0xFF
    path.write_bytes(bytes(raw))


def test_corrupt_data_page_names_the_file(store):
    A = random_csr(100, 100, 0.2, seed=4)
    m = store.matrix("corrupt")
    m.write_csr(A, max_block_rows=50)
    target = m.folder / "csr/part-50-100.parquet"
    col_meta = pq.ParquetFile(target).metadata.row_group(0).column(2)  # the value column's first page
    _flip(target, col_meta.data_page_offset + col_meta.total_compressed_size // 2)
    assert m.has_csr()  # size and footer unchanged: the cheap check passes ...
    with pytest.raises(StorageError, match="part-50-100.parquet"):
        m.read_csr()  # ... and the page CRC catches it while decoding
    assert any("sha256" in p for p in m.verify("csr"))
    m.read_csr_rows(0, 50)  # the intact block still reads


@pytest.mark.parametrize("damage", ["footer", "truncate", "delete"])
def test_damaged_file_is_not_complete(store, damage):
    m = store.matrix("damaged")
    m.write_csr(random_csr(30, 30, 0.2), max_block_rows=10)
    target = m.folder / "csr/part-10-20.parquet"
    if damage == "footer":
        _flip(target, target.stat().st_size - 20)
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-5])
    else:
        target.unlink()
    assert not m.has_csr()
    with pytest.raises(StorageError, match="part-10-20.parquet"):
        m.read_csr()


def test_disk_full_raises_storage_error_and_leaves_nothing(store, monkeypatch):
    def full_disk(table, where, **kwargs):
        with open(where, "wb") as f:
            f.write(b"PAR1 partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq, "write_table", full_disk)
    m = store.matrix("full")
    with pytest.raises(StorageError, match="no space left") as info:
        m.write_csr(random_csr(10, 10, 0.3))
    assert "\n" not in str(info.value)
    assert _files(m.folder / "csr") == []
    assert not m.has_csr()


def test_concurrent_writers_keep_each_others_entries(store):
    m = store.matrix("conc")
    keys = [perm_key("rowshuffle", {"seed": s}) for s in range(16)]
    errors = []

    def worker(part):
        try:
            for key in part:
                store.matrix("conc").write_perm(key, np.random.default_rng(0).permutation(50))
        except Exception as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(keys[i::2],)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(m.has_perm(k) for k in keys)
    assert sorted(a for a in m.artifacts() if a.startswith("perm/")) == sorted(f"perm/{k}" for k in keys)
