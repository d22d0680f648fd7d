"""GPU deterministic CUDA-core CSR SpMM (kernels/formats/csr/launch.py, csr_spmm.cu) for float32 / float16 /
bfloat16 against float64: NaN-poisoned out (every element written), rectangular shapes, empty rows, a hub row cut
into pieces (the fixup kernel), N off the 16-byte path, float32 and 16-bit C, accumulate, two runs bit-identical,
the bound launch equal to the plain one; 16-bit B on every mapping (4 values per lane; 8 where N % 8 == 0, "wide"
and "pair", with 16-byte loads where the buffers are aligned), `CsrRows.tune` keeping one of them; float32 A on
those mappings over B's per-call 16-bit copy (csr_pack_b: the copy and its scales bit for bit a NumPy twin's,
infinities, NaNs and extreme ranges included); SpmmPlan's "csr-rows" kernel on request and in its timed choice."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)

from kernels.formats.csr.launch import FLOAT32_MAPS, MAPS, PAIRED, CsrConfig, CsrRows, maps_for  # noqa: E402
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


def packed_b(Bh) -> tuple:
    """NumPy twin of csr_pack_b, widened back: each row of float32 B, its subnormals read as zeros of their sign (the
    kernels run with denormals flushed), times 2^shift (shift puts its largest finite magnitude m in [2^14, 2^15),
    clamped to [-113, 126]; 0 for a row of zeros), rounded to float16, times 2^-shift: the B that float32 A's 16-bit
    mappings multiply, exactly (float64), with the float16 copy and the float32 scales."""
    Bh = np.asarray(Bh, dtype=np.float32)
    Bh = np.where(np.abs(Bh) < np.finfo(np.float32).tiny, np.copysign(np.float32(0), Bh), Bh)
    a = np.abs(Bh.astype(np.float64))
    m = np.where(np.isfinite(a), a, 0.0).max(axis=1, initial=0.0)
    e = np.frexp(np.where(m > 0, m, 1.0))[1] - 1  # floor(log2 m)
    shift = np.where(m > 0, np.clip(14 - e, -113, 126), 0)
    up = np.ldexp(np.float32(1), shift).astype(np.float32)[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        q = (Bh * up).astype(np.float16)
    return q.astype(np.float64) * np.ldexp(1.0, -shift)[:, None], q, np.ldexp(np.float32(1), -shift).astype(np.float32)


def b_as_multiplied(p, Bh, mapping: str) -> np.ndarray:
    """B as the kernel multiplies it (float64): the precision's storage, or float32's 16-bit copy on a 16-bit
    mapping."""
    if p.name == "float32" and mapping != "rows":
        return packed_b(Bh)[0]
    return p.to_float32(p.to_storage(Bh)).astype(np.float64)


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
    op = CsrRows(A, p, CsrConfig(seg_len=64))  # small pieces: the hub and long rows go through the fixup
    mappings = ("rows", *maps_for(N))  # N = 272: the 16-column mappings too (float32: over B's 16-bit copy)
    assert op.mapping(N) == ("wide" if p.half and len(mappings) > 1 else "rows")  # untuned
    for dtype, mapping in itertools.product({np.dtype(np.float32), p.storage_dtype}, mappings):
        ref = stored(A, p) @ b_as_multiplied(p, Bh, mapping)
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


@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("N, shift, mapping", [(136, 0, "wide"), (136, 1, "wide"), (136, 0, "pair"),
                                               (136, 1, "pair"), (132, 0, None), (272, 0, "pair16"),
                                               (272, 1, "pair16"), (528, 0, "pair16_deep"),
                                               (528, 1, "pair16_deep")])
def test_16bit_mappings(p_name, N, shift, mapping):
    """16-bit B: N % 8 == 0 takes an 8-values-per-lane kernel ("wide": half-warps on alternate nonzeros; "pair": a
    half-warp per segment), N % 16 == 0 from 256 also a 16-values one ("pair16", "pair16_deep"), with 16-byte
    loads, or element loads when B and C are not 16-byte aligned (``shift``: one element off); N = 132 the
    4-values kernel. float32 runs them over B's 16-bit copy (its pass with element loads where B is off). Each
    matches float64 and is bitwise repeatable."""
    p = precision(p_name)
    A = sp.csr_array(BASE_CASES["hub_row"](), dtype=np.float32)
    K = A.shape[1]
    Bh = np.random.default_rng(5).standard_normal((K, N)).astype(np.float32)
    ref = stored(A, p) @ b_as_multiplied(p, Bh, mapping or "rows")
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
        for mapping in (MAPS if p.half else (None,) + MAPS):  # N = 272: every mapping takes it
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
    and "pair16_deep" where N % 16 == 0 from 256; float32 "rows" and FLOAT32_MAPS over B's 16-bit copy) and later
    calls run the one kept, bit for bit what that mapping gives; nothing to tune where N % 8 != 0 or for float32
    without the copy (``half_b`` off); a mapping the kernel lacks, or not for this N, is refused."""
    p = precision(p_name)
    A = sp.csr_array(sp.vstack([BASE_CASES["hub_row"](), random_csr((501, BASE_CASES["hub_row"]().shape[1]), 4000,
                                                                    seed=6)]), dtype=np.float32)  # odd segments
    op = CsrRows(A, p, CsrConfig(seg_len=64))
    B = cupy.asarray(p.to_storage(np.random.default_rng(7).standard_normal((A.shape[1], 136))))
    if not p.half:  # without B's 16-bit copy float32 has "rows" alone
        off = CsrRows(A, p, CsrConfig(seg_len=64, half_b=False))
        assert off.tune(B) is None and off.maps == {} and off.mapping(136) == "rows"
        with pytest.raises(ValueError, match="mapping 'pair'"):
            off.run(B, cupy.empty((A.shape[0], 136), cupy.float32), mapping="pair")
    ms = op.tune(B)
    timed = ("wide", "pair") if p.half else ("rows",) + FLOAT32_MAPS
    assert set(ms) == set(timed) and all(v > 0 for v in ms.values())
    kept = op.maps[136]
    assert kept == min(timed, key=ms.get) and op.mapping_ms[136] == ms
    assert (136 in op._packed) == (op.packs and kept != "rows")  # the copy's buffers: kept only where used
    with pytest.raises(ValueError, match="mapping 'pair16'"):  # 136 columns: no 16-column mapping
        op.run(B, cupy.empty((A.shape[0], 136), p.storage_dtype), mapping="pair16")
    B256 = cupy.asarray(p.to_storage(np.random.default_rng(8).standard_normal((A.shape[1], 256))))
    ms256 = op.tune(B256)
    timed = MAPS if p.half else ("rows",) + FLOAT32_MAPS
    assert set(ms256) == set(timed) and op.maps[256] == min(timed, key=ms256.get)
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


