"""Hostile inputs (issue 17): sizes from outside checked before allocation, extraction budgets, refused members.

Every case with a huge declared size runs in a subprocess under RLIMIT_AS (``hostile.run_limited``), so a
regression raises MemoryError there instead of taking the machine down.
"""
from __future__ import annotations

import hashlib
import io
import json
import tarfile

import numpy as np
import pytest

from configs.errors import FetchError, InputError
from tasks.fetch import fetch
from tasks.parse import load_matrix
from tests.tasks.fetch.helpers import assert_clean, one_line
from tests.tasks.fetch.hostile import MTX_ONE, run_limited, serve_matrix, tarball

HUGE = 3_000_000_000
HUGE_MTX = f"%%MatrixMarket matrix coordinate real general\n{HUGE} {HUGE} 2\n1 1 1.0\n{HUGE} {HUGE} 2.0\n".encode()
IGB_ARCHIVE = "igb/igb-homogeneous/igb_homogeneous_tiny.tar.gz"

LOAD_EACH = """
import json
from configs.errors import InputError
from tasks.fetch import fetch
from tasks.parse import load_matrix
out = {}
for spec in json.loads(SPECS):
    try:
        load_matrix(fetch(spec, ROOT))
        out[spec] = "loaded"
    except InputError as err:
        out[spec] = "refused: " + str(err)
    except MemoryError:
        out[spec] = "MemoryError"
print("RESULT " + json.dumps(out))
"""


def _igb_with_huge_node_feat() -> bytes:
    edges = io.BytesIO()
    np.save(edges, np.array([[0, 1], [1, 0]], dtype=np.int64))
    feat = io.BytesIO()  # a header declaring 3e9 nodes, and no data
    np.lib.format.write_array_header_1_0(feat, {"descr": "<f4", "fortran_order": False, "shape": (HUGE, 1)})
    return tarball({"tiny/processed/paper__cites__paper/edge_index.npy": edges.getvalue(),
                    "tiny/processed/paper/node_feat.npy": feat.getvalue()})


def test_sizes_from_outside_are_refused_before_allocation(mirror, data_root, tmp_path):
    """3e9 rows and columns with 2 entries, declared by a MatrixMarket header (local file, and a SuiteSparse
    archive whose index row is small), by the SuiteSparse index, by IGB metadata and by generator parameters."""
    (tmp_path / "huge.mtx").write_bytes(HUGE_MTX)
    serve_matrix(mirror, "Hostile", "indexed", tarball({"indexed/indexed.mtx": HUGE_MTX}), HUGE, HUGE, 2)
    mirror.serve("suitesparse/MM/Hostile/header.tar.gz", tarball({"header/header.mtx": HUGE_MTX}))
    lines = mirror.faults["suitesparse/files/ssstats.csv"].body.decode().splitlines()
    lines[0] = str(int(lines[0]) + 1)
    lines.append("Hostile,header,2,2,2,1,0,0,0,0,0,hostile test,2")  # the index is small; the header is not
    mirror.serve("suitesparse/files/ssstats.csv", ("\n".join(lines) + "\n").encode())
    igb = _igb_with_huge_node_feat()
    mirror.serve(IGB_ARCHIVE, igb)
    specs = [str(tmp_path / "huge.mtx"), "Hostile/indexed", "Hostile/header", "igb:tiny",
             f"gen:uniform?rows={HUGE}&cols={HUGE}&nnz=2", "gen:rmat?scale=36"]
    env = {**mirror.env(), "TCSPMM_IGB_MD5_TINY": hashlib.md5(igb).hexdigest(), "TCSPMM_DATA": str(data_root)}
    code = f"SPECS = {json.dumps(specs)!r}\nROOT = {str(data_root)!r}\n" + LOAD_EACH
    proc = run_limited(code, env, memory_bytes=3 << 30)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    size = f"a {HUGE:,} x {HUGE:,} matrix with 2 entries (as CSR, one offset per row) needs about"
    for spec in specs[:4]:
        assert result[spec].startswith("refused: ") and size in result[spec], (spec, result[spec])
        assert "over the limit of" in result[spec] and "TCSPMM_MEMORY_LIMIT" in result[spec]
    assert result[specs[0]].startswith(f"refused: huge.mtx: {size}")
    assert result["Hostile/indexed"].startswith(f"refused: Hostile/indexed: {size}")
    assert result["Hostile/header"].startswith(f"refused: Hostile/header.mtx: {size}")
    assert result["igb:tiny"].startswith(f"refused: igb:tiny: {size}")
    assert result[specs[4]].startswith(f"refused: gen:uniform: a {HUGE:,} x {HUGE:,} matrix with 4 entries")
    assert result[specs[5]].startswith("refused: gen:rmat: a 68,719,476,736 x 68,719,476,736 matrix")
    assert not mirror.gets("Hostile/indexed.tar.gz"), "refused from the index: nothing to download"
    assert not list(data_root.rglob("*.parquet"))
    assert_clean(data_root)


