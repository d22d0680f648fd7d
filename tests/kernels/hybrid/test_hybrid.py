"""The hybrid plan on the CPU (kernels.hybrid, kernels.formats.ranking.split): the split the cost model chooses on a
power-law graph and on uniform matrices, the row sets, the NumPy twin and SpmmPlan(format="hybrid", device="cpu")
against float64 in every precision, bitwise repeatable, and the edge cases (rectangular, empty rows, nnz = 0, all
rows or none on Tensor Cores)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from configs.errors import InputError
from hybrid_cases import CASES, FORCED, dense_core, power_law
from kernels.formats import REGISTRY, get
from kernels.formats.ranking import rank, split, split_cost, window_costs
from kernels.formats.structure import structure, window_stats
from kernels.hybrid import HYBRID, plan_candidates
from kernels.hybrid.parts import HybridA, reference_spmm, split_matrix, tc_formats, to_csr
from kernels.precision import precision as as_precision
from kernels.spmm import SpmmPlan
from tasks.fetch.generators import generate

PRECISIONS = ("float32", "float16", "bfloat16")


def rel_err(C, ref) -> float:
    """The precision contract's measure (kernels.precision): relative Frobenius error against float64."""
    return float(np.linalg.norm(C - ref) / max(np.linalg.norm(ref), 1e-30))


def operand(A, N=40, seed=1):
    return np.random.default_rng(seed).standard_normal((A.shape[1], N)).astype(np.float32)


