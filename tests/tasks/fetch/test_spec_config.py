"""Spec strings, local files and the YAML configs."""
from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

from configs import HttpConfig, fixture_roots, load_catalog, load_sources
from configs.errors import FetchError, InputError
from tasks.fetch import fetch
from tasks.fetch.spec import parse_spec
from tasks.parse import load_matrix
from tests.tasks.fetch.helpers import assert_clean, one_line

WEST = "suitesparse/MM/HB/west0067.tar.gz"


@pytest.mark.parametrize("text, kind", [
    ("HB/bcsstk17", "suitesparse"), ("suitesparse:HB/bcsstk17", "suitesparse"), ("igb:small", "igb"),
    ("a/b.mtx", "file"), ("x.mtx.gz", "file"), ("dir/x.tar.gz", "file"), ("gen:rmat?scale=4", "gen")])
def test_spec_kinds(text, kind):
    assert parse_spec(text).kind == kind


@pytest.mark.parametrize("text", ["", "bcsstk17", "HB/bcs/stk17", "HB/bcs stk"])
def test_bad_spec_lists_the_accepted_forms(text):
    with pytest.raises(InputError) as err:
        parse_spec(text)
    assert "accepted forms" in one_line(err.value)


def test_sources_env_overrides(monkeypatch):
    monkeypatch.setenv("TCSPMM_SUITESPARSE_URL", "http://mirror.example/ss/")
    monkeypatch.setenv("TCSPMM_HTTP_TIMEOUT_S", "2.5")
    cfg = load_sources()
    assert cfg.suitesparse_url == "http://mirror.example/ss" and cfg.http.timeout_s == 2.5
    monkeypatch.delenv("TCSPMM_SUITESPARSE_URL")
    monkeypatch.delenv("TCSPMM_HTTP_TIMEOUT_S")
    assert load_sources().suitesparse_url == "https://sparse.tamu.edu"


def test_bad_config_is_one_line(tmp_path):
    bad = tmp_path / "sources.yaml"
    bad.write_text("suitesparse_url: https://x\nhttp:\n  timeout: 3\n")
    with pytest.raises(InputError) as err:
        load_sources(bad, env={})
    assert "unknown key(s) timeout" in one_line(err.value)
    with pytest.raises(InputError, match="timeout_s must be > 0"):
        HttpConfig(timeout_s=0)



def test_fixture_roots_are_the_env_then_the_checkouts_then_the_shared_folder(tmp_path):
    """The one list the tests' mirror and the benchmarks look in (tests/conftest.py, benchmarks/spmm.py,
    benchmarks/reorder.py)."""
    repo = tmp_path / "checkout"
    assert fixture_roots(repo, env={}) == [repo / ".fixtures", tmp_path / "shared" / "fixtures"]
    assert fixture_roots(repo, env={"TCSPMM_FIXTURES": ""}) == fixture_roots(repo, env={})  # empty: unset
    assert fixture_roots(str(repo), env={"TCSPMM_FIXTURES": "/data/fx"}) == [
        Path("/data/fx"), repo / ".fixtures", tmp_path / "shared" / "fixtures"]


def test_catalog_specs_all_parse():
    specs = load_catalog()
    assert "igb:tiny" in specs and any(s.startswith("gen:") for s in specs)
    assert {parse_spec(s).kind for s in specs} == {"suitesparse", "igb", "gen"}


def _tar_member(mirror) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(mirror.read(WEST)), mode="r:gz") as tar:
        return tar.extractfile("west0067/west0067.mtx").read()


def test_local_mtx_gz_and_tar_gz_agree(mirror, data_root, tmp_path):
    text = _tar_member(mirror)
    (tmp_path / "west.mtx").write_bytes(text)
    (tmp_path / "west.mtx.gz").write_bytes(gzip.compress(text))
    (tmp_path / "west0067.tar.gz").write_bytes(mirror.read(WEST))
    mats = [load_matrix(fetch(str(tmp_path / n), data_root)) for n in ("west.mtx", "west.mtx.gz", "west0067.tar.gz")]
    for parsed in mats[1:]:
        assert abs(parsed.csr - mats[0].csr).max() == 0
    raw = fetch(str(tmp_path / "west.mtx"), data_root)
    assert raw.kind == "file" and raw.matrix_id == f"file.west.{raw.sha256[:12]}"
    assert mirror.requests == []
    assert_clean(data_root)


def test_local_missing_file(tmp_path, data_root):
    with pytest.raises(InputError, match="no such file"):
        fetch(str(tmp_path / "nope.mtx"), data_root)


def test_local_corrupt_tar_gz(tmp_path, data_root, mirror):
    bad = tmp_path / "broken.tar.gz"
    bad.write_bytes(mirror.read(WEST)[:900])
    with pytest.raises(FetchError) as err:
        load_matrix(fetch(str(bad), data_root))
    assert one_line(err.value).startswith(f"archive {bad} is corrupt or truncated")
    assert_clean(data_root)
    assert not (data_root / "extracted").exists() or not any((data_root / "extracted").iterdir())


@pytest.mark.parametrize("member,why", [
    ("../evil.mtx", "its path climbs out of its folder with '..'"),
    ("evil/../../evil.mtx", "its path climbs out of its folder with '..'"),
    ("evil/../evil.mtx", "its path climbs out of its folder with '..'"),  # inside, yet refused: README says so
    ("/tmp/evil.mtx", "its path is absolute"),  # tarfile's data filter would strip the / without a word
])
def test_unsafe_tar_member_is_refused(tmp_path, data_root, member, why):
    payload = b"%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 1.0\n"
    bad = tmp_path / "evil.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        info = tarfile.TarInfo(member)
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    with pytest.raises(FetchError) as err:
        load_matrix(fetch(str(bad), data_root))
    assert one_line(err.value) == f"archive {bad}: refusing member {member}: {why}; nothing was kept"
    assert not (tmp_path / "evil.mtx").exists() and not Path(data_root.parent / "evil.mtx").exists()
    assert_clean(data_root)
