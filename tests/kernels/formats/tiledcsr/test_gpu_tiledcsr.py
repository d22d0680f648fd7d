"""GPU Tiled-CSR kernel (kernels/formats/tiledcsr/launch.py, kernels/formats/tiledcsr/tiledcsr_spmm.cu) for TF32 / FP16 / BF16 against
float64: every call on a NaN-poisoned out (every element must be written), rectangular shapes, empty tiles and
groups, widths and N not multiples of the tile (the vec kernel, the edge kernel, and both in one call), row groups
of several chunks, blocks that walk several row groups (row_slots), 2D and 3D grids, chunk sizes, unroll and warp
counts, accumulate, determinism (bit-identical across runs and across all of those launch choices); row groups split
into pieces (a power-law hub, a split at a chunk boundary, a one-tile piece) summed by the fixup, with accumulate and
16-bit C; the plan with format="tiledcsr" and "auto"."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if cupy.cuda.runtime.getDeviceCount() == 0:  # pragma: no cover - CuPy installed without a device
    pytest.skip("needs a CUDA device", allow_module_level=True)
from kernels.formats import get as _get_format  # noqa: E402

if not _get_format("tiledcsr").gpu_ready:  # gated off in kernels/formats/tiledcsr/plugin.py until these pass
    pytest.skip(f"tiledcsr: {_get_format('tiledcsr').gpu_not_ready_why}", allow_module_level=True)

from kernels.formats.tiledcsr import launch as lt  # noqa: E402
from kernels.formats import get  # noqa: E402
from kernels.formats.tiledcsr.container import TiledCSR  # noqa: E402
from kernels.precision import precision  # noqa: E402
from kernel_cases import BASE_CASES, host_b, random_csr, rounded_ref  # noqa: E402

PRECISIONS = ("float32", "float16", "bfloat16")
# Against the float64 product of the precision-rounded A and B (TF32 and 16-bit products are exact in fp32): only
# the fp32 summation order differs, ~1e-6 relative; the hub row sums 40,000 products, hence 1e-4 (a wrong slot or
# B row gives O(1)). A 16-bit C adds one rounding per element: 2^-11 float16, 2^-8 bfloat16.
ROUNDED_RTOL = {"float32": 1e-4, "float16": 1e-3, "bfloat16": 8e-3}

CASES = {**BASE_CASES,
         "partial_last_tiles": lambda: random_csr((37, 45), 900, seed=11),  # 37 = 2 x 16 + 5 rows, 45 columns
         "dense_rows": lambda: random_csr((64, 300), 64 * 200, seed=12),  # near-full tiles, 19-38 per group
         "long_groups": lambda: random_csr((70, 2000), 70 * 60, seed=13)}  # 49-98 sparse tiles a group; 6 rows last


def poisoned(shape, p):
    if p.name == "float32":
        return cupy.full(shape, np.nan, dtype=cupy.float32)
    return cupy.full(shape, 0x7E00 if p.name == "float16" else 0x7FC0, dtype=cupy.uint16).view(p.storage_dtype)


def rel_err(C, ref):
    return float(np.linalg.norm(C - ref) / max(np.linalg.norm(ref), 1e-300))


def run(X, p, B, out=None, **kw):
    dm = lt.upload(X, p.name)
    Bd = cupy.asarray(p.to_storage(B))
    out = lt.spmm(dm, Bd, out, **kw)
    return p.to_float32(cupy.asnumpy(out)).astype(np.float64)


@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("N", [1, 13, 64, 77, 128, 136, 520])  # 520: vec kernel on 512 columns, edge on 8
def test_kernel_against_float64(name, p_name, N):
    p = precision(p_name)
    A = sp.csr_array(CASES[name](), dtype=np.float32)
    X = get("tiledcsr").convert(A, p)
    B = host_b(A.shape[1], N)
    ref = rounded_ref(A, B, p)
    C = run(X, p, B, poisoned((A.shape[0], N), p))  # C in the precision's storage dtype
    assert not np.isnan(C).any(), "every element of C is written"
    tol = ROUNDED_RTOL[p_name]
    assert np.allclose(C, ref, rtol=tol, atol=tol * max(np.abs(ref).max(initial=0), 1)), rel_err(C, ref)
    Cf = run(X, p, B, cupy.full((A.shape[0], N), np.nan, dtype=cupy.float32))  # float32 C from 16-bit inputs
    assert rel_err(Cf, ref) < ROUNDED_RTOL["float32"]  # fp32 sums only (the hub row: 40,000 products)


@pytest.mark.parametrize("p_name", PRECISIONS)
def test_contract_against_unrounded_float64(p_name):
    p = precision(p_name)
    A = sp.csr_array(random_csr((333, 257), 9000, seed=3), dtype=np.float32)
    B = host_b(257, 96)
    C = run(get("tiledcsr").convert(A, p), p, B)
    assert rel_err(C, A.astype(np.float64) @ B.astype(np.float64)) <= p.tolerance


@pytest.mark.parametrize("p_name", PRECISIONS)
def test_empty_tiles_and_groups(p_name):
    """Tiles whose entries were all removed (a tile with columns but no nonzeros), empty groups, nnz = 0."""
    p = precision(p_name)
    A = sp.csr_array(BASE_CASES["empty_windows"](), dtype=np.float32)
    X = get("tiledcsr").convert(A, p)
    t = int(X.group_ptr[0])  # empty tile 0 of group 0: drop its entries, keep its columns
    p0, p1 = int(X.tile_ptr[t]), int(X.tile_ptr[t + 1])
    tile_ptr = X.tile_ptr.copy()
    tile_ptr[t + 1:] -= p1 - p0
    ip = X.tile_indptr.copy()
    ip[t] = 0
    E = TiledCSR(X.shape, X.group_ptr, tile_ptr, X.tile_cols, ip, np.delete(X.tile_indices, np.s_[p0:p1]),
                 np.delete(X.data, np.s_[p0:p1]))
    E.validate(full=True)
    B = host_b(A.shape[1], 72)
    Er = TiledCSR(E.shape, E.group_ptr, E.tile_ptr, E.tile_cols, E.tile_indptr, E.tile_indices,
                  p.rounded(p.to_float32(E.data)).astype(np.float32))  # what the Tensor Cores read
    ref = get("tiledcsr").reference_spmm(Er, p.rounded(B))
    C = run(E, p, B)
    assert np.allclose(C, ref, rtol=ROUNDED_RTOL[p_name], atol=1e-3)
    assert not C[16:48].any()  # the empty groups are written as zeros
    Z = get("tiledcsr").convert(sp.csr_array((40, 30), dtype=np.float32), p)
    assert not run(Z, p, host_b(30, 16), poisoned((40, 16), p)).any()


def unaligned(Bh, p):
    """B on the device 2 bytes off a 16-byte boundary: FLAG_VEC off, so the edge kernel takes every chunk."""
    flat = cupy.empty(Bh.size + 8, dtype=p.storage_dtype)
    Bd = flat[1:1 + Bh.size].reshape(Bh.shape)
    Bd[...] = cupy.asarray(p.to_storage(Bh))
    assert Bd.data.ptr % 16 and Bd.flags.c_contiguous
    return Bd


@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("bands", [1, 2, 3, 8])
def test_grids_and_launch_choices_agree_bitwise(p_name, bands):
    """3D tiling, row slots, chunk size, unroll and warps per block change only which block computes a C tile and
    when; the edge kernel only how B is loaded and C stored: each warp sums its piece's tiles in tile order, so C
    is bit-identical across all of them. The pieces are the TiledArrays' (a function of the matrix, fixed at
    upload), shared by every launch compared here."""
    p = precision(p_name)
    A = sp.csr_array(CASES["dense_rows"](), dtype=np.float32)
    X = get("tiledcsr").convert(A, p)
    Bh = host_b(300, 1000)  # 1000 columns: one full 512-column chunk (vec kernel) and a partial one (edge kernel)
    dm, Bd = lt.upload(X, p.name), cupy.asarray(p.to_storage(Bh))
    base = cupy.asnumpy(lt.spmm(dm, Bd, bands=1))

    def same(C):
        assert np.array_equal(cupy.asnumpy(C).view(np.uint8), base.view(np.uint8))

    same(lt.spmm(dm, Bd, bands=bands))
    same(lt.spmm(dm, Bd, bands=bands, row_slots=1))  # one block row walks all 4 groups as one stream
    for cfg in (lt.TiledConfig(chunk_tiles=2), lt.TiledConfig(chunk_tiles=16, unroll=1),
                lt.TiledConfig(max_warps=1, chunk_tiles=4), lt.TiledConfig(max_warps=2, unroll=4)):
        same(lt.spmm(dm, Bd, config=cfg, bands=bands))
    same(lt.spmm(dm, unaligned(Bh, p), bands=bands))  # the edge kernel everywhere


@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("row_slots", [1, 2, 3])
def test_blocks_walking_several_groups(p_name, row_slots):
    """A block's stream crosses groups with more tiles than a chunk, empty groups (16..47) and the partial last
    group: every C element written once, as the float64 product."""
    p = precision(p_name)
    A = sp.csr_array(random_csr((70, 900), 70 * 80, seed=14), dtype=np.float32).tolil()
    A[16:48] = 0
    A = sp.csr_array(A)
    X = get("tiledcsr").convert(A, p)
    B = host_b(900, 200)
    ref = rounded_ref(A, B, p)
    for cfg in (lt.TILED_CONFIG, lt.TiledConfig(chunk_tiles=2, max_warps=1)):
        dm = lt.upload(X, p.name)
        out = poisoned((70, 200), p)
        C = p.to_float32(cupy.asnumpy(lt.spmm(dm, cupy.asarray(p.to_storage(B)), out, config=cfg,
                                              row_slots=row_slots))).astype(np.float64)
        assert not np.isnan(C).any() and not C[16:48].any()
        tol = ROUNDED_RTOL[p_name]
        assert np.allclose(C, ref, rtol=tol, atol=tol * max(np.abs(ref).max(initial=0), 1)), rel_err(C, ref)


@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("N", [200, 1000])  # 200: the edge kernel alone; 1000: vec and edge kernels in one call
def test_deterministic_and_accumulate(p_name, N):
    p = precision(p_name)
    A = sp.csr_array(BASE_CASES["hub_row"](), dtype=np.float32)
    X = get("tiledcsr").convert(A, p)
    dm = lt.upload(X, p.name)
    Bd = cupy.asarray(p.to_storage(host_b(A.shape[1], N)))
    one, two = lt.spmm(dm, Bd), lt.spmm(dm, Bd)
    assert np.array_equal(cupy.asnumpy(one).view(np.uint8), cupy.asnumpy(two).view(np.uint8))
    out = cupy.ones((A.shape[0], N), dtype=cupy.float32)
    lt.spmm(dm, Bd, out, accumulate=True)
    ref = rounded_ref(A, p.to_float32(cupy.asnumpy(Bd)).astype(np.float64), p) + 1.0
    assert np.allclose(cupy.asnumpy(out), ref, rtol=1e-4, atol=1e-3 * np.abs(ref).max())


def test_launcher_checks():
    p = precision("float16")
    A = sp.csr_array(random_csr((40, 30), 200, seed=2), dtype=np.float32)
    with pytest.raises(ValueError, match="needs 16-wide float16 tiles"):
        lt.upload(get("tiledcsr").convert(A, precision("float32")), "float16")
    dm = lt.upload(get("tiledcsr").convert(A, p), "float16")
    with pytest.raises(TypeError, match="C-contiguous 2-D cupy float16"):
        lt.spmm(dm, cupy.zeros((30, 8), dtype=cupy.float32))
    with pytest.raises(ValueError, match="B has 31 rows"):
        lt.spmm(dm, cupy.zeros((31, 8), dtype=cupy.float16))


@pytest.mark.parametrize("p_name", PRECISIONS)
def test_plan_runs_tiledcsr_and_auto(p_name):
    from kernels.spmm import SpmmPlan

    p = precision(p_name)
    A = sp.csr_array(random_csr((500, 400), 20_000, seed=5), dtype=np.float32)
    B = host_b(400, 128)
    exact = A.astype(np.float64) @ B.astype(np.float64)
    plan = SpmmPlan(A, dtype=p_name, format="tiledcsr")
    assert plan.choice["format"] == "tiledcsr" and plan.choice["kernel"] == "tiledcsr-tile"
    C = p.to_float32(cupy.asnumpy(plan.run(cupy.asarray(p.to_storage(B))))).astype(np.float64)
    assert rel_err(C, exact) <= p.tolerance
    auto = SpmmPlan(A, dtype=p_name, format="auto", auto_candidates=16)  # every candidate built, Tiled-CSR among them
    assert "tiledcsr" in auto._ops
    C = p.to_float32(cupy.asnumpy(auto.run(cupy.asarray(p.to_storage(B))))).astype(np.float64)
    assert rel_err(C, exact) <= p.tolerance


def power_law_csr(seed=21):
    """3000 x 2500, Pareto row degrees (most rows a few entries) plus two hub rows (2500 and 1800 entries): their
    groups hold ~160 and ~120 tiles of 16 against a mean of ~10, so `auto_piece_tiles` splits them."""
    rng = np.random.default_rng(seed)
    deg = np.minimum(2500, (rng.pareto(1.2, 3000) * 2 + 1).astype(np.int64))
    deg[[7, 1500]] = [2500, 1800]
    rows = np.repeat(np.arange(3000), deg)
    cols = np.concatenate([rng.choice(2500, d, replace=False) for d in deg])
    vals = rng.standard_normal(rows.shape[0]).astype(np.float32)
    return sp.csr_array(sp.coo_array((vals, (rows, cols)), shape=(3000, 2500)))


def hub_group_csr():
    """40 x 520, row 3 dense: group 0 has exactly 33 tiles of 16 (65 of 8), so P = 16 splits it at chunk boundaries
    into 16 | 16 | 1 (TF32: 16 x 4 | 1); group 1 empty; group 2 partial (8 rows)."""
    A = random_csr((40, 520), 900, seed=9).tolil()
    A[16:32] = 0
    A[3, :] = np.linspace(-1.0, 1.0, 520, dtype=np.float32)
    return sp.csr_array(A)


SPLIT_CASES = {"power_law": power_law_csr, "hub_group": hub_group_csr}


@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("name, piece_tiles", [("power_law", None), ("power_law", 3), ("hub_group", 16),
                                               ("hub_group", 1)])
@pytest.mark.parametrize("N", [13, 64, 520])
def test_split_groups_against_float64(name, piece_tiles, p_name, N):
    p = precision(p_name)
    A = sp.csr_array(SPLIT_CASES[name](), dtype=np.float32)
    X = get("tiledcsr").convert(A, p)
    dm = lt.upload(X, p.name, piece_tiles)
    assert dm.pieces.n_slots > 0, "a group is split"
    if name == "hub_group" and piece_tiles == 16:
        assert int(np.diff(dm.pieces.piece_ptr).min()) == 0 and 1 in np.diff(dm.pieces.piece_ptr)  # a 1-tile piece
    B = host_b(A.shape[1], N)
    ref = rounded_ref(A, B, p)
    Bd = cupy.asarray(p.to_storage(B))
    tol = ROUNDED_RTOL[p_name]
    for out in (poisoned((A.shape[0], N), p), cupy.full((A.shape[0], N), np.nan, dtype=cupy.float32)):
        C = p.to_float32(cupy.asnumpy(lt.spmm(dm, Bd, out))).astype(np.float64)
        assert not np.isnan(C).any(), "every element of C is written"
        assert np.allclose(C, ref, rtol=tol, atol=tol * max(np.abs(ref).max(initial=0), 1)), rel_err(C, ref)


@pytest.mark.parametrize("p_name", PRECISIONS)
@pytest.mark.parametrize("N", [64, 200, 1000])  # 64: the vec kernel; 200: the edge kernel; 1000: both
def test_split_groups_accumulate_16bit_and_deterministic(p_name, N):
    """The fixup's store is half_store's: accumulate into float32 and (16-bit) into B's type over split groups; two
    runs and every launch choice on the same pieces give bit-identical C."""
    p = precision(p_name)
    A = sp.csr_array(power_law_csr(), dtype=np.float32)
    dm = lt.upload(get("tiledcsr").convert(A, p), p.name, 4)  # P = 4: the hubs in ~40 pieces, most groups split
    assert dm.pieces.n_slots > 100
    Bd = cupy.asarray(p.to_storage(host_b(A.shape[1], N)))
    ref = rounded_ref(A, p.to_float32(cupy.asnumpy(Bd)).astype(np.float64), p)
    one = cupy.asnumpy(lt.spmm(dm, Bd))
    for C in (lt.spmm(dm, Bd), lt.spmm(dm, Bd, bands=3), lt.spmm(dm, Bd, row_slots=7),
              lt.spmm(dm, Bd, config=lt.TiledConfig(chunk_tiles=2, max_warps=2, unroll=1))):
        assert np.array_equal(cupy.asnumpy(C).view(np.uint8), one.view(np.uint8))
    assert rel_err(one.astype(np.float64), ref) < ROUNDED_RTOL["float32"]
    out = cupy.ones((A.shape[0], N), dtype=cupy.float32)
    lt.spmm(dm, Bd, out, accumulate=True)
    assert np.allclose(cupy.asnumpy(out), ref + 1.0, rtol=1e-4, atol=1e-3 * np.abs(ref).max())
    if p_name == "float32":
        return
    half = cupy.asarray(p.to_storage(np.full((A.shape[0], N), 0.5, np.float32)))
    lt.spmm(dm, Bd, half, accumulate=True)  # one rounding of (fp32 sum + 0.5) per element
    C16 = p.to_float32(cupy.asnumpy(half)).astype(np.float64)
    tol = ROUNDED_RTOL[p_name]
    assert np.allclose(C16, ref + 0.5, rtol=tol, atol=tol * np.abs(ref).max()), rel_err(C16, ref + 0.5)
    C16 = p.to_float32(cupy.asnumpy(lt.spmm(dm, Bd, out_dtype=p.storage_dtype))).astype(np.float64)
    assert np.allclose(C16, ref, rtol=tol, atol=tol * np.abs(ref).max()), rel_err(C16, ref)
