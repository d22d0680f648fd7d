"""The per-call path of ``gnn.SparseOp``'s fixed-value products on a device: `PlanProduct`, one ``SpmmPlan`` product
(A's or A.T's plan, one N and dtype) bound once and re-pointed per call, and `array_view`, a torch tensor seen by
the plan's array library without DLPack or ownership.

Why (issue #33): the layers called ``plan.run(B)`` without ``out``, which is the plan's slow path on every call
(B converted and checked, C allocated from CuPy's pool, the launch packed anew), with a DLPack conversion each way
and a CuPy stream object made per call. Per call a `PlanProduct` now costs: two pointer comparisons; when torch's
allocator has moved X or the output, a view of each (`array_view`, no DLPack) and ``call.set_io`` (a few writes
into the packed arguments); the bound launch, or the CUDA graph of it replayed (kernels.calls). For a plan on
permuted rows the gather into the caller's row order is part of that bound call on CUDA (kernels.calls.gathered:
one more packed launch, in the same graph; torch's ``index_select`` cost 15-50 us of host time per product on
the H200, 2026-11-28, more than the product's own launch), and an ``index_select`` on the CPU path. Nothing is
checked, converted or synchronised per call.

Buffers: the kernel's output ``C`` of a permuted plan is this object's, allocated once and overwritten by every
call (only the gather reads it, on the same stream); what is returned is always a fresh torch tensor from torch's
caching allocator (no cudaMalloc, no sync), because autograd may hold it (a later op saving it for its backward).
A plan on unpermuted rows writes straight into that fresh output. One product serves one stream at a time (its C
is shared by the calls, which torch's stream order keeps apart; the old per-call C from CuPy's per-stream pool did
not need that): forward and backward on concurrent streams would need a C per stream.

The same code runs on the CPU path of ``SpmmPlan`` (NumPy views, a ``kernels.cpu_path.CpuCall``), which is how
tests/gnn/test_products.py counts bindings, re-pointings and allocations without a GPU.
"""
from __future__ import annotations

import numpy as np
import torch

_CUPY_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "uint16",  # bfloat16: bits
                torch.int64: "int64"}
_TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "uint16": torch.bfloat16}
KEPT_VIEWS = 8  # array views a product keeps by data pointer (the same shape and dtype each time, so the pointer
# names the view): X of the forward and the backward call, the fresh outputs of an unpermuted plan


def array_view(t: torch.Tensor):
    """``t`` (contiguous) as the plan's array type, sharing its memory and not owning it: a NumPy view on the CPU;
    on CUDA a cupy array on ``cupy.cuda.UnownedMemory`` (no DLPack capsule, no stream handshake; bfloat16 as
    uint16 bit patterns, what ``SpmmPlan`` takes). The view must be used only while ``t`` lives, on t's stream
    order: a bound launch issued now is ordered before any reuse of t's block by torch's allocator."""
    if t.device.type == "cpu":
        return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()
    import cupy

    mem = cupy.cuda.UnownedMemory(t.data_ptr(), t.numel() * t.element_size(), None, t.device.index)
    return cupy.ndarray(tuple(t.shape), _CUPY_DTYPES[t.dtype], cupy.cuda.MemoryPointer(mem, 0))


class PlanProduct:
    """``A @ X`` for one plan and one (N, dtype) of X: ``product(X)`` with X [n_cols, N] contiguous in the plan's
    input dtype returns a new tensor [n_rows, N] in the plan's output dtype, rows in the user's order.

    ``plan``: an ``SpmmPlan`` (GPU or CPU path); ``inverse``: None, or for a plan on A[perm] the inverse
    permutation (``inverse[perm[r]] = r``) as a long tensor on X's device, so that ``out = C[inverse]``.
    ``bias``: a float32 [N] tensor added to every row of out in the gather's pass (kernels.gather.bias_fits: a
    permuted plan on CUDA, float32 out, N % 4 == 0); ``adds_bias`` says whether this product does (else the caller
    adds it), and each call passes the bias it means (a new tensor there re-binds the gather, not the product).
    Counters (read by the tests and benchmarks/gnn.py): ``binds`` (1), ``rebinds`` (re-pointings), ``calls``."""

    def __init__(self, plan, X: torch.Tensor, inverse: torch.Tensor | None = None, bias: torch.Tensor | None = None):
        self.plan, self.inverse = plan, inverse
        self.shape = (plan.shape[0], int(X.shape[1]))
        self.device = X.device
        self.out_dtype = _TORCH_DTYPES[np.dtype(plan.out_dtype).name]
        # a permuted plan's C: this product's own, reused by every call
        self.C = None if inverse is None else self._empty()
        first_out = self.C if self.C is not None else self._empty()
        self.call = plan.bind(array_view(X), array_view(first_out))
        self.kernel = self.call.kernel
        self.fused = self.C is not None and self.device.type == "cuda"  # the gather inside the bound call
        self.adds_bias, self._bias_ptr = False, None
        if self.fused:
            first_out = self._empty()
            self._plan_call = self.call  # the plan's bound product, behind every gather bound here
            self.adds_bias = bias is not None and self._bias_fits(bias, first_out)
            self._gather(X, first_out, bias if self.adds_bias else None)
        self._ptrs = (X.data_ptr(), first_out.data_ptr())
        self._views: dict = {}  # data pointer -> array_view: a layer's forward and backward X come back each epoch
        self.binds, self.rebinds, self.calls = 1, 0, 0

    def _bias_fits(self, bias: torch.Tensor, out: torch.Tensor) -> bool:
        from kernels.gather import bias_fits

        return bias.is_contiguous() and bias.device == self.device and \
            bias_fits(array_view(self.C), array_view(out), array_view(bias.detach()))

    def _gather(self, X: torch.Tensor, out: torch.Tensor, bias: torch.Tensor | None) -> None:
        """The plan's bound product followed by the gather (+ bias) into out, as this product's call."""
        from kernels.calls import gathered

        self.call = gathered(self._plan_call, array_view(X), array_view(self.C), array_view(self.inverse),
                             array_view(out), None if bias is None else array_view(bias.detach()))
        self._bias_ptr = None if bias is None else bias.data_ptr()

    def _view(self, t: torch.Tensor):
        ptr = t.data_ptr()
        view = self._views.get(ptr)
        if view is None:
            if len(self._views) >= KEPT_VIEWS:
                self._views.pop(next(iter(self._views)))
            view = self._views[ptr] = array_view(t)
        return view

    def _empty(self) -> torch.Tensor:
        return torch.empty(self.shape, dtype=self.out_dtype, device=self.device)

    def __call__(self, X: torch.Tensor, stream=None, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``A @ X`` (``+ bias`` where this product `adds_bias`: the bias of this call) on ``stream`` (a CuPy
        stream object; None: CuPy's current one)."""
        out = self.C if self.C is not None and not self.fused else self._empty()
        ptrs = (X.data_ptr(), out.data_ptr())
        if self.adds_bias and bias.data_ptr() != self._bias_ptr:  # another bias tensor: the gather bound anew
            self._gather(X, out, bias)
            self._ptrs = ptrs
            self.rebinds += 1
        elif ptrs != self._ptrs:  # torch's allocator moved a buffer: re-point the bound launch (no rebuild)
            self.call.set_io(self._view(X), self._view(out))
            self._ptrs = ptrs
            self.rebinds += 1
        self.call(stream)
        self.calls += 1
        if self.inverse is None or self.fused:
            return out
        return out.index_select(0, self.inverse)  # C's row r is the user's row perm[r]: out[i] = C[inverse[i]]
