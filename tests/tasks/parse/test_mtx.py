"""MatrixMarket parsing: every field/symmetry, and one test per malformed case with its one-line message."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from configs.errors import InputError
from tasks.fetch import fetch
from tasks.parse import load_matrix
from tests.tasks.fetch.helpers import assert_clean, one_line

BANNER = "%%MatrixMarket matrix coordinate real general\n"


def _load(tmp_path, data_root, text, name="m.mtx", **kw):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return load_matrix(fetch(str(path), data_root), **kw)


def _fails(tmp_path, data_root, text, name="bad.mtx"):
    with pytest.raises(InputError) as err:
        _load(tmp_path, data_root, text, name=name)
    assert_clean(data_root)
    return one_line(err.value)


def test_general_with_duplicates_and_explicit_zero(tmp_path, data_root):
    # [[1+2, 0],      duplicate (1,1) summed; the stored 0.0 at (2,1) stays an explicit entry
    #  [0.0, 0],
    #  [0,   5]]
    text = BANNER + "% comment\n3 2 4\n1 1 1.0\n1 1 2.0\n2 1 0.0\n3 2 5\n"
    parsed = _load(tmp_path, data_root, text)
    A = parsed.csr
    assert A.shape == (3, 2) and A.nnz == 3 and parsed.meta["nonzero_entries"] == 2
    assert A.toarray().tolist() == [[3, 0], [0, 0], [0, 5]]
    assert A.data.dtype == np.float64 and A.has_canonical_format
    dropped = _load(tmp_path, data_root, text, drop_zeros=True)
    assert dropped.csr.nnz == 2 and dropped.meta["nnz"] == 2


def test_symmetric_skew_and_hermitian_expand(tmp_path, data_root):
    sym = _load(tmp_path, data_root, "%%MatrixMarket matrix coordinate integer symmetric\n3 3 3\n1 1 4\n2 1 7\n3 2 1\n")
    assert sym.csr.toarray().tolist() == [[4, 7, 0], [7, 0, 1], [0, 1, 0]]
    skew = _load(tmp_path, data_root, "%%MatrixMarket matrix coordinate real skew-symmetric\n2 2 1\n2 1 3.5\n")
    assert skew.csr.toarray().tolist() == [[0, -3.5], [3.5, 0]]
    herm_text = "%%MatrixMarket matrix coordinate complex hermitian\n2 2 2\n1 1 2 0\n2 1 1 3\n"
    herm = _load(tmp_path, data_root, herm_text, complex_mode="real")
    assert herm.csr.toarray().tolist() == [[2, 1], [1, 0]]
    herm_abs = _load(tmp_path, data_root, herm_text, complex_mode="abs")
    assert np.allclose(herm_abs.csr.toarray(), [[2, np.sqrt(10)], [np.sqrt(10), 0]])
    pattern = _load(tmp_path, data_root, "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 2\n2 1\n3 3\n")
    assert pattern.csr.data.dtype == np.float32 and pattern.csr.nnz == 3


def test_array_format_keeps_nonzeros(tmp_path, data_root):
    parsed = _load(tmp_path, data_root, "%%MatrixMarket matrix array real general\n2 3\n1\n0\n0\n4\n5\n0\n")
    assert parsed.csr.toarray().tolist() == [[1, 0, 5], [0, 4, 0]]  # column-major in the file
    assert parsed.meta["format"] == "array"


def test_complex_refused_without_mode(tmp_path, data_root):
    msg = _fails(tmp_path, data_root, "%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 1\n", "z.mtx")
    assert msg == "z.mtx is complex; pass complex_mode='real'|'abs' to convert"


def test_pattern_entries_with_values_are_refused_naming_the_line(tmp_path, data_root):
    head = "%%MatrixMarket matrix coordinate pattern symmetric\n% c\n3 3 3\n1 1\n2 1\n"
    msg = _fails(tmp_path, data_root, head + "3 2 -4.5\n", "p.mtx")  # the values would be dropped silently
    assert msg == ("p.mtx line 6: the header says 'pattern' (row and column only) but the entry carries a value "
                   "('3 2 -4.5'); declare its field 'real' or 'integer' to keep the values, or remove them")
    ok = _load(tmp_path, data_root, head + "3 2\n", "q.mtx")
    assert ok.csr.nnz == 5 and ok.csr.dtype == np.float32


def test_bad_banner(tmp_path, data_root):
    msg = _fails(tmp_path, data_root, "%%MatrixMarkt matrix coordinate real general\n1 1 1\n1 1 1\n")
    assert msg.startswith("bad.mtx line 1: bad MatrixMarket banner '%%MatrixMarkt matrix coordinate real general'")


BAD = [  # (what is wrong, file text, file name, the one-line error)
    ("column index out of range", BANNER + "% c1\n% c2\n% c3\n% c4\n% c5\n% c6\n% c7\n% c8\n1086 1086 3\n1 1 1\n"
     "2 2 2\n5 1200 3\n", "bcsstk17.mtx", "bcsstk17.mtx line 13: column index 1200 exceeds the declared 1086 columns"),
    ("row index zero", BANNER + "3 3 2\n1 1 1\n0 2 2\n", "bad.mtx",
     "bad.mtx line 4: row index 0 is below 1 (indices are 1-based)"),
    ("fewer entries than declared", BANNER + "3 3 3\n1 1 1\n2 2 2\n", "bad.mtx",
     "bad.mtx: 2 entries, the header declares 3 (file truncated?)"),
    ("more entries than declared", BANNER + "3 3 2\n1 1 1\n2 2 2\n3 3 3\n", "bad.mtx",
     "bad.mtx line 5: more entries than the 2 the header declares"),
    ("truncated file", BANNER + "3 3 3\n1 1 1\n2 2 2\n3 ", "bad.mtx",
     "bad.mtx line 5: file ends in the middle of an entry ('3 '; truncated?)"),
    ("malformed number", BANNER + "3 3 2\n1 1 1\n2 x 2\n", "bad.mtx",
     "bad.mtx line 4: invalid integer value in '2 x 2'"),
    ("symmetric file with both triangles",
     "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n2 1 1\n1 2 1\n3 3 1\n", "bad.mtx",
     "bad.mtx: symmetric file stores both triangles (entry 2 at row 1, column 2); a symmetric file stores one"),
]


@pytest.mark.parametrize("text, name, expected", [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_a_bad_file_fails_in_one_line_naming_it_and_leaves_nothing(tmp_path, data_root, text, name, expected):
    assert _fails(tmp_path, data_root, text, name) == expected


def test_header_dimensions_past_int32_give_int64(tmp_path, data_root):
    text = BANNER + "3 3000000000 2\n1 2999999999 1.5\n3 7 2\n"
    A = _load(tmp_path, data_root, text).csr
    assert A.shape == (3, 3_000_000_000) and A.indices.dtype == A.indptr.dtype == np.int64
    assert A.indices.tolist() == [2_999_999_998, 6]


def test_matches_scipy_on_a_random_file(tmp_path, data_root):
    import scipy.io
    ref = sp.random(57, 31, density=0.2, random_state=np.random.default_rng(0), format="coo")
    path = tmp_path / "r.mtx"
    scipy.io.mmwrite(path, ref)
    A = load_matrix(fetch(str(path), data_root)).csr
    assert abs(A - sp.csr_array(scipy.io.mmread(path))).max() == 0
