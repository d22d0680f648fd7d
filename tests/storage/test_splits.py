"""A composite's stored split (storage.splits): one uint8 label per row window, its meta kept whole, beside the
registered formats' artifacts; written atomically like every artifact, and refused in one line when it is not one."""
import numpy as np
import pytest

from configs.errors import InputError, StorageError
from storage.splits import has_split, read_split, write_split


@pytest.mark.parametrize("n_windows", [0, 1, 7, 5000])
def test_split_round_trip(store, n_windows):
    m = store.matrix("s")
    labels = (np.random.default_rng(n_windows).random(n_windows) < 0.3).astype(np.uint8)
    assert not has_split(m, "hybrid", "none-abc-float32")
    write_split(m, "hybrid", "none-abc-float32", labels, {"tc_format": "metcf", "N": 128, "summary": {"a": [1, 2]}})
    assert has_split(m, "hybrid", "none-abc-float32")
    got, meta = read_split(m, "hybrid", "none-abc-float32")
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, labels)
    assert meta["tc_format"] == "metcf" and meta["N"] == 128 and meta["summary"] == {"a": [1, 2]}
    assert meta["n_windows"] == n_windows and meta["split"] == "hybrid"
    assert m.intact("formats/hybrid/none-abc-float32") and m.format_meta("hybrid", "none-abc-float32")["source"]


def test_split_rewrite_replaces_it(store):
    m = store.matrix("s")
    write_split(m, "hybrid", "k", np.ones(10, dtype=np.uint8), {"v": 1})
    write_split(m, "hybrid", "k", np.zeros(3, dtype=np.uint8), {"v": 2})
    got, meta = read_split(m, "hybrid", "k")
    assert got.tolist() == [0, 0, 0] and meta["v"] == 2
    assert len(list((m.folder / "formats" / "hybrid" / "k").iterdir())) == 1


def test_bad_labels_and_missing_splits_are_refused(store):
    m = store.matrix("s")
    with pytest.raises(InputError, match=r"expected uint8 \[n_windows\] labels, got shape \(4,\) dtype int64"):
        write_split(m, "hybrid", "k", np.zeros(4, dtype=np.int64))
    with pytest.raises(InputError, match=r"got shape \(2, 2\) dtype uint8"):
        write_split(m, "hybrid", "k", np.zeros((2, 2), dtype=np.uint8))
    with pytest.raises(InputError):
        write_split(m, "../x", "k", np.zeros(4, dtype=np.uint8))
    with pytest.raises(StorageError):
        read_split(m, "hybrid", "k")
    m.write_perm("p", np.arange(3))
    assert not has_split(m, "hybrid", "k")