def test_float32_tunes_without_the_copy_where_it_does_not_fit(monkeypatch):
    """float32's `tune` times "rows" alone, and keeps it, where allocating B's 16-bit copy fails (out of memory);
    the plan's C is then float32 B's, within float32's own rounding."""
    p = precision("float32")
    A = sp.csr_array(random_csr((700, 500), 7000, seed=13), dtype=np.float32)
    op = CsrRows(A, p)
    Bh = np.random.default_rng(14).standard_normal((500, 128)).astype(np.float32)

    def full(N):
        raise cupy.cuda.memory.OutOfMemoryError(500 * N * 2, 0)

    monkeypatch.setattr(op, "packed", full)
    assert set(op.tune(cupy.asarray(Bh))) == {"rows"} and op.mapping(128) == "rows"
    C = cupy.asnumpy(op.run(cupy.asarray(Bh), cupy.empty((700, 128), cupy.float32)))
    ref = A.astype(np.float64) @ Bh.astype(np.float64)
    assert np.allclose(C, ref, rtol=RTOL["float32"], atol=RTOL["float32"] * np.abs(ref).max())


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


@pytest.mark.parametrize("shift, N", [(0, 136), (1, 136), (0, 128), (1, 128), (0, 40)])
def test_float32_copy_of_b_is_the_numpy_twins(shift, N):
    """csr_pack_b (float32 A's 16-bit mappings; ``shift``: B one element off 16 bytes, its element-load pass; N <= 128
    with 16-byte loads: CsrConfig.pack_rows rows a warp, K = 67 leaving the last warp short of rows): the
    copy and its scales are bit for bit `packed_b`'s on rows of zeros, of one value, with infinities and NaNs, of
    1e37-1e38 and of float32 subnormals (read as zeros: the GPU flushes them, measured on the H200), and across 2^40
    within one row (float16's subnormals there); every normal value to TF32's precision down to 2^-28 of its row's
    largest; C from it matches float64 of that B, and rows of an identity give the copy back with its infinities
    and NaNs; C += A @ B adds once; the bound call is the plain one, bit for bit."""
    p = precision("float32")
    rng = np.random.default_rng(11)
    K = 67
    Bh = rng.standard_normal((K, N)).astype(np.float32)
    Bh[1] = 0.0
    Bh[2] = 3.0
    Bh[3, 5], Bh[4, 7], Bh[4, 9] = np.inf, np.nan, -np.inf
    Bh[5] *= np.float32(1e37)
    Bh[6] = (Bh[6] * np.float32(1e-40)).astype(np.float32)  # float32 subnormals
    Bh[7] *= np.exp2(rng.uniform(-40, 0, N)).astype(np.float32)  # 2^40 of range in one row
    Bh[8] = np.float32(1e38) * np.sign(rng.standard_normal(N)).astype(np.float32)
    head = sp.lil_array(random_csr((290, K), 2900, seed=12))
    head[:, [3, 4, 5, 8]] = 0  # products that would overflow or carry inf / NaN: only the identity rows see them
    A = sp.csr_array(sp.vstack([sp.csr_array(head), sp.csr_array(np.eye(10, K, 3))]), dtype=np.float32)
    A.eliminate_zeros()
    B = cupy.empty(K * N + shift, dtype=cupy.float32)[shift:].reshape(K, N)
    B[...] = cupy.asarray(Bh)
    op = CsrRows(A, p, CsrConfig(seg_len=64))
    C = cupy.asnumpy(op.run(B, poisoned((A.shape[0], N), np.float32), mapping="pair"))
    wide, q, scale = packed_b(Bh)
    copy, scales = op.packed(N)
    got = cupy.asnumpy(copy).reshape(K, N).view(np.float16)
    assert np.array_equal(np.isnan(got), np.isnan(q))  # a NaN's bits are the converter's own
    bad = np.argwhere((got.view(np.uint16) != q.view(np.uint16)) & ~np.isnan(q))
    assert bad.size == 0, [(int(r), int(c), float(Bh[r, c]), float(got[r, c]), float(q[r, c])) for r, c in bad[:8]]
    assert np.array_equal(cupy.asnumpy(scales), scale)
    assert scale[1] == 1.0 and scale[2] == 2.0 ** -13  # zeros: no scale; 3.0 -> 3 x 2^13 in [2^14, 2^15)
    assert scale[6] == 1.0 and not got[6].any()  # a row of float32 subnormals: zeros, unscaled
    finite = np.isfinite(Bh)
    assert np.array_equal(np.isfinite(wide), finite) and np.array_equal(np.isnan(wide), np.isnan(Bh))
    normal = finite & (np.abs(Bh) >= np.finfo(np.float32).tiny)
    x = np.where(normal, Bh, 0).astype(np.float64)
    top = np.abs(x).max(axis=1, keepdims=True)
    err = np.abs(np.where(normal, wide, 0) - x)
    assert (err[np.abs(x) >= top * 2.0 ** -28] <= 2.0 ** -11 * np.abs(x)[np.abs(x) >= top * 2.0 ** -28]).all()
    assert (err <= np.maximum(2.0 ** -11 * np.abs(x), top * 2.0 ** -38)).all()
    ref = stored(A[:290], p) @ wide  # rows 3, 4, 5, 8 of B unused here
    assert np.allclose(C[:290], ref, rtol=RTOL["float32"], atol=RTOL["float32"] * np.abs(ref).max())
    assert np.array_equal(C[290:], wide[3:13].astype(np.float32), equal_nan=True)  # infinities, NaNs carried
    bound = op.bind(B, poisoned((A.shape[0], N), np.float32), mapping="pair")
    again = cupy.asnumpy(bound(cupy.cuda.get_current_stream().ptr))
    assert np.array_equal(again.view(np.uint32), C.view(np.uint32))
    acc = cupy.ones((A.shape[0], N), cupy.float32)
    op.run(B, acc, accumulate=True, mapping="wide")
    want = cupy.asnumpy(op.run(B, cupy.empty_like(acc), mapping="wide")) + np.float32(1)
    assert np.allclose(cupy.asnumpy(acc), want, rtol=1e-6, atol=1e-5, equal_nan=True)


