"""A format is one folder and one register line: a toy format registered the way kernels/formats/__init__.py
registers the real ones (``register(Format(...))``) is a choice of SpmmPlan (by name and under "auto"), stores and
reloads through the block store with its own layout, and is refused in one line where it provides nothing (no GPU
kernels, no sharding), with no other edit anywhere. With an SDDMM operator in its record (``Format.sddmm``) it is
also a format and a route of SddmmPlan: its twin on the CPU path, its device form timed against cuSPARSE on a GPU
(NumPy standing in for CuPy), refused in one line where its kernel is not ready or the plan is of another format."""
from __future__ import annotations

import dataclasses
import sys
import types
from dataclasses import dataclass

import numpy as np
import pytest
import scipy.sparse as sp

from configs.errors import InputError
from kernels.formats import REGISTRY, Format, candidates, register
from kernels.formats.blocks import WINDOW, canonical_csr, check_pieces, stack_offsets
from kernels.formats.contract import SddmmDevice, SddmmOperator
from kernels.precision import precision as as_precision
from kernels.reference import csr_sddmm
from kernels.sddmm import SddmmPlan, route_names
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


class ToySddmm:
    """An SDDMM operator on the triplets (kernels.formats.contract.SddmmOperator) and nothing else; its device form
    runs NumPy (the tests' stand-in for a device) and records its calls."""

    route, on_csr = "toy", False
    description = "the toy's SDDMM (one product per triplet)"

    def __init__(self, gpu_ready=True):
        self.gpu_ready, self.gpu_not_ready_why = gpu_ready, "a toy: its SDDMM kernel has no tests"
        self.calls = []

    def prepare(self, S, precision, *, vector=None):
        X = to_triplets(S, precision)
        return X, {"triplets": X.nnz}

    def twin(self, X, A, B) -> np.ndarray:  # the triplets are S's canonical CSR order
        A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
        return np.einsum("ij,ij->i", A[X.row], B[X.col]) * X.value

    def upload(self, X, precision):
        return ToySddmmDevice(self, X)


class ToySddmmDevice:
    def __init__(self, op, X):
        self.op, self.X = op, X

    def run(self, A, B, out=None):
        self.op.calls.append("toy")
        vals = self.op.twin(self.X, A, B).astype(np.float32)
        if out is None:
            return vals
        out[...] = vals
        return out


@pytest.fixture
def toy_sddmm():
    fmt = register(dataclasses.replace(TOY, sddmm=ToySddmm(), gpu_ready=True))
    yield fmt
    REGISTRY.pop("toy")
    LAYOUTS.pop("toy")


@pytest.fixture
def fake_gpu(monkeypatch, toy_sddmm):
    """SddmmPlan's GPU path with NumPy standing in for CuPy, cuSPARSE a stub, the CSR kernel not GPU-ready (the
    routes are the toy's and cuSPARSE's) and each route's "as issued" time from ``times`` (route -> ms). Returns
    (times, the routes' calls)."""
    import kernels.launch
    import kernels.sddmm
    import kernels.spmm
    from kernels.formats.csr import sddmm as csr_sddmm_gpu

    cupy = types.SimpleNamespace(asarray=np.asarray, empty=np.empty, ascontiguousarray=np.ascontiguousarray,
                                 float32=np.float32, ndarray=np.ndarray)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(kernels.spmm, "gpu_available", lambda: True)
    monkeypatch.setattr(csr_sddmm_gpu, "GPU_READY", False)
    calls, times = toy_sddmm.sddmm.calls, {}

    class Cusparse:
        def __init__(self, indptr, indices, shape):
            self.nnz = len(indices)

        def run(self, A, B, out=None):
            calls.append("cusparse")
            return np.zeros(self.nnz, np.float32) if out is None else out

    monkeypatch.setattr(kernels.sddmm, "CusparseSddmm", Cusparse)
    monkeypatch.setattr(kernels.launch, "issued_ms", lambda fn, **kw: (fn(), times[calls[-1]])[1])
    return times, calls


