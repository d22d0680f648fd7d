"""The stages over the store, without Prefect: fixtures fetched from the local mirror, parsed, stored, read back."""
from pathlib import Path

import numpy as np
import pytest

from configs.errors import InputError
from storage import BlockStore
from tasks import stages
from tasks.fetch import fetch
from tasks.parse import load_matrix

FIXTURES = ["Newman/karate", "LPnetlib/lp_e226", "HB/young1c", "SNAP/email-Enron", "igb:tiny"]


@pytest.mark.parametrize("spec", FIXTURES)
def test_ingest_reads_back_from_parquet_exactly_what_was_parsed(mirror, data_root, spec):
    complex_mode = "real" if spec == "HB/young1c" else None
    out = stages.ingest(spec, str(data_root), complex_mode=complex_mode)
    parsed = load_matrix(fetch(spec, Path(data_root)), complex_mode=complex_mode)
    stored = BlockStore(data_root).matrix(out["matrix_id"]).read_csr()
    assert stored.shape == parsed.csr.shape == tuple(out["shape"])
    assert stored.nnz == parsed.csr.nnz == out["nnz"]
    np.testing.assert_array_equal(stored.indptr, parsed.csr.indptr)
    np.testing.assert_array_equal(stored.indices, parsed.csr.indices)
    np.testing.assert_array_equal(stored.data, parsed.csr.data)  # bit-exact values, same dtype
    assert stored.data.dtype == parsed.csr.data.dtype
    again = stages.ingest(spec, str(data_root), complex_mode=complex_mode)
    assert again["reused"] and again["matrix_id"] == out["matrix_id"]


def test_reorder_never_applies_a_method_that_adds_tc_blocks(data_root):
    out = stages.ingest("gen:uniform?rows=2000&cols=3000&density=0.002&seed=4", str(data_root))
    for method in ("degree", "rcm", "tca"):
        order = stages.reorder(out["matrix_id"], method, str(data_root))
        assert order["after"]["n_tc_blocks"] <= order["before"]["n_tc_blocks"]
        perm = BlockStore(data_root).matrix(out["matrix_id"]).read_perm(order["perm_key"])
        assert np.array_equal(np.sort(perm), np.arange(2000))


def test_community_reorder_records_its_device(data_root):
    """community runs on the GPU when one is present; the device is part of the stored order's key and params."""
    from kernels.spmm import gpu_available

    out = stages.ingest("gen:sbm?n=4000&blocks=40&deg_in=12&deg_out=1&seed=3", str(data_root))
    order = stages.reorder(out["matrix_id"], "community", str(data_root))
    assert order["applied"] == "community" and order["after"]["n_tc_blocks"] < order["before"]["n_tc_blocks"]
    meta = BlockStore(data_root).matrix(out["matrix_id"]).perm_meta(order["perm_key"])
    assert meta["params"]["device"] == ("gpu" if gpu_available() else "cpu")
    assert stages.reorder(out["matrix_id"], "community", str(data_root))["reused"]


def test_unknown_reorder_method_and_format_are_input_errors(data_root):
    out = stages.ingest("gen:banded?n=100&bandwidth=3&density=1&seed=0", str(data_root))
    with pytest.raises(InputError, match="--reorder 'metis'"):
        stages.reorder(out["matrix_id"], "metis", str(data_root))
    order = stages.reorder(out["matrix_id"], "none", str(data_root))
    with pytest.raises(InputError, match="--format 'csc'"):
        stages.convert(out["matrix_id"], order["perm_key"], str(data_root), fmt="csc")


def test_parse_options_are_part_of_the_stored_matrix(mirror, data_root):
    from configs.errors import InputError

    real = stages.ingest("HB/young1c", str(data_root), complex_mode="real")
    modulus = stages.ingest("HB/young1c", str(data_root), complex_mode="abs")
    assert real["matrix_id"] != modulus["matrix_id"] and not modulus["reused"]
    store = BlockStore(data_root)
    assert not np.array_equal(store.matrix(real["matrix_id"]).read_csr().data,
                              store.matrix(modulus["matrix_id"]).read_csr().data)
    with pytest.raises(InputError, match="complex"):  # no conversion chosen: still refused
        stages.ingest("HB/young1c", str(data_root))


def test_runs_table_timestamps_are_now(data_root):
    import datetime as dt

    from tasks.report import stage_rows

    BlockStore(data_root).append_runs(stage_rows("r1", "m", {"spmm": {"wall_ms": 1.0, "n_cols_b": 4}}))
    stamps = BlockStore(data_root).read_runs().column("timestamp").to_pylist()
    now = dt.datetime.now(dt.timezone.utc)
    assert all(abs((now - t.replace(tzinfo=t.tzinfo or dt.timezone.utc)).total_seconds()) < 120 for t in stamps)


@pytest.mark.parametrize("fmt", ["metcf", "cvse"])
def test_the_report_shows_the_converted_formats_size_whatever_the_format(fmt):
    import json

    from tasks.report import stage_rows

    rows = stage_rows("r1", "m", {"convert": {"format": fmt, f"{fmt}_bytes": 123, "csr_bytes": 456}})
    extra = json.loads(next(r for r in rows if r["stage"] == "convert")["extra"])
    assert extra[f"{fmt}_bytes"] == 123 and extra["csr_bytes"] == 456


def test_local_archive_extracts_under_the_runs_data_root(tmp_path, monkeypatch, data_root):
    import gzip

    monkeypatch.delenv("TCSPMM_DATA", raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    path = cwd / "small.mtx.gz"
    path.write_bytes(gzip.compress(b"%%MatrixMarket matrix coordinate real general\n2 2 1\n1 2 3.5\n"))
    out = stages.ingest(str(path), str(data_root))
    assert out["nnz"] == 1
    assert not (cwd / "data").exists()  # nothing in the working directory's default root
    assert list(Path(data_root).glob("extracted/*"))