def test_a_prepared_operator_gives_the_same_arrays_and_bits_and_a_plan_prepares_its_fallback():
    """CsrDevice.prepare builds CsrRows on a background thread: the same arrays and bits as one built in place; a
    plan whose format lists the CSR kernel as a fallback starts it when it is made, and it is done (its copies
    landed) by the time the plan is, before anything is timed."""
    from kernels.formats.csr.plugin import CsrDevice
    from kernels.spmm import SpmmPlan

    p = precision("float16")
    A = sp.csr_array(BASE_CASES["hub_row"](), dtype=np.float32)
    B = cupy.asarray(p.to_storage(np.random.default_rng(3).standard_normal((A.shape[1], 128))))
    fresh, dev = CsrRows(A, p), CsrDevice(A, p)
    future = dev.prepare()
    assert dev.prepare() is future and future.result()[0] is not None
    given = dev._get()
    assert "background" in dev.timings["conversion"] and dev.prepare() is None  # built: nothing to start
    for name in ("indices", "data", "seg_ptr", "seg_row", "seg_slot", "fix_row", "fix_ptr", "slot_long"):
        assert bool((getattr(fresh, name) == getattr(given, name)).all()), name
    assert (fresh.n_segs, fresh.n_long, fresh.n_slots, fresh.tail0) == (given.n_segs, given.n_long, given.n_slots,
                                                                        given.tail0)
    one = fresh.run(B, cupy.empty((A.shape[0], 128), cupy.float32))
    two = given.run(B, cupy.empty((A.shape[0], 128), cupy.float32))
    assert bool((one.view(cupy.uint32) == two.view(cupy.uint32)).all())
    plan = SpmmPlan(A, device="gpu", dtype="float16", format="metcf")
    csr = plan._op("csr-rows")
    assert "csr-rows" in plan._fallbacks and csr._pending is not None and csr._pending.done()
    plan.run(B, kernel="csr-rows")  # as the decision's timing of the fallback would build it
    assert csr._rows is not None and "background" in csr.timings["conversion"]
    off = SpmmPlan(A, device="gpu", dtype="float16", format="metcf", autotune=False)
    assert "csr-rows" not in off._by_kernel  # nothing timed against the choice: nothing prepared
