"""SuiteSparse fetch + parse against the local mirror: index checks, scipy reference, caching, failures."""
from __future__ import annotations

import csv
import dataclasses
import errno
import os
import time

import numpy as np
import pytest

from configs import HttpConfig, load_sources
from configs.errors import FetchError, InputError
from tasks.fetch import fetch
from tasks.parse import load_matrix
from tests.tasks.fetch.helpers import assert_clean, cached_urls, mmread_member, one_line

CASES = ["Newman/karate", "LPnetlib/lp_e226", "HB/west0067", "SNAP/email-Enron", "HB/bcsstk13"]


def _index_row(mirror, group, name):
    lines = mirror.read("suitesparse/files/ssstats.csv").decode().splitlines()[2:]
    return next(r for r in csv.reader(lines) if r[0] == group and r[1] == name)


def _sources(**http):
    return dataclasses.replace(load_sources(), http=HttpConfig(**{"backoff_s": 0.01, **http}))


@pytest.mark.parametrize("spec", CASES)
def test_fixture_matrix_matches_index_and_scipy(mirror, data_root, spec):
    group, name = spec.split("/")
    parsed = load_matrix(fetch(spec, data_root))
    row = _index_row(mirror, group, name)
    assert parsed.meta["shape"] == (int(row[2]), int(row[3]))
    assert parsed.meta["nonzero_entries"] == int(row[4])
    ref = mmread_member(mirror.read(f"suitesparse/MM/{group}/{name}.tar.gz"), f"{name}/{name}.mtx")
    A = parsed.csr
    assert A.shape == ref.shape and A.has_canonical_format
    assert abs(A - ref).max() == 0
    assert A.indptr.dtype == A.indices.dtype == np.int32
    assert parsed.meta["sha256"] == fetch(spec, data_root).sha256
    assert parsed.meta["source_url"].endswith(f"/MM/{group}/{name}.tar.gz")


def test_email_enron_expands_to_both_triangles(data_root):
    parsed = load_matrix(fetch("suitesparse:SNAP/email-Enron", data_root))
    A = parsed.csr
    assert A.nnz == 367_662 and parsed.meta["symmetry"] == "symmetric"
    assert abs(A - A.T).max() == 0
    assert A.data.dtype == np.float32  # pattern


def test_rectangular_lp_e226(data_root):
    raw = fetch("LPnetlib/lp_e226", data_root)
    assert raw.matrix_id == "suitesparse.LPnetlib.lp_e226" and raw.expected_shape == (223, 472)
    assert load_matrix(raw).csr.shape == (223, 472)


def test_complex_young1c_refused_by_default_then_converted(mirror, data_root):
    raw = fetch("HB/young1c", data_root)
    with pytest.raises(InputError) as err:
        load_matrix(raw)
    assert one_line(err.value) == "HB/young1c.mtx is complex; pass complex_mode='real'|'abs' to convert"
    ref = mmread_member(mirror.read("suitesparse/MM/HB/young1c.tar.gz"), "young1c/young1c.mtx")
    real = load_matrix(raw, complex_mode="real")
    mod = load_matrix(raw, complex_mode="abs")
    assert np.allclose(real.csr.toarray(), ref.toarray().real)
    assert np.allclose(mod.csr.toarray(), np.abs(ref.toarray()))
    assert real.meta["complex_mode"] == "real" and real.csr.data.dtype == np.float64
    with pytest.raises(InputError, match="complex_mode must be"):
        load_matrix(raw, complex_mode="imag")


def test_second_fetch_makes_no_request(mirror, data_root):
    first = fetch("HB/west0067", data_root)
    assert len(mirror.gets()) == 2  # the index and the tarball
    mirror.requests.clear()
    second = fetch("HB/west0067", data_root)
    load_matrix(second)
    assert mirror.requests == [] and second == first
    assert first.path == data_root / "cache" / first.sha256


def test_resume_after_truncated_download(mirror, data_root):
    path = "suitesparse/MM/HB/bcsstk13.tar.gz"
    mirror.fail(path, "truncate", after_bytes=100_000, times=1)
    raw = fetch("HB/bcsstk13", data_root)
    gets = mirror.gets("bcsstk13")
    assert [g.status for g in gets] == [200, 206] and gets[1].range == "bytes=100000-"
    assert raw.path.read_bytes() == mirror.read(path)
    assert load_matrix(raw).meta["nonzero_entries"] == 83_883
    assert_clean(data_root)


