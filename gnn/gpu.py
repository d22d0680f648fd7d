"""CUDA side of ``gnn.SparseOp``: the plans and per-edge kernels of one op on one device (its index tensors are
the op's own, ``SparseOp.index``).

Per call nothing crosses through DLPack and nothing is checked twice: the fixed-value products are bound once per (A
or A.T, dtype, N, forward or backward) and re-pointed when torch's allocator moves a buffer
(gnn.products.PlanProduct); the steps with per-call values (the SpMM with attention weights, forward and transposed,
the SDDMM, GAT's attention softmax and its backward) are kernels.edge launches on the tensors' addresses (one warp
per row, fixed-order sums: the same bits each call; before 2026-11-29 cuSPARSE SpMM and SDDMM, ~100 and ~120 us of
host time a call inside an eager GAT epoch on the H200, six calls an epoch); all write into outputs torch allocates
(no CuPy pool allocation). CuPy's current stream is torch's current stream (one ``ExternalStream`` kept per torch
stream) for the plans; kernels.edge launches on torch's stream pointer itself. The only host synchronisations are on
the first call per (product, N), before autotuning times candidates on private streams.

The per-epoch budget this gives is written down in docs/benchmarks.md ("GNN per-epoch fixed cost").
"""
from __future__ import annotations

import contextlib

import numpy as np
import scipy.sparse as sp
import torch

from configs.names import BASE_FORMAT
from gnn.backend import add_bias, as_float32
from gnn.products import PlanProduct

HALF_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
_NO_SCOPE = contextlib.nullcontext()


def _public_raw_stream(index: int) -> int:
    return torch.cuda.current_stream(index).cuda_stream


# torch's current stream on a device as a pointer: the private query torch's own compiled code uses (no Stream
# object made), the public one where a build lacks it
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", _public_raw_stream)


class _StreamScope:
    """``with scope:`` CuPy's current device and stream are ``device`` and ``stream`` (re-entrant: both keep their
    own per-thread stacks)."""

    __slots__ = ("device", "stream")

    def __init__(self, device, stream):
        self.device, self.stream = device, stream

    def __enter__(self):
        self.device.__enter__()
        self.stream.__enter__()
        return self

    def __exit__(self, *exc):
        self.stream.__exit__(*exc)
        self.device.__exit__(*exc)
        return False


