"""Public SDDMM (kernels.sddmm) on the CPU path: (A @ B^T) (.) S in CSR and CVSE for every precision against the
float64 dense product, the CSR twin, the CVSE gather back to CSR order, argument checks, and the GPU refusal of the
CVSE kernel while the format is not gpu_ready."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from configs.errors import InputError
from kernel_cases import random_csr
from kernels.precision import precision
from kernels.sddmm import SddmmPlan, csr_sddmm, sddmm


def case(shape=(37, 45), nnz=400, Kd=21, seed=0):
    S = random_csr(shape, nnz, seed=seed)
    S = sp.csr_array(S, dtype=np.float32)
    rng = np.random.default_rng(seed + 1)
    return S, rng.standard_normal((shape[0], Kd)).astype(np.float32), rng.standard_normal((shape[1], Kd)).astype(
        np.float32)


def test_csr_twin_equals_dense_masked_product():
    S, A, B = case()
    dense = (A.astype(np.float64) @ B.T.astype(np.float64)) * S.toarray()
    out = sp.csr_array((csr_sddmm(S, A, B), S.indices, S.indptr), shape=S.shape)
    np.testing.assert_allclose(out.toarray(), dense, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fmt,vector", [("csr", None), ("cvse", None), ("cvse", 2), ("cvse", 4), ("cvse", 16)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_plan_matches_float64_within_the_precision_contract(dtype, fmt, vector):
    S, A, B = case()
    p = precision(dtype)
    plan = SddmmPlan(S, dtype=dtype, format=fmt, vector=vector, device="cpu")
    assert plan.choice["kernel"] == "cpu-reference" and plan.choice["format"] == fmt
    out = plan.run(A, B)
    assert out.dtype == np.float32 and out.shape == (S.nnz,)
    exact = csr_sddmm(S, A, B)
    assert np.linalg.norm(out - exact) / np.linalg.norm(exact) < p.tolerance
    # exactly the twin on the rounded inputs (S, A, B rounded to the precision; float64 sums)
    Sr = sp.csr_array((p.rounded(S.data), S.indices, S.indptr), shape=S.shape)
    np.testing.assert_allclose(out, csr_sddmm(Sr, p.rounded(A), p.rounded(B)), rtol=1e-6, atol=1e-6)
    if fmt == "cvse":
        assert plan.svc["vector"] == (vector or plan.svc["vector"]) and "padding" in plan.svc


def test_cvse_gather_is_the_csr_order_on_empty_rows_and_explicit_zeros():
    S = random_csr((40, 30), 200, seed=4).tolil()
    S[8:24] = 0  # empty vector rows for every V
    S = sp.csr_array(S, dtype=np.float32)
    S.eliminate_zeros()
    S.data[::5] = 0.0  # stored zeros keep their vector and their output (0)
    _, A, B = case((40, 30), 0, 9, seed=2)
    ref = sddmm(S, A, B, format="csr", device="cpu")
    for V in (2, 4, 8, 16):
        got = sddmm(S, A, B, format="cvse", vector=V, device="cpu")
        assert got.nnz == S.nnz and np.array_equal(got.indices, S.indices) and np.array_equal(got.indptr, S.indptr)
        np.testing.assert_allclose(got.data, ref.data, rtol=1e-6, atol=1e-6)
        assert not got.data[::5].any()


def test_empty_and_rectangular():
    S = sp.csr_array((5, 9), dtype=np.float32)
    A, B = np.ones((5, 4), np.float32), np.ones((9, 4), np.float32)
    for fmt in ("csr", "cvse"):
        out = SddmmPlan(S, format=fmt, device="cpu").run(A, B)
        assert out.shape == (0,)
    S, A, B = case((7, 333), 333, Kd=5)
    got = sddmm(S, A, B, format="cvse", device="cpu", dtype="float16")
    dense = (A.astype(np.float64) @ B.T) * S.toarray()
    assert np.linalg.norm(got.toarray() - dense) / np.linalg.norm(dense) < precision("float16").tolerance


def test_argument_checks():
    S, A, B = case()
    with pytest.raises(InputError, match="format 'bcsr' is not supported"):
        SddmmPlan(S, format="bcsr", device="cpu")
    with pytest.raises(ValueError, match=r"expected \(37, Kd\) and \(45, Kd\)"):
        SddmmPlan(S, device="cpu").run(A[:, :3], B)
    with pytest.raises(TypeError, match="SciPy sparse"):
        SddmmPlan(np.ones((3, 3)), device="cpu")
    with pytest.raises(ValueError, match="vector length V is 3"):
        SddmmPlan(S, format="cvse", vector=3, device="cpu")


def test_gpu_refuses_the_cvse_kernel_while_not_gpu_ready(monkeypatch):
    # the refusal comes before anything touches a device: simulate a GPU being present
    import dataclasses

    import kernels.spmm
    from kernels.formats import REGISTRY

    monkeypatch.setattr(kernels.spmm, "gpu_available", lambda: True)
    monkeypatch.setitem(REGISTRY, "cvse", dataclasses.replace(REGISTRY["cvse"], gpu_ready=False,
                                                              gpu_not_ready_why="its kernels failed their tests"))
    S, _, _ = case()
    with pytest.raises(InputError, match="kernel cvse: no GPU path yet, its kernels failed their tests"):
        SddmmPlan(S, format="cvse", kernel="cvse", device="gpu")


@pytest.mark.parametrize("fmt", ["csr", "cvse"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_operands_in_the_storage_dtype_are_taken_as_they_are(dtype, fmt):
    """A and B already in the plan's storage dtype (float16; bfloat16 as uint16 bits, as SpmmPlan takes B) give
    the same values as the float32 operands they hold: bits are not read as integers."""
    S, A, B = case(seed=3)
    p = precision(dtype)
    As, Bs = p.to_storage(A), p.to_storage(B)
    plan = SddmmPlan(S, dtype=dtype, format=fmt, device="cpu")
    np.testing.assert_array_equal(plan.run(As, Bs), plan.run(p.to_float32(As), p.to_float32(Bs)))
    assert As.dtype == p.storage_dtype and np.abs(plan.run(As, Bs)).max() < 1e3  # uint16 bits as ints: ~1e9


@pytest.mark.parametrize("fmt", ["csr", "cvse"])
def test_run_writes_into_out(fmt):
    S, A, B = case()
    plan = SddmmPlan(S, format=fmt, dtype="float16", device="cpu")
    want = plan.run(A, B)
    out = np.full(S.nnz, np.nan, dtype=np.float32)
    assert plan.run(A, B, out=out) is out and np.array_equal(out, want)
    for bad in (np.zeros(S.nnz, np.float64), np.zeros(S.nnz + 1, np.float32), np.zeros((S.nnz, 1), np.float32),
                np.zeros(2 * S.nnz, np.float32)[::2], [0.0] * S.nnz):
        with pytest.raises(ValueError, match=rf"out must be a C-contiguous float32 numpy array of shape \({S.nnz},\)"):
            plan.run(A, B, out=bad)


def test_gpu_refuses_the_csr_kernel_until_it_is_gpu_ready(monkeypatch):
    import kernels.spmm
    from kernels.formats.csr import sddmm as csr_sddmm_gpu

    monkeypatch.setattr(kernels.spmm, "gpu_available", lambda: True)
    monkeypatch.setattr(csr_sddmm_gpu, "GPU_READY", False)
    S, _, _ = case()
    with pytest.raises(InputError, match="kernel csr: the CUDA-core SDDMM kernel has not passed its GPU tests"):
        SddmmPlan(S, format="csr", kernel="csr", device="gpu")


@pytest.fixture
def fake_gpu(monkeypatch):
    """SddmmPlan's GPU path with NumPy standing in for CuPy and each route a stub that records its calls; the
    routes' "as issued" times come from ``times`` (route -> ms). Returns (times, calls)."""
    import sys
    import types

    import kernels.launch
    import kernels.spmm
    import kernels.sddmm as ks
    from kernels.formats.csr import sddmm as csr_sddmm_gpu
    from kernels.formats.cvse import launch as launch_cvse

    cupy = types.SimpleNamespace(asarray=np.asarray, empty=np.empty, ascontiguousarray=np.ascontiguousarray,
                                 float32=np.float32, ndarray=np.ndarray,
                                 take=lambda a, idx, out=None: np.take(a, idx, out=out))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(kernels.spmm, "gpu_available", lambda: True)
    times, calls = {}, []

    class Stub:
        def __init__(self, route, nnz):
            self.route, self.nnz = route, nnz

        def run(self, A, B, out=None):
            calls.append(self.route)
            return np.zeros(self.nnz, np.float32) if out is None else out

    def upload(X, precision):
        return types.SimpleNamespace(n_vectors=X.data.shape[0], vector=X.vector)

    def cvse_sddmm(dm, A, B, out=None, **kw):
        calls.append("cvse")
        return out

    monkeypatch.setattr(launch_cvse, "upload", upload)
    monkeypatch.setattr(launch_cvse, "sddmm", cvse_sddmm)
    monkeypatch.setattr(ks, "CusparseSddmm", lambda indptr, indices, shape: Stub("cusparse", len(indices)))
    monkeypatch.setattr(csr_sddmm_gpu, "CsrSddmm", lambda indptr, indices, shape, p, values=None:
                        Stub("csr", len(indices)))
    monkeypatch.setattr(csr_sddmm_gpu, "GPU_READY", True)
    monkeypatch.setattr(kernels.launch, "issued_ms", lambda fn, **kw: (fn(), times[calls[-1]])[1])
    return times, calls


