"""GPU deterministic CUDA-core CSR SpMM (kernels/formats/csr/launch.py, csr_spmm.cu) for float32 / float16 /
bfloat16 against float64: NaN-poisoned out (every element written), rectangular shapes, empty rows, a hub row cut
into pieces (the fixup kernel), N off the 16-byte path, float32 and 16-bit C, accumulate, two runs bit-identical,
the bound launch equal to the plain one; 16-bit B on every mapping (4 values per lane; 8 where N % 8 == 0, "wide"
and "pair", with 16-byte loads where the buffers are aligned), `CsrRows.tune` keeping one of them; SpmmPlan's
"csr-rows" kernel on request and in its timed choice."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)

from kernels.formats.csr.launch import MAPS, PAIRED, CsrConfig, CsrRows, maps_for  # noqa: E402
from kernels.precision import precision  # noqa: E402
from kernel_cases import BASE_CASES, random_csr  # noqa: E402

PRECISIONS = ("float32", "float16", "bfloat16")
# against the float64 product of the stored (rounded) values: fp32 FMAs in a fixed order; a 16-bit C adds a rounding
RTOL = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}
CASES = {**BASE_CASES, "long_rows": lambda: random_csr((40, 3000), 40 * 1500, seed=9)}


def stored(A, p):
    """A with its values as the kernel reads them (the precision's storage, widened exactly)."""
    A = sp.csr_array(A, dtype=np.float32)
    return sp.csr_array((p.to_float32(p.to_storage(A.data)).astype(np.float64), A.indices, A.indptr), shape=A.shape)


def poisoned(shape, dtype):
    out = cupy.empty(shape, dtype=dtype)
    out.view(cupy.uint8).fill(0xFF)  # NaN in every float type
    return out


@pytest.mark.parametrize("N", [1, 13, 24, 128, 200, 272])
@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_against_float64(name, p_name, N):
    p = precision(p_name)
    A = sp.csr_array(CASES[name](), dtype=np.float32)
    Bh = np.random.default_rng(1).standard_normal((A.shape[1], N)).astype(np.float32)
    B = cupy.asarray(p.to_storage(Bh))
    ref = stored(A, p) @ p.to_float32(p.to_storage(Bh)).astype(np.float64)
    op = CsrRows(A, p, CsrConfig(seg_len=64))  # small pieces: the hub and long rows go through the fixup
    mappings = ("rows", *maps_for(N)) if p.half else ("rows",)  # N = 272: the 16-column mappings too
    assert op.mapping(N) == ("wide" if len(mappings) > 1 else "rows")  # untuned
    for dtype, mapping in itertools.product({np.dtype(np.float32), p.storage_dtype}, mappings):
        out = poisoned((A.shape[0], N), dtype)
        C = p.to_float32(cupy.asnumpy(op.run(B, out, mapping=mapping))).astype(np.float64)
        assert np.isfinite(C).all(), ("every element of C is written", mapping)
        assert not op.pieces_done(N).any(), "csr_rows leaves its piece counts at zero for the next call"
        tol = RTOL["float32"] if dtype == np.float32 else RTOL[p_name]
        scale = max(np.abs(ref).max(initial=0.0), 1.0)
        assert np.allclose(C, ref, rtol=tol, atol=tol * scale), (dtype, mapping, float(np.abs(C - ref).max()))


@pytest.mark.parametrize("p_name", PRECISIONS)
def test_deterministic_bound_and_accumulate(p_name):
    p = precision(p_name)
    A = sp.csr_array(BASE_CASES["hub_row"](), dtype=np.float32)
    B = cupy.asarray(p.to_storage(np.random.default_rng(2).standard_normal((A.shape[1], 256))))
    op = CsrRows(A, p)
    one = op.run(B, cupy.empty((A.shape[0], 256), cupy.float32)).copy()
    two = op.run(B, cupy.empty((A.shape[0], 256), cupy.float32))
    assert bool((one.view(cupy.uint32) == two.view(cupy.uint32)).all())
    out = cupy.empty((A.shape[0], 256), cupy.float32)
    bound = op.bind(B, out)
    assert bool((bound(cupy.cuda.get_current_stream().ptr).view(cupy.uint32) == one.view(cupy.uint32)).all())
    acc = cupy.ones((A.shape[0], 256), cupy.float32)
    op.run(B, acc, accumulate=True)
    assert cupy.allclose(acc, one + 1, rtol=1e-6, atol=1e-5)
    if p.half:  # C += A @ B in the 16-bit type: added in fp32, rounded once
        acc16 = cupy.asarray(p.to_storage(np.ones((A.shape[0], 256), np.float32)))
        op.run(B, acc16, accumulate=True)
        want = p.to_float32(p.to_storage(cupy.asnumpy(one) + 1))
        assert np.array_equal(p.to_float32(cupy.asnumpy(acc16)), want)
    with pytest.raises(ValueError, match="B has 7 rows"):
        op.run(cupy.zeros((7, 4), p.storage_dtype), out)


@pytest.mark.parametrize("p_name", ["float32", "float16"])
def test_plan_runs_csr_rows(p_name):
    from kernels.spmm import SpmmPlan

    p = precision(p_name)
    A = sp.csr_array(random_csr((3000, 2000), 30_000, seed=4), dtype=np.float32)
    Bh = np.random.default_rng(3).standard_normal((2000, 128)).astype(np.float32)
    exact = A.astype(np.float64) @ Bh.astype(np.float64)
    plan = SpmmPlan(A, dtype=p_name, format="metcf", autotune=True)  # ME-TCF times csr-rows as its fallback
    B = cupy.asarray(p.to_storage(Bh))
    C = plan.run(B)
    assert "csr_rows_ms" in plan.choice  # timed next to the Tensor Core choice
    Cr = plan.run(B, kernel="csr-rows")
    for got in (C, Cr):
        got = p.to_float32(cupy.asnumpy(got)).astype(np.float64)
        assert np.linalg.norm(got - exact) / np.linalg.norm(exact) <= p.tolerance
    out = cupy.empty_like(Cr)
    first = plan.run(B, out, kernel="csr-rows").copy()
    for _ in range(4):  # the bound call, then graph replay
        assert bool((plan.run(B, out, kernel="csr-rows") == first).all())


@pytest.mark.parametrize("p_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("N, shift, mapping", [(136, 0, "wide"), (136, 1, "wide"), (136, 0, "pair"),
                                               (136, 1, "pair"), (132, 0, None), (272, 0, "pair16"),
                                               (272, 1, "pair16"), (528, 0, "pair16_deep"),
                                               (528, 1, "pair16_deep")])