def test_memory_limit_is_configurable(data_root, tmp_path, monkeypatch):
    (tmp_path / "small.mtx").write_bytes(MTX_ONE)
    monkeypatch.setenv("TCSPMM_MEMORY_LIMIT", "64")
    with pytest.raises(InputError) as err:
        load_matrix(fetch(str(tmp_path / "small.mtx"), data_root))
    assert one_line(err.value) == ("small.mtx: a 2 x 2 matrix with 1 entries (as CSR, one offset per row) needs about "
                                   "88 B of memory, over the limit of 64 B (set by TCSPMM_MEMORY_LIMIT or "
                                   "--memory-limit)")
    with pytest.raises(InputError, match="TCSPMM_MEMORY_LIMIT: 'lots' is not a size"):
        monkeypatch.setenv("TCSPMM_MEMORY_LIMIT", "lots")
        load_matrix(fetch(str(tmp_path / "small.mtx"), data_root))
    monkeypatch.setenv("TCSPMM_MEMORY_LIMIT", "1G")
    assert load_matrix(fetch(str(tmp_path / "small.mtx"), data_root)).csr.nnz == 1


def test_padded_member_is_refused_at_download(mirror, data_root):
    """A valid 1-entry matrix padded with 100 MiB of whitespace, announced by the index as 1 nonzero: the budget
    (8x the announced text, at least 16 MiB) stops it before it enters the cache; nothing is extracted."""
    body = tarball({"padded/padded.mtx": (MTX_ONE, 100 << 20)})
    serve_matrix(mirror, "Hostile", "padded", body, 2, 2, 1)
    with pytest.raises(FetchError) as err:
        fetch("Hostile/padded", data_root)
    msg = one_line(err.value)
    assert msg.startswith(f"archive {mirror.suitesparse_url}/MM/Hostile/padded.tar.gz: it unpacks to more than")
    assert "over its budget of 16.0 MiB (the SuiteSparse index announces 1 entries" in msg
    assert msg.endswith("nothing was kept")
    assert not (data_root / "extracted").exists()
    assert_clean(data_root, allowed_urls={f"{mirror.suitesparse_url}/files/ssstats.csv"})


def test_padded_member_is_refused_at_extraction(data_root, tmp_path, monkeypatch):
    """Archives already on disk (a local .tar.gz or .mtx.gz, or one cached before a budget existed) are bounded
    by the extraction cap when they are unpacked; what was written is removed."""
    import gzip

    (tmp_path / "padded.tar.gz").write_bytes(tarball({"padded/padded.mtx": (MTX_ONE, 3 << 20)}))
    (tmp_path / "padded.mtx.gz").write_bytes(gzip.compress(MTX_ONE + b" " * (3 << 20), compresslevel=1))
    monkeypatch.setenv("TCSPMM_EXTRACT_CAP", "1M")
    for name, said in (("padded.tar.gz", "member padded/padded.mtx brings the unpacked size to 3.0 MiB"),
                       ("padded.mtx.gz", "it unpacks to more than 1.0 MiB")):
        with pytest.raises(FetchError) as err:
            load_matrix(fetch(str(tmp_path / name), data_root))
        assert one_line(err.value) == (f"archive {tmp_path / name}: {said}, over its budget of 1.0 MiB (the "
                                       f"extraction cap, TCSPMM_EXTRACT_CAP or --extract-cap); nothing was kept")
        assert not any((data_root / "extracted").iterdir())
    assert_clean(data_root)
    monkeypatch.setenv("TCSPMM_EXTRACT_CAP", "8M")
    assert load_matrix(fetch(str(tmp_path / "padded.tar.gz"), data_root)).csr.nnz == 1


def test_symlink_member_says_what_was_refused(mirror, data_root):
    serve_matrix(mirror, "Hostile", "linked", tarball({"linked/real.mtx": MTX_ONE},
                                                       symlinks={"linked/linked.mtx": "real.mtx"}), 2, 2, 1)
    with pytest.raises(FetchError) as err:
        fetch("Hostile/linked", data_root)
    assert one_line(err.value) == (f"archive {mirror.suitesparse_url}/MM/Hostile/linked.tar.gz: refusing member "
                                   f"linked/linked.mtx: it is a symbolic link to 'real.mtx', not a regular file")
    assert_clean(data_root, allowed_urls={f"{mirror.suitesparse_url}/files/ssstats.csv"})


def test_tar_helper_builds_what_it_says():
    with tarfile.open(fileobj=io.BytesIO(tarball({"a/a.mtx": (MTX_ONE, 10)})), mode="r:gz") as tar:
        assert tar.extractfile("a/a.mtx").read() == MTX_ONE + b" " * 10
