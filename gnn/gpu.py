"""CUDA side of ``gnn.SparseOp``: the plans and cuSPARSE operators of one op on one device (its index tensors are
the op's own, ``SparseOp.index``).

Per call nothing crosses through DLPack and nothing is checked twice: the fixed-value products are bound once per
(A or A.T, dtype, N, forward or backward) and re-pointed when torch's allocator moves a buffer
(gnn.products.PlanProduct); the per-call-values cuSPARSE product is bound once per (A or A.T, N) and re-pointed the
same way (`_bound_values`); the SDDMM reads and writes torch tensors through non-owning CuPy views
(gnn.products.array_view); all write into outputs torch allocates (no CuPy pool allocation; the SDDMM's is
zero-filled, see `sddmm`). CuPy's
current stream is torch's current stream (one ``ExternalStream`` kept per torch stream), so CuPy and cuSPARSE work
is ordered with the torch work around it. The only host synchronisations are on the first call per (product, N),
before autotuning times candidates on private streams. The per-epoch budget this gives is written down in
docs/benchmarks.md ("GNN per-epoch fixed cost").
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from configs.names import BASE_FORMAT
from gnn.products import PlanProduct, array_view

HALF_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}


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


class _Pointer:
    """A device address where a bound cuSPARSE call reads ``.data.ptr`` (``CusparseBound.set_io``): the tensor
    itself lives on in the caller, which issues the call on its stream before the tensor can be freed."""

    __slots__ = ("data", "ptr")

    def __init__(self, ptr: int):
        self.ptr, self.data = ptr, self


class GpuEngine:
    def __init__(self, op, device: torch.device):
        self.op, self.device = op, device
        self._plans: dict = {}  # (transpose, dtype name) -> SpmmPlan
        self._cus: dict = {}  # transpose -> kernels.cusparse.CusparseSpmm (per-call values)
        self._tuned: set = set()  # (transpose, N) for which cuSPARSE's algorithm was tuned
        self._sddmm = None
        self._inverse = None  # inverse of op.perm on the device (out = C[inverse]), made with the first permuted plan
        self._products: dict = {}  # (plan key, N, transpose) -> PlanProduct
        self._streams: dict = {}  # torch stream pointer -> _StreamScope (CuPy's device and that stream)
        self._values: dict = {}  # transpose -> torch view of the cuSPARSE operator's values (copied into per call)
        self._bound: dict = {}  # (transpose, N) -> [CusparseBound, (X, out) pointers it points at]

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
            self.op.compute[(str(self.device), "A.T" if transpose else "A", name)] = how
        return self._plans[key]

    def matmul(self, X: torch.Tensor, transpose: bool) -> torch.Tensor:
        if X.dtype == torch.float64:
            return self._csr64(transpose) @ X
        plan = self._plan(transpose, X.dtype)
        # X in the plan's dtype, contiguous: X itself when it is (no launch, no new tensor; the product reads its
        # pointer only, so no detach either)
        Xc = X if X.dtype == plan.gnn_dtype else X.to(plan.gnn_dtype)
        if not Xc.is_contiguous():
            Xc = Xc.contiguous()
        # forward and backward keep products of their own, also where they share A's plan (A symmetric): each
        # then sees the same buffers epoch after epoch (torch's allocator hands a step's tensors the same blocks)
        # and replays its graph without re-pointing; one product alternating between the two re-pointed its
        # launch on every call
        key = (id(plan), Xc.shape[1], transpose)
        product = self._products.get(key)
        if product is None:
            product = self._product(plan, Xc)
            self._products[key] = product
        with self._on_torch_stream():
            out = product(Xc)
        return out if out.dtype == X.dtype else out.to(X.dtype)

    def _product(self, plan, Xc: torch.Tensor) -> PlanProduct:
        """The bound product of ``plan`` for Xc's N (decided, and autotuned, for that N first)."""
        if int(Xc.shape[1]) not in plan.choices:  # autotune times on CuPy's private streams: X must be ready
            self._synchronize()  # once per plan and N
        if plan.gnn_permuted and self._inverse is None:
            inverse = np.empty_like(self.op.perm)
            inverse[self.op.perm] = np.arange(len(self.op.perm))
            self._inverse = torch.from_numpy(inverse).to(self.device)
        with self._on_torch_stream():
            return PlanProduct(plan, Xc, self._inverse if plan.gnn_permuted else None)

    # ---- per-call values: cuSPARSE --------------------------------------------------------------------------------
    def _cusparse(self, transpose: bool):
        if transpose not in self._cus:
            from kernels.cusparse import CusparseSpmm

            A = self.op.A
            if transpose:
                indptr, indices, _ = self.op.transpose_pattern
                M = sp.csr_array((np.ones(len(indices), np.float32), indices, indptr), shape=A.shape[::-1])
            else:
                M = sp.csr_array((np.ones(A.nnz, np.float32), A.indices, A.indptr), shape=A.shape)
            with self._on_torch_stream():
                try:  # bitwise repeatability is not needed for training (PyG's scatter is not either): the
                    # fastest algorithm, not the fastest deterministic one
                    self._cus[transpose] = CusparseSpmm(M, deterministic=False)
                except TypeError:  # a CusparseSpmm without the option
                    self._cus[transpose] = CusparseSpmm(M)
            self.op.compute[(str(self.device), "values", "A.T" if transpose else "A")] = "cuSPARSE SpMM"
        return self._cus[transpose]

    def matmul_values(self, values: torch.Tensor, X: torch.Tensor, transpose: bool) -> torch.Tensor:
        v = values.detach()
        if transpose:
            v = v.index_select(0, self.op.index("order_t", self.device))
        if X.dtype == torch.float64:
            return self._csr64(transpose, v.to(torch.float64)) @ X
        op = self._cusparse(transpose)
        # float32 and contiguous: taken as they are (the product reads their pointers only), no new tensor
        v32 = v if v.dtype == torch.float32 and v.is_contiguous() else v.to(torch.float32).contiguous()
        X32 = X if X.dtype == torch.float32 and X.is_contiguous() else X.detach().to(torch.float32).contiguous()
        N = int(X32.shape[1])
        if (transpose, N) not in self._tuned and N > 0 and op.nnz > 0:
            self._synchronize()  # tune times on private streams
            with self._on_torch_stream():
                op.tune(array_view(X32), repeats=5, warmup=1)
            self._tuned.add((transpose, N))
        out = torch.empty((op.shape[0], N), dtype=torch.float32, device=self.device)
        # the descriptor points at op.data: the new values are copied there (one copy launch, through torch's
        # copy rather than a CuPy assignment); re-pointing the descriptor instead would skip it, but cuSPARSE
        # documents value changes, not pointer changes, after CSR_ALG3's preprocessing
        self._values_view(transpose, op).copy_(v32)
        if op.nnz == 0 or N == 0:
            with self._on_torch_stream():
                op.run(array_view(X32), array_view(out))
        else:
            self._bound_values(transpose, op, X32, out)(_raw_stream(self.device.index))
        return out if out.dtype == X.dtype else out.to(X.dtype)

    def _bound_values(self, transpose: bool, op, X32: torch.Tensor, out: torch.Tensor):
        """The cuSPARSE SpMM of the per-call-values operator bound once per (transpose, N) (kernels.cusparse
        .CusparseBound: its dense descriptors re-pointed when torch's allocator moves X or the output, two
        cusparseDnMatSetValues), called on torch's current stream: per call no checks, no array views, no stream
        scope (the unbound ``run`` cost checks, a descriptor lookup and two CuPy views a call)."""
        key = (transpose, int(X32.shape[1]))
        entry = self._bound.get(key)
        ptrs = (X32.data_ptr(), out.data_ptr())
        if entry is None:
            with self._on_torch_stream():
                bound = op.bind(array_view(X32), array_view(out))
            entry = self._bound[key] = [bound, ptrs]
        elif entry[1] != ptrs:
            entry[0].set_io(_Pointer(ptrs[0]), _Pointer(ptrs[1]))
            entry[1] = ptrs
        return entry[0]

    def _values_view(self, transpose: bool, op) -> torch.Tensor:
        view = self._values.get(transpose)
        if view is None:
            view = self._values[transpose] = torch.from_dlpack(op.data)  # once: op.data lives as long as op
        return view

    def sddmm(self, U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        if torch.promote_types(U.dtype, V.dtype) == torch.float64:
            rows, cols = self.op.index("rows", self.device), self.op.index("cols", self.device)
            return (U.detach()[rows].double() * V.detach()[cols].double()).sum(-1)
        if self._sddmm is None:
            from kernels.cusparse_sddmm import CusparseSddmm

            with self._on_torch_stream():
                self._sddmm = CusparseSddmm(self.op.A.indptr, self.op.A.indices, self.op.shape)
            self.op.compute[(str(self.device), "sddmm")] = "cuSPARSE SDDMM"
        U32 = U if U.dtype == torch.float32 and U.is_contiguous() else U.detach().to(torch.float32).contiguous()
        V32 = V if V.dtype == torch.float32 and V.is_contiguous() else V.detach().to(torch.float32).contiguous()
        # zeros, as kernels.cusparse_sddmm allocates its own: cuSPARSE documents C = alpha (A B) o spy(C) + beta C,
        # not that beta = 0 leaves C unread (an uninitialised NaN would survive 0 * NaN); one fill launch
        out = torch.zeros(self.op.nnz, dtype=torch.float32, device=self.device)
        with self._on_torch_stream():
            self._sddmm.run(array_view(U32), array_view(V32), array_view(out))
        return out

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