def test_16bit_mappings(p_name, N, shift, mapping):
    """16-bit B: N % 8 == 0 takes an 8-values-per-lane kernel ("wide": half-warps on alternate nonzeros; "pair": a
    half-warp per segment), N % 16 == 0 from 256 also a 16-values one ("pair16", "pair16_deep"), with 16-byte
    loads, or element loads when B and C are not 16-byte aligned (``shift``: 2 bytes off); N = 132 the 4-values
    kernel. Each matches float64 and is bitwise repeatable."""
    p = precision(p_name)
    A = sp.csr_array(BASE_CASES["hub_row"](), dtype=np.float32)
    K = A.shape[1]
    Bh = np.random.default_rng(5).standard_normal((K, N)).astype(np.float32)
    ref = stored(A, p) @ p.to_float32(p.to_storage(Bh)).astype(np.float64)
    B = cupy.empty(K * N + shift, dtype=p.storage_dtype)[shift:].reshape(K, N)
    B[...] = cupy.asarray(p.to_storage(Bh))
    op = CsrRows(A, p, CsrConfig(seg_len=64))
    for dtype in (np.float32, p.storage_dtype):
        outs = [cupy.empty(A.shape[0] * N + shift, dtype=dtype)[shift:].reshape(A.shape[0], N) for _ in range(2)]
        assert (outs[0].data.ptr % 16 == 0) == (shift == 0)
        for out in outs:
            out.view(cupy.uint8).fill(0xFF)  # NaN: every element must be written
        C = [cupy.asnumpy(op.run(B, out, mapping=mapping)) for out in outs]
        assert np.array_equal(C[0].view(np.uint8), C[1].view(np.uint8)), "bitwise repeatable"
        got = p.to_float32(C[0]).astype(np.float64)
        tol = RTOL["float32"] if np.dtype(dtype) == np.float32 else RTOL[p_name]
        scale = max(np.abs(ref).max(), 1.0)
        assert np.isfinite(got).all()
        assert np.allclose(got, ref, rtol=tol, atol=tol * scale), float(np.abs(got - ref).max())


