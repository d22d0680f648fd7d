"""The group layout of the tiled CVSE SpMM kernel (``cvse_spmm_tiled_*`` in kernels/cuda/cvse_spmm.cu): the
vectors of a CVSE cut by K chunks of ``bk`` columns, so that a thread block can stage B's chunk rows in shared memory
once and reuse them across all its vector rows (VectorSparse SC'21's block-sparse reuse of the dense operand; the
per-vector kernel reads a B row from L2 once per vector instead, which loses to dense GEMM below ~95 % sparsity).

Segment (t, i) = the vectors of vector row i with columns in chunk t (t * bk .. t * bk + bk - 1), stored chunk-major
(segment id s = t * n_vec_rows + i) so that the segments of chunk t of any run of vector rows are contiguous: one
copy per thread block and chunk. A segment is cut into groups of 16 vector slots (one mma k of the transpose-mapped
m16n8k16), padded with empty slots, so ``group_ptr[s] .. group_ptr[s + 1]`` are its groups.

A group is ``16 + 64 * NH`` 32-bit words (NH = 2 n8 tiles for V = 16, else 1), in the order the kernel's lanes read:

- words ``4 q + j`` (q, j in 0..3): the row within the chunk (column - t * bk) of slot ``2 q + (j & 1) + 8 (j >> 1)``
  (the slots lane (g, q) of the m16n8k16 A fragment holds: 2q, 2q+1, 2q+8, 2q+9), -1 for an empty slot;
- words ``16 + 2 NH lane + 2 h + w`` for lane = 4 g + q: the mma B fragment of n8 tile h (vector member v = 8 h + g):
  w = 0 packs slots 2q (low half) and 2q+1, w = 1 slots 2q+8 and 2q+9; zeros for empty slots and v >= V.

Shared-memory bank order: the kernel stores B's chunk row r at 16-byte position ``c ^ ((r & 3) << 1)``, and a quarter
warp of its 16-byte reads covers the 4 slots of one class j (members q = 0..3) at two adjacent 16-byte columns. So
within a segment the slots are filled level by level: level L takes the L-th vector (in column order) of each of the
buckets r & 3 = 0, 1, 2, 3 that still has one, and class j of a group is 4 consecutive slots of that sequence. While
every bucket has vectors left, a class holds one vector per bucket, distinct r & 3: its quarter-warp read is free of
bank conflicts; only the tail of a segment (buckets run out unevenly) can repeat a bucket. The summation order is
fixed by the layout: the kernel's output is deterministic.

Public API: `tile_layout`, `stage_groups`, `tiles_spmm` (the NumPy twin, float64), `value_half`, `TILE_BK`.
"""
from __future__ import annotations

import numpy as np

from kernels.indexing import INT32_MAX

TILE_BK = 128  # K rows of B per chunk (CVSE_TILE_BK in kernels/cuda/cvse_spmm.cu)
SLOTS = 16  # vector slots per group: the m16n8k16's k


def group_words(V: int) -> int:
    """32-bit words per group: 16 slot rows + 32 lanes x 2 words per n8 tile."""
    return 16 + 64 * (2 if V == 16 else 1)


def value_half(V: int, v, q, j):
    """The 16-bit position within a group of member v of the vector in class j, member q: lane 4 (v % 8) + q's
    fragment word 2 (v // 8) + (j >> 1) (after the 16 slot-row words), half j & 1."""
    nh = 2 if V == 16 else 1
    h, g = divmod(v, 8)
    return 2 * (16 + 2 * nh * (4 * g + q) + 2 * h + (j >> 1)) + (j & 1)


