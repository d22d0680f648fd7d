"""A format is one folder and one register line: a toy format registered the way kernels/formats/__init__.py
registers the real ones (``register(Format(...))``) is a choice of SpmmPlan (by name and under "auto"), stores and
reloads through the block store with its own layout, and is refused in one line where it provides nothing (no GPU
kernels, no sharding), with no other edit anywhere."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import scipy.sparse as sp

from configs.errors import InputError
from kernels.formats import REGISTRY, Format, candidates, register
from kernels.formats.blocks import WINDOW, canonical_csr, check_pieces, stack_offsets
from kernels.spmm import SpmmPlan, gpu_ready
from storage import BlockStore
from storage.formats import LAYOUTS, BlockLayout


@dataclass(frozen=True)
class Triplets:
    """A as (row, col, value) triplets in row-major order, grouped by 16-row window: window w owns triplets
    ``window_ptr[w]:window_ptr[w + 1]``; a triplet is a tile of one item (its value)."""

    shape: tuple[int, int]
    window_ptr: np.ndarray  # int64 [n_windows + 1]
    item_ptr: np.ndarray  # int64 [nnz + 1]: one value per tile
    row: np.ndarray  # int64 [nnz]
    col: np.ndarray  # int64 [nnz]
    value: np.ndarray  # float32 [nnz]

    format_name = "toy"  # a converted object names its format and gives its shape and nnz

    @property
    def nnz(self) -> int:
        return int(self.row.size)


def to_triplets(A, precision) -> Triplets:
    A = canonical_csr(A, "toy").astype(np.float32).tocoo()
    n_windows = -(-int(A.shape[0]) // WINDOW)
    window_ptr = np.searchsorted(A.row, np.arange(n_windows + 1) * WINDOW).astype(np.int64)
    return Triplets(A.shape, window_ptr, np.arange(A.nnz + 1, dtype=np.int64), A.row.astype(np.int64),
                    A.col.astype(np.int64), A.data)


def concat(pieces: list) -> Triplets:
    check_pieces(pieces, "toy", WINDOW, lambda X: X.shape[1])
    offsets = np.cumsum([0] + [X.shape[0] for X in pieces[:-1]])
    return Triplets((sum(X.shape[0] for X in pieces), pieces[0].shape[1]),
                    stack_offsets([X.window_ptr for X in pieces]),
                    np.arange(sum(X.row.size for X in pieces) + 1, dtype=np.int64),
                    np.concatenate([X.row + o for X, o in zip(pieces, offsets)]),
                    np.concatenate([X.col for X in pieces]), np.concatenate([X.value for X in pieces]))


def from_arrays(a: dict) -> Triplets:
    return Triplets(tuple(int(s) for s in a["shape"]), a["window_ptr"], a["item_ptr"], a["row"], a["col"], a["value"])


def to_csr(X: Triplets) -> sp.csr_array:
    return sp.csr_array((X.value, (X.row, X.col)), shape=X.shape)


def reference(X: Triplets, B, precision=None) -> np.ndarray:
    return to_csr(X).astype(np.float64) @ np.asarray(B, dtype=np.float64)


TOY = Format(name="toy", summary="row-major triplets per 16-row window (a test of the seam)",
             block_width={"float32": 1}, convert=to_triplets, concat=concat,
             layout=BlockLayout(rows_per_group=WINDOW, group_offset="window_ptr", item_offset="item_ptr",
                                fixed={"row": 0, "col": 0}, ragged=("value",)),
             from_arrays=from_arrays, reference_spmm=reference, stats=lambda X, csr_nbytes: {"nnz": int(X.row.size)},
             device="toy:none", to_csr=to_csr, gpu_ready=False, gpu_not_ready_why="a toy: it has no kernels")


@pytest.fixture
def toy():
    register(TOY)  # the one line a format folder's register line is
    yield TOY
    REGISTRY.pop("toy")
    LAYOUTS.pop("toy")


def matrix(seed=3):
    return sp.random(37, 29, density=0.2, format="csr", dtype=np.float32, random_state=seed)


def test_spmm_plan_runs_it_by_name_and_under_auto(toy):
    A, B = matrix(), np.random.default_rng(0).standard_normal((29, 5)).astype(np.float32)
    plan = SpmmPlan(A, device="cpu", format="toy")
    assert plan.formats == [toy] and plan.choice["format"] == "toy"
    np.testing.assert_allclose(plan.run(B), A @ B, rtol=1e-5, atol=1e-6)
    assert toy in candidates("auto", "float32") and toy not in candidates("auto", "float16")


def test_a_converted_toy_object_is_taken_as_given(toy):
    A = matrix(4)
    X = to_triplets(A, None)
    plan = SpmmPlan(X, device="cpu")
    assert plan.formats == [toy]
    B = np.ones((29, 3), dtype=np.float32)
    np.testing.assert_allclose(plan.run(B), A @ B, rtol=1e-5, atol=1e-6)
    with pytest.raises(InputError, match="format 'toy' has no float16 kernels"):
        SpmmPlan(X, device="cpu", dtype="float16")


def test_it_stores_and_reloads_through_its_own_layout(toy, tmp_path):
    A = matrix(5)
    X = concat([to_triplets(A[:16], None), to_triplets(A[16:], None)])  # row blocks, as Dask converts them
    np.testing.assert_array_equal(to_csr(X).toarray(), to_csr(to_triplets(A, None)).toarray())
    store = BlockStore(tmp_path).matrix("toy-matrix")
    store.write_format("toy", "none-float32", X, {"perm_key": "none"})
    Y = from_arrays(store.read_format("toy", "none-float32"))
    np.testing.assert_array_equal(to_csr(Y).toarray(), A.toarray())
    window = from_arrays(store.read_format("toy", "none-float32", 1, 2))  # rows 16..31 alone
    assert window.row.size == A[16:32].nnz


def test_what_it_does_not_provide_is_refused_in_one_line(toy):
    from tasks.distribute.formats import shard_ops

    with pytest.raises(InputError, match="format 'toy' cannot run sharded"):
        shard_ops("toy")
    with pytest.raises(InputError, match="format toy: no GPU path yet, a toy: it has no kernels"):
        gpu_ready([toy], "toy")  # what a GPU plan asks of its formats
    assert gpu_ready([REGISTRY["csr"], toy], "auto") == [REGISTRY["csr"]]  # "auto" leaves it out