@pytest.mark.parametrize(("times", "kept"), [({"cvse": 1.0, "csr": 0.5, "cusparse": 0.46}, "csr"),
                                             ({"cvse": 1.0, "csr": 2.0, "cusparse": 0.89}, "cusparse"),
                                             ({"cvse": 1.0, "csr": 2.0, "cusparse": 0.95}, "cvse")])
def test_auto_times_every_route_per_kd_and_keeps_the_fastest(fake_gpu, times, kept):
    """The first run with a Kd times every route; ours is the faster of cvse and csr, and cuSPARSE is kept only
    below CUSPARSE_MARGIN (0.9) of it; later runs with that Kd take the kept route without timing."""
    from kernels.sddmm import CUSPARSE_MARGIN

    assert CUSPARSE_MARGIN == 0.9
    fake_times, calls = fake_gpu
    fake_times.update(times)
    S, A, B = case()
    plan = SddmmPlan(S, dtype="float16", format="cvse", device="gpu")
    assert plan.kernel == "auto" and plan.routes == ("cvse", "csr", "cusparse")
    plan.run(A, B)
    assert plan.choices == {A.shape[1]: kept} and plan.timings[A.shape[1]] == times
    assert plan.choice["kernel"] == kept and plan.choice["format"] == ("cvse" if kept == "cvse" else "csr")
    calls.clear()
    plan.run(A, B)
    assert calls == [kept]


