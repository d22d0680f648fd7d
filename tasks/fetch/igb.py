"""Illinois Graph Benchmark (IGB) homogeneous archives: download and md5 check.

``{igb_url}/igb-homogeneous/igb_homogeneous_{size}.tar.gz`` extracts to ``{size}/processed/...``:
``paper__cites__paper/edge_index.npy`` (int64 [E, 2]: column 0 source, column 1 destination) and
``paper/node_feat.npy`` (float32 [N, F]). The archive's md5 must match ``configs/igb.yaml`` (or the
``TCSPMM_IGB_MD5_<SIZE>`` override) before it enters the cache. Parsing lives in ``tasks.parse.igb``.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from configs import IgbConfig, SourcesConfig
from configs.errors import FetchError
from tasks.fetch.http import download
from tasks.fetch.spec import RawMatrix, Spec

EDGE_INDEX = "processed/paper__cites__paper/edge_index.npy"
NODE_FEAT = "processed/paper/node_feat.npy"


def archive_url(sources: SourcesConfig, size: str) -> str:
    return f"{sources.igb_url}/igb-homogeneous/igb_homogeneous_{size}.tar.gz"


def fetch_igb(spec: Spec, data_root: Path, sources: SourcesConfig, igb: IgbConfig) -> RawMatrix:
    """Download the ``spec.size`` archive into the cache, refusing it unless its md5 matches the table."""
    size = spec.size
    url = archive_url(sources, size)
    expected = igb.md5.get(size)
    if expected is None:
        raise FetchError(f"igb:{size}: no md5 for this size in configs/igb.yaml; set TCSPMM_IGB_MD5_{size.upper()}")

    def check(_path: Path, digests: Mapping[str, str]) -> None:
        if digests["md5"] != expected:
            raise FetchError(f"{url}: md5 {digests['md5']} does not match the expected {expected} "
                             f"(set TCSPMM_IGB_MD5_{size.upper()} if this mirror serves a different archive)")

    entry = download(url, data_root, http_config=sources.http, verify=check, label=f"igb:{size}")
    check(entry.path, {"md5": entry.md5})  # a cached copy must match the table in force now, too
    return RawMatrix(
        matrix_id=f"igb.{size}",
        spec=spec.text,
        kind="igb",
        path=entry.path,
        source_url=url,
        sha256=entry.sha256,
        expected_shape=None,
        expected_nnz=None,
        params={"size": size, "md5": entry.md5, "edge_index": f"{size}/{EDGE_INDEX}",
                "node_feat": f"{size}/{NODE_FEAT}", "orientation": "A[dst, src]"},
    )
