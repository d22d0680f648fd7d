"""The deterministic CUDA-core CSR SpMM (csr_spmm.cu beside this file): SpmmPlan's fallback where Tensor Core blocks
stay nearly empty (power-law graphs, tiny matrices), in place of cuSPARSE, whose CSR SpMM gives bitwise-different C
from call to call (so a deterministic plan never picks it). Works on the matrix as given, in every precision
(16-bit values widened to fp32; float32 values multiplied in fp32, on B as given ("rows") or, where `tune` finds it
faster, on a per-call float16 copy of B with one power-of-two scale per row of B (csr_pack_b: TF32's 11 significant
bits, the float32 plans' contract)); C float32 or B's 16-bit type.

`segments` cuts each row into pieces of at most ``seg_len`` nonzeros (NumPy, once per plan): a short row is one
segment written straight to C; the pieces of a long row write float32 partial rows to a workspace, added in piece
order by the row's last piece to finish (csr_rows) or by a second kernel (csr_fixup, after the 16-bit mappings, and
for the rows a hybrid copies into C). 16-bit B with N % 8 == 0 takes one of the 16-byte-load mappings: "wide" (a
warp per segment, its halves on alternate nonzeros, 8 values a lane) or "pair" (a half-warp per segment, 8 values
a lane), and where N % 16 == 0 and N >= 256 also "pair16" / "pair16_deep" (pair's walk, 16 values a lane, two or
four nonzeros in flight), timed against each other once per N (`CsrRows.tune`; "wide" untimed).
`CsrRows` uploads A and the segments once; ``bind(B, out)`` packs the one or two launches (kernels.launch.Bound:
one cuLaunchKernel each per call), ``run`` launches unbound. CuPy is imported lazily.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kernels import launch
from kernels.formats.csr.upload import ordered_ptr, upload_rows
from kernels.precision import precision as as_precision
from storage.indexing import INT32_MAX, cut_ranges, longest_first
from kernels.operands import check_b_out

SOURCE = Path(__file__).resolve().parent / "csr_spmm.cu"
SUFFIX = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
COLS = 128  # columns per warp (4 per lane; the wide kernel: 8 per lane of each half-warp)
PACK_WARPS = 8  # csr_pack_b's warps per block (CsrConfig.pack_rows_for(N) rows of B each; launch bound: <= 8)


@dataclass(frozen=True)
class Mapping:
    """A 16-bit row kernel's mapping (csr_spmm.cu): ``cols`` columns a launch chunk (blockIdx.y) covers, ``lane``
    columns a lane (N % lane == 0: a lane's columns all inside N or all outside), from N = ``min_n``; ``paired``: a
    half-warp per segment, the walk's short tail grouped (the kernel takes tail0)."""

    cols: int
    lane: int
    paired: bool
    min_n: int = 0


# The mappings in tie-break order, "wide" the untimed default. pair16's 256 columns a half-warp start at N = 256 (at
# 128 half its lanes would idle). Against the faster of wide and pair, N = 256 (H200, float16, graph replay;
# docs/kernels-notes.md "Session 29"): pair16 R-MAT 0.93-0.99x, SBM 0.92x, email-Enron 1.41x; pair16_deep R-MAT
# 0.97-0.98x, SBM 0.95x, email-Enron 0.92x; a larger SBM 1.13-1.18x (pair kept). Which one wins depends on the
# matrix: tune times each.
# float32 A takes them over B's per-call 16-bit copy (csr_spmm.cu's csr_pack_b: float16 with a power-of-two scale
# per row of B, TF32's 11 significant bits), timed by `tune` against "rows" on float32 B: the copy costs a pass
# over B (read 4, write 2 bytes a value) and halves the bytes every nonzero gathers. It times "pair" alone of them
# (FLOAT32_MAPS): on the length walk the kept mapping was "pair" or "rows" in every float32 case of session 36 (R-MAT
# scale 17 and 20, SBM, email-Enron, as given and after TCA, N = 128 / 256, H200; docs/kernels-notes.md), and each
# timing costs a plan time (R-MAT 10M, N = 256: five mappings timed took the plan from ~9 % to 11.4 % of TCA's).
MAPPINGS = {"wide": Mapping(COLS, 8, False), "pair": Mapping(COLS, 8, True),
            "pair16": Mapping(2 * COLS, 16, True, 256), "pair16_deep": Mapping(2 * COLS, 16, True, 256)}
MAPS = tuple(MAPPINGS)
PAIRED = tuple(name for name, m in MAPPINGS.items() if m.paired)
ORDER = ("rows",) + MAPS  # tie-break order of `tune`'s timings
FLOAT32_MAPS = ("pair",)  # the 16-bit mappings float32's `tune` times over B's copy (with "rows")


def maps_for(N: int) -> tuple[str, ...]:
    """The 16-bit mappings that take N columns, in MAPS order (none where N % 8)."""
    return tuple(name for name, m in MAPPINGS.items() if N % m.lane == 0 and N >= m.min_n)


# Rows are walked (launched) in A's order, except rows of at least HEAVY x the mean length, which go first, longest
# first: a hub row's pieces left for the last wave of warps keep the GPU waiting on them. The rest keep A's order,
# which carries the B-row locality a reordering built (an SBM after TCA ran 1.28x slower with every row sorted by
# length). Swept on the H200 (float32 / float16, N = 128 and 256, as given and after TCA; docs/kernels-notes.md
# "Session 23"): email-Enron after TCA, float32, N = 128: 50.0 us as given, 33.6 at 2, 34.1 at 4, 39.4 at 8;
# R-MAT 4-8% faster at 2; SBM and 3-D mesh unchanged (no row that long). C is the same bit for bit in any walk.
# 16-bit B walks every row by length (HEAVY_HALF: each non-empty row counts as heavy), which the float32 kernel
# cannot take (SBM 1.28x slower there): the pair mapping's half-warps then hold rows of near the same length (a warp
# loops to the longer one's) and the wide one loses at most 3%. After the mapping is tuned on that walk, float16
# against the A-order walk (H200, graph replay, N = 128 / 256, us; docs/kernels-notes.md "Session 28"): sbm-50k
# after TCA 30.5 -> 26.7 / 62.1 -> 57.2, rmat-s17 as given 106.4 -> 93.9 / 200.2 -> 176.4, after TCA 97.0 -> 93.8 /
# 182.2 -> 176.3, email-Enron 22.8 -> 22.1 / 53.7 -> 53.3; no case slower.
# float32 with B's 16-bit copy (``half_b``, the default) walks by length too: the copy's mappings are the 16-bit ones.
# float32, ms, graph replay, the mapping `tune` kept on each walk, hub rows first -> every row by length (H200, N =
# 128 / 256; docs/kernels-notes.md "Session 36"): R-MAT scale 20 as given 1.209 -> 1.084 / 2.308 -> 2.051, R-MAT
# scale 17 0.145 -> 0.131 / 0.270 -> 0.239, SBM after TCA 0.111 -> 0.105 / 0.208 -> 0.202, email-Enron ("rows" on
# both) 0.0322 -> 0.0324 / 0.0618 -> 0.0627; "rows" itself on the length walk: SBM after TCA 0.111 -> 0.142.
HEAVY = 2.0
HEAVY_HALF = 1e-9
# The pair mapping groups the walk's tail of segments of <= SHORT nonzeros, tail_group a half-warp, in the first
# warps (csr_spmm.cu): swept in one process on the H200 (float16, N = 128 / 256, graph replay, against the kernel
# without it; docs/kernels-notes.md "Session 28"): (8, 2) R-MAT 0.93-0.96x, SBM 1.00-1.01x, email-Enron 0.98-1.02x;
# (8, 4) the same on R-MAT, SBM 1.01x, email-Enron up to 1.07x; (8, 16) SBM up to 1.17x, email-Enron up to 1.23x
# (segments of 10-16 nonzeros in series are latency, not launch cost); (4, 2) R-MAT 0.92-1.00x.
SHORT = 2


@dataclass(frozen=True)
class CsrConfig:
    """Compile-time constants of csr_spmm.cu and the row cut."""

    warps: int = 2  # warps per thread block (one segment each)
    unroll: int = 4  # B loads in flight per warp before their FMAs
    seg_len: int = 128  # nonzeros per segment: longer rows are cut and their pieces summed by csr_fixup
    heavy: float = HEAVY  # rows of >= heavy x the mean row length are walked first, longest first (0: as given)
    heavy_half: float = HEAVY_HALF  # the same for 16-bit B and float32 with half_b (default: all, longest first)
    tail_group: int = 8  # the pair mapping: segments a half-warp takes in the walk's tail of short segments
    tail_short: int = SHORT  # nonzeros of a segment in that tail (<= 16: one pass of a half-warp each)
    half_b: bool = True  # float32: `tune` also times the 16-bit mappings over B's per-call 16-bit copy
    pack_rows: int = 2  # csr_pack_b's rows of B a warp where N <= 128, their loads in flight together (1..8)

    def defines(self) -> tuple[str, ...]:
        return (f"-DCSR_WARPS={self.warps}", f"-DCSR_UNROLL={self.unroll}", f"-DCSR_TAIL_GROUP={self.tail_group}",
                f"-DCSR_PACK_ROWS={self.pack_rows}")

    def pack_rows_for(self, N: int) -> int:
        """csr_pack_b's rows of B a warp for N columns: ``pack_rows`` where a lane's 4 columns span the row."""
        return self.pack_rows if N <= COLS else 1

    def walk_heavy(self, half: bool) -> float:
        """`walk_order`'s threshold for B of this width (``heavy`` 0 walks A's order in either)."""
        return 0.0 if self.heavy <= 0 else self.heavy_half if half else self.heavy


CSR_CONFIG = CsrConfig()


@dataclass(frozen=True)
class Segments:
    seg_ptr: np.ndarray  # int64 [S + 1]
    seg_row: np.ndarray  # int32 [S]
    seg_slot: np.ndarray  # int32 [S]: -1 = C, else the workspace row
    fix_row: np.ndarray  # int32 [R]: the long rows
    fix_ptr: np.ndarray  # int32 [R + 1]: their workspace rows, in piece order

    @property
    def n_slots(self) -> int:
        return int(self.fix_ptr[-1])


def segments(indptr, seg_len: int = CSR_CONFIG.seg_len) -> Segments:
    """Cut rows into pieces of <= seg_len nonzeros (>= 1 piece per row, so every row of C is written)."""
    return Segments(*cut_ranges(indptr, seg_len, "row", "seg_len"))


def short_tail(seg_ptr, short: int = SHORT) -> int:
    """The first segment of the walk's tail of segments of <= ``short`` nonzeros, rounded up to even (the pair
    mapping takes two segments a warp before it): the segment count rounded up when the last one is longer."""
    lens = np.diff(np.asarray(seg_ptr, dtype=np.int64))
    longer = np.flatnonzero(lens > short)
    first = int(longer[-1]) + 1 if longer.size else 0
    return first + (first & 1)


def walk_order(indptr, heavy: float = HEAVY) -> np.ndarray | None:
    """The order rows are launched in: rows of >= ``heavy`` x the mean row length first (longest first, ties in A's
    order), then the others in A's order; None when that is A's own order (no such row, or ``heavy`` <= 0)."""
    return longest_first(indptr, heavy)


def reference(A, B, seg: Segments) -> np.ndarray:
    """NumPy twin of the two kernels in float64 (piece sums added in piece order): what the tests compare to."""
    A = A.tocsr()
    C = np.zeros((A.shape[0], B.shape[1]))
    W = np.zeros((seg.n_slots, B.shape[1]))
    for s in range(seg.seg_row.shape[0]):
        lo, hi = seg.seg_ptr[s], seg.seg_ptr[s + 1]
        part = A.data[lo:hi].astype(np.float64) @ B[A.indices[lo:hi]].astype(np.float64)
        if seg.seg_slot[s] < 0:
            C[seg.seg_row[s]] = part
        else:
            W[seg.seg_slot[s]] = part
    for i, r in enumerate(seg.fix_row):
        C[r] = W[seg.fix_ptr[i]:seg.fix_ptr[i + 1]].sum(axis=0)
    return C


@dataclass(frozen=True)
class Layout:
    """What `CsrRows` derives from A's row pointer on the host, before any upload (`Layout.of`): the launch walk,
    the row pieces and the long rows' workspace rows. NumPy only (no device call): the host half of `CsrRows`,
    checked without a GPU (tests/kernels/formats/csr/test_csr_rows.py)."""

    shape: tuple  # C's rows (n_rows) and A's columns
    packs: bool  # float32 A over B's per-call 16-bit copy (csr_pack_b) where `tune` finds it faster than "rows"
    walk: np.ndarray | None  # the launch order of A's rows (`walk_order`), None: A's own
    indptr: np.ndarray  # int64 row pointer of A's rows in walk order
    seg: Segments
    seg_row: np.ndarray  # int32 [S]: the row of C each piece writes
    fix_row: np.ndarray  # int32: the long rows' rows of C, then the copied rows
    fix_ptr: np.ndarray  # int32: their workspace rows
    slot_long: np.ndarray  # int32: each workspace row's long row (csr_rows' in-kernel piece sums)
    copy_slot0: int  # the first workspace row copied to C
    n_copy: int
    n_split: int  # long rows cut into pieces
    tail0: int  # the pair mappings' tail of short segments

    @classmethod
    def of(cls, A, precision, config: CsrConfig = CSR_CONFIG, *, rows=None, n_rows: int | None = None,
           copy_rows=None) -> "Layout":
        """The layout of canonical CSR ``A`` (`CsrRows`' arguments)."""
        p = as_precision(precision)
        shape = (int(A.shape[0]) if n_rows is None else int(n_rows), int(A.shape[1]))
        if shape[1] > INT32_MAX or shape[0] > INT32_MAX:
            raise ValueError(f"A has shape {shape}; the CSR kernel takes int32 row and column ids")
        if rows is not None:
            rows = np.asarray(rows, dtype=np.int64)
            if rows.shape != (int(A.shape[0]),) or (rows.size and (rows.min() < 0 or rows.max() >= shape[0])):
                raise ValueError(f"rows has shape {rows.shape} in {rows.min() if rows.size else 0}.."
                                 f"{rows.max() if rows.size else 0}, expected one row of C (< {shape[0]}) "
                                 f"per row of A ({int(A.shape[0])})")
        packs = p.name == "float32" and config.half_b
        walk = walk_order(A.indptr, config.walk_heavy(p.half or packs))
        indptr = np.asarray(A.indptr, dtype=np.int64)
        if walk is not None:  # A's rows in launch order, each still writing its own row of C
            indptr = ordered_ptr(indptr, walk)
            rows = walk if rows is None else rows[walk]
        seg = segments(indptr, config.seg_len)
        seg_row, fix_row, fix_ptr = seg.seg_row, seg.fix_row, seg.fix_ptr
        if rows is not None:
            seg_row, fix_row = rows[seg_row].astype(np.int32), rows[fix_row].astype(np.int32)
        copy_rows = np.zeros(0, dtype=np.int64) if copy_rows is None else np.asarray(copy_rows, dtype=np.int64)
        n_copy, n_split = int(copy_rows.shape[0]), int(fix_row.shape[0])
        # csr_rows sums a long row's pieces itself (its last piece to finish): each workspace row's long row, and
        # per N a count of finished pieces per (long row, column chunk) that the kernel leaves at zero
        slot_long = np.repeat(np.arange(n_split, dtype=np.int32), np.diff(fix_ptr))
        if n_copy:
            fix_row = np.concatenate([fix_row, copy_rows.astype(np.int32)])
            fix_ptr = np.concatenate([fix_ptr, fix_ptr[-1] + np.arange(1, n_copy + 1, dtype=np.int32)])
        tail0 = short_tail(seg.seg_ptr, config.tail_short) if p.half or packs else 0
        return cls(shape, packs, walk, indptr, seg, seg_row, fix_row, fix_ptr, slot_long, seg.n_slots, n_copy,
                   n_split, tail0)


class CsrRows:
    """A (canonical CSR: SciPy) on the current device in ``precision``'s storage type, with its row pieces.

    ``rows`` (int64 [A's rows], distinct, default the identity): the row of C each row of A writes, in a C of
    ``n_rows`` rows (default A's); C's other rows are not touched. ``copy_rows`` (int64, disjoint from ``rows``):
    rows of C that ``csr_fixup`` writes from float32 workspace rows the caller fills first (`copy_view`), one
    each, after the long rows' pieces: how kernels.hybrid brings a Tensor Core part computed on its own rows into
    C. A long row's pieces are summed into C by ``csr_rows`` itself (its last piece to finish: `pieces_done`)
    and by ``csr_fixup`` after the 16-bit mappings. Rows are launched in `walk_order`
    (``config.walk_heavy``: every row by length for 16-bit B and for float32 with B's 16-bit copy, ``half_b``;
    hub rows first for float32 without it), which changes no bit of C."""

    def __init__(self, A, precision, config: CsrConfig = CSR_CONFIG, *, rows=None, n_rows: int | None = None,
                 copy_rows=None):
        import cupy

        self.precision, self.config = as_precision(precision), config
        p = self.precision
        lay = Layout.of(A, p, config, rows=rows, n_rows=n_rows, copy_rows=copy_rows)
        self.shape, self.packs = lay.shape, lay.packs
        walk, indptr, seg = lay.walk, lay.indptr, lay.seg
        seg_row, fix_row, fix_ptr, slot_long = lay.seg_row, lay.fix_row, lay.fix_ptr, lay.slot_long
        self.copy_slot0, self.n_copy, self.n_split = lay.copy_slot0, lay.n_copy, lay.n_split
        self.n_segs, self.n_long, self.n_slots = int(seg_row.shape[0]), int(fix_row.shape[0]), int(fix_ptr[-1])
        self.tail0 = lay.tail0
        self.indices, self.data = upload_rows(A, walk, p, indptr)  # permuted to the walk, rounded on the device
        up = cupy.asarray
        self.seg_ptr, self.seg_row, self.seg_slot = up(seg.seg_ptr), up(seg_row), up(seg.seg_slot)
        self.fix_row = up(fix_row) if self.n_long else cupy.zeros(1, cupy.int32)
        self.fix_ptr = up(fix_ptr)
        self.slot_long = up(slot_long) if slot_long.size else cupy.zeros(1, cupy.int32)
        self._workspace: dict[int, object] = {}  # N -> float32 [n_slots, N]
        self._pieces_done: dict[int, object] = {}  # N -> int32 [n_split x column chunks], zero between calls
        self._rows = launch.function(f"csr_rows_{SUFFIX[p.name]}", config, SOURCE)  # compiles now
        # 16-bit B where N % 8 == 0: 8 or 16 values per lane (csr_spmm.cu's header); N -> the one `tune` kept
        self._maps = {m: launch.function(f"csr_rows_{m}_{'f32h' if self.packs else SUFFIX[p.name]}", config,
                                         SOURCE) for m in MAPS} if p.half or self.packs else {}
        self._pack = launch.function("csr_pack_b", config, SOURCE) if self.packs else None
        self._packed: dict[int, tuple] = {}  # N -> (B's 16-bit copy, its scale per row of B)
        self.mapping_ms: dict[int, dict] = {}  # N -> `tune`'s timings of each mapping (the faster is kept: `maps`)
        self.tuned_out: dict[int, np.dtype] = {}  # N -> the dtype of the C `tune` timed into
        self._fixup = launch.function(f"csr_fixup_{SUFFIX[p.name]}", config, SOURCE)

    def workspace(self, N: int):
        """The float32 workspace for N columns, made once per N (before any capture: the steady state allocates
        nothing)."""
        import cupy

        W = self._workspace.get(N)
        if W is None:
            W = self._workspace[N] = cupy.empty(max(self.n_slots * N, 1), dtype=cupy.float32)
        return W

    def pieces_done(self, N: int):
        """csr_rows' count of finished pieces per (long row, column chunk) for N columns: zeros, made once per N
        (before any capture); every call leaves it zero."""
        import cupy

        done = self._pieces_done.get(N)
        if done is None:
            done = self._pieces_done[N] = cupy.zeros(max(self.n_split * -(-N // COLS), 1), dtype=cupy.int32)
        return done

    def packed(self, N: int) -> tuple:
        """(uint16 [K x N] B's 16-bit copy, float32 [K] its scale per row of B) for float32 A's 16-bit mappings
        (K: A's columns), made once per N (before any capture); `tune` drops them where "rows" is kept."""
        import cupy

        buf = self._packed.get(N)
        if buf is None:
            K = self.shape[1]
            buf = self._packed[N] = (cupy.empty(max(K * N, 1), dtype=cupy.uint16),
                                     cupy.empty(max(K, 1), dtype=cupy.float32))
        return buf

    def copy_view(self, N: int):
        """float32 [len(copy_rows), N], C-contiguous: the workspace rows ``csr_fixup`` copies to ``copy_rows``."""
        return self.workspace(N)[self.copy_slot0 * N:(self.copy_slot0 + self.n_copy) * N].reshape(self.n_copy, N)

    @property
    def maps(self) -> dict[int, str]:
        """N -> the mapping `tune` kept: the fastest of its timings (ties: the earlier in MAPS)."""
        return {N: self.mapping(N) for N in self.mapping_ms}

    def mapping(self, N: int) -> str:
        """The row kernel's mapping for N columns: "rows" (4 values per lane), or where N % 8 == 0 the one `tune`
        kept (untimed: "wide" for 16-bit B, "rows" for float32)."""
        if not self._maps or N % 8:
            return "rows"
        ms = self.mapping_ms.get(N)
        if ms is None:
            return "rows" if self.packs else "wide"
        return min(ms, key=lambda m: (ms[m], ORDER.index(m)))

    def mapping_fields(self, N: int, prefix: str) -> dict:
        """For a plan's Choice: ``{prefix}mapping`` (the one kept for N) and ``{prefix}mapping_ms`` (each timed
        mapping's ms), or nothing when N was not timed."""
        if N not in self.mapping_ms:
            return {}
        return {f"{prefix}mapping": self.mapping(N), f"{prefix}mapping_ms": self.mapping_ms[N]}

    def tune(self, B, out_dtype=None) -> dict | None:
        """Time the 16-byte-load mappings that take B's N (`maps_for`; float32: "rows" and those of FLOAT32_MAPS
        over B's 16-bit copy) on B (GPU time, the autotune budget, into a scratch C of ``out_dtype``, default the
        storage type: the caller's C) and keep the fastest; their milliseconds, or None when B's N has one mapping
        (N % 8 != 0, or float32 with ``half_b`` off) or was tuned already; float32 times "rows" alone where the
        device has no room for the copy (K x N x 2 bytes). Each gives C within the same rounding of one sum order,
        bitwise repeatable (the paired ones the same bits). ``tuned_out[N]``: the scratch C's dtype."""
        if getattr(B, "ndim", 0) != 2:
            return None  # not a B at all: the launch's own checks say so
        N = int(B.shape[1])
        if not self._maps or N % 8 or N in self.mapping_ms or self.shape[0] == 0 or not self.n_segs:
            return None
        import cupy

        dtype = self.precision.storage_dtype if out_dtype is None else np.dtype(out_dtype)
        scratch = cupy.empty((self.shape[0], N), dtype=dtype)
        self.tuned_out[N] = dtype
        timed = ("rows",) + tuple(m for m in maps_for(N) if m in FLOAT32_MAPS) if self.packs else maps_for(N)
        if self.packs:
            try:
                self.packed(N)
            except cupy.cuda.memory.OutOfMemoryError:  # no room for B's 16-bit copy: float32 B as given
                timed = ("rows",)
        ms = self.mapping_ms[N] = {}
        for m in timed:  # one far slower than the best so far is not timed further
            ms[m] = launch.time_bound(self.bind(B, scratch, mapping=m), best_ms=min(ms.values(), default=None))
        if self.mapping(N) == "rows":
            self._packed.pop(N, None)  # B's 16-bit copy is not used for this N
        return ms

    def _launches(self, B, out, accumulate: bool, mapping: str | None = None):
        if out is None:
            raise ValueError("out must be given: the CSR kernel writes into the caller's C")
        # 4 columns per lane: one 16-byte float or 8-byte 16-bit access
        out, N, flags = check_b_out(self.shape, self.precision.name, B, out, None, accumulate, vec_elems=4)
        W = self.workspace(N)
        chunks = -(-N // COLS)
        block = (32 * self.config.warps,)
        pack = rows = fix = None
        if self.n_segs:  # none: a hybrid whose rows are all on Tensor Cores copied here
            mapping = self.mapping(N) if mapping is None else mapping
            if mapping != "rows" and mapping not in (maps_for(N) if self._maps else ()):
                raise ValueError(f"mapping {mapping!r} is not one of {self.precision.name}'s for N = {N}: "
                                 f"rows{''.join(', ' + m for m in (maps_for(N) if self._maps else ()))}")
            fn = self._rows if mapping == "rows" else self._maps[mapping]
            b_in, b_at = B, 5
            if self.packs and mapping != "rows":  # csr_pack_b first: B's 16-bit copy, which the row kernel reads
                b_in, scale = self.packed(N)
                b_at, K = None, self.shape[1]
                per_warp = self.config.pack_rows_for(N)
                pack = (self._pack, (-(-K // (PACK_WARPS * per_warp)),), (32 * PACK_WARPS,),
                        (B, b_in, scale, np.int64(K), np.int64(N), np.int32(flags), np.int32(per_warp)), 0, 0, None, 5)
            args = (self.seg_ptr, self.seg_row, self.seg_slot, self.indices, self.data, b_in, out, W,
                    np.int64(self.n_segs), np.int64(N), np.int32(flags))
            warps, m = self.n_segs, MAPPINGS.get(mapping)
            if m is not None and m.paired:  # tail_group segments a half-warp in the short tail, then 2 a warp
                tail0, group = self.tail0, self.config.tail_group
                warps = max(0, -(-(self.n_segs - tail0) // (2 * group))) + min(tail0, self.n_segs + 1) // 2
                args += (np.int64(tail0),)
            elif mapping == "rows":  # it sums the long rows' pieces itself
                args += (self.slot_long, self.fix_row, self.fix_ptr, self.pieces_done(N))
            if pack is not None:
                args += (scale,)  # the copy's scale per row of B
            row_chunks = -(-N // (COLS if m is None else m.cols))
            rows = (fn, (-(-warps // self.config.warps), row_chunks), block, args, 0, b_at, 6, 10)
        # csr_fixup: every long row and copied row, or after csr_rows only the copied rows (fix_row / fix_ptr from
        # the first copied one on: their fix_ptr entries are workspace rows, absolute)
        first = self.n_split if rows is not None and mapping == "rows" else 0
        if self.n_long > first:
            fix_row, fix_ptr = (self.fix_row, self.fix_ptr) if first == 0 else \
                (self.fix_row[first:], self.fix_ptr[first:])
            fix = (self._fixup, (-(-(self.n_long - first) // self.config.warps), chunks), block,
                   (fix_row, fix_ptr, W, out, np.int64(self.n_long - first), np.int64(N), np.int32(flags)), 0,
                   None, 3, 6)
        return pack, rows, fix

    def run(self, B, out, *, accumulate: bool = False, mapping: str | None = None):
        if self.shape[0] == 0:
            return out
        return launch._run(out, *self._launches(B, out, accumulate, mapping))

    def bind(self, B, out, *, accumulate: bool = False, mapping: str | None = None):
        """The launches checked and packed once (kernels.launch.Bound); ``mapping`` None: `mapping` (N)."""
        if self.shape[0] == 0:
            return launch._bind(B, out)
        return launch._bind(B, out, *self._launches(B, out, accumulate, mapping), vec_n=4)
