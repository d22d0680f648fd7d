"""Issue 30: two runs of one matrix build each stored artifact once (the second waits for the first's lock and
reuses what it wrote), and an artifact whose bytes changed after it was written is rebuilt from its source."""
import threading

import numpy as np
import pytest

from storage import BlockStore
from storage.store import MatrixStore
from tasks import stages

GEN = "gen:banded?n=2000&bandwidth=3&seed=3"


def test_second_run_waits_for_the_first_and_reuses_its_permutation(data_root, monkeypatch):
    """The 'first run' (this thread) holds the permutation's build lock; the 'second run' (a thread) finds no
    permutation, waits on the lock, and must then reuse the one the first wrote instead of computing its own."""
    matrix_id = stages.ingest(GEN, str(data_root))["matrix_id"]
    key = stages.reorder(matrix_id, "degree", str(data_root))["perm_key"]  # the key; removed below
    mstore = BlockStore(data_root).matrix(matrix_id)
    perm = mstore.read_perm(key)
    meta = mstore.perm_meta(key)
    with mstore.manifest.update() as m:
        del m["artifacts"][f"perm/{key}"]
    checked = threading.Event()
    intact = MatrixStore.intact

    def intact_then_signal(self, artifact):
        found = intact(self, artifact)
        checked.set()
        return found

    monkeypatch.setattr(MatrixStore, "intact", intact_then_signal)
    second = {}
    with mstore.building(f"perm/{key}"):
        thread = threading.Thread(target=lambda: second.update(stages.reorder(matrix_id, "degree", str(data_root))))
        thread.start()
        assert checked.wait(60), "the second run never looked for the permutation"
        mstore.write_perm(key, perm, {"method": meta["method"], "params": meta["params"],
                                      "report": meta.get("source", {}).get("report", {})})
    thread.join(60)
    assert second["reused"] is True and second["perm_key"] == key


@pytest.mark.parametrize("artifact", ["csr", "perm", "format"])
def test_a_damaged_block_is_rebuilt_from_its_source(data_root, artifact, caplog):
    matrix_id = stages.ingest(GEN, str(data_root))["matrix_id"]
    key = stages.reorder(matrix_id, "rcm", str(data_root))["perm_key"]
    stages.convert(matrix_id, key, str(data_root), fmt="metcf")  # the block damaged below, whatever auto ranks
    mstore = BlockStore(data_root).matrix(matrix_id)
    name = {"csr": "csr", "perm": f"perm/{key}", "format": f"formats/metcf/{key}-float32"}[artifact]
    path = mstore.folder / mstore.manifest.entry(name)["files"][0]["path"]
    data = bytearray(path.read_bytes())
    data[8] ^= 0xFF  # a data page byte: same size, same footer, so only the sha256 tells
    path.write_bytes(bytes(data))
    assert mstore.verify(name) and mstore.manifest.complete(name) is not None
    ingested = stages.ingest(GEN, str(data_root))
    ordered = stages.reorder(matrix_id, "rcm", str(data_root))
    converted = stages.convert(matrix_id, key, str(data_root), fmt="metcf")
    rebuilt = {"csr": ingested, "perm": ordered, "format": converted}[artifact]
    assert rebuilt["reused"] is False and not mstore.verify(name)
    assert f"{name}: {path}: sha256 does not match the manifest" in caplog.text and "rebuilding it" in caplog.text
    A = mstore.read_csr()
    assert A.nnz == ingested["nnz"] and np.array_equal(np.sort(mstore.read_perm(key)), np.arange(A.shape[0]))
