"""NaN and Inf values (issue 17 item 3): refused at parse time with their count and first position, unless allowed."""
from __future__ import annotations

import numpy as np
import pytest

from configs.errors import InputError
from tasks.fetch import fetch
from tasks.parse import load_matrix
from tests.tasks.fetch.helpers import assert_clean, one_line

# [[1,   nan, 0],
#  [0,   2,   inf],
#  [-inf, 0,  3]]      3 of 6 entries are not finite; the first (in file order) is on line 5
COORD = ("%%MatrixMarket matrix coordinate real general\n% a comment\n3 3 6\n1 1 1\n1 2 nan\n2 2 2\n2 3 inf\n"
         "3 1 -inf\n3 3 3\n")


def _load(tmp_path, data_root, text, name="m.mtx", **kw):
    (tmp_path / name).write_text(text)
    return load_matrix(fetch(str(tmp_path / name), data_root), **kw)


def test_nonfinite_refused_with_count_and_first_position(tmp_path, data_root):
    with pytest.raises(InputError) as err:
        _load(tmp_path, data_root, COORD, "nan.mtx")
    assert one_line(err.value) == ("nan.mtx: 3 values are not finite (NaN or Inf), the first at line 5, row 1, "
                                   "column 2 (nan); pass --allow-nonfinite to keep them")
    assert_clean(data_root)


def test_nonfinite_in_a_dense_array_file(tmp_path, data_root):
    text = "%%MatrixMarket matrix array real general\n2 2\n1\ninf\n0\n4\n"  # column-major: (2, 1) is inf
    with pytest.raises(InputError) as err:
        _load(tmp_path, data_root, text, "dense.mtx")
    assert one_line(err.value) == ("dense.mtx: 1 value is not finite (NaN or Inf), the first at row 2, column 1 "
                                   "(inf); pass --allow-nonfinite to keep them")


def test_nonfinite_kept_when_allowed(tmp_path, data_root):
    parsed = _load(tmp_path, data_root, COORD, "nan.mtx", allow_nonfinite=True)
    assert parsed.meta["nonfinite_entries"] == 3 and parsed.csr.nnz == 6
    assert np.isnan(parsed.csr[0, 1]) and np.isposinf(parsed.csr[1, 2]) and np.isneginf(parsed.csr[2, 0])
    finite = _load(tmp_path, data_root, COORD.replace("nan", "5").replace("-inf", "6").replace("inf", "7"))
    assert finite.meta["nonfinite_entries"] == 0
