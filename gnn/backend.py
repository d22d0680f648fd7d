"""``SparseOp``: one sparse matrix A (a graph's propagation matrix, ``A[dst, src]``) ready for the GNN autograd
functions, with every product they need, on the CPU and on CUDA devices. Tensors in and out are torch tensors in
the user's node order; the row permutation of the Tensor Core path stays inside.

- ``matmul(X)``, A @ X: CPU csr @ X; CUDA ``SpmmPlan(A[perm])``, rows scattered back by perm.
- ``matmul(G, transpose=True)``, A.T @ G: CPU csr(A.T) @ G; CUDA ``SpmmPlan(A.T[perm])`` built once (A's own
  plan when A is symmetric).
- ``matmul_values(v, X[, transpose])``, A's pattern with per-call values v: CPU csr @ X; CUDA kernels.edge (a
  lane per output column, the values read in place, through A.T's order for the transpose).
- ``sddmm(U, V)``, U[row_k] . V[col_k]: CPU gnn.reference.sddmm; CUDA kernels.edge (float32, a thread per edge).
- ``attention(d, s, slope)`` / ``attention_backward``: GAT's weights ``softmax_row(leaky_relu(d[row] + s[col]))``
  and their gradients, CUDA only (kernels.edge; on the CPU gnn.functional.edge_attention composes torch ops).
- ``index(name, device)``: the pattern's index tensors (rows, columns, row pointers, A.T's) for torch-side steps
  (the softmax, GAT's rank-one logits), made once per device.

Per-call values (attention) go through kernels.edge's CUDA-core kernels, not the ME-TCF plans: a plan bakes A's
values in when it is built. Precision: CPU float64 stays float64 (gradcheck), everything else computes in float32
(TF32 on the Tensor Core kernels) and returns the input's dtype; half inputs use a half plan when ``SpmmPlan`` takes
``dtype=`` float16/bfloat16, else a float32 plan (``op.compute`` records which ran). CUDA float64 runs torch's own
sparse ops (for references, not speed). GPU work runs on torch's current stream, reading and writing torch's buffers
by address (gnn.gpu).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from configs.errors import InputError
from gnn import reference as ref

HALF = (torch.float16, torch.bfloat16)


class SparseOp:
    """A (``shape`` [n_rows, n_cols], CSR, sorted, no duplicates) with an optional row permutation ``perm``
    (``perm[new] = old``; the Tensor Core plans run on ``A[perm]``). Read-only after construction."""

    def __init__(self, A, perm=None, *, name: str | None = None):
        if not sp.issparse(A) or A.ndim != 2:
            raise InputError(f"gnn.SparseOp: needs a 2-D SciPy sparse matrix, got {type(A).__name__}")
        A = sp.csr_array(A)
        A.sum_duplicates()  # sorts too; canonical CSR from the store is already both
        self.A, self.shape, self.nnz, self.name = A, tuple(int(s) for s in A.shape), int(A.nnz), name
        if perm is not None:
            perm = np.asarray(perm, dtype=np.int64)
            n = self.shape[0]
            if perm.shape != (n,) or (n and np.bincount(perm, minlength=n).max() != 1) or \
                    (n and (perm.min() < 0 or perm.max() >= n)):
                raise InputError(f"gnn.SparseOp: perm of shape {perm.shape} is not a permutation of the "
                                 f"{n} rows")
        self.perm = perm
        self._t = None  # (indptr_t, indices_t, order) of A.T
        self._sym = None
        self._cpu: dict = {}
        self._gpu: dict = {}  # torch.device("cuda", i) -> gnn.gpu.GpuEngine (`_engine`)
        self._index: dict = {}  # (name, torch.device) -> int64 index tensor of A's pattern (`index`)
        self.compute: dict = {}

    @classmethod
    def gcn(cls, A, perm=None, *, add_self_loops: bool = True, name: str | None = None) -> "SparseOp":
        """The GCN propagation matrix ``D^-1/2 (A + I) D^-1/2`` of adjacency A (gnn.norm.gcn_norm)."""
        from gnn.norm import gcn_norm

        return cls(gcn_norm(A, add_self_loops=add_self_loops, dtype=np.float64), perm, name=name)

    # ---- structure ----------------------------------------------------------------------------------------------
    @property
    def transpose_pattern(self):
        if self._t is None:
            self._t = ref.transpose_order(self.A.indptr, self.A.indices, self.shape)
        return self._t

    @property
    def symmetric(self) -> bool:
        """A == A.T (pattern and values): the backward then reuses the forward plan."""
        if self._sym is None:
            A = self.A
            self._sym = A.shape[0] == A.shape[1] and (abs(A - A.T) > 0).nnz == 0
        return self._sym

    def edge_rows(self, device) -> torch.Tensor:
        """Destination (row) of each stored nonzero, int64, on ``device`` (cached)."""
        return self.index("rows", device)

    def index(self, name: str, device) -> torch.Tensor:
        """An int64 index tensor of A's pattern on ``device``, made once per device: "rows" / "cols" (each stored
        nonzero's row / column), "indptr", and A.T's "indptr_t", "indices_t" and "order_t" (A.T's nonzeros as
        positions in A's CSR order: ``data_t = data[order_t]``)."""
        key = (name, device if isinstance(device, torch.device) else torch.device(device))  # no string per call
        found = self._index.get(key)
        if found is None:
            make = {"rows": lambda: ref.edge_rows(self.A.indptr), "cols": lambda: self.A.indices,
                    "indptr": lambda: self.A.indptr, "indptr_t": lambda: self.transpose_pattern[0],
                    "indices_t": lambda: self.transpose_pattern[1], "order_t": lambda: self.transpose_pattern[2]}
            if name not in make:
                raise ValueError(f"gnn.SparseOp.index: {name!r} is not one of {', '.join(make)}")
            found = self._index[key] = torch.from_numpy(np.asarray(make[name](), dtype=np.int64)).to(device)
        return found

    # ---- products -----------------------------------------------------------------------------------------------
    def matmul(self, X: torch.Tensor, transpose: bool = False, bias: torch.Tensor | None = None) -> torch.Tensor:
        """A @ X (A.T @ X with ``transpose``), X 2-D; ``+ bias`` (a row added to every row, in the dtype both promote
        to: `add_bias`) where given, on CUDA in the pass that restores a permuted plan's row order where it can."""
        self._check(X, self.shape[0] if transpose else self.shape[1], "X")
        if X.device.type == "cpu":
            cd = _cpu_dtype(X.dtype)
            out = self._cpu_matrix(_NP[cd], transpose) @ X.detach().to(cd).contiguous().numpy()
            out = torch.from_numpy(np.ascontiguousarray(out)).to(X.dtype)
            return out if bias is None else add_bias(out, bias)
        return self._engine(X.device).matmul(X, transpose, bias)

    def matmul_values(self, values: torch.Tensor, X: torch.Tensor, transpose: bool = False) -> torch.Tensor:
        """A_v @ X where A_v has A's pattern and ``values`` (in A's CSR order) as its data: values [nnz], or
        [nnz, H] for H heads, head h's values weighting X's columns ``h C .. (h + 1) C`` (X [., H C], torch's
        [., H, C] flattened)."""
        heads = self._heads(values, "values", X.shape[1] if X.ndim == 2 else None)
        self._check(X, self.shape[0] if transpose else self.shape[1], "X")
        if X.device.type == "cpu":
            cd = _cpu_dtype(X.dtype)
            v = values.detach().to(cd).numpy().reshape(self.nnz, heads)
            Xn = X.detach().to(cd).contiguous().numpy()
            C = Xn.shape[1] // heads
            indptr, indices, order = self.transpose_pattern if transpose else \
                (self.A.indptr, self.A.indices, slice(None))
            shape = self.shape[::-1] if transpose else self.shape
            out = np.concatenate([sp.csr_array((v[order, h], indices, indptr), shape=shape) @ Xn[:, h * C:(h + 1) * C]
                                  for h in range(heads)], axis=1)
            return torch.from_numpy(np.ascontiguousarray(out)).to(X.dtype)
        return self._engine(X.device).matmul_values(values, X, transpose)

    def sddmm(self, U: torch.Tensor, V: torch.Tensor, heads: int | None = None) -> torch.Tensor:
        """``out[k] = U[row_k] . V[col_k]`` [nnz]: U [n_rows, K], V [n_cols, K]; dtype promoted from U and V. With
        ``heads`` H: per head over its columns ``h C .. (h + 1) C`` (C = K / H), [nnz, H]."""
        self._check(U, self.shape[0], "U")
        self._check(V, self.shape[1], "V")
        if U.shape[1] != V.shape[1] or (heads is not None and (heads < 1 or U.shape[1] % heads)):
            raise ValueError(f"gnn.SparseOp: U {tuple(U.shape)} and V {tuple(V.shape)} with heads={heads}: the "
                             "widths must match and split into the heads")
        dtype = torch.promote_types(U.dtype, V.dtype)
        if U.device.type == "cpu":
            cd = _cpu_dtype(dtype)
            Un, Vn = U.detach().to(cd).numpy(), V.detach().to(cd).numpy()
            H = heads or 1
            C = Un.shape[1] // H
            out = np.stack([ref.sddmm(self.A.indptr, self.A.indices, Un[:, h * C:(h + 1) * C], Vn[:, h * C:(h + 1) * C])
                            for h in range(H)], axis=1)
            return torch.from_numpy(np.ascontiguousarray(out if heads else out[:, 0])).to(dtype)
        return self._engine(U.device).sddmm(U, V, heads).to(dtype)

    def attention(self, d: torch.Tensor, s: torch.Tensor, slope: float) -> torch.Tensor:
        """GAT's attention weights on A's pattern, float32, in A's CSR order: ``alpha_k = softmax over row i of
        leaky_relu(d[i] + s[col_k], slope)``; d [n_rows] and s [n_cols] -> [nnz], or per head d [n_rows, H] and s
        [n_cols, H] -> [nnz, H]; on one CUDA device (float32, or cast)."""
        d, s = self._edge_vectors(d, s)
        return self._engine(d.device).attention(d, s, float(slope))

    def attention_backward(self, d: torch.Tensor, s: torch.Tensor, slope: float, alpha: torch.Tensor,
                           g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(dL/dd, dL/ds), float32, of `attention` (``alpha`` its output) for ``g = dL/dalpha``."""
        d, s = self._edge_vectors(d, s)
        edges = (self.nnz, *d.shape[1:])
        if alpha.shape != edges or g.shape != edges:
            raise ValueError(f"gnn.SparseOp: alpha {tuple(alpha.shape)} and g {tuple(g.shape)}, expected {edges}")
        return self._engine(d.device).attention_backward(d, s, float(slope), alpha.contiguous(), g)

    def check_edge_vectors(self, d: torch.Tensor, s: torch.Tensor, who: str = "gnn.SparseOp") -> None:
        """GAT's logit factors on this pattern: d [n_rows] and s [n_cols], or d [n_rows, H] and s [n_cols, H];
        a ValueError naming ``who`` otherwise."""
        if d.ndim not in (1, 2) or d.shape[0] != self.shape[0] or s.shape != (self.shape[1], *d.shape[1:]):
            raise ValueError(f"{who}: d {tuple(d.shape)} and s {tuple(s.shape)}, expected ({self.shape[0]},) and "
                             f"({self.shape[1]},), or ({self.shape[0]}, H) and ({self.shape[1]}, H)")

    def _edge_vectors(self, d: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.check_edge_vectors(d, s)
        if d.device.type != "cuda" or s.device != d.device:
            raise ValueError(f"gnn.SparseOp.attention: runs on one CUDA device (d on {d.device}, s on {s.device}); "
                             "on the CPU gnn.functional.edge_attention composes torch ops")
        return as_float32(d), as_float32(s)

    def _heads(self, values: torch.Tensor, what: str, width) -> int:
        """H of per-edge ``values`` [nnz] (1) or [nnz, H], which must split ``width`` columns into its heads."""
        heads = int(values.shape[1]) if values.ndim == 2 else 1
        if values.ndim not in (1, 2) or values.shape[0] != self.nnz or heads < 1 or \
                (width is not None and width % heads):
            raise ValueError(f"gnn.SparseOp: {what} has shape {tuple(values.shape)}, expected ({self.nnz},) or "
                             f"({self.nnz}, H) with H dividing X's {width} columns")
        return heads

    # ---- helpers ------------------------------------------------------------------------------------------------
    def _check(self, X: torch.Tensor, rows: int, what: str) -> None:
        if X.ndim != 2 or X.shape[0] != rows:
            raise ValueError(f"gnn.SparseOp: {what} has shape {tuple(X.shape)}, expected ({rows}, F)")

    def _cpu_matrix(self, dtype, transpose: bool) -> sp.csr_array:
        key = (np.dtype(dtype).name, transpose)
        if key not in self._cpu:
            M = self.A.T if transpose else self.A
            self._cpu[key] = sp.csr_array(M, dtype=dtype)
            self.compute[("cpu", key)] = "scipy csr @ dense"
        return self._cpu[key]

    def _engine(self, device):
        """The GPU engine of a CUDA device, one per device index: a tensor's device (which has its index) finds it
        in one dict lookup; "cuda" without an index means the current device."""
        engine = self._gpu.get(device)
        if engine is None:
            dev = torch.device(device)
            dev = torch.device("cuda", dev.index if dev.index is not None else torch.cuda.current_device())
            engine = self._gpu.get(dev)
            if engine is None:
                from gnn.gpu import GpuEngine

                engine = self._gpu[dev] = GpuEngine(self, dev)
        return engine


def add_bias(out: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``out + bias`` (a new product's out, which nothing else holds), in place where out's dtype holds the sum."""
    return out.add_(bias) if torch.promote_types(out.dtype, bias.dtype) == out.dtype else out + bias


def as_float32(X: torch.Tensor) -> torch.Tensor:
    """X as a float32 contiguous tensor: X itself when it is one (the kernels read its address only), else a
    detached copy."""
    return X if X.dtype == torch.float32 and X.is_contiguous() else X.detach().to(torch.float32).contiguous()


def _cpu_dtype(dtype: torch.dtype) -> torch.dtype:
    """The CPU compute dtype: float64 stays (gradcheck), everything else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


_NP = {torch.float64: np.float64, torch.float32: np.float32}
