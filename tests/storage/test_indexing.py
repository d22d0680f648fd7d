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


def test_segment_ids_of_a_slice_are_numbered_from_start():
    #   row:    0  1  2  3  4  5
    #   indptr: 0  2  2  5  6  6  9   (rows 1 and 4 empty)
    indptr = np.array([0, 2, 2, 5, 6, 6, 9])
    whole = segment_ids(indptr)
    for r0, r1 in ((0, 6), (1, 4), (2, 3), (4, 5), (3, 3)):
        part = segment_ids(indptr[r0:r1 + 1], start=r0)
        assert np.array_equal(part, whole[indptr[r0]:indptr[r1]])  # the slice's items keep their row
        assert np.array_equal(part, np.repeat(np.arange(r0, r1), np.diff(indptr[r0:r1 + 1])))
    assert segment_ids(indptr[2:5], np.int32, start=2).dtype == np.int32
    assert np.array_equal(segment_ids(indptr[2:5], np.int32, start=2), [2, 2, 2, 3])
