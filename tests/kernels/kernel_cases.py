"""Matrices that hit the edge cases of 16x8 tiling, shared by the kernels tests (CPU and GPU)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def random_csr(shape, nnz, seed, index_dtype=np.int32):
    """Random distinct positions, normal values; canonical CSR with the given index dtype."""
    rng = np.random.default_rng(seed)
    n_rows, n_cols = shape
    flat = rng.choice(n_rows * n_cols, size=min(nnz, n_rows * n_cols), replace=False) if n_rows * n_cols else []
    rows, cols = np.divmod(np.asarray(flat, dtype=np.int64), max(n_cols, 1))
    A = sp.csr_array((rng.standard_normal(len(rows)), (rows, cols)), shape=shape)
    A.sum_duplicates()
    A.indices, A.indptr = A.indices.astype(index_dtype), A.indptr.astype(index_dtype)
    return A


def empty_windows():
    A = random_csr((100, 50), 600, seed=2).tolil()
    A[16:48] = 0  # windows 1 and 2 entirely empty
    A[5] = 0
    A[99] = 0
    A = sp.csr_array(A)
    A.eliminate_zeros()
    return A


def hub_row():
    """Row 17 holds 40,000 nonzeros: window 1 spans 5,000 blocks (one row, 8 per block)."""
    A = random_csr((33, 100_000), 500, seed=3).tolil()
    A[17, np.random.default_rng(4).choice(100_000, 40_000, replace=False)] = 1.5
    return sp.csr_array(A)


def explicit_zeros():
    A = random_csr((50, 70), 400, seed=5)
    A.data[::3] = 0.0  # stored zeros must survive the round trip
    return A


# The shapes every ME-TCF test covers: remainders of 16 and 8, rectangular both ways, empty windows, nnz = 0,
# a hub row spanning 5,000 blocks, stored zeros.
BASE_CASES = {
    "7x333": lambda: random_csr((7, 333), 333, seed=0),
    "1000x37": lambda: random_csr((1000, 37), 3000, seed=1),
    "37x5000": lambda: random_csr((37, 5000), 2000, seed=6),
    "empty_windows": empty_windows,
    "nnz0": lambda: sp.csr_array((40, 30)),
    "hub_row": hub_row,
    "explicit_zeros": explicit_zeros,
}


def host_b(K, N, seed=1):
    """A seeded float32 B of K x N on the host."""
    return np.random.default_rng(seed).standard_normal((K, N)).astype(np.float32)


def rounded_ref(A, B, p):
    """float64 product of A and B rounded to the precision ``p`` (TF32 for float32), what the Tensor Cores
    multiply."""
    A = sp.csr_array(A, dtype=np.float32)
    Ar = sp.csr_array((p.rounded(A.data), A.indices, A.indptr), shape=A.shape)
    return Ar @ p.rounded(B)


def int64_columns():
    """K = 2**36 columns: column ids (and the CSR's indices) need int64 in every format."""
    cols = np.array([0, 2**31 + 5, 3 * 10**9, 7, 2**31 + 5, 2**35], dtype=np.int64)
    rows = np.array([0, 0, 3, 17, 18, 18], dtype=np.int64)
    return sp.csr_array((np.arange(1.0, 7.0), (rows, cols)), shape=(20, 2**36))


def as_float32(A, drop_zeros: bool = True):
    """A as a float32 CSR; stored zeros dropped unless ``drop_zeros`` is False (formats whose dense blocks cannot
    tell an explicit zero from padding compare against A without them)."""
    A = sp.csr_array(A, dtype=np.float32)
    if drop_zeros:
        A.eliminate_zeros()
    return A


def rel_err(C, exact) -> float:
    """Relative Frobenius error of C against a float64 reference."""
    return float(np.linalg.norm(np.asarray(C, dtype=np.float64) - exact) / np.linalg.norm(exact))


def check_plugin_precision(name: str, dtype: str):
    """A format's registered ``convert`` at ``dtype`` stores blocks of the precision's width and storage dtype, and
    its NumPy twin multiplies within the precision's tolerance; returns the converted object for more checks."""
    from kernels.formats import get
    from kernels.precision import precision

    p = precision(dtype)
    A = as_float32(random_csr((70, 90), 900, seed=5))
    X = get(name).convert(A, p)
    assert X.width == p.block_width and X.data.dtype == p.storage_dtype
    B = np.random.default_rng(2).standard_normal((90, 8))
    assert rel_err(get(name).reference_spmm(X, B), A.astype(np.float64) @ B) < p.tolerance
    return X


def check_cpu_plan(name: str, dtype: str, **convert_kw) -> None:
    """``SpmmPlan(format=name)`` on the CPU path, given the CSR and given the converted object (as the SpMM stage
    passes it), keeps the format and multiplies within the precision's tolerance."""
    from kernels.formats import get
    from kernels.precision import precision
    from kernels.spmm import SpmmPlan

    p = precision(dtype)
    A = as_float32(random_csr((100, 77), 1500, seed=8))
    B = np.random.default_rng(3).standard_normal((77, 16)).astype(np.float32)
    exact = A.astype(np.float64) @ B.astype(np.float64)
    for given in (A, get(name).convert(A, p, **convert_kw)):
        plan = SpmmPlan(given, device="cpu", dtype=dtype, format=name)
        assert plan.choice["format"] == name
        assert rel_err(p.to_float32(plan.run(B)), exact) < p.tolerance


def check_store_round_trip(tmp_path, name: str, dtype: str, fields, **convert_kw):
    """A format's object of ``BASE_CASES["empty_windows"]`` (100 rows: 7 windows, 1 and 2 empty) written to a block
    store in window ranges [0, 2, 7] and read back whole: every field equal in value and dtype. Returns (A, X, the
    matrix store) for reads of parts."""
    from kernels.formats import get
    from kernels.precision import precision
    from storage import BlockStore

    A = as_float32(BASE_CASES["empty_windows"]())
    X = get(name).convert(A, precision(dtype), **convert_kw)
    ms = BlockStore(tmp_path).matrix("gen.test")
    ms.write_format(name, f"k-{dtype}", X, {"dtype": dtype}, window_ranges=[0, 2, 7])
    back = get(name).from_arrays(ms.read_format(name, f"k-{dtype}"))
    for field in fields:
        assert np.array_equal(getattr(back, field), getattr(X, field)), field
        assert getattr(back, field).dtype == getattr(X, field).dtype, field
    assert back.shape == X.shape
    back.validate(full=True)
    return A, X, ms


# The PTX ISA side of the lane-by-lane kernel simulations (test_cvse_warp.py, test_tiledcsr_warp.py)
def byte_perm(x, y, sel):
    pool = x | (y << 32)
    return sum(((pool >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i) for i in range(4))


def mma_isa(a_regs, b_regs, tf32: bool, to_f):
    """D (16 x 8) = A Bt from the 32 lanes' registers, laid out as the PTX ISA documents m16n8k8 .tf32 / m16n8k16."""
    k = 8 if tf32 else 16
    A, Bt = np.zeros((16, k)), np.zeros((k, 8))
    for lane in range(32):
        g, q = lane >> 2, lane & 3
        if tf32:  # a0 (g, q), a1 (g+8, q), a2 (g, q+4), a3 (g+8, q+4); b0 (q, g), b1 (q+4, g)
            for i, (r, c) in enumerate([(g, q), (g + 8, q), (g, q + 4), (g + 8, q + 4)]):
                A[r, c] = to_f(a_regs[lane][i])
            Bt[q, g], Bt[q + 4, g] = to_f(b_regs[lane][0]), to_f(b_regs[lane][1])
        else:  # ai = pairs (row, 2q + {0, 1} (+8)), low half = lower k; b0 = Bt[2q..2q+1][g], b1 = Bt[2q+8..+9][g]
            for i, (r, c) in enumerate([(g, 2 * q), (g + 8, 2 * q), (g, 2 * q + 8), (g + 8, 2 * q + 8)]):
                A[r, c], A[r, c + 1] = to_f(a_regs[lane][i] & 0xFFFF), to_f(a_regs[lane][i] >> 16)
            for j, kk in enumerate([2 * q, 2 * q + 8]):
                Bt[kk, g], Bt[kk + 1, g] = to_f(b_regs[lane][j] & 0xFFFF), to_f(b_regs[lane][j] >> 16)
    D = A @ Bt
    return [[D[lane >> 2, 2 * (lane & 3)], D[lane >> 2, 2 * (lane & 3) + 1], D[(lane >> 2) + 8, 2 * (lane & 3)],
             D[(lane >> 2) + 8, 2 * (lane & 3) + 1]] for lane in range(32)]


def special_values():
    """-0.0, NaN, inf, a float16 overflow (1e6 -> inf), a bfloat16 tie and a float16 subnormal: a converter that
    converts values per nonzero must give the host converter's bits."""
    vals = np.array([-0.0, np.nan, np.inf, 1e6, 1.0 + 2.0**-8, 3e-6, 1.0 / 3.0, -7.0])
    return sp.csr_array((vals, ([0, 1, 2, 3, 15, 16, 16, 40], [0, 9, 17, 30, 31, 0, 33, 1])), shape=(41, 34))


# The GPU converters' cases (checked on NumPy by the *_xp tests, on the device by the GPU ones): every BASE_CASES
# shape plus no rows, one row, no columns, one column, special values, int64 indices, and random shapes
CONVERTER_CASES = {**BASE_CASES,
                   "zero_rows": lambda: sp.csr_array((0, 5)),
                   "one_row": lambda: random_csr((1, 300), 120, seed=9),
                   "one_row_no_cols": lambda: sp.csr_array((1, 0)),
                   "one_column": lambda: random_csr((70, 1), 40, seed=10),
                   "special_values": special_values,
                   "int64_columns": int64_columns,  # K = 2**36: column ids int64
                   "int64_indices_small": lambda: random_csr((300, 200), 2000, seed=7, index_dtype=np.int64),
                   **{f"random_{s}": (lambda s=s: random_csr((50 + 97 * s, 20 + 61 * s), 300 * s + 5, seed=s))
                      for s in range(6)}}


def assert_same_arrays(G, X, fields, where=np.ndarray):
    """Container G's arrays equal host container X's field by field, bit for bit (dtype, shape, bytes: -0.0 and NaN
    payloads included); G's arrays must be ``where`` arrays (np.ndarray, or cupy.ndarray for a device conversion:
    compared through a host copy)."""
    assert G.shape == X.shape and all(isinstance(n, int) for n in G.shape)
    for field in fields:
        got, want = getattr(G, field), getattr(X, field)
        assert isinstance(got, where), f"{field}: {type(got).__name__}, expected {where.__name__}"
        got = got if isinstance(got, np.ndarray) else got.get()
        assert got.dtype == want.dtype, f"{field}: dtype {got.dtype}, expected {want.dtype}"
        assert got.shape == want.shape, f"{field}: shape {got.shape}, expected {want.shape}"
        assert got.tobytes() == want.tobytes(), field
