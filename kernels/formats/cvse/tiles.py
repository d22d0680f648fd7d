"""The group layout of the tiled CVSE SpMM kernel (``cvse_spmm_tiled_*`` in kernels/formats/cvse/cvse_spmm.cu): the
vectors of a CVSE cut by K chunks of ``bk`` columns, so that a thread block can stage B's chunk rows in shared memory
once and reuse them across all its vector rows (VectorSparse SC'21's block-sparse reuse of the dense operand; the
per-vector kernel reads a B row from L2 once per vector instead, which loses to dense GEMM below ~95 % sparsity).

Segment (t, i) = the vectors of vector row i with columns in chunk t (t * bk .. t * bk + bk - 1), stored chunk-major
(segment id s = t * n_vec_rows + i) so that the segments of chunk t of any run of vector rows are contiguous: one
copy per thread block and chunk. A segment is cut into groups of 16 vector slots (one mma k of the transpose-mapped
m16n8k16), padded with empty slots, so ``group_ptr[s] .. group_ptr[s + 1]`` are its groups.

A group is ``16 + 64 * NH`` 32-bit words (NH = 2 n8 tiles for V = 16, else 1), in the order the kernel's lanes read:

- words ``4 q + j`` (q, j in 0..3): the row within the chunk (column - t * bk) of slot ``2 q + (j & 1) + 8 (j >> 1)``
  (the slots lane (g, q) of the m16n8k16 A fragment holds: 2q, 2q+1, 2q+8, 2q+9); an empty slot holds
  ``bk + z`` (z in 0..7), one of the 8 zero rows the kernel keeps after the chunk's B rows;
- words ``16 + 2 NH lane + 2 h + w`` for lane = 4 g + q: the mma B fragment of n8 tile h (vector member v = 8 h + g):
  w = 0 packs slots 2q (low half) and 2q+1, w = 1 slots 2q+8 and 2q+9; zeros for empty slots and v >= V.

Shared-memory bank order: the kernel stores B's chunk row r at 16-byte position ``c ^ (r & 7)`` and gathers a group
by ldmatrix, whose 8-lane phases each read the same logical piece of 8 slots: slots 0..7 (classes j = 0, 1), then
8..15 (j = 2, 3). Such a phase is free of bank conflicts when its 8 slots have distinct r & 7 (their bucket). So a
segment's vectors, sorted by bucket (fullest first), are dealt round robin over its halves (2 per group): a bucket's
vectors land in distinct halves as long as it has no more of them than the segment has halves, and an empty slot
reads the zero row of a bucket its half does not use. Only a bucket fuller than the halves repeats in a half. The
summation order is fixed by the layout: the kernel's output is deterministic.

Chunk order (`chunk_order`): a chunk's B rows need not sit in column order. Row r of the staged tile holds column
``rows[t * bk + r]``, chosen per chunk so that every segment's vectors spread evenly over the 8 buckets (a greedy
colouring: columns by falling use, each into the bucket, of the bk / 8 places each has, that adds the fewest
bucket-over-halves overflows to the segments using it); the kernel's B rewrite (sm_90) or copy (sm_80) reads B's
rows in that order, so the permutation costs nothing per call. At V = 8, 80 %, 4096 x 4096 it cuts the ldmatrix
reads per phase from 1.49 (column order) to 1.36.

Public API: `tile_layout`, `chunk_order`, `stage_groups`, `tiles_spmm` (the NumPy twin, float64), `value_half`,
`TILE_BK`.
"""
from __future__ import annotations

import numpy as np

from kernels.formats.cvse.container import values_float64
from storage.indexing import INT32_MAX, segment_ids

TILE_BK = 256  # K rows of B per chunk: CvseConfig.tile_bk's default (CVSE_TILE_BK in kernels/formats/cvse/cvse_spmm.cu)
SLOTS = 16  # vector slots per group: the m16n8k16's k
BUCKETS = 8  # bank classes of a B tile row (r & 7: its 16-byte pieces' xor), one per slot of an ldmatrix phase
HALF = 8  # slots per ldmatrix phase: slots 0..7 and 8..15 of a group
# _FREE[mask][k]: the k-th bucket not in the bit mask (the zero row an empty slot of a half using `mask` reads)
_FREE = np.array([[z for z in range(BUCKETS) if not m >> z & 1] + [0] * bin(m).count("1") for m in range(256)],
                 dtype=np.int64)


def slot_word(p):
    """The slot-row word of slot p (0..15) of a group: 4 q + j for p = 4 j + q (the m16n8k16 A fragment order: lane
    (g, q) holds slots 2q, 2q+1, 2q+8, 2q+9 in words 4q .. 4q + 3)."""
    return 4 * (p % 4) + p // 4


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


