"""kernels.gather and kernels.calls.gathered on the GPU: rows gathered bitwise in every word width, re-pointed by
set_io, and a plan's product plus its gather replayed as one graph, equal to the plan's product indexed."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)

from kernels import calls  # noqa: E402
from kernels.gather import bias_fits, bind_rows, word_bytes  # noqa: E402


@pytest.mark.parametrize("dtype,n,word", [("float32", 128, 16), ("float32", 3, 4), ("uint16", 3, 2),
                                          ("uint16", 8, 16), ("float16", 6, 4), ("int64", 2, 16)])
def test_rows_gathered_bitwise_in_each_word(dtype, n, word):
    rng = np.random.default_rng(n)
    m, k = 37, 29
    host = rng.integers(0, 256, size=(m, n * np.dtype(dtype).itemsize), dtype=np.uint8).view(dtype)
    C = cupy.asarray(host)
    index = rng.integers(0, m, size=k)  # repeats and skipped rows alike
    out = cupy.empty((k, n), dtype=dtype)
    bound, w = bind_rows(C, cupy.asarray(index, dtype=cupy.int64), out)
    assert w == word
    bound(cupy.cuda.get_current_stream().ptr)
    np.testing.assert_array_equal(cupy.asnumpy(out).view(np.uint8), host[index].view(np.uint8))
    out2, C2 = cupy.empty_like(out), cupy.asarray(host[::-1].copy())
    bound.set_io(C2, out2)  # re-pointed: the new C read into the new out, the old out untouched
    bound(cupy.cuda.get_current_stream().ptr)
    np.testing.assert_array_equal(cupy.asnumpy(out2).view(np.uint8), host[::-1][index].view(np.uint8))
    np.testing.assert_array_equal(cupy.asnumpy(out).view(np.uint8), host[index].view(np.uint8))


def test_rows_gathered_with_a_bias_row_added_as_one_float32_add():
    """bind_rows with a bias: out[i] = C[index[i]] + bias, the bits of the gather followed by out += bias; re-pointed
    by set_io with the bias kept; refused where the bias cannot ride 16-byte float32 words."""
    rng = np.random.default_rng(5)
    m, k, n = 41, 33, 24
    host = rng.standard_normal((m, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    C, bias = cupy.asarray(host), cupy.asarray(b)
    index = rng.integers(0, m, size=k)
    out = cupy.empty((k, n), cupy.float32)
    assert bias_fits(C, out, bias)
    bound, w = bind_rows(C, cupy.asarray(index, dtype=cupy.int64), out, bias)
    assert w == 16
    bound(cupy.cuda.get_current_stream().ptr)
    want = cupy.asarray(host[index])
    want += bias  # the gather, then one float32 add per element
    np.testing.assert_array_equal(cupy.asnumpy(out), cupy.asnumpy(want))
    C2, out2 = cupy.asarray(host[::-1].copy()), cupy.empty_like(out)
    bound.set_io(C2, out2)
    bound(cupy.cuda.get_current_stream().ptr)
    np.testing.assert_array_equal(cupy.asnumpy(out2), host[::-1][index] + b)
    for bad_C, bad_out, bad_bias in ((C[:, :22], cupy.empty((k, 22), cupy.float32), bias[:22]),  # 22 % 4
                                     (C, out, bias[1:].copy()), (C, out, bias.astype(cupy.float16)),
                                     (C, out, cupy.empty(n + 1, cupy.float32)[1:])):  # 4 bytes off 16
        assert not bias_fits(cupy.ascontiguousarray(bad_C), bad_out, bad_bias)
    with pytest.raises(ValueError, match="float32 rows of whole 16-byte words"):
        bind_rows(C, cupy.asarray(index, dtype=cupy.int64), out, cupy.empty(n + 1, cupy.float32)[1:])


def test_bad_operands_refused_in_one_line():
    C = cupy.zeros((4, 8), cupy.float32)
    with pytest.raises(ValueError, match="index must be int64"):
        bind_rows(C, cupy.arange(4, dtype=cupy.int32), cupy.empty((4, 8), cupy.float32))
    with pytest.raises(ValueError, match="differ in columns or dtype"):
        bind_rows(C, cupy.arange(4), cupy.empty((4, 8), cupy.float16))
    with pytest.raises(ValueError, match="C-contiguous"):
        bind_rows(C, cupy.arange(8), cupy.empty((8, 4), cupy.float32).T)
    with pytest.raises(ValueError, match="2-byte words"):
        word_bytes(3)
    assert word_bytes(512, 0x1000, 0x2004) == 4 and word_bytes(512, 0x1000, 0x2010) == 16


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_gathered_plan_call_equals_the_product_indexed_and_replays(dtype):
    from kernels.spmm import SpmmPlan

    rng = np.random.default_rng(3)
    n = 300
    A = sp.random_array((n, n), density=0.03, random_state=rng, format="csr", dtype=np.float32)
    perm = rng.permutation(n)
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(n)
    plan = SpmmPlan(sp.csr_array(A[perm]), device="gpu", dtype=dtype, out_dtype=np.float32)
    store = np.float16 if dtype == "float16" else np.float32
    B = cupy.asarray(rng.standard_normal((n, 64)).astype(store))
    C = cupy.empty((n, 64), cupy.float32)
    out = cupy.empty((n, 64), cupy.float32)
    call = calls.gathered(plan.bind(B, C), B, C, cupy.asarray(inverse, dtype=cupy.int64), out)
    want = cupy.asnumpy(plan.run(B))[inverse]  # the unbound path, then the rows in the user's order
    for _ in range(calls.AUTO_GRAPH_AFTER + 2):  # the last calls replay one graph of both launches
        out.fill(np.nan)
        assert call() is out
        np.testing.assert_array_equal(cupy.asnumpy(out), want)
    assert call.graph is not None
    out2 = cupy.empty_like(out)
    B2 = cupy.asarray(rng.standard_normal((n, 64)).astype(store))
    call.set_io(B2, out2)
    call()
    np.testing.assert_array_equal(cupy.asnumpy(out2), cupy.asnumpy(plan.run(B2))[inverse])
    shifted = cupy.empty(n * 64 + 1, cupy.float32)[1:].reshape(n, 64)  # 4 bytes past an allocation's start
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        call.set_io(B2, shifted)
    bias = cupy.asarray(rng.standard_normal(64).astype(np.float32))
    with_bias = calls.gathered(plan.bind(B, C), B, C, cupy.asarray(inverse, dtype=cupy.int64), out, bias)
    for _ in range(calls.AUTO_GRAPH_AFTER + 2):  # replayed: the bias read at each replay
        with_bias()
    want = cupy.asarray(want)
    want += bias
    np.testing.assert_array_equal(cupy.asnumpy(out), cupy.asnumpy(want))