def n_chunks(K: int, bk: int = TILE_BK) -> int:
    return max(1, -(-int(K) // bk))


def tile_layout(vec_ptr, indices, data, K: int, bk: int = TILE_BK) -> tuple[np.ndarray, np.ndarray]:
    """(group_ptr int64 [T * n_vec_rows + 1], tiles uint32 [n_groups, group_words(V)]) of the CVSE arrays
    (``data`` [n_vectors, V] 16-bit: float16 or bfloat16 bits; the kernel is 16-bit only). T = ceil(K / bk)."""
    data = np.asarray(data)
    n, V = (int(s) for s in data.shape)
    if data.dtype.itemsize != 2:
        raise ValueError(f"the tiled CVSE kernel takes 16-bit values, got {data.dtype}")
    if bk % 4 or bk < 4:
        raise ValueError(f"bk = {bk}: the bank order needs a multiple of 4")
    words = group_words(V)
    vec_ptr = np.asarray(vec_ptr, dtype=np.int64)
    Mv, T = vec_ptr.shape[0] - 1, n_chunks(K, bk)
    n_seg = T * Mv
    col = np.asarray(indices, dtype=np.int64)
    row = np.repeat(np.arange(Mv, dtype=np.int64), np.diff(vec_ptr))
    t = col // bk
    r = col - t * bk
    seg = t * Mv + row
    bucket = r & 3
    # rank of each vector within its (segment, bucket), in column order (a vector row's columns ascend)
    by_bucket = np.lexsort((col, bucket, seg))
    key = (seg * 4 + bucket)[by_bucket]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if n else np.zeros(0, np.int64)
    rank = np.empty(n, dtype=np.int64)
    rank[by_bucket] = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    order = np.lexsort((bucket, rank, seg))  # slot order: segment, level, bucket
    counts = np.bincount(seg, minlength=n_seg) if n else np.zeros(n_seg, np.int64)
    group_ptr = np.zeros(n_seg + 1, dtype=np.int64)
    np.cumsum(-(-counts // SLOTS), out=group_ptr[1:])
    n_groups = int(group_ptr[-1])
    if max(n_groups, 1) * words > INT32_MAX:
        raise ValueError(f"the tiled layout needs {n_groups} groups of {words} words: more than the int32 group ids "
                         "the kernel takes")
    seg_o = seg[order]
    pos = np.arange(n, dtype=np.int64) - np.r_[0, np.cumsum(counts)][seg_o]  # slot within the segment
    G = group_ptr[seg_o] + pos // SLOTS
    j, q = (pos % SLOTS) // 4, pos % 4
    tiles = np.zeros((max(n_groups, 1), words), dtype=np.uint32)
    tiles[:, :16] = np.uint32(0xFFFFFFFF)  # -1: empty slot
    tiles[G, 4 * q + j] = r[order].astype(np.uint32)
    t16 = tiles.view(np.uint16)  # word w = halves 2w (low) and 2w + 1 (little-endian)
    vals = data.view(np.uint16)[order]
    for v in range(V):
        t16[G, value_half(V, v, q, j)] = vals[:, v]
    return group_ptr, tiles[:n_groups] if n_groups else tiles


def stage_groups(group_ptr, n_vec_rows: int, rows_per_block: int) -> int:
    """The most groups one thread block of ``rows_per_block`` vector rows stages for one chunk (the kernel's shared
    memory per stage is sized by it)."""
    P = np.asarray(group_ptr, dtype=np.int64)
    T = (P.shape[0] - 1) // max(n_vec_rows, 1)
    if n_vec_rows == 0:
        return 0
    i0 = np.arange(0, n_vec_rows, rows_per_block, dtype=np.int64)
    i1 = np.minimum(i0 + rows_per_block, n_vec_rows)
    t = np.arange(T, dtype=np.int64)[:, None] * n_vec_rows
    return int((P[t + i1] - P[t + i0]).max())


def tiles_spmm(group_ptr, tiles, V: int, shape, B, bk: int = TILE_BK, *, bf16: bool = False) -> np.ndarray:
    """float64 C = A @ B read back from the layout alone (slot rows and fragment words), as the kernel reads it."""
    from kernels.formats.cvse import values_float64

    n_rows, K = (int(s) for s in shape)
    B = np.asarray(B, dtype=np.float64)
    P = np.asarray(group_ptr, dtype=np.int64)
    T = n_chunks(K, bk)
    Mv = (P.shape[0] - 1) // T
    C = np.zeros((Mv * V, B.shape[1]))
    n_groups = int(P[-1])
    if n_groups == 0:
        return C[:n_rows]
    seg = np.repeat(np.arange(P.shape[0] - 1, dtype=np.int64), np.diff(P))  # segment of each group
    t, i = seg // Mv, seg % Mv
    t16 = tiles[:n_groups].view(np.uint16)
    raw = t16 if bf16 else t16.view(np.float16)
    for q in range(4):
        for j in range(4):
            r = tiles[:n_groups, 4 * q + j].astype(np.int64)
            r[tiles[:n_groups, 4 * q + j] == 0xFFFFFFFF] = -1
            live = r >= 0
            cols = t[live] * bk + r[live]
            for v in range(V):
                vals = values_float64(raw[live, value_half(V, v, q, j)])
                np.add.at(C, V * i[live] + v, vals[:, None] * B[cols])
    return C[:n_rows]
