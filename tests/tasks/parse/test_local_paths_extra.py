"""Local files whose content another name already brought into the data root."""
import gzip

from tasks.fetch import fetch
from tasks.parse import load_matrix


def test_same_gz_content_under_two_names_parses_both(tmp_path, data_root):
    payload = gzip.compress(b"%%MatrixMarket matrix coordinate real general\n2 3 2\n1 2 3.5\n2 3 -1\n")
    first, second = tmp_path / "first.mtx.gz", tmp_path / "second+copy.mtx.gz"
    first.write_bytes(payload)
    second.write_bytes(payload)
    a = load_matrix(fetch(str(first), data_root), data_root=data_root).csr
    raw = fetch(str(second), data_root)
    b = load_matrix(raw, data_root=data_root).csr
    assert (a != b).nnz == 0 and b.shape == (2, 3)
    assert "+" not in raw.matrix_id  # ids use only what the store accepts