def test_a_fixed_route_is_never_timed(fake_gpu):
    _, calls = fake_gpu
    S, A, B = case()
    plan = SddmmPlan(S, dtype="float32", format="csr", kernel="csr", device="gpu")
    assert plan.routes == ("csr",) and plan.kernel == "csr"
    plan.run(A, B)
    assert calls == ["csr"] and plan.choices == {A.shape[1]: "csr"} and not plan.timings
    assert SddmmPlan(S, format="csr", device="gpu").routes == ("csr", "cusparse")


def test_s_values_are_scanned_once_for_every_route_on_its_csr(fake_gpu, monkeypatch):
    """The CSR route and cuSPARSE both multiply by S's values (None where all are one): the plan scans them once
    (kernels.reference.sddmm_scale) and hands both the result; a plan without such a route does not scan."""
    import kernels.sddmm as ks
    from kernels.formats.csr import sddmm as csr_sddmm_gpu

    scans, given = [], {}

    def counted(S, real=ks.sddmm_scale):
        scans.append(S.nnz)
        return real(S)

    monkeypatch.setattr(ks, "sddmm_scale", counted)
    monkeypatch.setattr(csr_sddmm_gpu, "sddmm_scale", counted, raising=False)  # a scan of the route's own: counted
    monkeypatch.setattr(csr_sddmm_gpu, "CsrSddmm", lambda indptr, indices, shape, p, values=None:
                        given.setdefault("csr", values))
    S, _, _ = case()
    plan = SddmmPlan(S, format="cvse", device="gpu")
    assert plan.routes == ("cvse", "csr", "cusparse") and scans == [S.nnz]
    np.testing.assert_array_equal(given["csr"], plan._S.data)
    assert plan._dev["cusparse"]._s is given["csr"]  # the fake CuPy's asarray keeps the array: the same scan
    scans.clear()
    given.clear()
    unit = SddmmPlan(sp.csr_array((np.ones(S.nnz, np.float32), S.indices, S.indptr), shape=S.shape), device="gpu")
    assert scans == [S.nnz] and given == {"csr": None} and unit._dev["cusparse"]._s is None
    scans.clear()
    SddmmPlan(S, format="cvse", kernel="cvse", device="gpu")
    assert scans == []
