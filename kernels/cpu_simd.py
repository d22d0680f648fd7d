"""Fixed-width float32 vectors for numba CPU kernels: a row tile of C held in registers across a row's nonzeros.

numba has no vector type, and LLVM does not keep ``acc = np.empty(n)`` in registers: for a runtime n the k loop
re-loads and re-stores acc[k] per nonzero (a store-to-load chain per vector), behind per-call alias checks and a
remainder loop; for a constant n it promotes acc to 32 *scalar* registers. ``F32Vec(w)`` is an LLVM
``<w x float>`` value (w = 4 ... 128; wider than the machine's vectors it is split into its registers by LLVM), so

    s = vzero(32)                              # s[0:32] = 0
    for p in range(p0, p1):
        s = vaxpy(s, data[p], B, indices[p], c)  # s += data[p] * B[indices[p], c:c+32]
    vstore(C, i, c, s)                         # C[i, c:c+32] = s

compiles to broadcast, multiply and add on ``w / 16`` AVX-512 registers per nonzero (measured 1.6-2x the
``acc[k]`` loop, one thread, kernels/cpu_spmm.py). Multiply and add stay two roundings (no FMA contraction), in
nonzero order, the same as NumPy's ``acc[k] += a * B[j, k]``: every tile width gives C bitwise equal.

Contract (not checked: these are inner-loop primitives): arr is a 2-D C-contiguous float32 array, row and
``c:c+w`` inside it (no wraparound of negative indices, no bounds check).
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model


class F32Vec(types.Type):
    """``<width x float>``: a row tile of C in registers."""

    def __init__(self, width: int):
        self.width = int(width)
        super().__init__(name=f"F32Vec{self.width}")


@register_model(F32Vec)
class _F32VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, ir.VectorType(ir.FloatType(), fe_type.width))


def _vector_ptr(context, builder, aryty, ary, row, rowty, col, colty, width: int):
    """Pointer to arr[row, col] as ``<width x float>*``."""
    arr = context.make_array(aryty)(context, builder, ary)
    idx = [context.cast(builder, row, rowty, types.intp), context.cast(builder, col, colty, types.intp)]
    ptr = cgutils.get_item_pointer(context, builder, aryty, arr, idx, wraparound=False)
    return builder.bitcast(ptr, ir.VectorType(ir.FloatType(), width).as_pointer())


@intrinsic
def vzero(typingctx, width):
    """A zero ``F32Vec(width)``; width must be a compile-time constant (a literal int)."""
    if not isinstance(width, types.IntegerLiteral):
        return None
    vt = F32Vec(width.literal_value)

    def codegen(context, builder, sig, args):
        return ir.Constant(ir.VectorType(ir.FloatType(), vt.width), [0.0] * vt.width)

    return vt(width), codegen


@intrinsic
def vaxpy(typingctx, acc, a, arr, row, col):
    """acc + a * arr[row, col:col+w] (multiply, then add: two roundings, as NumPy's float32)."""
    if not isinstance(acc, F32Vec):
        return None

    def codegen(context, builder, sig, args):
        w = sig.args[0].width
        vt = ir.VectorType(ir.FloatType(), w)
        x = builder.load(_vector_ptr(context, builder, sig.args[2], args[2], args[3], sig.args[3], args[4],
                                     sig.args[4], w), align=4)
        s = context.cast(builder, args[1], sig.args[1], types.float32)
        splat = builder.insert_element(ir.Constant(vt, ir.Undefined), s, ir.IntType(32)(0))
        splat = builder.shuffle_vector(splat, ir.Constant(vt, ir.Undefined),
                                       ir.Constant(ir.VectorType(ir.IntType(32), w), [0] * w))
        return builder.fadd(args[0], builder.fmul(splat, x))

    return acc(acc, a, arr, row, col), codegen


@intrinsic
def vstore(typingctx, arr, row, col, v):
    """arr[row, col:col+w] = v."""
    if not isinstance(v, F32Vec):
        return None

    def codegen(context, builder, sig, args):
        ptr = _vector_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1], args[2], sig.args[2],
                          sig.args[3].width)
        builder.store(args[3], ptr, align=4)
        return context.get_dummy_value()

    return types.void(arr, row, col, v), codegen