def chunk_order(vec_ptr, indices, K: int, bk: int = TILE_BK) -> np.ndarray:
    """rows int64 [T * bk]: the column of A (row of B) that position r of chunk t holds, ``K`` where none (past K).
    Per chunk a greedy colouring of its columns into the 8 buckets (r & 7, bk / 8 places each): columns in order of
    falling use (ties by column), each into the bucket that pushes the fewest of its segments' bucket counts past
    their segment's halves (ties: the most room its segments have left under their halves, then the lowest
    bucket); all chunks advance together, one column rank per step. Deterministic. Memory: 8 int32 counts per
    segment (the layout's group_ptr has one int64)."""
    return _chunk_order(*_segments(vec_ptr, indices, bk), K, bk)


def _segments(vec_ptr, indices, bk: int):
    """(Mv, col, t, seg): the vector rows, and each vector's column, chunk and segment t * Mv + its vector row."""
    vec_ptr = np.asarray(vec_ptr, dtype=np.int64)
    Mv = vec_ptr.shape[0] - 1
    col = np.asarray(indices, dtype=np.int64)
    t = col // bk
    return Mv, col, t, t * Mv + segment_ids(vec_ptr)


def _chunk_order(Mv: int, col, t, seg, K: int, bk: int) -> np.ndarray:
    T = n_chunks(K, bk)
    halves = 2 * -(-np.bincount(seg, minlength=T * Mv) // SLOTS)  # per segment
    use = np.bincount(col, minlength=T * bk)  # per column (chunk-major)
    local = np.arange(T * bk, dtype=np.int64) % bk
    rank = np.empty(T * bk, dtype=np.int64)  # a column's place in its chunk's falling-use order
    by_use = np.lexsort((local, -use, np.arange(T * bk) // bk))
    rank[by_use] = local
    order = np.argsort(rank[col], kind="stable")  # vectors by their column's rank
    steps = np.searchsorted(rank[col][order], np.arange(bk + 1))
    count = np.zeros((T * Mv, BUCKETS), dtype=np.int32)
    room = np.full((T, BUCKETS), bk // BUCKETS, dtype=np.int64)
    bucket = np.zeros((T, bk), dtype=np.int64)  # by rank
    for j in range(bk):
        v = order[steps[j]:steps[j + 1]]  # the vectors of each chunk's rank-j column
        s, tv = seg[v], t[v]
        over = np.zeros((T, BUCKETS), dtype=np.int64)
        slack = np.zeros((T, BUCKETS), dtype=np.int64)
        np.add.at(over, tv, count[s] >= halves[s, None])
        np.add.at(slack, tv, halves[s, None] - count[s])
        score = over * (4 * bk * (Mv + 1)) - slack * BUCKETS + np.arange(BUCKETS)  # fewest overflows first
        score[room == 0] = np.iinfo(np.int64).max
        b = np.argmin(score, axis=1)
        bucket[:, j] = b
        room[np.arange(T), b] -= 1
        count[s, b[tv]] += 1
    # positions: bucket b's columns, in rank order, at b, b + 8, b + 16, ...
    place = np.argsort(bucket * bk + np.arange(bk), axis=1, kind="stable")  # ranks grouped by bucket
    pos = np.empty((T, bk), dtype=np.int64)
    within = np.arange(bk) % (bk // BUCKETS)
    pos[np.arange(T)[:, None], place] = np.sort(bucket, axis=1) + BUCKETS * within[None, :]
    rows = np.full(T * bk, K, dtype=np.int64)
    column = np.arange(T * bk, dtype=np.int64)
    at = (column // bk) * bk + pos.reshape(-1)[rank + (column // bk) * bk]
    rows[at] = np.where(column < K, column, K)
    return rows


def tile_layout(vec_ptr, indices, data, K: int, bk: int = TILE_BK) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group_ptr int64 [T * n_vec_rows + 1], tiles uint32 [n_groups, group_words(V)], rows int64 [T * bk]) of the
    CVSE arrays (``data`` [n_vectors, V] 16-bit: float16 or bfloat16 bits; the kernel is 16-bit only), T = ceil(K /
    bk); rows = `chunk_order`: slot rows are positions in it."""
    data = np.asarray(data)
    n, V = (int(s) for s in data.shape)
    if data.dtype.itemsize != 2:
        raise ValueError(f"the tiled CVSE kernel takes 16-bit values, got {data.dtype}")
    if bk % BUCKETS or bk < BUCKETS:
        raise ValueError(f"bk = {bk}: the bank order needs a multiple of {BUCKETS}")
    words = group_words(V)
    Mv, col, t, seg = _segments(vec_ptr, indices, bk)
    T = n_chunks(K, bk)
    n_seg = T * Mv
    rows = _chunk_order(Mv, col, t, seg, K, bk)
    real = rows < K
    place = np.zeros(T * bk, dtype=np.int64)  # a column's position in its chunk
    place[rows[real]] = (np.arange(T * bk, dtype=np.int64) % bk)[real]
    r = place[col]
    bucket = r & (BUCKETS - 1)
    fill = np.bincount(seg * BUCKETS + bucket, minlength=n_seg * BUCKETS) if n else np.zeros(0, np.int64)
    within = -fill[seg * BUCKETS + bucket] * BUCKETS + bucket if n else bucket  # fullest bucket first
    order = np.lexsort((col, within, seg))  # segment, bucket, column
    counts = np.bincount(seg, minlength=n_seg) if n else np.zeros(n_seg, np.int64)
    group_ptr = np.zeros(n_seg + 1, dtype=np.int64)
    np.cumsum(-(-counts // SLOTS), out=group_ptr[1:])
    n_groups = int(group_ptr[-1])
    if max(n_groups, 1) * words > INT32_MAX:
        raise ValueError(f"the tiled layout needs {n_groups} groups of {words} words: more than the int32 group ids "
                         "the kernel takes")
    seg_o = seg[order]
    j = np.arange(n, dtype=np.int64) - np.r_[0, np.cumsum(counts)][seg_o]  # rank within the segment
    H = 2 * (group_ptr[seg_o + 1] - group_ptr[seg_o])  # the segment's halves (8 slots each)
    half = 2 * group_ptr[seg_o] + j % H  # dealt round robin: a bucket's vectors in distinct halves while they fit
    G, p = half // 2, (half % 2) * HALF + j // H  # group, slot within the group
    tiles = np.zeros((max(n_groups, 1), words), dtype=np.uint32)
    tiles[G, slot_word(p)] = r[order].astype(np.uint32)
    t16 = tiles.view(np.uint16)  # word w = halves 2w (low) and 2w + 1 (little-endian)
    vals = data.view(np.uint16)[order]
    for v in range(V):
        t16[G, value_half(V, v, p % 4, p // 4)] = vals[:, v]
    # empty slots: each reads a zero row bk + z whose bucket z no live slot of its half uses
    used = np.zeros(2 * n_groups, dtype=np.int64)
    np.bitwise_or.at(used, half, 1 << bucket[order])
    empty = HALF - np.bincount(half, minlength=2 * n_groups)  # per half
    eh = np.repeat(np.arange(2 * n_groups, dtype=np.int64), empty)  # the half of each empty slot
    k = np.arange(eh.shape[0], dtype=np.int64) - np.repeat(np.cumsum(empty) - empty, empty)  # its rank in the half
    ep = (eh % 2) * HALF + (HALF - empty[eh]) + k
    tiles[eh // 2, slot_word(ep)] = (bk + _FREE[used[eh], k]).astype(np.uint32)
    return group_ptr, tiles[:n_groups] if n_groups else tiles, rows


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


def tiles_spmm(group_ptr, tiles, rows, V: int, shape, B, bk: int = TILE_BK, *, bf16: bool = False) -> np.ndarray:
    """float64 C = A @ B read back from the layout alone (slot rows, the chunk order ``rows`` and fragment words),
    as the kernel reads it: a live slot's B row is rows[t * bk + its slot row]."""
    n_rows, K = (int(s) for s in shape)
    B = np.asarray(B, dtype=np.float64)
    P = np.asarray(group_ptr, dtype=np.int64)
    T = n_chunks(K, bk)
    Mv = (P.shape[0] - 1) // T
    C = np.zeros((Mv * V, B.shape[1]))
    n_groups = int(P[-1])
    if n_groups == 0:
        return C[:n_rows]
    seg = segment_ids(P)  # segment of each group
    t, i = seg // Mv, seg % Mv
    t16 = tiles[:n_groups].view(np.uint16)
    raw = t16 if bf16 else t16.view(np.float16)
    for q in range(4):
        for j in range(4):
            r = tiles[:n_groups, 4 * q + j].astype(np.int64)
            live = r < bk  # rows bk .. bk + 7: an empty slot's zero row
            cols = np.asarray(rows, dtype=np.int64)[t[live] * bk + r[live]]
            if (cols >= K).any():
                raise ValueError("a live slot names a chunk position past K: the tiles do not match rows")
            for v in range(V):
                vals = values_float64(raw[live, value_half(V, v, q, j)])
                np.add.at(C, V * i[live] + v, vals[:, None] * B[cols])
    return C[:n_rows]