def test_unknown_matrix_id(mirror, data_root):
    with pytest.raises(InputError) as err:
        fetch("HB/no_such_matrix", data_root)
    msg = one_line(err.value)
    assert msg == f"matrix 'HB/no_such_matrix' is not in the SuiteSparse index at {mirror.suitesparse_url}" \
                  f"/files/ssstats.csv"
    assert not mirror.gets("/MM/")
    assert_clean(data_root, allowed_urls={f"{mirror.suitesparse_url}/files/ssstats.csv"})


def test_http_404_names_the_url(mirror, data_root):
    mirror.fail("suitesparse/MM/HB/west0067.tar.gz", status=404)
    with pytest.raises(FetchError) as err:
        fetch("HB/west0067", data_root)
    assert one_line(err.value) == f"HTTP 404 Not Found for {mirror.suitesparse_url}/MM/HB/west0067.tar.gz"
    assert len(mirror.gets("west0067")) == 1  # no retry on 404
    assert_clean(data_root, allowed_urls={f"{mirror.suitesparse_url}/files/ssstats.csv"})


def test_server_errors_are_retried(mirror, data_root):
    mirror.fail("suitesparse/MM/HB/west0067.tar.gz", status=503, times=2)
    raw = fetch("HB/west0067", data_root)
    assert [g.status for g in mirror.gets("west0067")] == [503, 503, 200]
    assert load_matrix(raw).csr.shape == (67, 67)


def test_corrupt_tarball(mirror, data_root):
    mirror.serve("suitesparse/MM/HB/west0067.tar.gz", b"<html>not a tarball</html>" * 40)
    with pytest.raises(FetchError) as err:
        fetch("HB/west0067", data_root)
    msg = one_line(err.value)
    assert msg.startswith(f"archive {mirror.suitesparse_url}/MM/HB/west0067.tar.gz is corrupt or truncated")
    assert_clean(data_root, allowed_urls={f"{mirror.suitesparse_url}/files/ssstats.csv"})


def test_truncated_tarball(mirror, data_root):
    path = "suitesparse/MM/HB/bcsstk13.tar.gz"
    mirror.serve(path, mirror.read(path)[:150_000])
    with pytest.raises(FetchError) as err:
        fetch("HB/bcsstk13", data_root)
    assert "bcsstk13.tar.gz is corrupt or truncated" in one_line(err.value)
    assert_clean(data_root, allowed_urls={f"{mirror.suitesparse_url}/files/ssstats.csv"})


def test_stalled_server_fails_within_the_timeout(mirror, data_root):
    mirror.fail("suitesparse/MM/HB/bcsstk13.tar.gz", "stall", after_bytes=1000)
    start = time.monotonic()
    with pytest.raises(FetchError) as err:
        fetch("HB/bcsstk13", data_root, sources=_sources(timeout_s=1, retries=0))
    assert time.monotonic() - start < 5
    msg = one_line(err.value)
    assert msg.startswith(f"{mirror.suitesparse_url}/MM/HB/bcsstk13.tar.gz: no data for 1 s (server stalled)")
    assert_clean(data_root, allowed_urls={f"{mirror.suitesparse_url}/files/ssstats.csv"})


def test_full_disk_is_one_line_and_leaves_nothing(mirror, data_root, monkeypatch):
    fetch("HB/west0067", data_root)  # index and a first file cached normally
    real_write = os.write

    def full(fd, payload):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(data_root)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, payload)

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(FetchError) as err:
        fetch("HB/bcsstk13", data_root)
    monkeypatch.undo()
    msg = one_line(err.value)
    assert msg == f"{mirror.suitesparse_url}/MM/HB/bcsstk13.tar.gz: no space left on device while writing to " \
                  f"{data_root / 'cache'}"
    assert f"{mirror.suitesparse_url}/MM/HB/bcsstk13.tar.gz" not in cached_urls(data_root)
    assert_clean(data_root)
