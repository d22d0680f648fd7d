"""storage.indexing's helpers on their own: the index dtype choice and the segment of each item of a pointer array."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from storage.indexing import INT32_MAX, index_dtype, segment_ids


def test_segment_ids_is_the_row_of_each_stored_entry_with_empty_rows():
    A = sp.random(9, 7, density=0.3, random_state=3, format="csr")
    A = sp.csr_array(sp.vstack([A[:3], sp.csr_array((2, 7)), A[3:]]))  # empty rows 3 and 4 in the middle
    rows = segment_ids(A.indptr)
    assert rows.dtype == np.int64 and rows.shape == (A.nnz,)
    assert np.array_equal(rows, A.tocoo().row)
    assert segment_ids(np.asarray(A.indptr, dtype=np.int32), np.int32).dtype == np.int32
    assert segment_ids(np.zeros(1, dtype=np.int64)).shape == (0,)  # no segments
    assert np.array_equal(segment_ids([0, 0, 2, 2, 3]), [1, 1, 3])  # empty segments at both ends


def test_index_dtype_widens_only_past_int32():
    assert index_dtype(INT32_MAX) is np.int32 and index_dtype(INT32_MAX + 1, 3) is np.int64
    assert index_dtype() is np.int32
