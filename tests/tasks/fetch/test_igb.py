"""IGB homogeneous archive: md5 table, A[dst, src] orientation, node count from node_feat.npy, features."""
from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest

from configs import load_igb
from configs.errors import FetchError, InputError
from tasks.fetch import fetch
from tasks.parse import load_features, load_matrix
from tests.tasks.fetch.helpers import assert_clean, one_line

ARCHIVE = "igb/igb-homogeneous/igb_homogeneous_tiny.tar.gz"


def _member(mirror, name):
    with tarfile.open(fileobj=io.BytesIO(mirror.read(ARCHIVE)), mode="r:gz") as tar:
        return np.load(io.BytesIO(tar.extractfile(name).read()))


def test_igb_tiny_is_a_dst_by_src_adjacency(mirror, data_root):
    raw = fetch("igb:tiny", data_root)
    assert raw.matrix_id == "igb.tiny" and raw.params["md5"] == mirror.igb_md5["tiny"]
    parsed = load_matrix(raw)
    A = parsed.csr
    edges = _member(mirror, "tiny/processed/paper__cites__paper/edge_index.npy")
    assert A.shape == (19_717, 19_717) and A.nnz == 88_648 == edges.shape[0]
    assert A.data.dtype == np.float32 and np.all(A.data == 1)
    src, dst = edges[:5, 0], edges[:5, 1]
    assert np.all(A[dst, src] == 1)
    assert parsed.meta["orientation"] == "A[dst, src]" and parsed.meta["edges"] == 88_648
    assert (data_root / "extracted" / raw.sha256 / "tiny" / "processed").is_dir()
    feats = load_features(raw)
    assert feats.shape == (19_717, 32) and feats.dtype == np.float32
    mirror.requests.clear()
    assert load_matrix(fetch("igb:tiny", data_root)).csr.nnz == A.nnz
    assert mirror.requests == []


def test_md5_table_and_override(monkeypatch):
    monkeypatch.delenv("TCSPMM_IGB_MD5_TINY", raising=False)
    table = load_igb().md5
    assert table["tiny"] == "34856534da55419b316d620e2d5b21be"
    assert table["small"] == "6781c699723529902ace0a95cafe6fe4"
    assert table["medium"] == "4640df4ceee46851fd18c0a44ddcc622"
    monkeypatch.setenv("TCSPMM_IGB_MD5_TINY", "0" * 32)
    assert load_igb().md5["tiny"] == "0" * 32
    monkeypatch.setenv("TCSPMM_IGB_MD5_TINY", "not-an-md5")
    with pytest.raises(InputError, match="is not 32 lowercase hex digits"):
        load_igb()


def test_checksum_mismatch_rejects_the_archive(mirror, data_root, monkeypatch):
    monkeypatch.delenv("TCSPMM_IGB_MD5_TINY")  # the published md5 of the real archive, not of the fixture
    with pytest.raises(FetchError) as err:
        fetch("igb:tiny", data_root)
    msg = one_line(err.value)
    assert msg.startswith(f"{mirror.igb_url}/igb-homogeneous/igb_homogeneous_tiny.tar.gz: md5 "
                          f"{mirror.igb_md5['tiny']} does not match the expected 34856534da55419b316d620e2d5b21be")
    assert_clean(data_root, allowed_urls=set())


def test_unknown_igb_size(data_root):
    with pytest.raises(InputError, match="unknown IGB size 'huge'; valid sizes: tiny, small, medium"):
        fetch("igb:huge", data_root)