@pytest.mark.parametrize("p_name", PRECISIONS)
def test_walk_order_changes_no_bit(p_name):
    """Rows launched as given (heavy=0), long rows first (float32's default), every row longest first (16-bit's
    default): the same C, bit for bit, in each mapping, here and with C's rows mapped (the hybrid's CUDA-core
    part)."""
    p = precision(p_name)
    A = sp.csr_array(sp.vstack([BASE_CASES["hub_row"](), random_csr((300, BASE_CASES["hub_row"]().shape[1]), 2000,
                                                                    seed=3)]), dtype=np.float32)
    B = cupy.asarray(p.to_storage(np.random.default_rng(4).standard_normal((A.shape[1], 272))))
    rows = np.random.default_rng(5).permutation(A.shape[0] + 7)[:A.shape[0]]
    walks = [CsrConfig(seg_len=64, heavy=0.0), CsrConfig(seg_len=64, heavy=4.0, heavy_half=4.0),
             CsrConfig(seg_len=64), CsrConfig(seg_len=64, heavy=1e-9, heavy_half=1e-9)]
    orders = []
    for mapped in (None, rows):
        n_rows = None if mapped is None else A.shape[0] + 7
        for mapping in (MAPS if p.half else (None,)):  # N = 272: every mapping takes it
            outs = []
            for config in walks:
                op = CsrRows(A, p, config, rows=mapped, n_rows=n_rows)
                orders.append(cupy.asnumpy(op.seg_row).tobytes())
                out = cupy.zeros((op.shape[0], 272), dtype=cupy.float32)
                outs.append(cupy.asnumpy(op.run(B, out, mapping=mapping)))
            assert all(np.array_equal(o.view(np.uint32), outs[0].view(np.uint32)) for o in outs[1:]), mapping
    assert len(set(orders[:len(walks)])) >= 3  # the walks differ: the test would see an order-dependent sum


@pytest.mark.parametrize("p_name", PRECISIONS)
def test_tune_keeps_the_faster_mapping(p_name):
    """`tune` times the mappings that take N once per N (16-bit: "wide" and "pair" where N % 8 == 0, also "pair16"
    and "pair16_deep" where N % 16 == 0 from 256) and later calls run the one kept, bit for bit what that mapping
    gives; nothing to tune for float32 or N % 8 != 0; a mapping the kernel lacks, or not for this N, is refused."""
    p = precision(p_name)
    A = sp.csr_array(sp.vstack([BASE_CASES["hub_row"](), random_csr((501, BASE_CASES["hub_row"]().shape[1]), 4000,
                                                                    seed=6)]), dtype=np.float32)  # odd segments
    op = CsrRows(A, p, CsrConfig(seg_len=64))
    B = cupy.asarray(p.to_storage(np.random.default_rng(7).standard_normal((A.shape[1], 136))))
    ms = op.tune(B)
    if not p.half:
        assert ms is None and op.maps == {} and op.mapping(136) == "rows"
        with pytest.raises(ValueError, match="mapping 'pair'"):
            op.run(B, cupy.empty((A.shape[0], 136), cupy.float32), mapping="pair")
        return
    assert set(ms) == {"wide", "pair"} and all(v > 0 for v in ms.values())
    kept = op.maps[136]
    assert kept == min(MAPS[:2], key=ms.get) and op.mapping_ms[136] == ms
    with pytest.raises(ValueError, match="mapping 'pair16'"):  # 136 columns: no 16-column mapping
        op.run(B, cupy.empty((A.shape[0], 136), p.storage_dtype), mapping="pair16")
    B256 = cupy.asarray(p.to_storage(np.random.default_rng(8).standard_normal((A.shape[1], 256))))
    ms256 = op.tune(B256)
    assert set(ms256) == set(MAPS) and op.maps[256] == min(MAPS, key=ms256.get)
    paired = [cupy.asnumpy(op.run(B256, cupy.empty((A.shape[0], 256), p.storage_dtype), mapping=m))
              for m in ("pair", "pair16", "pair16_deep")]
    assert all(np.array_equal(c.view(np.uint16), paired[0].view(np.uint16)) for c in paired[1:])
    assert op.tune(B) is None  # once per N
    assert op.tune(B[:, 0].copy()) is None  # not 2-D: nothing timed, the launch's checks refuse it
    with pytest.raises(TypeError, match="2-D"):
        op.run(B[:, 0].copy(), cupy.empty((A.shape[0], 1), p.storage_dtype))
    assert op.tune(B[:, :132].copy()) is None and op.mapping(132) == "rows"
    got = cupy.asnumpy(op.run(B, cupy.empty((A.shape[0], 136), p.storage_dtype)))
    want = cupy.asnumpy(op.run(B, cupy.empty((A.shape[0], 136), p.storage_dtype), mapping=kept))
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    with pytest.raises(ValueError, match="mapping 'pair'"):
        op.run(B[:, :132].copy(), cupy.empty((A.shape[0], 132), p.storage_dtype), mapping="pair")


@pytest.mark.parametrize("autotune", [True, False])
def test_plan_reports_the_csr_mapping(autotune):
    """A float16 CSR plan times the mappings at its first run for an N (autotune on) and says which it kept; with
    autotune off it runs "wide" untimed. Both correct and repeatable."""
    from kernels.spmm import SpmmPlan

    p = precision("float16")
    A = sp.csr_array(random_csr((3000, 2000), 30_000, seed=8), dtype=np.float32)
    Bh = np.random.default_rng(9).standard_normal((2000, 128)).astype(np.float32)
    exact = A.astype(np.float64) @ p.to_float32(p.to_storage(Bh)).astype(np.float64)
    plan = SpmmPlan(A, dtype="float16", format="csr", autotune=autotune)
    B = cupy.asarray(p.to_storage(Bh))
    C = plan.run(B)
    assert plan.choices[128].kernel == "csr-rows"
    if autotune:
        assert plan.choices[128]["csr_mapping"] in MAPS and \
            set(plan.choices[128]["csr_mapping_ms"]) == set(maps_for(128))
    else:
        assert "csr_mapping" not in plan.choices[128]
    got = p.to_float32(cupy.asnumpy(C)).astype(np.float64)
    assert np.linalg.norm(got - exact) / np.linalg.norm(exact) <= p.tolerance
    first = cupy.asnumpy(C).copy()
    for _ in range(3):
        assert np.array_equal(cupy.asnumpy(plan.run(B)).view(np.uint16), first.view(np.uint16))