def forced(name, precision):
    make, mask = FORCED[name]
    A = make()
    return A, split_matrix(A, precision, tc_windows=mask(-(-A.shape[0] // 16)))


# ----- the split -----
def test_per_window_statistics_sum_to_the_structure():
    A = power_law()
    st, win = structure(A, sample_nnz=None), window_stats(A)
    pw = win.per_window()
    assert win.exact and win.rows.sum() == A.shape[0] and win.nnz.sum() == A.nnz
    for w in (8, 16):
        assert pw.tc_blocks[w].sum() == st.tc_blocks[w] and pw.tc_blocks[w].max() == st.tc_blocks_max[w]
        assert pw.bcsr_blocks[w].sum() == st.bcsr_blocks[w] and pw.bcsr_blocks_max[w].max() == st.bcsr_blocks_max[w]
    for V in (2, 4, 8, 16):
        assert pw.vectors[V].sum() == st.vectors[V] and pw.vectors_max[V].max() == st.vectors_max[V]
    assert pw.row_nnz_max.max() == st.row_nnz_max and pw.nonempty_rows.sum() == st.nonempty_rows


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_format_costed_per_window_sums_to_its_estimate(precision):
    A = power_law()
    st, pw = structure(A, sample_nnz=None), window_stats(A).per_window()
    for fmt in tc_formats(precision):
        add, peak, launch = window_costs(fmt, pw, precision, 128)
        assert add.sum() + peak.max() + launch == pytest.approx(fmt.estimate(st, precision, 128), rel=1e-9)
    csr = get("csr")  # its index bytes count one row pointer per window more: within 0.1 %
    add, peak, launch = window_costs(csr, pw, precision, 128)
    assert add.sum() + peak.max() + launch == pytest.approx(csr.estimate(st, precision, 128), rel=1e-3)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_dense_core_splits_and_power_law_and_uniform_matrices_do_not(precision):
    A = dense_core()
    s = split_matrix(A, precision).split
    core = np.arange(s.tc.size) >= s.tc.size - 64  # the community's windows: Tensor Cores for (nearly) all of them
    assert not (s.tc & ~core).any() and s.tc.sum() >= 60 and not s.scattered
    assert s.tc_format == "metcf" and s.summary()["tc_nnz_share"] > 0.5
    assert s.predicted_us < min(s.tc_us, s.cuda_us)  # the hybrid beats both of its parts alone
    ranked = dict((f.name, us) for f, us in rank(plan_candidates("auto", precision), structure(A), precision, 128))
    assert ranked["hybrid"] is not None and ranked["hybrid"] < min(ranked["metcf"], ranked["csr"])
    # R-MAT alone: every window on CUDA cores, as measured (the hybrid no faster than the CSR kernel: hybrid_cases)
    G = sp.csr_array(generate("rmat", "scale=14&edge_factor=16&seed=1"))
    g = split_matrix(G, precision).split
    assert not g.tc.any() and g.predicted_us <= min(g.tc_us, g.cuda_us)
    assert HYBRID.estimate(structure(G), precision, 128) is None
    for density in (0.001, 0.05):  # every window alike: one side takes all, and auto does not consider it
        U = sp.random(4096, 4096, density=density, format="csr", random_state=0, dtype=np.float32)
        assert split_matrix(U, precision).split.degenerate
        assert HYBRID.estimate(structure(U), precision, 128) is None


def test_the_split_is_the_cheapest_of_its_candidates():
    win, prec = window_stats(power_law()), as_precision("float32")
    s = split(win, tc_formats(prec), get("csr"), prec, 128)
    # its prediction is split_cost's of its own windows, to the bit (split reuses the costs it computed)
    assert split_cost(win, s.tc, get(s.tc_format), get("csr"), prec, 128) == (s.predicted_us, s.scattered)
    rng = np.random.default_rng(0)
    for _ in range(20):  # random splits and the split with one window flipped cost at least as much
        mask = rng.random(win.index.size) < rng.random()
        assert split_cost(win, mask, get(s.tc_format), get("csr"), prec, 128)[0] >= s.predicted_us - 1e-9
    for i in rng.choice(win.index.size, 20, replace=False):
        flipped = s.tc.copy()
        flipped[i] = ~flipped[i]
        assert split_cost(win, flipped, get(s.tc_format), get("csr"), prec, 128)[0] >= s.predicted_us - 1e-9


# ----- the row sets and the twin -----
@pytest.mark.parametrize("name", sorted(FORCED))
def test_row_sets_partition_a_and_keep_the_forced_windows(name):
    A, H = forced(name, "float32")
    rows = np.concatenate([H.tc_rows, H.cuda_rows])
    assert np.array_equal(np.sort(rows), np.arange(A.shape[0]))
    assert np.array_equal(np.unique(H.tc_rows // 16), H.split.windows.index[H.split.tc])
    assert (H.tc_csr.shape[0], H.cuda_csr.shape[0]) == (H.tc_rows.size, H.cuda_rows.size)
    if H.tc_range is not None:
        assert np.array_equal(H.tc_rows, np.arange(*H.tc_range)) and not H.split.scattered
    assert H.split.scattered == (name in ("scattered", "last_partial"))
    assert H.tc_range == {"head_run": (0, 48), "middle_run": (1600, 1632), "all_tc": (0, A.shape[0]),
                          "nnz0": (0, 16)}.get(name)  # nnz0: 3 windows, the first on Tensor Cores


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", sorted(FORCED))
def test_twin_of_a_forced_split_meets_the_precision_contract(name, precision):
    prec = as_precision(precision)
    make, mask = FORCED[name]
    A = make()
    H = split_matrix(A, prec, tc_windows=mask(-(-A.shape[0] // 16)))
    H = HybridA(H.shape, H.precision, H.split, H.tc_rows, H.cuda_rows, H.tc_range, H.tc_csr, H.cuda_csr,
                get(H.split.tc_format).convert(H.tc_csr, prec) if H.tc_rows.size else None,
                get("csr").convert(H.cuda_csr, prec) if H.cuda_rows.size else None)
    B = operand(A)
    C = reference_spmm(H, prec.rounded(B), prec)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    assert rel_err(C, ref) <= prec.tolerance if A.nnz else np.array_equal(C, np.zeros_like(ref))
    assert np.array_equal(C, reference_spmm(H, prec.rounded(B), prec))  # bitwise repeatable
    back = to_csr(H)  # values as the parts store them (bfloat16: uint16 bits)
    back = sp.csr_array((prec.to_float32(back.data).astype(np.float64), back.indices, back.indptr), shape=A.shape)
    stored = sp.csr_array((prec.to_float32(prec.to_storage(A.data)).astype(np.float64), A.indices, A.indptr),
                          shape=A.shape)
    assert back.shape == A.shape and (back != stored).nnz == 0


# ----- SpmmPlan(format="hybrid") on the CPU -----
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_meets_the_precision_contract_and_repeats_bitwise(name, precision):
    A = CASES[name]()
    prec = as_precision(precision)
    B = operand(A, N=33)
    plan = SpmmPlan(A, device="cpu", format="hybrid", dtype=precision)
    C = prec.to_float32(plan.run(B)).astype(np.float64)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    if A.nnz:
        assert rel_err(C, ref) <= prec.tolerance, rel_err(C, ref)
    else:
        assert not C.any()
    again = SpmmPlan(A, device="cpu", format="hybrid", dtype=precision).run(B)
    assert np.array_equal(plan.run(B), again) and plan.choice["format"] == "hybrid"
    assert C.shape == (A.shape[0], 33)


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_plan_takes_a_forced_split_as_a(precision):
    A, H = forced("scattered", precision)
    prec = as_precision(precision)
    B = operand(A)
    C = prec.to_float32(SpmmPlan(H, device="cpu", dtype=precision).run(B)).astype(np.float64)
    assert rel_err(C, A.astype(np.float64) @ B.astype(np.float64)) <= prec.tolerance


def test_auto_lists_the_hybrid_after_the_registered_formats():
    assert plan_candidates("hybrid", "float32") == [HYBRID]
    auto = plan_candidates("auto", "float16")
    assert auto[-1] is HYBRID and auto[:-1] == [f for f in REGISTRY.values() if "float16" in f.block_width]
    assert plan_candidates("metcf", "float32") == [get("metcf")]


def test_bad_input_is_refused_in_one_line(monkeypatch):
    A = power_law()
    with pytest.raises(ValueError, match=r"tc_windows is int64 \(3,\), expected bool \(512,\)"):
        split_matrix(A, "float32", tc_windows=np.zeros(3, dtype=np.int64))
    with pytest.raises(TypeError, match="needs a scipy.sparse matrix, got ndarray"):
        split_matrix(np.eye(3), "float32")
    monkeypatch.setitem(REGISTRY, "metcf", dataclasses.replace(REGISTRY["metcf"], per_window_cost=False))
    for name in ("bcsr", "tiledcsr"):
        monkeypatch.setitem(REGISTRY, name, dataclasses.replace(REGISTRY[name], per_window_cost=False))
    with pytest.raises(InputError, match="format 'hybrid' needs a registered Tensor Core format"):
        SpmmPlan(A, device="cpu", format="hybrid")
    assert HYBRID not in plan_candidates("auto", "float32")


def test_the_hybrid_operator_declares_the_contract():
    import inspect

    from kernels.baselines import BASELINES

    op = HYBRID.device_class()
    owned = [k for f in REGISTRY.values() for k in f.device_class().kernels] + \
        [k for b in BASELINES for k in b.kernels]
    assert op.format_name == HYBRID.name and op.kernels == ("hybrid",) and not set(op.kernels) & set(owned)
    assert set(HYBRID.fallbacks) <= set(owned) and op.out_dtype is None
    for name in ("decide", "launch", "bind"):
        assert {"kernel", "B", "out", "accumulate", "choice"} <= set(inspect.signature(getattr(op, name)).parameters) \
            if name != "decide" else callable(op.decide)
