"""The README's downstream contract ("Reading the files without tcspmm"): the recipe there, with pyarrow, NumPy and
SciPy only, gives what the store's own readers give, for IGB's CSR (orientation in the metadata), its node arrays,
and ME-TCF blocks in float32 and bfloat16; and a matrix that was never stored says "not found"."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from configs.errors import StorageError
from storage import BlockStore, load_csr, load_edge_index, load_node_array
from tasks import stages


def _manifest_files(folder: Path, artifact: str) -> list[Path]:
    manifest = json.loads((folder / "manifest.json").read_text())
    return [folder / f["path"] for f in manifest["artifacts"][artifact]["files"]]


def _csr_without_tcspmm(folder: Path):
    t = pq.read_table(_manifest_files(folder, "csr"))
    meta = json.loads(t.schema.metadata[b"tcspmm"])
    A = sp.csr_array((t["value"].to_numpy(), (t["row"].to_numpy(), t["col"].to_numpy())), shape=meta["shape"])
    return A, meta


def _metcf_without_tcspmm(folder: Path, artifact: str, perm: np.ndarray) -> sp.csr_array:
    """Decode ME-TCF blocks to the ORIGINAL matrix: (window W, local id p) -> A[perm][16W + p // w, a2b[p % w]]."""
    t = pq.read_table(_manifest_files(folder, artifact))
    meta = json.loads(t.schema.metadata[b"tcspmm"])
    w = meta["widths"]["sparse_a_to_b"]
    window = t["window"].to_numpy()
    a2b = np.stack(t["sparse_a_to_b"].to_numpy(zero_copy_only=False))
    local = t["tc_local_id"].to_pylist()
    data = t["data"].to_pylist()
    rows, cols, vals = [], [], []
    for W, slots, ids, values in zip(window, a2b, local, data):
        ids = np.asarray(ids, dtype=np.int64)
        rows.append(16 * W + ids // w)
        cols.append(slots[ids % w])
        vals.append(np.asarray(values))
    v = np.concatenate(vals)
    if meta["value_types"]["data"] == "bfloat16":  # uint16 bit patterns
        v = (v.astype(np.uint32) << 16).view(np.float32)
    new_rows = np.concatenate(rows)
    assert (np.concatenate(cols) >= 0).all()  # padding slots hold no nonzero
    return sp.csr_array((v, (perm[new_rows], np.concatenate(cols))), shape=meta["shape"])


def test_igb_csr_and_node_arrays_read_without_tcspmm(data_root):
    out = stages.ingest("igb:tiny", str(data_root))
    mid = out["matrix_id"]
    folder = data_root / "matrices" / mid
    A, meta = _csr_without_tcspmm(folder)
    assert meta["format"] == "csr" and meta["source"]["orientation"] == "A[dst, src]"
    B = load_csr(mid, data_root)
    assert A.shape == B.shape and (A != B).nnz == 0 and A.dtype == B.dtype == np.float32
    edge_index = load_edge_index(mid, data_root)  # row 0 source = column, row 1 destination = row
    coo = A.tocoo()
    assert sorted(zip(coo.col.tolist(), coo.row.tolist())) == sorted(zip(*edge_index.tolist()))
    t = pq.read_table(_manifest_files(folder, "nodes/feat"))  # the README's recipe: row-major values, n_cols a row
    feat = t.column("values").to_numpy().reshape(-1, json.loads(t.schema.metadata[b"tcspmm"])["n_cols"])
    np.testing.assert_array_equal(feat, load_node_array(mid, "feat", data_root))
    assert feat.shape[0] == A.shape[0]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_metcf_blocks_decode_with_the_readme_maps(data_root, dtype):
    mid = stages.ingest("gen:sbm?n=700&blocks=7&p_in=0.05&p_out=0.002&seed=3", str(data_root))["matrix_id"]
    perm_key = stages.reorder(mid, "degree", str(data_root), dtype=dtype)["perm_key"]
    stages.convert(mid, perm_key, str(data_root), dtype=dtype)
    folder = data_root / "matrices" / mid
    manifest = json.loads((folder / "manifest.json").read_text())
    (artifact,) = [a for a in manifest["artifacts"] if a.startswith("formats/metcf/")]
    perm = pq.read_table(_manifest_files(folder, f"perm/{perm_key}"))["perm"].to_numpy()
    A = load_csr(mid, data_root)
    decoded = _metcf_without_tcspmm(folder, artifact, perm)
    ref = A.astype(np.float32)
    if dtype == "bfloat16":
        from kernels.precision import precision

        ref = sp.csr_array((precision("bfloat16").to_float32(precision("bfloat16").to_storage(ref.data)),
                            ref.indices, ref.indptr), shape=ref.shape)
    assert decoded.nnz == A.nnz and abs(decoded - ref).max() == 0


def test_missing_matrix_says_not_found(data_root):
    stages.ingest("gen:banded?n=50&bandwidth=2&seed=1", str(data_root))
    for read in (lambda: load_csr("igb.tny", data_root), lambda: load_edge_index("igb.tny", data_root),
                 lambda: load_node_array("igb.tny", "feat", data_root),
                 lambda: BlockStore(data_root).matrix("igb.tny").csr_meta()):
        with pytest.raises(StorageError) as err:
            read()
        msg = str(err.value)
        assert "matrix 'igb.tny' not found" in msg and "not complete" not in msg
        assert "stored: gen.banded." in msg
    with pytest.raises(StorageError, match="no matrix is stored there"):
        load_csr("x", data_root / "elsewhere")


def test_missing_artifact_of_a_stored_matrix_is_not_complete(data_root):
    mid = stages.ingest("gen:banded?n=50&bandwidth=2&seed=1", str(data_root))["matrix_id"]
    with pytest.raises(StorageError, match="not complete"):
        BlockStore(data_root).matrix(mid).perm_meta("degree-000000000000")
