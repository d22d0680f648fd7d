"""Generators: determinism, shapes, canonical output, shuffling, parameter errors, int64 indices."""
from __future__ import annotations

import numpy as np
import pytest

from configs.errors import InputError
from tasks.fetch import fetch
from tasks.fetch.generators import KINDS, generate
from tasks.parse import load_matrix
from tests.tasks.fetch.helpers import one_line

SMALL = {
    "rmat": "scale=9&edge_factor=8",
    "core": "scale=9&edge_factor=8&members=40&targets=24",
    "sbm": "n=1000&blocks=10&p_in=0.05&p_out=0.001",
    "mesh": "nx=17&ny=9",
    "banded": "n=333&bandwidth=4&density=0.5",
    "uniform": "rows=70&cols=30&nnz=333",
    "longrow": "rows=40&cols=5000&min_row_nnz=300&max_row_nnz=600",
    "dlmc": "rows=64&cols=96&sparsity=0.9&vector=4&values=ones",  # its random values are signed (test_generators_dlmc)
}


def _canonical(A):
    assert A.has_canonical_format and A.indices.dtype == A.indptr.dtype == np.int32
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    assert A.indices.min(initial=0) >= 0 and A.indices.max(initial=0) < A.shape[1]
    keys = rows.astype(np.int64) * A.shape[1] + A.indices
    assert np.all(np.diff(keys) > 0)  # sorted, no duplicates
    assert A.data.dtype == np.float32 and np.all(A.data > 0) and np.all(A.data <= 1)


@pytest.mark.parametrize("kind", KINDS)
def test_deterministic_canonical_and_seeded(kind):
    A = generate(kind, SMALL[kind] + "&seed=3")
    B = generate(kind, SMALL[kind] + "&seed=3")
    C = generate(kind, SMALL[kind] + "&seed=4")
    _canonical(A)
    assert A.nnz > 0 and (A != B).nnz == 0
    assert (A != C).nnz > 0


def test_rectangular_shapes_and_row_lengths():
    assert generate("uniform", "rows=70&cols=30&nnz=333").shape == (70, 30)
    assert generate("uniform", "rows=70&cols=30&nnz=333").nnz == 333
    L = generate("longrow", SMALL["longrow"])
    lengths = np.diff(L.indptr)
    assert L.shape == (40, 5000) and lengths.min() >= 300 and lengths.max() <= 600


def test_mesh_shuffle_is_a_symmetric_relabelling():
    natural = generate("mesh", "nx=20&ny=15&shuffle=0&values=ones")
    shuffled = generate("mesh", "nx=20&ny=15&values=ones")
    rows = np.repeat(np.arange(300), np.diff(natural.indptr))
    assert np.abs(rows - natural.indices).max() == 20  # natural numbering: bandwidth nx
    srows = np.repeat(np.arange(300), np.diff(shuffled.indptr))
    assert np.abs(srows - shuffled.indices).max() > 100
    assert natural.nnz == shuffled.nnz == 300 * 5 - 2 * (20 + 15)
    assert sorted(np.diff(natural.indptr)) == sorted(np.diff(shuffled.indptr))
    assert (shuffled != shuffled.T).nnz == 0 and np.all(shuffled.data == 1)


def test_rmat_natural_order_puts_the_hub_first():
    A = generate("rmat", "scale=10&edge_factor=8&shuffle=0")
    assert np.argmax(np.diff(A.indptr)) == 0


def test_core_plants_a_community_on_rmat():
    """gen:core: the R-MAT of the same seed with its last ``members`` rows linked to one run of ``targets`` columns."""
    G = generate("rmat", "scale=10&edge_factor=8&shuffle=0&values=ones&seed=2")
    A = generate("core", "scale=10&edge_factor=8&members=64&targets=100&shuffle=0&values=ones&seed=2")
    assert A.shape == G.shape and (A[:-64] != G[:-64]).nnz == 0  # the R-MAT draws come first, unchanged
    block = A[-64:].toarray()
    cols = np.flatnonzero(block.all(axis=0))
    assert cols.size >= 100 and np.any(np.convolve(block.all(axis=0), np.ones(100), "valid") == 100)  # one run
    assert (A - G).nnz <= 64 * 100 and A.nnz >= G.nnz
    shuffled = generate("core", "scale=10&edge_factor=8&members=64&targets=100&seed=2")
    assert shuffled.nnz == A.nnz and sorted(np.diff(shuffled.indptr)) == sorted(np.diff(A.indptr))
    for bad, message in (("scale=10&members=2000", "members (2000) and targets (256) must be <= 2**scale = 1024"),
                         ("scale=10&members=0", "members must be >= 1, got 0"), ("scale=10", "missing required "
                         "parameter 'members'"), ("scale=41&members=8", "scale must be <= 40")):
        with pytest.raises(InputError) as err:
            generate("core", bad)
        assert str(err.value).startswith("gen:core: ") and message in str(err.value)


def test_sbm_degree_form():
    A = generate("sbm", "rows=2000&blocks=20&deg_in=6&deg_out=1&shuffle=0")
    inside = (np.repeat(np.arange(2000), np.diff(A.indptr)) // 100) == (A.indices // 100)
    assert 0.8 < inside.mean() < 0.9  # 6 of 7 expected neighbours inside the block


def test_matrix_id_from_canonical_params():
    a = fetch("gen:rmat?scale=8&seed=1", ".")
    b = fetch("gen:rmat?seed=1&scale=8&edge_factor=16&shuffle=1", ".")
    assert a.matrix_id == b.matrix_id and a.matrix_id.startswith("gen.rmat.") and len(a.matrix_id) == 21
    assert a.matrix_id != fetch("gen:rmat?scale=8&seed=2", ".").matrix_id
    parsed = load_matrix(a)
    assert parsed.meta["params"]["scale"] == 8 and parsed.meta["source_url"] == a.source_url


@pytest.mark.parametrize("spec, message", [
    ("gen:blob?n=3", "unknown generator kind 'blob'; valid kinds: rmat, core, sbm, mesh, banded, uniform, longrow,"
                      " dlmc"),
    ("gen:rmat?scale=8&size=3", "unknown parameter(s) size; valid: scale, edge_factor, a, b, c, seed, shuffle"),
    ("gen:rmat?scale=eight", "scale='eight' is not a valid int"),
    ("gen:rmat?edge_factor=4", "missing required parameter 'scale'"),
    ("gen:sbm?n=100&p_in=0.1", "give either p_in and p_out, or deg_in and deg_out"),
    ("gen:mesh?nx=4&stencil=7", "stencil must be one of (5, 9) for nz=1"),
    ("gen:uniform?rows=4&cols=4&nnz=9", "nnz must be in [0, rows * cols / 2]"),
])
def test_bad_generator_params(spec, message):
    with pytest.raises(InputError) as err:
        fetch(spec, ".")
    assert message in one_line(err.value)


def test_huge_dimension_gives_int64_indices():
    parsed = load_matrix(fetch("gen:uniform?rows=7&cols=3000000000&nnz=20&seed=5", "."))
    A = parsed.csr
    assert A.shape == (7, 3_000_000_000) and A.nnz == 20
    assert A.indices.dtype == A.indptr.dtype == np.int64
    assert A.indices.max() < 3_000_000_000 and A.has_canonical_format
