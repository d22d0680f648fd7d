"""The hybrid's stored form (kernels.hybrid.parts.record / rebuild): what the pipeline's convert stage keeps of a
split (a TC flag per 16-row window and the split's parameters) rebuilds the same split on the same A, every case
and precision; a record that does not fit A or the precision is refused in one line."""
from __future__ import annotations

import numpy as np
import pytest

from configs.errors import InputError
from hybrid_cases import CASES, FORCED
from kernels.hybrid import HYBRID
from kernels.hybrid.parts import rebuild, record, split_matrix, split_record

PRECISIONS = ("float32", "float16", "bfloat16")


def same_split(H, G) -> None:
    assert H.split.tc_format == G.split.tc_format and H.split.N == G.split.N and H.shape == G.shape
    np.testing.assert_array_equal(H.split.tc, G.split.tc)
    np.testing.assert_array_equal(H.tc_rows, G.tc_rows)
    np.testing.assert_array_equal(H.cuda_rows, G.cuda_rows)
    assert H.tc_range == G.tc_range
    for a, b in ((H.tc_csr, G.tc_csr), (H.cuda_csr, G.cuda_csr)):
        assert a.shape == b.shape
        np.testing.assert_array_equal(a.indptr, b.indptr)
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_array_equal(a.data, b.data)
    drop = {"split_s"}
    assert {k: v for k, v in H.summary().items() if k not in drop} == \
        {k: v for k, v in G.summary().items() if k not in drop}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_stored_split_rebuilds_the_models_split(case, precision):
    A = CASES[case]()
    labels, meta = record(A, precision)
    n_windows = -(-A.shape[0] // 16)
    assert labels.dtype == np.uint8 and labels.shape == (n_windows,) and set(np.unique(labels)) <= {0, 1}
    assert meta["summary"]["tc_rows"] + meta["summary"]["cuda_rows"] == A.shape[0]
    same_split(split_matrix(A, precision), rebuild(A, precision, labels, meta))


@pytest.mark.parametrize("name", sorted(FORCED))
def test_a_forced_split_is_stored_as_it_was_forced(name):
    """A split past the cost model (scattered windows, a run, all, none) comes back as given, not re-chosen."""
    make, mask = FORCED[name]
    A = make()
    H = split_matrix(A, "float32", tc_windows=mask(-(-A.shape[0] // 16)))
    labels, meta = split_record(H)
    same_split(H, HYBRID.rebuild(A, "float32", labels, meta))


def test_a_record_that_does_not_fit_is_refused_in_one_line():
    A = CASES["dense_head"]()
    labels, meta = record(A, "float32")
    bad = [
        (A[:100], labels, meta, "stored hybrid split is of a [3048, 512] matrix at float32, expected [100, 512]"),
        (A, labels, {**meta, "precision": "float16"}, "at float16, expected [3048, 512] at float32"),
        (A, labels[:-1], meta, "has 190 window flags (largest 1), expected 191 flags"),
        (A, labels + 1, meta, "largest 2), expected 191 flags of 0 or 1"),
        (A, labels, {**meta, "tc_format": "csr"}, "Tensor Core format is 'csr', expected one of"),
        (A, labels, {**meta, "cuda_format": "metcf"}, "runs its other rows on 'metcf', expected 'csr'"),
    ]
    for M, lab, met, message in bad:
        with pytest.raises(InputError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")) \
                as err:
            rebuild(M, "float32", lab, met)
        assert "\n" not in str(err.value)


def test_a_given_format_needs_given_windows():
    with pytest.raises(ValueError, match="pass tc_windows with it"):
        split_matrix(CASES["dense_head"](), "float32", tc_format="metcf")
