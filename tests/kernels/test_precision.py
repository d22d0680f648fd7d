"""kernels.precision: bfloat16 rounding, storage round trips, the float16 range refusal; the format registry."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import scipy.sparse as sp

import kernels.precision as precision_module
from configs.errors import InputError
from kernels.formats import REGISTRY, candidates, get
from kernels.precision import API_FIX, FP16_MAX, FP16_TINY, bf16_bits, check_range, precision


def test_bf16_bits_round_to_nearest_even_and_keep_nan():
    # 1 + 2^-8 is exactly halfway between bfloat16 1.0 (0x3F80) and its successor 0x3F81: ties go to even (0x3F80);
    # 1 + 3 * 2^-8 is halfway between 0x3F81 and 0x3F82: to even 0x3F82.
    x = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -2.5, np.inf, -np.inf, np.nan, 3.0e38], dtype=np.float32)
    bits = bf16_bits(x)
    assert bits.dtype == np.uint16
    assert bits[:6].tolist() == [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7F80, 0xFF80]
    back = precision("bfloat16").to_float32(bits)
    assert np.isnan(back[6]) and back[7] == np.float32(np.uint32(0x7F62 << 16).view(np.float32))


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
def test_storage_round_trip_is_exact_on_representable_values(name):
    p = precision(name)
    x = np.array([0.0, 1.0, -0.5, 1024.0, 0.375], dtype=np.float32)
    assert np.array_equal(p.to_float32(p.to_storage(x)), x)
    assert p.rounded(x).dtype == np.float64


def test_unknown_dtype_is_one_line():
    with pytest.raises(InputError, match=r"dtype 'float64' is not supported; choose one of float32, float16, "):
        precision(np.float64)


def test_float16_refuses_overflow_naming_the_largest_value_and_bf16():
    v = np.array([1.0, -7.0e4, 3.0, 1e5])
    with pytest.raises(InputError, match=r"HB/x \(float16\): 2 values exceed the float16 range \(largest \|x\| = "
                                         r"100000 > 65504\); use --dtype bfloat16"):
        check_range(v, precision("float16"), "HB/x (float16)")
    report = check_range(v, precision("float16"), "HB/x", allow_overflow=True)
    assert report["overflow"] == 2 and report["max_abs"] == 1e5
    assert check_range(v, precision("bfloat16"), "HB/x")["overflow"] == 0  # bfloat16 holds float32's range
    assert check_range(np.array([FP16_MAX, -1.0]), precision("float16"), "ok")["overflow"] == 0


def test_spmm_plan_applies_the_range_check_of_the_cli():
    """Issue 30: SpmmPlan(A, dtype=float16) on a stiffness-like matrix (|a| up to 2.1e9) returned NaN and inf."""
    from kernels.spmm import SpmmPlan

    A = sp.random(40, 40, density=0.2, format="csr", random_state=1) * 2.1e9
    with pytest.raises(InputError, match=r"A \(float16\): \d+ values exceed the float16 range \(largest \|x\| = "
                                         r"2\.\d+e\+09 > 65504\); use dtype='bfloat16' \(or float32\), or pass "
                                         r"allow_overflow=True to run float16 anyway"):
        SpmmPlan(A, device="cpu", dtype=np.float16)
    plan = SpmmPlan(A, device="cpu", dtype=np.float16, allow_overflow=True)
    assert plan.range["overflow"] == A.nnz
    assert SpmmPlan(A, device="cpu", dtype="bfloat16").range["overflow"] == 0
    assert SpmmPlan(A / 1e6, device="cpu", dtype=np.float16).range["max_abs"] < 65504


def test_float16_refuses_mass_underflow_but_not_a_few_tiny_values():
    tiny = np.full(100, 1e-9)
    with pytest.raises(InputError, match=r"100 of 100 nonzero values are below float16's smallest subnormal"):
        check_range(tiny, precision("float16"), "m")
    few = np.concatenate([np.ones(1000), tiny[:5]])
    assert check_range(few, precision("float16"), "m")["underflow"] == 5


def check_range_reference(values, prec, source, **kw) -> dict:
    """check_range as it was before its fast path, every array counted from a float64 copy of its finite values
    (`_filtered_counts`): the oracle."""
    with mock.patch.object(precision_module, "_range_counts", precision_module._filtered_counts):
        return check_range(values, prec, source, **kw)


def range_outcome(fn, values, **kw):
    """The report with its value types, or the error message."""
    try:
        report = fn(values, precision("float16"), "A", **kw)
    except InputError as e:
        return ("error", str(e))
    return ("report", report, [type(x) for x in report.values()])


RANGE_CASES = {
    "empty": [], "zero": [0.0], "all zero": [0.0, -0.0, 0.0], "one": [-3.5],
    "nan": [np.nan], "inf": [np.inf], "-inf": [-np.inf], "nan and values": [np.nan, 1.0, -7.0e4, 0.0],
    "inf and tiny": [np.inf] + [1e-9] * 3 + [1.0], "-inf and overflow": [-np.inf, 1e5, 2.0],
    "at the limits": [FP16_MAX, -FP16_MAX, FP16_TINY, -FP16_TINY, 0.0],
    "just past the limits": [np.nextafter(FP16_MAX, np.inf), np.nextafter(FP16_TINY, 0.0), 1.0],
    "1% tiny": [1e-9] + [1.0] * 99, "just over 1% tiny": [1e-9, -1e-9] + [1.0] * 98,
    "tiny and zeros": [1e-9] * 3 + [0.0] * 500, "negative overflow": [-1e6, -65505.0, 3.0],
}


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int64, np.int8])
@pytest.mark.parametrize("case", list(RANGE_CASES))
def test_range_check_equals_the_float64_reference(case, dtype):
    with np.errstate(over="ignore", invalid="ignore"):  # float16 / int casts of out-of-range values
        values = np.array(RANGE_CASES[case]).astype(dtype)
    for kw in ({}, {"allow_overflow": True}, {"fix": API_FIX}):
        assert range_outcome(check_range, values, **kw) == range_outcome(check_range_reference, values, **kw)


def test_range_check_equals_the_reference_on_random_arrays():
    rng = np.random.default_rng(11)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, FP16_MAX, FP16_TINY, 1e-30, 1e30])
    for trial in range(300):
        n = int(rng.integers(1, 400))
        v = rng.standard_normal(n) * 10.0 ** rng.integers(-12, 8)
        if trial % 3:
            v[rng.integers(0, n, int(rng.integers(1, 4)))] = rng.choice(specials, 1)
        dtype = (np.float16, np.float32, np.float64)[trial % 3]
        with np.errstate(over="ignore"):
            v = v.astype(dtype)
        shaped = v if trial % 5 else v.reshape(1, -1)[:, ::-1]  # 2-D, non-contiguous
        for kw in ({}, {"allow_overflow": True}):
            assert range_outcome(check_range, shaped, **kw) == range_outcome(check_range_reference, shaped, **kw)
    assert range_outcome(check_range, np.float32(7e4)) == range_outcome(check_range_reference, np.float32(7e4))
    assert check_range([1.0, -2.0, 1e-9, 0.0], precision("float16"), "A", allow_overflow=True) == {
        "overflow": 0, "underflow": 1, "max_abs": 2.0}
    assert check_range([np.nan], precision("float32"), "A") == {"overflow": 0, "underflow": 0, "max_abs": 0.0}


def test_registry_lists_metcf_for_every_precision_and_refuses_unknown_formats():
    assert "metcf" in REGISTRY and set(get("metcf").precisions) == {"float32", "float16", "bfloat16"}
    assert [f.name for f in candidates("auto", "float16")] == [f.name for f in REGISTRY.values()
                                                             if "float16" in f.block_width]
    with pytest.raises(InputError, match=r"--format 'csc' is not a registered format; choose auto or one of (\w+, )*metcf"):
        candidates("csc", "float32")


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
def test_metcf_plugin_converts_with_the_precision_block_width(name):
    p = precision(name)
    A = sp.random(37, 333, density=0.1, random_state=3, format="csr")  # 7-row tail window, K % 16 != 0
    M = get("metcf").convert(A, p)
    M.validate(full=True)
    assert M.width == p.block_width and M.data.dtype == p.storage_dtype
    B = np.random.default_rng(0).standard_normal((333, 5))
    ref = (sp.csr_array((p.to_float32(p.to_storage(A.data)), A.indices, A.indptr), shape=A.shape) @ B)
    assert np.allclose(get("metcf").reference_spmm(M, B, p), ref)
    pieces = [get("metcf").convert(A[:16], p), get("metcf").convert(A[16:], p)]
    whole = get("metcf").concat(pieces)
    assert np.array_equal(whole.sparse_a_to_b, M.sparse_a_to_b) and np.array_equal(whole.data, M.data)


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_cpu_plan_in_half_precision_meets_the_contract(name):
    from kernels.spmm import SpmmPlan

    p = precision(name)
    A = sp.random(200, 150, density=0.05, random_state=4, format="csr")
    B = np.random.default_rng(1).standard_normal((150, 9)).astype(np.float32)
    plan = SpmmPlan(A, device="cpu", dtype=name)
    C = plan.run(B)
    assert C.dtype == p.storage_dtype and plan.choice["precision"] == name
    ref = A.astype(np.float64) @ B.astype(np.float64)
    assert np.linalg.norm(p.to_float32(C) - ref) / np.linalg.norm(ref) <= p.tolerance
    C32 = SpmmPlan(A, device="cpu", dtype=name, out_dtype=np.float32).run(B)
    assert C32.dtype == np.float32
    with pytest.raises(ValueError, match="out_dtype float64 is not supported"):
        SpmmPlan(A, device="cpu", dtype=name, out_dtype=np.float64)


def test_half_width_metcf_round_trips_through_the_store(tmp_path):
    from storage import BlockStore

    A = sp.random(70, 90, density=0.2, random_state=5, format="csr", dtype=np.float32)
    for name in ("float16", "bfloat16"):
        p = precision(name)
        M = get("metcf").convert(A, p)
        ms = BlockStore(tmp_path).matrix("gen.test")
        ms.write_format("metcf", f"k-{name}", M, {"dtype": name, "value_types": {"data": name}},
                        window_ranges=[0, 2, 5])
        back = get("metcf").from_arrays(ms.read_format("metcf", f"k-{name}"))
        for field in ("row_window_offset", "tc_offset", "tc_local_id", "sparse_a_to_b", "data"):
            assert np.array_equal(getattr(back, field), getattr(M, field)), (name, field)
        assert back.width == 16 and back.data.dtype == p.storage_dtype
        part = ms.read_format("metcf", f"k-{name}", 2, 5)  # one shard's window range
        assert part["sparse_a_to_b"].shape[1] == 16
        assert ms.format_meta("metcf", f"k-{name}")["value_types"] == {"data": name}


def test_blocked_ell_plan_counts_the_padding_to_the_longest_block_row():
    from kernels.cusparse_bell import plan_blocked_ell

    # block rows of 16: rows 0-15 touch column blocks {0, 2}; rows 16-31 touch {1}; rows 32-36 (partial) none
    A = sp.csr_array((np.ones(4), ([0, 5, 17, 20], [3, 40, 20, 31])), shape=(37, 50))
    info = plan_blocked_ell(A, block=16)
    assert (info["block_rows"], info["ell_blocks"], info["nonzero_blocks"]) == (3, 2, 3)
    assert info["value_bytes"] == 3 * 16 * 2 * 16 * 2  # every block row padded to 2 blocks of 16 x 16 halves
    assert info["fill"] == pytest.approx(4 / (3 * 2 * 256))


def test_a_format_whose_gpu_kernels_are_not_validated_is_refused_on_the_gpu_by_name(monkeypatch):
    import kernels.spmm as spmm_mod
    from kernels.formats import REGISTRY

    import dataclasses

    unready = [f.name for f in REGISTRY.values() if not f.gpu_ready]
    if not unready:  # every registered format is validated on a GPU: gate one off for this test
        monkeypatch.setitem(REGISTRY, "cvse", dataclasses.replace(REGISTRY["cvse"], gpu_ready=False))
        unready = ["cvse"]
    monkeypatch.setattr(spmm_mod, "gpu_available", lambda: True)  # refused before anything touches a device
    A = sp.random(40, 40, density=0.1, random_state=2, format="csr")
    with pytest.raises(InputError, match=rf"format {unready[0]}: no GPU path yet, .*--devices cpu"):
        spmm_mod.SpmmPlan(A, device="gpu", format=unready[0])
    assert spmm_mod.SpmmPlan(A, device="cpu", format=unready[0]).run(np.ones((40, 2))).shape == (40, 2)
