"""Per-edge GNN steps on one CSR pattern (kernels/cuda/edge.cu), launched from raw device addresses on a given
stream: GAT's attention (``alpha = softmax over each row of leaky_relu(d[row] + s[col])``) and its backward, the
float32 SDDMM ``out[k] = U[row_k] . V[col_k]`` and the SpMM with per-call values ``A_v @ X`` (or ``A_v.T @ X``),
each for H heads at once on the one pattern (edge quantities [nnz, H], node quantities [n, H], features
[n, H * C] with head h's channels at ``h C .. (h + 1) C``).
gnn.gpu passes torch tensors' addresses and torch's current stream, so a call makes no array object and allocates
nothing: one ``cuLaunchKernel`` per kernel with its arguments packed on the spot (cuLaunchKernel copies them at the
launch). Launches are capturable into a CUDA graph.

Index arrays are int64 (``gnn.SparseOp.index``), values float32, row-major and contiguous; nothing is checked on
the device (the caller's tensors come from the op's own pattern). One warp per row and head (per column and head
for the backward's column sums, per row item for the SpMM; a thread per edge for the SDDMM), fixed-order sums, no
atomics: the same bits on every call (edge.cu says how each is summed).
"""
from __future__ import annotations

import numpy as np

from kernels import launch

SOURCE = launch.CUDA_DIR / "edge.cu"
THREADS = 256  # 8 warps a block, one row each
_WARPS = THREADS // 32


class _Build:
    """edge.cu takes no -D options."""

    @staticmethod
    def defines() -> tuple:
        return ()


BUILD = _Build()


