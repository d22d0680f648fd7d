"""Precisions of the Tensor Core products, decided in one place: what A, B and C are stored in, which mma shape
multiplies them, the accuracy contract, and the range checks that refuse inputs a 16-bit type cannot hold.

    float32   A, B, C float32; TF32 mma.m16n8k8 (16 x 8 TC blocks), FP32 accumulation
    float16   A, B, C float16 (C optionally float32); mma.m16n8k16 (16 x 16 TC blocks), FP32 accumulation
    bfloat16  as float16 with bfloat16 values; NumPy and CuPy have no bfloat16 dtype, so its values travel as the
              uint16 bit patterns (round to nearest even), which is also how they are stored in Parquet

Accuracy contract (README, "Precision"): relative Frobenius error against a float64 reference of the product of
the un-rounded inputs, on inputs within range: <= 2e-3 for float32 (TF32), <= 1e-2 for float16, <= 3e-2 for
bfloat16. Inputs out of range for float16 (|x| > 65504, or many nonzeros that would flush to zero) are refused by
`check_range` unless the caller allows overflow.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from configs.errors import InputError

FP16_MAX = 65504.0
FP16_TINY = 2.0 ** -24  # smallest float16 subnormal: smaller magnitudes round to zero
UNDERFLOW_FRACTION = 0.01  # refuse when more than this share of the nonzero values would round to zero


@dataclass(frozen=True)
class Precision:
    name: str  # float32 | float16 | bfloat16
    block_width: int  # columns of a TC block: the k of the mma instruction
    mma: str  # the instruction, for reports
    storage_dtype: np.dtype  # host/device dtype of A's values, B and C (uint16 = bfloat16 bits)
    tolerance: float  # the accuracy contract, relative Frobenius error vs float64
    itemsize: int

    @property
    def half(self) -> bool:
        return self.itemsize == 2

    def to_storage(self, x) -> np.ndarray:
        """float values (NumPy or CuPy, kept on their side) -> this precision's storage (bfloat16: uint16 bits,
        round to nearest even; NaN stays NaN)."""
        xp = _xp(x)
        x = xp.asarray(x)
        if self.name == "bfloat16":
            return to_bf16_bits(x.astype(xp.float32, copy=False))
        with np.errstate(over="ignore"):  # out-of-range values become inf (refused unless allow_overflow)
            return x.astype(self.storage_dtype)

    def to_float32(self, x) -> np.ndarray:
        """Storage values (NumPy or CuPy) -> float32, exact. float32 input is returned as is: it is a float32 C of a
        16-bit product (out_dtype float32), never bfloat16 bits, which travel as uint16."""
        xp = _xp(x)
        x = xp.asarray(x)
        if x.dtype == np.float32:
            return x
        if self.name == "bfloat16":
            return from_bf16_bits(x)
        return x.astype(np.float32)

    def rounded(self, x) -> np.ndarray:
        """float64 copy of ``x`` rounded to this precision (TF32 for float32: what the Tensor Cores read)."""
        x = np.asarray(x, dtype=np.float32)
        if self.name == "float32":
            bits = x.view(np.uint32)
            r = np.where(np.isfinite(x), (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000), bits)
            return r.view(np.float32).astype(np.float64)
        return self.to_float32(self.to_storage(x)).astype(np.float64)


def _xp(x):
    """cupy for a CuPy array (imported only then: this module loads without a GPU), else numpy."""
    import importlib

    return importlib.import_module("cupy") if type(x).__module__.startswith("cupy") else np


def to_bf16_bits(x):
    """float32 array (NumPy or CuPy) -> uint16 bfloat16 bit patterns, round to nearest even; infinities kept,
    NaN stays (quiet) NaN; finite values past the largest bfloat16 round to infinity."""
    xp = _xp(x)
    bits = xp.ascontiguousarray(x, dtype=xp.float32).view(xp.uint32)
    rounded = (bits + xp.uint32(0x7FFF) + ((bits >> xp.uint32(16)) & xp.uint32(1))) >> xp.uint32(16)
    nan = (bits & xp.uint32(0x7FFFFFFF)) > xp.uint32(0x7F800000)
    return xp.where(nan, (bits >> xp.uint32(16)) | xp.uint32(0x0040), rounded).astype(xp.uint16)


def from_bf16_bits(u):
    """uint16 bfloat16 bit patterns (NumPy or CuPy) -> float32, exact."""
    xp = _xp(u)
    return (xp.asarray(u).astype(xp.uint32) << xp.uint32(16)).view(xp.float32)


bf16_bits = to_bf16_bits


PRECISIONS = {
    "float32": Precision("float32", 8, "mma.m16n8k8.tf32", np.dtype(np.float32), 2e-3, 4),
    "float16": Precision("float16", 16, "mma.m16n8k16.f16", np.dtype(np.float16), 1e-2, 2),
    "bfloat16": Precision("bfloat16", 16, "mma.m16n8k16.bf16", np.dtype(np.uint16), 3e-2, 2),
}


def precision(name) -> Precision:
    """The Precision for a name or NumPy dtype (float32 / float16 / 'bfloat16')."""
    if isinstance(name, Precision):
        return name
    key = name if isinstance(name, str) else np.dtype(name).name
    if key not in PRECISIONS:
        raise InputError(f"dtype {key!r} is not supported; choose one of {', '.join(PRECISIONS)}")
    return PRECISIONS[key]


# How a caller's user picks another type or allows the overflow: the CLI's options, or SpmmPlan's arguments.
CLI_FIX = ("--dtype bfloat16", "--allow-overflow")
API_FIX = ("dtype='bfloat16'", "allow_overflow=True")


def check_range(values, prec: Precision, source: str, *, allow_overflow: bool = False,
                fix: tuple[str, str] = CLI_FIX) -> dict:
    """Refuse values a float16 run cannot hold: any |x| > 65504 (would become inf) or more than 1% of the nonzero
    values below float16's smallest subnormal (would become 0). Returns counts for the report; raises InputError
    with one line naming the largest value and suggesting bfloat16 unless ``allow_overflow``. ``fix``: how the
    caller's user asks for bfloat16 or allows the overflow (`CLI_FIX` or `API_FIX`)."""
    v = np.asarray(values)
    report = {"overflow": 0, "underflow": 0, "max_abs": 0.0}
    if prec.name != "float16" or v.size == 0:
        return report
    counts = _range_counts(v)
    if counts is None:
        return report
    a, overflow, underflow, max_abs, n_nonzero = counts
    report.update(overflow=overflow, underflow=underflow, max_abs=max_abs)
    if allow_overflow:
        return report
    if report["overflow"]:
        raise InputError(f"{source}: {report['overflow']} values exceed the float16 range (largest |x| = "
                         f"{report['max_abs']:.6g} > {FP16_MAX:g}); use {fix[0]} (or float32), or pass "
                         f"{fix[1]} to run float16 anyway")
    if n_nonzero and report["underflow"] > UNDERFLOW_FRACTION * n_nonzero:
        raise InputError(f"{source}: {report['underflow']} of {n_nonzero} nonzero values are below float16's "
                         f"smallest subnormal {FP16_TINY:.3g} and would round to zero (smallest |x| = "
                         f"{float(a[a > 0].min()):.3g}); use {fix[0]} (or float32), or pass {fix[1]}")
    return report


