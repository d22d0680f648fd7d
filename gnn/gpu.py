"""CUDA side of ``gnn.SparseOp``: the plans, cuSPARSE operators and index tensors of one op on one device.

Tensors cross between torch and CuPy through DLPack (``cupy.from_dlpack`` / ``torch.from_dlpack``: no copies),
with CuPy's current stream set to torch's current stream, so CuPy and cuSPARSE work is ordered with the torch work
around it and DLPack's producer/consumer synchronisation is a no-op.
"""
from __future__ import annotations

import contextlib

import numpy as np
import scipy.sparse as sp
import torch

from gnn import reference as ref

HALF_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}


class GpuEngine:
    def __init__(self, op, device: torch.device):
        self.op, self.device = op, device
        self._plans: dict = {}  # (transpose, dtype name) -> SpmmPlan
        self._cus: dict = {}  # transpose -> kernels.cusparse.CusparseSpmm (per-call values)
        self._tuned: set = set()  # (transpose, N) for which cuSPARSE's algorithm was tuned
        self._sddmm = None
        self._perm = None if op.perm is None else torch.from_numpy(op.perm).to(device)
        self._order = None  # A.T's nonzeros in A's CSR order, on the device
        self._torch_csr: dict = {}  # float64 path: torch sparse CSR of A and A.T

    @contextlib.contextmanager
    def _on_torch_stream(self):
        import cupy

        stream = torch.cuda.current_stream(self.device)
        with cupy.cuda.Device(self.device.index), cupy.cuda.ExternalStream(stream.cuda_stream):
            yield cupy

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
                    plan = SpmmPlan(A, device="gpu", dtype=name, **({"out_dtype": np.float32} if name != "float32"
                                                                     else {}))
                    how = f"SpmmPlan dtype={name}"
                except (ValueError, TypeError) as err:  # a SpmmPlan without half kernels: float32, inputs cast
                    if name == "float32":
                        raise
                    plan = self._plans.get((transpose, "float32")) or SpmmPlan(A, device="gpu")
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
        Xc = X.detach().to(plan.gnn_dtype).contiguous()
        N = int(Xc.shape[1])
        if N not in plan.choices:  # the first call per N may autotune on CuPy's private streams: X must be ready
            torch.cuda.current_stream(self.device).synchronize()  # synchronize!
        with self._on_torch_stream() as cupy:
            if Xc.dtype == torch.bfloat16:  # CuPy has no bfloat16: the plan takes the bit patterns as uint16
                B = cupy.from_dlpack(Xc.view(torch.int16)).view(cupy.uint16)
            else:
                B = cupy.from_dlpack(Xc)
            Ct = torch.from_dlpack(plan.run(B))
        if plan.gnn_permuted:  # C's row r is row perm[r] of the product: out[perm] = C
            Ct = torch.empty_like(Ct).index_copy_(0, self._perm, Ct)
        return Ct.to(X.dtype)

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
            if self._order is None:
                self._order = torch.from_numpy(self.op.transpose_pattern[2]).to(self.device)
            v = v.index_select(0, self._order)
        if X.dtype == torch.float64:
            return self._csr64(transpose, v.to(torch.float64)) @ X
        op = self._cusparse(transpose)
        v32 = v.to(torch.float32).contiguous()
        X32 = X.detach().to(torch.float32).contiguous()
        N = int(X32.shape[1])
        if (transpose, N) not in self._tuned and N > 0 and op.nnz > 0:
            torch.cuda.current_stream(self.device).synchronize()  # synchronize! tune times on private streams
            with self._on_torch_stream() as cupy:
                op.tune(cupy.from_dlpack(X32), repeats=5, warmup=1)
            self._tuned.add((transpose, N))
        with self._on_torch_stream() as cupy:
            op.data[...] = cupy.from_dlpack(v32)  # the descriptor points at op.data: new values, same pattern
            Ct = torch.from_dlpack(op.run(cupy.from_dlpack(X32)))
        return Ct.to(X.dtype)

    def sddmm(self, U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        if torch.promote_types(U.dtype, V.dtype) == torch.float64:
            rows, cols = self.op.edge_rows(self.device), self._cols()
            return (U.detach()[rows].double() * V.detach()[cols].double()).sum(-1)
        if self._sddmm is None:
            from kernels.cusparse_sddmm import CusparseSddmm

            with self._on_torch_stream():
                self._sddmm = CusparseSddmm(self.op.A.indptr, self.op.A.indices, self.op.shape)
            self.op.compute[(str(self.device), "sddmm")] = "cuSPARSE SDDMM"
        U32 = U.detach().to(torch.float32).contiguous()
        V32 = V.detach().to(torch.float32).contiguous()
        with self._on_torch_stream() as cupy:
            return torch.from_dlpack(self._sddmm.run(cupy.from_dlpack(U32), cupy.from_dlpack(V32)))

    # ---- float64 (references, not speed): torch's sparse CSR ------------------------------------------------------
    def _cols(self) -> torch.Tensor:
        if "cols" not in self._torch_csr:
            self._torch_csr["cols"] = torch.from_numpy(self.op.A.indices.astype(np.int64)).to(self.device)
        return self._torch_csr["cols"]

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