def _launch(name: str, stream: int, n_warps: int, *args: int) -> None:
    """``name`` over ``n_warps`` warps (a row, column or item each, or 32 edges) on ``stream``; ``args``: 64-bit
    slots (addresses, int64 sizes, `launch.float_bits`), packed as they are (no per-argument conversion on this
    per-call path)."""
    if n_warps <= 0:
        return
    launch.launch_slots(launch.function(name, BUILD, SOURCE), (-(-n_warps // _WARPS), 1, 1), (THREADS, 1, 1), stream,
                        np.array(args, dtype=np.uint64))


def attention(stream: int, indptr: int, indices: int, n_rows: int, heads: int, d: int, s: int, slope: float,
              alpha: int) -> None:
    """``alpha[k, h] = exp(e - m) / sum_row exp(e - m)`` with ``e = leaky_relu(d[i, h] + s[col_k, h], slope)`` and
    m the largest e of row i and head h: every stored nonzero k of row i (d [n_rows, H], s [n_cols, H], alpha
    [nnz, H], float32; H = ``heads``)."""
    _launch("attention_fwd", stream, n_rows * heads, indptr, indices, d, s, launch.float_bits(slope), n_rows, heads,
            alpha)


def attention_backward(stream: int, indptr: int, indices: int, n_rows: int, indptr_t: int, order_t: int,
                       n_cols: int, heads: int, d: int, s: int, slope: float, alpha: int, g: int, dlogit: int,
                       dd: int, ds: int) -> None:
    """The gradients of `attention` for ``g = dL/dalpha`` [nnz, H]: the logits' ``dlogit`` [nnz, H] (scratch the
    caller owns), ``dd`` [n_rows, H] its row sums and ``ds`` [n_cols, H] its column sums (walked in A.T's order:
    ``indptr_t``, ``order_t`` as ``gnn.SparseOp.index`` gives them). Two launches, stream-ordered."""
    _launch("attention_bwd_rows", stream, n_rows * heads, indptr, indices, d, s, launch.float_bits(slope), n_rows,
            heads, alpha, g, dlogit, dd)
    _launch("attention_bwd_cols", stream, n_cols * heads, indptr_t, order_t, dlogit, n_cols, heads, ds)


SUFFIX = {"float32": "", "float16": "_f16", "bfloat16": "_bf16"}  # the kernels' input precisions


def sddmm(stream: int, rows: int, indices: int, nnz: int, U: int, V: int, heads: int, C: int, out: int,
          dtype: str = "float32") -> None:
    """``out[k, h] = U[rows[k], h] . V[indices[k], h]`` in float32, a thread per edge (rows, indices: each stored
    nonzero's row and column): U [n_rows, H * C] and V [n_cols, H * C] row-major (head h's channels at
    ``h C .. (h + 1) C``) of ``dtype`` (float32, float16 or bfloat16: 16-bit values widened exactly), out [nnz, H]
    float32; float32 takes float4 loads when C % 4 == 0 and both addresses are 16-byte aligned (the same bits every
    way: one fused multiply-add per product, in channel order)."""
    if dtype == "float32" and C % 4 == 0 and U % 16 == 0 and V % 16 == 0:
        name, words = "sddmm_edges_v4", C // 4
    else:
        name, words = "sddmm_edges" + SUFFIX[dtype], C
    _launch(name, stream, -(-nnz // 32), rows, indices, U, V, nnz, heads, words, out)


CHUNK = 128  # edges an item of spmm_values at most: a longer row is split (R-MAT scale 16 hubs: thousands of edges)


def row_items(indptr, chunk: int = CHUNK) -> dict:
    """spmm_values' work list for a CSR row pointer (NumPy, int64): every row cut into items of at most ``chunk``
    edges (an empty row is one empty item: its output row is written as zeros). ``item_row``, ``item_begin`` (the
    item's first edge) and ``item_slot`` (-1 where the item is its row's only one, else its partial row's slot);
    ``split_row`` (the rows of more than one item) and ``split_slot`` (their slots, CSR-like: row r's are
    ``split_slot[r] .. split_slot[r + 1]``, in edge order)."""
    if chunk < 1:
        raise ValueError(f"kernels.edge.row_items: chunk must be >= 1, got {chunk}")
    indptr = np.asarray(indptr, dtype=np.int64)
    counts = np.diff(indptr)
    n_items = np.maximum(1, -(-counts // chunk))
    first = np.concatenate(([0], np.cumsum(n_items)))
    item_row = np.repeat(np.arange(len(counts), dtype=np.int64), n_items)
    item_begin = indptr[:-1][item_row] + chunk * (np.arange(first[-1], dtype=np.int64) - first[:-1][item_row])
    split = n_items > 1
    item_slot = np.full(first[-1], -1, dtype=np.int64)
    in_split = split[item_row]
    item_slot[in_split] = np.arange(int(in_split.sum()), dtype=np.int64)
    split_slot = np.concatenate(([0], np.cumsum(n_items[split]))).astype(np.int64)
    return {"item_row": item_row, "item_begin": item_begin, "item_slot": item_slot,
            "split_row": np.flatnonzero(split).astype(np.int64), "split_slot": split_slot}


def spmm_values(stream: int, indptr: int, indices: int, order: int, values: int, X: int, N: int, heads: int,
                out: int, items: tuple[int, int, int, int, int], n_items: int, n_split: int, partial: int,
                dtype: str = "float32") -> None:
    """``out = A_v @ X`` per head (out [n_rows, N], X [n_cols, N] float32 row-major, N = H * C: head h's columns
    ``h C .. (h + 1) C`` weighted by ``values[., h]``, values [nnz, H]), the values of stored nonzero k being
    ``values[order[k]]``, or ``values[k]`` where ``order`` is 0 (a null address): with A.T's (indptr_t,
    indices_t, order_t) this is ``A_v.T @ X`` on A's own values. ``items``: the addresses of `row_items`'
    item_row, item_begin, item_slot, split_row and split_slot on the device; ``partial`` a float32
    [split_slot[-1], N] scratch (unused without split rows). X of ``dtype`` (float32, float16 or bfloat16:
    widened exactly); values, out and partial float32. Two launches where a row is split, else one."""
    item_row, item_begin, item_slot, split_row, split_slot = items
    _launch("spmm_values" + SUFFIX[dtype], stream, n_items, indptr, indices, order, values, X, item_row,
            item_begin, item_slot, n_items, N, heads, CHUNK, out, partial)
    _launch("spmm_values_fixup", stream, n_split, split_row, split_slot, n_split, N, partial, out)