def sddmm_case(seed=6, Kd=7):
    S = sp.csr_array(matrix(seed))
    rng = np.random.default_rng(seed)
    return S, rng.standard_normal((S.shape[0], Kd)).astype(np.float32), rng.standard_normal(
        (S.shape[1], Kd)).astype(np.float32)


def test_sddmm_plan_takes_it_as_a_format_on_the_cpu(toy_sddmm):
    assert isinstance(toy_sddmm.sddmm, SddmmOperator)
    assert all(isinstance(f.sddmm, SddmmOperator) for f in REGISTRY.values() if f.sddmm is not None)
    S, A, B = sddmm_case()
    plan = SddmmPlan(S, format="toy", device="cpu")
    assert plan.choice["kernel"] == "cpu-reference" and plan.choice["format"] == "toy"
    assert plan.svc == {"triplets": S.nnz}
    p = as_precision("float32")
    Sr = sp.csr_array((p.rounded(S.data), S.indices, S.indptr), shape=S.shape)
    np.testing.assert_allclose(plan.run(A, B), csr_sddmm(Sr, p.rounded(A), p.rounded(B)), rtol=1e-6, atol=1e-6)
    names = list(route_names())
    assert "toy" in names and names[-1] == "cusparse"
    with pytest.raises(InputError, match="choose one of csr, cvse, toy"):
        SddmmPlan(S, format="bcsr", device="cpu")


def test_sddmm_gpu_plan_times_its_route_against_cusparse(toy_sddmm, fake_gpu):
    times, calls = fake_gpu
    times.update(toy=1.0, cusparse=0.95)  # cuSPARSE not below 0.9 x the toy's: the toy's route is kept
    S, A, B = sddmm_case()
    plan = SddmmPlan(S, format="toy", dtype="float16", device="gpu")  # (cuSPARSE's float32 copies: in NumPy)
    assert plan.routes == ("toy", "cusparse") and plan.kernel == "auto"
    assert isinstance(plan._dev["toy"], SddmmDevice)
    got = plan.run(A, B)
    assert plan.choices == {A.shape[1]: "toy"} and plan.timings[A.shape[1]] == times
    assert plan.choice["kernel"] == "toy" and plan.choice["format"] == "toy"
    np.testing.assert_array_equal(got, SddmmPlan(S, format="toy", dtype="float16", device="cpu").run(A, B))
    calls.clear()
    plan.run(A, B)
    assert calls == ["toy"]
    fixed = SddmmPlan(S, format="toy", kernel="toy", device="gpu")
    assert fixed.routes == ("toy",) and fixed.kernel == "toy"
    assert SddmmPlan(S, format="csr", device="gpu").routes == ("cusparse",)  # its route runs on its own arrays


def test_sddmm_refuses_its_route_in_one_line(toy_sddmm, fake_gpu, monkeypatch):
    S, _, _ = sddmm_case()
    with pytest.raises(InputError, match="kernel toy needs format='toy'"):
        SddmmPlan(S, format="csr", kernel="toy", device="gpu")
    monkeypatch.setitem(REGISTRY, "toy", dataclasses.replace(toy_sddmm, sddmm=ToySddmm(gpu_ready=False)))
    with pytest.raises(InputError, match="kernel toy: a toy: its SDDMM kernel has no tests; use kernel='cusparse'"):
        SddmmPlan(S, format="toy", kernel="toy", device="gpu")
    assert SddmmPlan(S, format="toy", device="gpu").routes == ("cusparse",)
    monkeypatch.setitem(REGISTRY, "toy", dataclasses.replace(toy_sddmm, gpu_ready=False))
    with pytest.raises(InputError, match="kernel toy: no GPU path yet, a toy: it has no kernels"):
        SddmmPlan(S, format="toy", kernel="toy", device="gpu")
