"""GPU CUDA-core CSR SDDMM (kernels/formats/csr/sddmm.py, csr_sddmm.cu) for TF32 / FP16 / BF16 against float64 of
the precision-rounded inputs: every team size (Kd 1 .. 300), Kd off the 16-byte path and misaligned operands (the
element path), rectangular shapes, empty rows, a hub row, S's values applied or unit, a NaN-poisoned out (every
element written), two runs bit-identical, and one-line refusals of bad operands. When this module passes on a GPU,
set ``GPU_READY = True`` in kernels/formats/csr/sddmm.py: SddmmPlan then times this route with the others."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)

from kernels.formats.csr import sddmm as cs  # noqa: E402
from kernels.precision import precision  # noqa: E402
from kernel_cases import BASE_CASES, random_csr  # noqa: E402

PRECISIONS = ("float32", "float16", "bfloat16")
RTOL = 1e-5  # against float64 of the rounded inputs: products exact in fp32, only the fp32 sums' order differs
CASES = {**BASE_CASES, "wide": lambda: random_csr((30, 5000), 3000, seed=12)}


def twin(S, A64, B64, values=None):
    """kernels.sddmm's float64 twin on S's pattern with ``values`` (None: ones)."""
    from kernels.sddmm import csr_sddmm

    data = np.ones(S.nnz) if values is None else values
    return csr_sddmm(sp.csr_array((data, S.indices, S.indptr), shape=S.shape), A64, B64)


def rel_err(got, want):
    want = np.asarray(want, dtype=np.float64)
    return float(np.linalg.norm(np.asarray(got, dtype=np.float64) - want) / max(np.linalg.norm(want), 1e-30))


def operands(S, Kd, p, seed, offset=0):
    """A, B on the device in p's storage (``offset`` elements into a larger buffer: misaligned for offset 1) and
    their float64 values as the kernel reads them."""
    rng = np.random.default_rng(seed)
    out = []
    for rows in S.shape:
        X = rng.standard_normal((rows, Kd)).astype(np.float32)
        store = p.to_storage(X)
        buf = cupy.empty(store.size + offset, dtype=store.dtype)
        dev = buf[offset:].reshape(store.shape)
        dev[...] = cupy.asarray(store)
        out.append((dev, p.rounded(X)))
    return out


@pytest.mark.parametrize("Kd", [1, 2, 8, 13, 64, 100, 256, 300])
@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_against_float64(name, p_name, Kd):
    p = precision(p_name)
    S = sp.csr_array(CASES[name](), dtype=np.float32)
    values = p.rounded(S.data).astype(np.float32)
    (A, A64), (B, B64) = operands(S, Kd, p, seed=Kd)
    for scaled in (False, True):
        op = cs.CsrSddmm(S.indptr, S.indices, S.shape, p_name, values=values if scaled else None)
        out = cupy.empty(S.nnz, dtype=cupy.float32)
        out.view(cupy.uint32).fill(0x7FC00000)  # NaN: every element must be written
        got = op.run(A, B, out=out).get()
        want = twin(S, A64, B64, values if scaled else None)
        assert np.isfinite(got).all() and rel_err(got, want) < RTOL, (name, scaled)
        assert np.array_equal(op.run(A, B).get().view(np.uint32), got.view(np.uint32))  # bitwise repeatable


@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("Kd", [16, 64])
def test_misaligned_operands_take_the_element_path(p_name, Kd):
    p = precision(p_name)
    S = sp.csr_array(random_csr((200, 150), 2500, seed=5), dtype=np.float32)
    (A, A64), (B, B64) = operands(S, Kd, p, seed=1, offset=1)
    assert A.data.ptr % 16 and B.data.ptr % 16
    got = cs.CsrSddmm(S.indptr, S.indices, S.shape, p_name).run(A, B).get()
    assert rel_err(got, twin(S, A64, B64)) < RTOL


def test_empty_pattern_and_zero_features():
    p = precision("float16")
    empty = sp.csr_array((5, 4), dtype=np.float32)
    op = cs.CsrSddmm(empty.indptr, empty.indices, empty.shape, "float16")
    A, B = cupy.zeros((5, 8), dtype=cupy.float16), cupy.zeros((4, 8), dtype=cupy.float16)
    assert op.run(A, B).shape == (0,)
    S = sp.csr_array(random_csr((6, 7), 20, seed=2), dtype=np.float32)
    got = cs.CsrSddmm(S.indptr, S.indices, S.shape, "float16").run(cupy.zeros((6, 0), p.storage_dtype),
                                                                    cupy.zeros((7, 0), p.storage_dtype))
    assert got.shape == (S.nnz,) and not got.any()


def test_bad_operands_are_refused_in_one_line():
    S = sp.csr_array(random_csr((6, 7), 20, seed=2), dtype=np.float32)
    op = cs.CsrSddmm(S.indptr, S.indices, S.shape, "float16")
    A, B = cupy.zeros((6, 8), dtype=cupy.float16), cupy.zeros((7, 8), dtype=cupy.float16)
    with pytest.raises(TypeError, match="A must be a C-contiguous 2-D cupy float16 array"):
        op.run(A.astype(cupy.float32), B)
    with pytest.raises(ValueError, match="B has 6 rows, expected 7"):
        op.run(A, A)
    with pytest.raises(ValueError, match="A has 8 columns and B 4"):
        op.run(A, B[:, :4].copy())
    with pytest.raises(ValueError, match=r"out must be contiguous float32 \(20,\)"):
        op.run(A, B, out=cupy.zeros(3, cupy.float32))
    with pytest.raises(ValueError, match="indptr has 3 entries, expected n_rows \\+ 1 = 7"):
        cs.CsrSddmm(S.indptr[:3], S.indices, S.shape, "float16")


@pytest.mark.parametrize("p_name", PRECISIONS)
def test_sddmm_plan_route(p_name):
    """SddmmPlan(kernel="csr"): refused in one line until this module has passed (GPU_READY), then the route,
    and an "auto" candidate timed with the others."""
    from configs.errors import InputError
    from kernels.sddmm import SddmmPlan, csr_sddmm

    p = precision(p_name)
    S = sp.csr_array(random_csr((300, 200), 4000, seed=6), dtype=np.float32)
    if not cs.GPU_READY:
        with pytest.raises(InputError, match="kernel csr: the CUDA-core SDDMM kernel has not passed its GPU tests"):
            SddmmPlan(S, dtype=p_name, format="csr", kernel="csr", device="gpu")
        assert "csr" not in SddmmPlan(S, dtype=p_name, format="cvse", device="gpu").routes
        return
    plan = SddmmPlan(S, dtype=p_name, format="csr", kernel="csr", device="gpu")
    (A, _), (B, _) = operands(S, 32, p, seed=3)
    got = plan.run(A, B).get()
    assert plan.choices[32] == "csr" and plan.choice["kernel"] == "csr"
    want = csr_sddmm(sp.csr_array((p.rounded(S.data), S.indices, S.indptr), shape=S.shape),
                     p.rounded(p.to_float32(A.get())), p.rounded(p.to_float32(B.get())))
    assert rel_err(got, want) < RTOL
    assert "csr" in SddmmPlan(S, dtype=p_name, format="cvse", device="gpu").routes
