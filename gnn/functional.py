"""Autograd functions over a ``gnn.SparseOp``: the GNN layers' sparse steps with hand-written backward passes.

- ``spmm(op, X) = A @ X``; backward ``dX = A.T @ G`` (the op's plan of A.T, built once per device).
- ``linear_spmm(op, X, W, b) = A @ (X @ W.T) + b`` (GCN's layer) as one autograd node: the Linear's, the product's
  and the bias's backward in one call, where the composition makes four (transpose, mm, product, add).
- ``edge_spmm(op, values, X) = A_v @ X`` (A's pattern, per-call ``values`` [nnz] in A's CSR order, e.g. attention,
  or [nnz, H] for H heads on X's H column blocks); backward ``dX = A_v.T @ G``, ``d values[k] = G[row_k] .
  X[col_k]`` (an SDDMM, per head).
- ``sddmm(op, U, V)[k] = U[row_k] . V[col_k]``; backward ``dU = S_g @ V``, ``dV = S_g.T @ U`` with S_g = A's pattern
  carrying the upstream gradient g.
- ``edge_sum(op, d, s)[k] = d[row_k] + s[col_k]`` (a rank-one SDDMM: GAT's attention logits); backward
  ``dd = row sums of g``, ``ds = column sums of g``, segment sums in a fixed order (deterministic).
- ``edge_softmax(op, e)``: softmax over each destination's incoming edges, in torch ops (autograd derives it).
- ``edge_attention(op, d, s, slope) = edge_softmax(op, leaky_relu(edge_sum(op, d, s), slope))`` (GAT's weights,
  d and s [n] or [n, H] for H heads at once):
  on CUDA one kernel forward and two backward (kernels.edge, fixed-order sums: the same bits each call), where
  the composition issues 8 torch ops forward and about 15 backward (their host time was most of a small graph's
  GAT epoch); on the CPU and in float64 the composition itself.

Autocast: the functions are marked ``custom_fwd``/``custom_bwd`` for CUDA, so the backward runs under the forward's
autocast state; they return their dense input's dtype (float16/bfloat16 under autocast) and compute as
``SparseOp`` says. Gradients come back in each input's own dtype.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from gnn.backend import SparseOp, as_float32

_fwd = torch.amp.custom_fwd(device_type="cuda")


def _bwd(bwd):
    """``torch.amp.custom_bwd``: ``bwd`` under the forward's autocast state; without entering an autocast context
    where the forward ran without autocast and the backward's thread has none on (the context changes nothing
    there and costs host time in every backward call)."""
    under_autocast = torch.amp.custom_bwd(bwd, device_type="cuda")

    @functools.wraps(bwd)
    def backward(ctx, *grads):
        if ctx._fwd_used_autocast or torch.is_autocast_enabled("cuda"):
            return under_autocast(ctx, *grads)
        return bwd(ctx, *grads)

    return backward


class _Spmm(torch.autograd.Function):
    @staticmethod
    @_fwd
    def forward(ctx, X, op: SparseOp):
        ctx.op = op
        return op.matmul(X)

    @staticmethod
    @_bwd
    def backward(ctx, G):
        return ctx.op.matmul(G.contiguous(), transpose=True), None


def _autocast_operands(*tensors):
    """What autocast does to an mm's operands where it is on for their device: each floating tensor but a float64
    one cast to autocast's dtype; done here so that the casts can be saved for the backward, as torch's mm node
    saves them."""
    device = tensors[0].device.type
    if not torch.is_autocast_enabled(device):
        return tensors
    dt = torch.get_autocast_dtype(device)
    return tuple(t if t.dtype == torch.float64 else t.to(dt) for t in tensors)


class _LinearSpmm(torch.autograd.Function):
    """``A @ (X @ W.T) + b``: the mm and its gradients as torch's linear and mm backward compute them (the same
    calls, so the same bits as the composition ``spmm(op, F.linear(X, W)) + b``), the product and its transpose as
    `_Spmm`'s, the bias's gradient the column sums of g (`column_sums`: for a wide float32 g a ones product, not
    the composition's bits); one node of host work instead of four."""

    @staticmethod
    @_fwd
    def forward(ctx, X, weight, bias, op: SparseOp):
        ctx.op, ctx.dtypes = op, (X.dtype, weight.dtype, None if bias is None else bias.dtype)
        Xc, Wc = _autocast_operands(X, weight)
        H = Xc.mm(Wc.t())
        ctx.save_for_backward(Xc, Wc)
        ctx.h_dtype = H.dtype
        return op.matmul(H, bias=bias)  # a new tensor of H's dtype (+ bias: its promotion with the bias's)

    @staticmethod
    @_bwd
    def backward(ctx, g):
        Xc, Wc = ctx.saved_tensors
        need, (x_dtype, w_dtype, b_dtype) = ctx.needs_input_grad, ctx.dtypes
        dH = ctx.op.matmul(g.to(ctx.h_dtype).contiguous(), transpose=True)
        # torch's mm backward for X @ W.t() (X row-major, W.t() column-major): dX = dH W, dW = dH.t() X
        dX = dH.mm(Wc).to(x_dtype) if need[0] else None
        dW = dH.t().mm(Xc).to(w_dtype) if need[1] else None
        db = column_sums(g).to(b_dtype) if need[2] else None
        return dX, dW, db, None


# The bias gradient (column sums of g [n, F]) as the product ones[1, n] @ g: cuBLAS reads g's rows whole, once, where
# torch's g.sum(0) reduces across rows; on the H200 (float32, us per call): [160k, 128] 149 -> 25, [200k, 128]
# 173 -> 32, [1M, 128] 293 -> 126, [8192, 128] 18 -> 15; with 16 columns sum(0) is the faster ([160k, 16] 27 vs
# 43), hence COLUMN_SUMS_MM_MIN (docs/kernels-notes.md, "Session 39"). Only where that product is an IEEE float32
# one: a TF32 matmul would round g to 10 significant bits, and under autocast (a backward runs under its forward's)
# the mm would run in 16 bits; there, and for 16-bit g, sum(0), which accumulates in float32. Repeatable bit for
# bit (cuBLAS's documented run-to-run reproducibility on one GPU), not bitwise sum(0)'s: another summation order,
# the same float32 accuracy (relative gap <= 1e-6 in those runs).
COLUMN_SUMS_MM_MIN = 64
_ONES: dict = {}  # (device, n) -> ones [1, n], float32: made on an eager call, reused (a captured step reads it)


def column_sums(g: torch.Tensor) -> torch.Tensor:
    """``g.sum(0)`` of a 2-D g, on CUDA float32 with at least COLUMN_SUMS_MM_MIN columns and IEEE float32 matmuls
    as ``ones @ g`` (the comment above)."""
    if not (g.is_cuda and g.dtype == torch.float32 and g.ndim == 2 and g.shape[1] >= COLUMN_SUMS_MM_MIN
            and _ieee_matmul() and not torch.is_autocast_enabled("cuda")):  # (autocast would run the mm in 16 bits)
        return g.sum(0)
    key = (g.device, int(g.shape[0]))
    ones = _ONES.get(key)
    if ones is None:
        if torch.cuda.is_current_stream_capturing():  # a capture's allocation is its graph's: not kept
            return g.sum(0)
        ones = _ONES[key] = torch.ones((1, key[1]), dtype=torch.float32, device=g.device)
        torch.cuda.current_stream(g.device).synchronize()  # synchronize! once per (device, n): filled for any stream
    return ones.mm(g).view(-1)


def _ieee_matmul() -> bool:
    """Whether torch's CUDA float32 matmuls run in IEEE float32 (no TF32): torch >= 2.9's ``fp32_precision`` of
    cuBLAS matmuls ("none" defers to the backends-wide one, whose "none" is IEEE: torch 2.11 reads "none" at both
    by default, and "tf32" after ``torch.backends.cuda.matmul.fp32_precision = "tf32"``), else ``allow_tf32``
    (whose getter raises in torch 2.11 once the new setting was used)."""
    matmul = torch.backends.cuda.matmul
    prec = getattr(matmul, "fp32_precision", None)
    if prec is None:
        return not matmul.allow_tf32
    if prec == "none":
        prec = getattr(torch.backends, "fp32_precision", "none")
    return prec in ("ieee", "none")


def _binary(name: str, product, grad_a, grad_b):
    """An autograd Function ``(a, b, op) -> product(op, a, b)`` whose backward is ``grad_a(op, a, b, g)`` and
    ``grad_b(op, a, b, g)`` (g contiguous; each only where its input needs it), returned in each input's dtype."""

    def forward(ctx, a, b, op: SparseOp):
        ctx.op = op
        ctx.save_for_backward(a, b)
        return product(op, a, b)

    def backward(ctx, g):
        a, b = ctx.saved_tensors
        op, g, need = ctx.op, g.contiguous(), ctx.needs_input_grad
        return (grad_a(op, a, b, g).to(a.dtype) if need[0] else None,
                grad_b(op, a, b, g).to(b.dtype) if need[1] else None, None)

    meta = type(torch.autograd.Function)  # its metaclass sets up the backward node class
    return meta(name, (torch.autograd.Function,), {"forward": staticmethod(_fwd(forward)),
                                                   "backward": staticmethod(_bwd(backward))})


# A_v @ X: d values[k] = G[row_k] . X[col_k] (an SDDMM), dX = A_v.T @ G
_EdgeSpmm = _binary("_EdgeSpmm", lambda op, v, X: op.matmul_values(v, X),
                    lambda op, v, X, G: op.sddmm(G, X, heads=v.shape[1] if v.ndim == 2 else None),
                    lambda op, v, X, G: op.matmul_values(v, G, transpose=True))
# U[row_k] . V[col_k]: dU = S_g @ V, dV = S_g.T @ U
_Sddmm = _binary("_Sddmm", lambda op, U, V: op.sddmm(U, V), lambda op, U, V, g: op.matmul_values(g, V),
                 lambda op, U, V, g: op.matmul_values(g, U, transpose=True))
# d[row_k] + s[col_k]: dd = g's row sums, ds = its column sums (A.T's rows)
_EdgeSum = _binary(
    "_EdgeSum", lambda op, d, s: d.index_select(0, op.index("rows", d.device))
    + s.index_select(0, op.index("cols", s.device)),
    lambda op, d, s, g: _segment_sum(g, op.index("indptr", g.device)),
    lambda op, d, s, g: _segment_sum(g.index_select(0, op.index("order_t", g.device)), op.index("indptr_t", g.device)))


class _EdgeAttention(torch.autograd.Function):
    """``edge_attention`` on CUDA: forward ``op.attention``, backward ``op.attention_backward`` (the softmax's,
    the leaky ReLU's and the logits' row and column sums in one pass each), gradients in d's and s's dtypes."""

    @staticmethod
    @_fwd
    def forward(ctx, d, s, op: SparseOp, slope: float):
        d32, s32 = as_float32(d), as_float32(s)
        alpha = op.attention(d32, s32, slope)
        ctx.save_for_backward(d32, s32, alpha)
        ctx.op, ctx.slope, ctx.dtypes = op, slope, (d.dtype, s.dtype)
        return alpha

    @staticmethod
    @_bwd
    def backward(ctx, g):
        d32, s32, alpha = ctx.saved_tensors
        dd, ds = ctx.op.attention_backward(d32, s32, ctx.slope, alpha, g)
        need = ctx.needs_input_grad
        return (dd.to(ctx.dtypes[0]) if need[0] else None, ds.to(ctx.dtypes[1]) if need[1] else None, None, None)


def _segment_sum(g: torch.Tensor, indptr: torch.Tensor) -> torch.Tensor:
    """Sum of each segment ``g[indptr[i]:indptr[i + 1]]`` (0 for an empty one), in float32 (float64 stays) and
    returned in g's dtype: one segmented reduction, each segment summed in a fixed order (CUB's on CUDA)."""
    work = g if g.dtype == torch.float64 else g.float()
    return torch.segment_reduce(work, "sum", offsets=indptr, unsafe=True).to(g.dtype)


def spmm(op: SparseOp, X: torch.Tensor) -> torch.Tensor:
    """A @ X with A's fixed values (X: [n_cols, F] -> [n_rows, F])."""
    return _Spmm.apply(X, op)


def linear_spmm(op: SparseOp, X: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``A @ (X @ weight.T) + bias`` (X [n_cols, F_in], weight [F_out, F_in] like ``torch.nn.Linear.weight``, bias
    [F_out] or None -> [n_rows, F_out]): GCN's layer in one autograd node, the same values as
    ``spmm(op, F.linear(X, weight)) + bias``."""
    if X.ndim != 2 or weight.ndim != 2 or X.shape[1] != weight.shape[1]:
        raise ValueError(f"gnn.linear_spmm: X {tuple(X.shape)} and weight {tuple(weight.shape)} do not chain "
                         "(X [n, F_in], weight [F_out, F_in])")
    return _LinearSpmm.apply(X, weight, bias, op)


def edge_spmm(op: SparseOp, values: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """A_v @ X, A's pattern with ``values`` [nnz] (A's CSR order) as its data; per head with values [nnz, H]:
    head h's values weight X's columns ``h C .. (h + 1) C`` (X [n_cols, H C], torch's [n_cols, H, C] flattened)."""
    return _EdgeSpmm.apply(values, X, op)


def sddmm(op: SparseOp, U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """``out[k] = U[row_k] . V[col_k]`` on A's pattern, [nnz]."""
    return _Sddmm.apply(U, V, op)


def edge_sum(op: SparseOp, d: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``out[k] = d[row_k] + s[col_k]`` [nnz] on A's pattern: d [n_rows], s [n_cols]; dtype promoted from both.
    What ``sddmm(op, [d, 1], [1, s])`` gives, as two gathers and an add, with row and column sums for its
    backward instead of two SpMMs of N = 2."""
    if d.shape != (op.shape[0],) or s.shape != (op.shape[1],):
        raise ValueError(f"gnn.edge_sum: d {tuple(d.shape)} and s {tuple(s.shape)}, expected ({op.shape[0]},) and "
                         f"({op.shape[1]},)")
    return _EdgeSum.apply(d, s, op)


def edge_softmax(op: SparseOp, e: torch.Tensor) -> torch.Tensor:
    """Softmax of edge scores ``e`` ([nnz] or [nnz, H]) over each row's (destination's) edges; half inputs are
    computed and returned in float32 (exp of a half logit loses the small weights)."""
    if e.shape[0] != op.nnz:
        raise ValueError(f"gnn.edge_softmax: e has {e.shape[0]} entries, expected nnz = {op.nnz}")
    if e.dtype in (torch.float16, torch.bfloat16):
        e = e.float()
    rows = op.edge_rows(e.device)
    idx = rows.view(-1, *([1] * (e.ndim - 1))).expand_as(e)
    shape = (op.shape[0], *e.shape[1:])
    # the row max is a constant shift (softmax is invariant to it): no gradient through it
    m = torch.full(shape, float("-inf"), dtype=e.dtype, device=e.device)
    m = m.scatter_reduce(0, idx, e.detach(), reduce="amax", include_self=True)
    ex = torch.exp(e - m.gather(0, idx))
    s = torch.zeros(shape, dtype=e.dtype, device=e.device).index_add(0, rows, ex)
    return ex / s.gather(0, idx)


def edge_attention(op: SparseOp, d: torch.Tensor, s: torch.Tensor, negative_slope: float = 0.2) -> torch.Tensor:
    """GAT's attention weights (A's CSR order): per destination row i the softmax over its edges of
    ``leaky_relu(d[i] + s[j])``, i.e. ``edge_softmax(op, leaky_relu(edge_sum(op, d, s), negative_slope))``; d
    [n_rows] and s [n_cols] -> [nnz], or for H heads at once d [n_rows, H] and s [n_cols, H] -> [nnz, H]. float32
    (float64 stays float64). CUDA: fused kernels (kernels.edge); the CPU and float64: that composition."""
    op.check_edge_vectors(d, s, "gnn.edge_attention")
    if d.device.type != "cuda" or torch.promote_types(d.dtype, s.dtype) == torch.float64:
        return composed_attention(op, d, s, negative_slope)
    return _EdgeAttention.apply(d, s, op, float(negative_slope))


def composed_attention(op: SparseOp, d: torch.Tensor, s: torch.Tensor, negative_slope: float = 0.2) -> torch.Tensor:
    """`edge_attention` in torch ops on any device (autograd derives its backward): the gathered sums, leaky ReLU,
    `edge_softmax`. What the CPU and float64 run, and the reference of the CUDA kernels' tests."""
    logits = d.index_select(0, op.index("rows", d.device)) + s.index_select(0, op.index("cols", s.device))
    return edge_softmax(op, F.leaky_relu(logits, negative_slope))