def _range_counts(v: np.ndarray):
    """(|x| of v's finite values, overflow count, underflow count, max |x|, nonzero count) as `check_range` reports
    them, None when no value is finite.

    Where every value is finite (the usual case) the counts come from |v| in its own float dtype with no filtering
    copy: 10M float32 values 6.5 ms, where the float64 copy of the finite values took 46 ms (float64 values: 12 vs
    54 ms; 2-core host). The same numbers: |x| is exact in any float dtype, and 65504 and 2^-24 are exact in
    float16, so every comparison agrees with the float64 one. A NaN or an infinity makes |v|'s max non-finite;
    those arrays, and integer or other dtypes, take the filtering path (`_filtered_counts`)."""
    if v.dtype in (np.float16, np.float32, np.float64):
        a = np.abs(v)
        top = a.max()
        if np.isfinite(top):
            below = int(np.count_nonzero(a < FP16_TINY))
            zeros = int(np.count_nonzero(a == 0)) if below else 0  # zeros are below FP16_TINY too
            overflow = int(np.count_nonzero(a > FP16_MAX)) if top > FP16_MAX else 0
            return a, overflow, below - zeros, float(top), a.size - zeros
    return _filtered_counts(v)


def _filtered_counts(v: np.ndarray):
    """`_range_counts` from a float64 copy of v's finite values: any dtype, NaN and infinities left out."""
    a = np.abs(v[np.isfinite(v)]).astype(np.float64)
    if a.size == 0:
        return None
    nonzero = a[a > 0]
    return a, int((a > FP16_MAX).sum()), int((nonzero < FP16_TINY).sum()), float(a.max()), nonzero.size