@pytest.mark.parametrize("p_name", ["float16", "bfloat16"])
def test_pair_tail_groups_short_rows_without_changing_a_bit(p_name):
    """The pair mappings' tail (segments of <= tail_short nonzeros, tail_group a half-warp, launched first): every
    row of C written (empty rows as zeros, C poisoned first), each row's sum bit for bit what one segment a
    half-warp gives, for tails of odd and even starts and lengths, a tail of every segment and none, in each of
    the 8- and 16-column mappings (N = 272: two chunks of 128 and a part, one of 256 and a part)."""
    p = precision(p_name)
    rng = np.random.default_rng(8)
    lengths = np.concatenate([rng.integers(17, 300, 9), rng.integers(3, 17, 40), rng.integers(0, 3, 203)])
    rows = [rng.choice(700, size=k, replace=False) for k in lengths]
    A = sp.csr_array((rng.standard_normal(int(lengths.sum())).astype(np.float32),
                      np.concatenate(rows).astype(np.int32), np.concatenate([[0], np.cumsum(lengths)])),
                     shape=(len(lengths), 700))
    A.sort_indices()
    Bh = rng.standard_normal((700, 272)).astype(np.float32)
    B = cupy.asarray(p.to_storage(Bh))
    ref = stored(A, p) @ p.to_float32(p.to_storage(Bh)).astype(np.float64)
    outs, tails = [], set()
    for group, short in ((1, 16), (8, 2), (3, 2), (8, 16), (5, 0), (2, 1000)):
        op = CsrRows(A, p, CsrConfig(seg_len=64, tail_group=group, tail_short=short))
        tails.add(op.tail0)
        for mapping in PAIRED:
            out = poisoned((A.shape[0], 272), p.storage_dtype)
            outs.append(p.to_float32(cupy.asnumpy(op.run(B, out, mapping=mapping))))
    assert len(tails) >= 4  # different tails were walked
    for C in outs[1:]:
        assert np.array_equal(C.view(np.uint32), outs[0].view(np.uint32))
    tol = RTOL[p_name]
    assert np.allclose(outs[0], ref, rtol=tol, atol=tol * max(np.abs(ref).max(), 1.0))
    assert not outs[0][lengths == 0].any()  # empty rows: zeros


@pytest.mark.parametrize("p_name", PRECISIONS)
def test_upload_rows_is_the_host_gather_and_rounding_bitwise(monkeypatch, p_name):
    """The device gather and rounding (kernels.formats.csr.upload) give the bits the host path gave: A[order]'s
    column ids and to_storage of its values, with values at float16's and bfloat16's edges (subnormal, past the
    largest, infinities, -0), empty rows, and chunks that cut rows."""
    from kernels.formats.csr import upload

    monkeypatch.setattr(upload, "CHUNK", 7)
    p = precision(p_name)
    A = random_csr((300, 90), 2500, seed=5)
    A = sp.csr_array(sp.vstack([A[:100], sp.csr_array((3, 90)), A[100:]], format="csr"), dtype=np.float32)
    edge = np.array([6e-8, 3e-5, -2e-7, 65504.0, 65520.0, 7e4, 3.4e38, np.inf, -np.inf, -0.0, 1 / 3],
                    dtype=np.float32)
    A.data[:edge.size] = edge
    for order in (None, np.random.default_rng(6).permutation(A.shape[0])):
        idx, val = upload.upload_rows(A, order, p)
        want = A if order is None else A[order]
        assert np.array_equal(cupy.asnumpy(idx), want.indices)
        host = p.to_storage(want.data)
        assert cupy.asnumpy(val).dtype == host.dtype
        assert np.array_equal(cupy.asnumpy(val).view(np.uint16 if p.half else np.uint32),
                              host.view(np.uint16 if p.half else np.uint32))
    stored16 = sp.csr_array((p.to_storage(A.data), A.indices, A.indptr), shape=A.shape)  # stored bits moved
    idx, val = upload.upload_rows(stored16, None, p)
    assert np.array_equal(cupy.asnumpy(val).view(np.uint8), stored16.data.view(np.uint8))