class GpuEngine:
    def __init__(self, op, device: torch.device):
        self.op, self.device = op, device
        self._name = str(device)  # op.compute's key part, made once (str() of a device per call is host time)
        self._plans: dict = {}  # (transpose, dtype name) -> SpmmPlan
        self._inverse = None  # inverse of op.perm on the device (out = C[inverse]), made with the first permuted plan
        self._products: dict = {}  # (plan key, N, transpose) -> PlanProduct
        self._items: dict = {}  # transpose -> kernels.edge.row_items on the device (`_row_items`)
        self._streams: dict = {}  # torch stream pointer -> _StreamScope (CuPy's device and that stream)
        self._plan_of: dict = {}  # (transpose, torch dtype) -> SpmmPlan: `_plan`'s answer, one lookup per call

    def _on_torch_stream(self) -> _StreamScope:
        """A context setting CuPy's current device and stream to this engine's device and torch's current stream
        there, one kept per torch stream: per call one raw-pointer query and a dict lookup (torch's
        ``current_stream`` object and a generator context cost 3-4 us more of host time per product, H200)."""
        ptr = _raw_stream(self.device.index)
        scope = self._streams.get(ptr)
        if scope is None:
            import cupy

            scope = self._streams[ptr] = _StreamScope(cupy.cuda.Device(self.device.index),
                                                      cupy.cuda.ExternalStream(ptr, self.device.index))
        return scope

    def _launching(self):
        """(a context to enter, the CuPy stream to launch on) for a bound plan call on torch's current stream: where
        this engine's device is the current one, nothing to enter (the call takes the stream; entering the scope's
        CuPy device and stream stacks cost ~12 us of an in-epoch call on the H200); else the scope itself."""
        scope = self._on_torch_stream()
        if self.device.type == "cuda" and torch.cuda.current_device() == self.device.index:
            return _NO_SCOPE, scope.stream
        return scope, getattr(scope, "stream", None)

    def _synchronize(self) -> None:
        """Wait for torch's current stream: only before a first call that autotunes (never per call)."""
        torch.cuda.current_stream(self.device).synchronize()  # synchronize!

    # ---- fixed values: Tensor Core plans --------------------------------------------------------------------------
    def _plan(self, transpose: bool, dtype: torch.dtype):
        from kernels.spmm import SpmmPlan

        if transpose and self.op.symmetric:
            transpose = False  # A.T == A: one plan serves forward and backward
        name = HALF_NAMES.get(dtype, "float32")
        key = (transpose, name)
        if key not in self._plans:
            A = self.op.A.T if transpose else self.op.A
            A = sp.csr_array(A, dtype=np.float32)
            A.sort_indices()
            permuted = self.op.perm is not None and A.shape[0] == self.op.shape[0]
            if permuted:  # A.T of a square A is permuted like A (A's plan when symmetric: A[perm] = A.T[perm])
                A = A[self.op.perm]
            with self._on_torch_stream():
                try:  # half plans return float32 C (cast to the input's dtype here: one rounding, not two)
                    # the base format (ME-TCF), not the default "auto": the GNN tables were measured on it, and
                    # a layer's products at several N would each time two formats in the first epoch
                    plan = SpmmPlan(A, device="gpu", dtype=name, format=BASE_FORMAT,
                                    **({"out_dtype": np.float32} if name != "float32" else {}))
                    how = f"SpmmPlan dtype={name}"
                except (ValueError, TypeError) as err:  # a SpmmPlan without half kernels: float32, inputs cast
                    if name == "float32":
                        raise
                    plan = self._plans.get((transpose, "float32")) or SpmmPlan(A, device="gpu", format=BASE_FORMAT)
                    self._plans[(transpose, "float32")] = plan
                    how = f"SpmmPlan float32 (inputs cast from {name}: {err})"
            plan.gnn_permuted = permuted
            plan.gnn_dtype = torch.float32 if how.startswith("SpmmPlan float32") else dtype
            self._plans[key] = plan
            self.op.compute[(self._name, "A.T" if transpose else "A", name)] = how
        return self._plans[key]

    def matmul(self, X: torch.Tensor, transpose: bool, bias: torch.Tensor | None = None) -> torch.Tensor:
        if X.dtype == torch.float64:
            out = self._csr64(transpose) @ X
            return out if bias is None else add_bias(out, bias)
        plan = self._plan_of.get((transpose, X.dtype))
        if plan is None:
            plan = self._plan_of[(transpose, X.dtype)] = self._plan(transpose, X.dtype)
        # X in the plan's dtype, contiguous: X itself when it is (no launch, no new tensor; the product reads its
        # pointer only, so no detach either)
        Xc = X if X.dtype == plan.gnn_dtype else X.to(plan.gnn_dtype)
        if not Xc.is_contiguous():
            Xc = Xc.contiguous()
        # the bias into the gather pass where the product's float32 out is the result (no cast after): out + bias
        # in one pass over out instead of two (a [200k, 128] float32 add took 50 us on the H200); whether it fits
        # there (a permuted plan, float32 C and bias, aligned) `PlanProduct` decides (`adds_bias`)
        fused = bias if bias is not None and X.dtype == torch.float32 else None
        # forward and backward keep products of their own, also where they share A's plan (A symmetric): each
        # then sees the same buffers epoch after epoch (torch's allocator hands a step's tensors the same blocks)
        # and replays its graph without re-pointing; one product alternating between the two re-pointed its
        # launch on every call
        key = (id(plan), Xc.shape[1], transpose, fused is not None)
        product = self._products.get(key)
        if product is None:
            product = self._product(plan, Xc, fused)
            self._products[key] = product
        scope, stream = self._launching()
        with scope:
            out = product(Xc, stream, fused)
        out = out if out.dtype == X.dtype else out.to(X.dtype)
        return out if bias is None or product.adds_bias else add_bias(out, bias)

    def _product(self, plan, Xc: torch.Tensor, bias: torch.Tensor | None = None) -> PlanProduct:
        """The bound product of ``plan`` for Xc's N (decided, and autotuned, for that N first)."""
        if int(Xc.shape[1]) not in plan.choices:  # autotune times on CuPy's private streams: X must be ready
            self._synchronize()  # once per plan and N
        if plan.gnn_permuted and self._inverse is None:
            inverse = np.empty_like(self.op.perm)
            inverse[self.op.perm] = np.arange(len(self.op.perm))
            self._inverse = torch.from_numpy(inverse).to(self.device)
        with self._on_torch_stream():
            return PlanProduct(plan, Xc, self._inverse if plan.gnn_permuted else None, bias)

    # ---- per-edge kernels (kernels/edge.py): per-call values, the SDDMM and GAT's attention ----------------------
    def _edge_call(self, fn, *args) -> None:
        """``fn(stream, *args)`` on torch's current stream of this engine's device, which must be the current
        device for the launch (torch makes a tensor's device current only inside its own ops)."""
        if torch.cuda.current_device() != self.device.index:
            with torch.cuda.device(self.device.index):
                fn(_raw_stream(self.device.index), *args)
        else:
            fn(_raw_stream(self.device.index), *args)

    def _pattern(self, transpose: bool = False) -> tuple[int, int]:
        """Addresses of A's int64 (indptr, indices) on this device, or A.T's (indptr_t, order_t)."""
        names = ("indptr_t", "order_t") if transpose else ("indptr", "cols")
        return tuple(self.op.index(name, self.device).data_ptr() for name in names)

    def matmul_values(self, values: torch.Tensor, X: torch.Tensor, transpose: bool) -> torch.Tensor:
        """A_v @ X (A_v.T @ X): values [nnz] or [nnz, H] (head h weighting X's columns h C .. (h + 1) C)."""
        heads = 1 if values.ndim == 1 else int(values.shape[1])
        if X.dtype == torch.float64:
            v = values.detach().reshape(self.op.nnz, heads)
            if transpose:
                v = v.index_select(0, self.op.index("order_t", self.device))
            parts = X.reshape(X.shape[0], heads, X.shape[1] // heads).unbind(1)
            return torch.cat([self._csr64(transpose, v[:, h].to(torch.float64).contiguous()) @ part.contiguous()
                              for h, part in enumerate(parts)], dim=1)
        from kernels import edge

        v32, (Xk, kind) = as_float32(values), _kernel_input(X)
        n_rows = self.op.shape[1] if transpose else self.op.shape[0]
        N = int(Xk.shape[1])
        out = torch.empty((n_rows, N), dtype=torch.float32, device=self.device)  # every entry written
        if n_rows and N:
            self.op.compute.setdefault((self._name, "values"), "kernels.edge spmm_values")
            if transpose:  # A.T's rows: its indices, and A's values read through order_t (no gather pass)
                indptr_t, order_t = self._pattern(transpose=True)
                pattern = (indptr_t, self.op.index("indices_t", self.device).data_ptr(), order_t)
            else:
                pattern = (*self._pattern(), 0)
            items, n_items, n_split, n_slots = self._row_items(transpose)
            partial = torch.empty((n_slots, N), dtype=torch.float32, device=self.device) if n_slots else None
            self._edge_call(edge.spmm_values, *pattern, v32.data_ptr(), Xk.data_ptr(), N, heads, out.data_ptr(),
                            items, n_items, n_split, partial.data_ptr() if n_slots else 0, kind)
        return out if out.dtype == X.dtype else out.to(X.dtype)

    def _row_items(self, transpose: bool) -> tuple:
        """kernels.edge.row_items of A's (or A.T's) rows on this device, made once: (the five arrays' addresses,
        items, split rows, partial slots)."""
        found = self._items.get(transpose)
        if found is None:
            from kernels import edge

            indptr = self.op.transpose_pattern[0] if transpose else self.op.A.indptr
            arrays = edge.row_items(indptr)
            tensors = [torch.from_numpy(arrays[k]).to(self.device) for k in
                       ("item_row", "item_begin", "item_slot", "split_row", "split_slot")]
            found = self._items[transpose] = (tuple(x.data_ptr() for x in tensors), len(arrays["item_row"]),
                                              len(arrays["split_row"]), int(arrays["split_slot"][-1]), tensors)
        return found[:4]

    def sddmm(self, U: torch.Tensor, V: torch.Tensor, heads: int | None = None) -> torch.Tensor:
        """``out[k] = U[row_k] . V[col_k]`` [nnz]; with ``heads`` H, per head over its C = K / H columns, [nnz, H]."""
        H = heads or 1
        if torch.promote_types(U.dtype, V.dtype) == torch.float64:
            rows, cols = self.op.index("rows", self.device), self.op.index("cols", self.device)
            C = U.shape[1] // H
            out = (U.detach()[rows].double().view(self.op.nnz, H, C)
                   * V.detach()[cols].double().view(self.op.nnz, H, C)).sum(-1)
            return out if heads else out.view(self.op.nnz)
        from kernels import edge

        (Uk, kind), (Vk, kind_v) = _kernel_input(U), _kernel_input(V)
        if kind != kind_v:  # one precision for both operands: float32
            (Uk, kind), (Vk, kind_v) = (as_float32(U), "float32"), (as_float32(V), "float32")
        out = torch.empty((self.op.nnz, H) if heads else self.op.nnz, dtype=torch.float32, device=self.device)
        if self.op.nnz:  # every entry written
            self.op.compute.setdefault((self._name, "sddmm"), "kernels.edge sddmm_edges")
            rows, cols = (self.op.index(name, self.device).data_ptr() for name in ("rows", "cols"))
            self._edge_call(edge.sddmm, rows, cols, self.op.nnz, Uk.data_ptr(), Vk.data_ptr(), H,
                            int(Uk.shape[1]) // H, out.data_ptr(), kind)
        return out

    def attention(self, d: torch.Tensor, s: torch.Tensor, slope: float) -> torch.Tensor:
        """GAT's attention weights (float32), ``softmax over row i of leaky_relu(d[i] + s[col_k])`` per head: d
        [n_rows] or [n_rows, H], s [n_cols] or [n_cols, H] float32 contiguous -> [nnz] or [nnz, H]."""
        from kernels import edge

        H = 1 if d.ndim == 1 else int(d.shape[1])
        alpha = torch.empty((self.op.nnz, *d.shape[1:]), dtype=torch.float32, device=self.device)
        if self.op.nnz:
            self.op.compute.setdefault((self._name, "attention"), "kernels.edge attention_fwd")
            self._edge_call(edge.attention, *self._pattern(), self.op.shape[0], H, d.data_ptr(), s.data_ptr(),
                            slope, alpha.data_ptr())
        return alpha

    def attention_backward(self, d: torch.Tensor, s: torch.Tensor, slope: float, alpha: torch.Tensor,
                           g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(dd, ds) float32, shaped as d and s, of `attention` for ``g = dL/dalpha``."""
        from kernels import edge

        H = 1 if d.ndim == 1 else int(d.shape[1])
        g32 = as_float32(g)
        n_rows, n_cols = self.op.shape
        dd = torch.empty(d.shape, dtype=torch.float32, device=self.device)  # every row and column written
        ds = torch.empty(s.shape, dtype=torch.float32, device=self.device)
        dlogit = torch.empty(alpha.shape, dtype=torch.float32, device=self.device)
        self._edge_call(edge.attention_backward, *self._pattern(), n_rows, *self._pattern(transpose=True), n_cols,
                        H, d.data_ptr(), s.data_ptr(), slope, alpha.data_ptr(), g32.data_ptr(), dlogit.data_ptr(),
                        dd.data_ptr(), ds.data_ptr())
        return dd, ds

    # ---- float64 (references, not speed): torch's sparse CSR ------------------------------------------------------
    def _csr64(self, transpose: bool, values: torch.Tensor | None = None) -> torch.Tensor:
        A = self.op.A
        if transpose:
            indptr, indices, order = self.op.transpose_pattern
            data = A.data[order] if values is None else None
        else:
            indptr, indices, data = A.indptr, A.indices, (A.data if values is None else None)
        crow = torch.from_numpy(np.asarray(indptr, np.int64)).to(self.device)
        col = torch.from_numpy(np.asarray(indices, np.int64)).to(self.device)
        vals = values if values is not None else torch.from_numpy(np.asarray(data, np.float64)).to(self.device)
        shape = A.shape[::-1] if transpose else A.shape
        return torch.sparse_csr_tensor(crow, col, vals, size=shape, dtype=torch.float64)


def _kernel_input(X: torch.Tensor) -> tuple[torch.Tensor, str]:
    """(X as a kernels.edge input, its precision name): a contiguous float16 / bfloat16 tensor as it is (the kernels
    widen it exactly, so under autocast no cast pass runs), anything else `as_float32`."""
    if X.dtype in HALF_NAMES and X.is_contiguous():
        return X, HALF_NAMES[X.dtype]
    return as_float32(X), "float32"
