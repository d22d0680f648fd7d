"""GPU FP16 / BF16 ME-TCF kernels (kernels/formats/metcf/launch_half.py: window and split-K at every ksplit) against float64
references: every call on a NaN-poisoned out (every element must be written), twice (bit-identical)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)

from kernels.formats.metcf import launch_half as lh  # noqa: E402
from kernels.formats.metcf.container import csr_to_metcf  # noqa: E402
from kernel_cases import BASE_CASES, random_csr  # noqa: E402

PRECISIONS = ("float16", "bfloat16")
# Against the float64 product of the same 16-bit-rounded A and B: the products are exact in fp32 (11 + 11 and 8 + 8
# significant bits), the sums fp32 in the Tensor Cores' order: the hub row's sums of 40,000 products measured 1.4e-5
# on an H200 (~1e-6 elsewhere), so float32 C gets 1e-4 (a wrong index or fragment slot gives O(1)); a 16-bit C adds
# one rounding per element (2^-11 = 4.9e-4 float16, 2^-8 = 3.9e-3 bfloat16 relative), hence 1e-3 and 8e-3.
ROUNDED_RTOL = {"float32": 1e-4, "float16": 1e-3, "bfloat16": 8e-3}
# Against the float64 product of the un-rounded inputs: the accuracy contract (kernels/precision.py).
TRUE_RTOL = {"float16": 1e-2, "bfloat16": 3e-2}
NAN_BITS = {"float16": 0x7E00, "bfloat16": 0x7FC0}


def storage(precision):
    return cupy.float16 if precision == "float16" else cupy.uint16


def to_f64(x, precision):
    """16-bit storage or float32 (NumPy) -> float64."""
    if x.dtype == np.uint16:
        return lh.from_bf16_bits(x).astype(np.float64)
    return x.astype(np.float64)


def rounded(x, precision):
    return to_f64(lh.to_bits16(np.asarray(x), precision), precision)


def kernels_for(N):
    return ["window"] + [f"split{k}" for k in lh.ksplits_half(N)]


def run(kernel, dh, B, out=None, **kw):
    if kernel == "window":
        return lh.spmm_window_half(dh, B, out, **kw)
    return lh.spmm_split_half(dh, B, out, ksplit=int(kernel[5:]), **kw)


def poisoned(shape, dtype, precision):
    if np.dtype(dtype) == np.float32:
        return cupy.full(shape, np.nan, dtype=cupy.float32)
    return cupy.full(shape, NAN_BITS[precision], dtype=cupy.uint16).view(dtype)


def rel(C, ref):
    return np.linalg.norm(C - ref) / max(np.linalg.norm(ref), 1e-300)


def make_b(A, N, precision, rng):
    """(B 16-bit storage on the host with NaN in every row A never references, B float32 un-rounded)."""
    B = rng.standard_normal((A.shape[1], N)).astype(np.float32)
    B16 = lh.to_bits16(B, precision)
    unused = np.setdiff1d(np.arange(A.shape[1]), np.unique(A.indices))
    B16.view(np.uint16)[unused] = NAN_BITS[precision]  # a padding or wrong-row read would spread it
    B[unused] = 0.0
    return B16, B


def check(A, N, precision, rng, *, out_dtype=np.float32, kernels=None, B_view=None):
    """Every kernel vs float64 references; B_view(B16 device) may return an unaligned copy of B."""
    A = sp.csr_array(A)
    M = csr_to_metcf(A, width=16)
    dh = lh.upload_half(M, precision)
    B16, B = make_b(A, N, precision, rng)
    A_r = sp.csr_array((rounded(A.data, precision), A.indices, A.indptr), shape=A.shape)
    B_r = np.nan_to_num(to_f64(B16, precision), nan=0.0)
    ref, true = A_r @ B_r, A.astype(np.float64) @ B.astype(np.float64)
    Bd = cupy.asarray(B16)
    if B_view is not None:
        Bd = B_view(Bd)
    out_dtype = np.dtype(out_dtype) if np.dtype(out_dtype) == np.float32 else np.dtype(storage(precision))
    tol = ROUNDED_RTOL["float32" if out_dtype == np.float32 else precision]
    for kernel in kernels or kernels_for(N):
        raw = []
        for _ in range(2):
            out = poisoned((A.shape[0], N), out_dtype, precision)
            assert run(kernel, dh, Bd, out) is out
            raw.append(cupy.asnumpy(out))
        C = to_f64(raw[0], precision)
        assert np.isfinite(C).all(), f"{kernel}: {np.count_nonzero(~np.isfinite(C))} unwritten/NaN elements"
        if not ref.any():
            assert not C.any(), f"{kernel}: nonzeros for a zero product"
        else:
            assert rel(C, ref) < tol, f"{kernel} {precision} N={N}: error {rel(C, ref):.2e} vs rounded inputs"
            assert rel(C, true) < TRUE_RTOL[precision], f"{kernel} {precision} N={N}: {rel(C, true):.2e} vs true"
        assert np.array_equal(raw[0].view(np.uint8), raw[1].view(np.uint8)), f"{kernel}: two calls differ"


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("N", [1, 5, 8, 64, 72, 128, 200, 256])
def test_random_rectangular(precision, N):
    rng = np.random.default_rng(N)
    check(random_csr((333, 517), 3000, seed=N), N, precision, rng)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", sorted(BASE_CASES))
@pytest.mark.parametrize("N", [5, 72, 128])
def test_base_cases(precision, case, N):
    # 7 x 333 (333 nnz, K not a multiple of 16), 1000 x 37, 37 x 5000, empty windows, nnz = 0, a hub row of
    # 40,000 nonzeros (one window of 2,500 blocks), stored zeros
    check(BASE_CASES[case](), N, precision, np.random.default_rng(N))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("N", [8, 72, 256])
def test_out_in_the_16bit_type(precision, N):
    rng = np.random.default_rng(100 + N)
    check(random_csr((333, 517), 3000, seed=7), N, precision, rng, out_dtype=storage(precision))
    check(BASE_CASES["hub_row"](), N, precision, rng, out_dtype=storage(precision))


def test_empty_rows_and_windows():
    #  rows 0..15   x . x .      window 0: a few nonzeros
    #  rows 16..63  . . . .      windows 1-3: no blocks (must come out as zeros)
    #  rows 64..70  . x . x      window 4: 7 rows (M = 71)
    A = random_csr((71, 90), 500, seed=3).tolil()
    A[16:64] = 0
    A = sp.csr_array(A)
    A.eliminate_zeros()
    for precision in PRECISIONS:
        for N in (1, 64, 130):
            check(A, N, precision, np.random.default_rng(N))
            check(A, N, precision, np.random.default_rng(N), out_dtype=storage(precision))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_window_walk_changes_no_bit(precision):
    """Windows growing down the matrix (row i has ~i / 8 nonzeros): the kernels take them longest first
    (lh.window_walk; B of 900 rows fits the L2 cache at every N here, lh.walks), and every kernel gives the bits it
    gives with each block on its own window (walk None)."""
    rng = np.random.default_rng(5)
    rows = [np.sort(rng.choice(900, size=1 + i // 8, replace=False)) for i in range(400)]
    A = sp.csr_array((rng.standard_normal(sum(map(len, rows))), np.concatenate(rows),
                      np.concatenate([[0], np.cumsum([len(r) for r in rows])])), shape=(400, 900))
    dh = lh.upload_half(csr_to_metcf(A, width=16), precision)
    assert dh.walk is not None and int(dh.walk[0]) == int(np.argmax(np.diff(dh.row_window_offset_host)))
    assert lh._walk_arg(dh, 256) is dh.walk and lh._walk_arg(dh, 1 << 24) == 0  # B past the L2 share: A's order
    plain = lh.HalfArrays(**{**dh.__dict__, "walk": None})
    for N in (64, 136, 256):
        B = cupy.asarray(lh.to_bits16(rng.standard_normal((900, N)).astype(np.float32), precision))
        for kernel in kernels_for(N):
            walked, own = run(kernel, dh, B), run(kernel, plain, B)
            assert cupy.array_equal(walked.view(cupy.uint32), own.view(cupy.uint32)), f"{kernel} N={N}"
    check(A, 128, precision, rng)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("N", [64, 128, 72])
def test_unaligned_b_and_out(precision, N):
    # B and out as views one element past a 16-byte boundary: the checked (element-wise) path even where N % 8 == 0
    def shifted(Bd):
        buf = cupy.empty(Bd.size + 1, dtype=Bd.dtype)
        view = buf[1:].reshape(Bd.shape)
        view[...] = Bd
        assert view.data.ptr % 16 != 0 and view.flags.c_contiguous
        return view

    A = random_csr((100, 300), 1500, seed=11)
    check(A, N, precision, np.random.default_rng(N), B_view=shifted)
    M = csr_to_metcf(A, width=16)
    dh = lh.upload_half(M, precision)
    Bd = cupy.asarray(lh.to_bits16(np.random.default_rng(1).standard_normal((300, N)).astype(np.float32), precision))
    for dtype in (cupy.float32, storage(precision)):
        for kernel in kernels_for(N):  # the same kernel on an aligned out (fast path where N % 8 == 0): same bits
            want = cupy.asnumpy(run(kernel, dh, Bd, out_dtype=dtype))
            buf = poisoned((100 * N + 1,), dtype, precision)
            out = buf[1:].reshape(100, N)
            run(kernel, dh, Bd, out)
            assert np.array_equal(cupy.asnumpy(out).view(np.uint8), want.view(np.uint8)), f"{kernel} {dtype}"


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("out16", [False, True])
def test_accumulate(precision, out16):
    A = random_csr((333, 517), 3000, seed=12)
    M = csr_to_metcf(A, width=16)
    dh = lh.upload_half(M, precision)
    rng = np.random.default_rng(13)
    for N in (5, 128):
        B16 = lh.to_bits16(rng.standard_normal((517, N)).astype(np.float32), precision)
        C0 = rng.standard_normal((333, N)).astype(np.float32)
        C0 = lh.to_bits16(C0, precision) if out16 else C0
        ref = to_f64(C0, precision) + sp.csr_array((rounded(A.data, precision), A.indices, A.indptr),
                                                   shape=A.shape) @ to_f64(B16, precision)
        Bd = cupy.asarray(B16)
        tol = ROUNDED_RTOL[precision if out16 else "float32"]
        for kernel in kernels_for(N):
            raw = []
            for _ in range(2):
                out = cupy.asarray(C0)
                run(kernel, dh, Bd, out, accumulate=True)
                raw.append(cupy.asnumpy(out))
            assert rel(to_f64(raw[0], precision), ref) < tol, f"{kernel} N={N}"
            assert np.array_equal(raw[0].view(np.uint8), raw[1].view(np.uint8)), f"{kernel}: two calls differ"


@pytest.mark.parametrize("precision", PRECISIONS)
def test_rows_past_m_and_outside_out_untouched(precision):
    # M = 7 (one window, rows 7..15 past M): a buffer of 7 + 16 rows, out = its first 7 rows; the rest must keep
    # its sentinel bits (a kernel writing past row M - 1 or past column N - 1 would change them)
    A = random_csr((7, 333), 333, seed=0)
    dh = lh.upload_half(csr_to_metcf(A, width=16), precision)
    for N in (5, 64, 72):
        Bd = cupy.asarray(lh.to_bits16(np.ones((333, N), dtype=np.float32), precision))
        for dtype in (cupy.float32, storage(precision)):
            for kernel in kernels_for(N):
                buf = poisoned((23, N), dtype, precision)
                run(kernel, dh, Bd, buf[:7])
                host = cupy.asnumpy(buf)
                assert np.isfinite(to_f64(host[:7], precision)).all()
                assert np.isnan(to_f64(host[7:], precision)).all(), f"{kernel}: wrote past row M - 1"


@pytest.mark.parametrize("precision", PRECISIONS)
def test_empty_matrix(precision):
    dh = lh.upload_half(csr_to_metcf(sp.csr_array((0, 10)), width=16), precision)
    out = lh.spmm_window_half(dh, cupy.zeros((10, 8), dtype=storage(precision)))
    assert out.shape == (0, 8) and out.dtype == cupy.float32
    assert lh.spmm_split_half(dh, cupy.zeros((10, 8), dtype=storage(precision)), ksplit=2).shape == (0, 8)


def test_checks_name_observed_and_expected():
    A = random_csr((40, 30), 100, seed=1)
    with pytest.raises(ValueError, match="8-wide TC blocks, expected 16"):
        lh.upload_half(csr_to_metcf(A, width=8), "float16")
    with pytest.raises(ValueError, match="precision"):
        lh.upload_half(csr_to_metcf(A, width=16), "float8")
    dh = lh.upload_half(csr_to_metcf(A, width=16), "bfloat16")
    with pytest.raises(TypeError, match="uint16"):
        lh.spmm_window_half(dh, cupy.zeros((30, 8), dtype=cupy.float16))  # float16 B for a bfloat16 matrix
    with pytest.raises(ValueError, match="expected A's column count 30"):
        lh.spmm_window_half(dh, cupy.zeros((31, 8), dtype=cupy.uint16))
    with pytest.raises(ValueError, match="out_dtype"):
        lh.spmm_window_half(dh, cupy.zeros((30, 8), dtype=cupy.uint16), out_dtype=cupy.float16)
    with pytest.raises(ValueError, match="ksplit is 3"):
        lh.spmm_split_half(dh, cupy.zeros((30, 8), dtype=cupy.uint16), ksplit=3)
    with pytest.raises(ValueError, match="pass out"):
        lh.spmm_window_half(dh, cupy.zeros((30, 8), dtype=cupy.uint16), accumulate=True)


# ---- the half plans' conversion on the device (kernels/formats/metcf/plugin.py convert_on_gpu) ----
def special_values_float64():
    vals = np.array([-0.0, np.nan, np.inf, 1e6, 1.0 + 2.0**-11, 3e-6, 1.0 / 3.0, -7.0, 2.0**-25, 65519.0])
    rows, cols = [0, 1, 2, 3, 15, 16, 16, 40, 40, 41], [0, 9, 17, 30, 31, 0, 33, 1, 5, 2]
    return sp.csr_array((vals, (rows, cols)), shape=(42, 34))


GPU_CONVERSION_CASES = {**BASE_CASES,
                        "special_values_float64": special_values_float64,
                        "random_float64": lambda: sp.csr_array(random_csr((300, 257), 5000, seed=21))}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", sorted(GPU_CONVERSION_CASES))
def test_gpu_conversion_uploads_the_host_conversions_arrays(precision, case):
    """convert_on_gpu(A) and the host's convert(A) give upload_half the same arrays, bit for bit, for float32 and
    float64 values, NaN, infinities, overflow and subnormals included: the condition for HALF_GPU_CONVERSION."""
    from kernels.formats.metcf.plugin import convert, convert_on_gpu
    from kernels.precision import precision as as_precision

    p = as_precision(precision)
    A = GPU_CONVERSION_CASES[case]()
    with np.errstate(over="ignore"):
        host = lh.upload_half(convert(A, p), precision)
        dev = lh.upload_half(convert_on_gpu(A, p), precision)
    assert np.array_equal(host.row_window_offset_host, dev.row_window_offset_host)
    for field in ("row_window_offset", "frag", "cols"):
        h, d = getattr(host, field), getattr(dev, field)
        assert (h.dtype, h.shape) == (d.dtype, d.shape), field
        assert cupy.asnumpy(h).tobytes() == cupy.asnumpy(d).tobytes(), field


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_half_plan_converted_on_the_gpu_runs_like_the_host_one(precision, monkeypatch):
    from kernels.formats.metcf import plugin
    from kernels.spmm import SpmmPlan

    A = sp.csr_array(random_csr((500, 400), 9000, seed=22), dtype=np.float32)
    B = np.random.default_rng(2).standard_normal((400, 64)).astype(np.float32)
    monkeypatch.setattr(plugin, "HALF_GPU_CONVERSION", False)
    host = SpmmPlan(A, dtype=precision, format="metcf", out_dtype=np.float32)
    monkeypatch.setattr(plugin, "HALF_GPU_CONVERSION", True)
    dev = SpmmPlan(A, dtype=precision, format="metcf", out_dtype=np.float32)
    assert host.timings["conversion"] == "host ME-TCF (16 x 16 blocks) upload"
    assert dev.timings["conversion"] == "kernels.formats.metcf.gpu (16 x 16 blocks)"
    assert np.array_equal(dev.run(B, kernel="metcf-window"), host.run(B, kernel="metcf-window"))
