"""ME-TCF (DTC-SpMM, ASPLOS'24, section 4.2): CSR condensed into 16x8 Tensor-Core blocks per 16-row window.

Public API: `METCF`, `csr_to_metcf`, `metcf_concat`, `metcf_to_csr`, `balanced_items`, `balance`, `metcf_stats`.
The array contract is docs/architecture.md ("ME-TCF (DTC-SpMM section 4.2), our arrays"); CUDA kernels are written against it.
Everything here is vectorized NumPy: no Python loop over rows, windows or blocks (the conversion, in
kernels.formats.condense, loops only over window-range chunks, which bound the temporaries at about 100 bytes per
nonzero of one chunk).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from kernels.formats.blocks import WINDOW, check_pieces, stack_offsets
from kernels.formats.condense import DEFAULT_CHUNK_NNZ, condense_windows
from storage.indexing import index_dtype, segment_ids

WIDTH = 8  # condensed columns per TC block for TF32 (the k8 of mma.m16n8k8)
WIDTHS = (8, 16)  # block widths: k8 (TF32, m16n8k8) and k16 (FP16/BF16, m16n8k16)
BLOCK = WINDOW * WIDTH  # 128 slots of a TF32 block; tc_local_id = r * width + c < 256 fits uint8 for both widths


@dataclass(frozen=True)
class METCF:
    """An M x K sparse matrix A in ME-TCF (memory-efficient Tensor-Core format).

    The block width w (``width``: the k of the mma instruction, 8 for TF32 m16n8k8, 16 for FP16/BF16 m16n8k16)
    is ``sparse_a_to_b.shape[1]``.

    Arrays (n_windows = ceil(M / 16), n_blocks = number of 16 x w TC blocks, nnz = A's stored entries):

    - ``row_window_offset`` [n_windows + 1], ``index_dtype(n_blocks)``: non-decreasing, starts at 0, ends at n_blocks.
      Window w (rows 16w .. 16w+15) owns TC blocks ``row_window_offset[w]:row_window_offset[w+1]``.
    - ``tc_offset`` [n_blocks + 1], ``index_dtype(nnz)``: strictly increasing (every block holds >= 1 nonzero),
      starts at 0, ends at nnz. Block b owns nonzeros ``tc_offset[b]:tc_offset[b+1]``.
    - ``tc_local_id`` [nnz], uint8: ``r * w + c`` with r = row within the window (0..15), c = slot in the block
      (0..w-1); strictly increasing within a block (no duplicates), and ``16 * window + r < M``.
    - ``sparse_a_to_b`` [n_blocks, w], ``index_dtype(K)``: original column of slot c of block b, -1 for padding.
      Within a window the non-padding entries are strictly increasing in (block, c); padding only at the tail of
      the window's last block; every non-padding slot is used by >= 1 nonzero of its block.
    - ``data`` [nnz], A's dtype: the values (explicit zeros kept), in the order of ``tc_local_id``.

    Canonical form: a window's distinct columns, sorted ascending, cut into groups of w (the last group padded
    with -1); within a block, nonzeros sorted by ``tc_local_id``. Windows without nonzeros own no blocks.

    Forward map (row, col) -> (window, block, r, c): window = row // 16, r = row % 16; k = position of col among
    the window's sorted distinct columns; block = row_window_offset[window] + k // w, c = k % w.
    Inverse map: row = 16 * window + r, col = sparse_a_to_b[block, c], where window is the w with
    row_window_offset[w] <= block < row_window_offset[w + 1], and (r, c) = divmod(tc_local_id[i], w).
    """

    format_name = "metcf"  # its registered name: SpmmPlan and the shards take a converted object by it
    shape: tuple[int, int]
    row_window_offset: np.ndarray
    tc_offset: np.ndarray
    tc_local_id: np.ndarray
    sparse_a_to_b: np.ndarray
    data: np.ndarray

    @property
    def width(self) -> int:
        """Condensed columns per TC block: 8 (TF32, m16n8k8) or 16 (FP16/BF16, m16n8k16)."""
        return int(self.sparse_a_to_b.shape[1]) if self.sparse_a_to_b.ndim == 2 else WIDTH

    @property
    def n_windows(self) -> int:
        return -(-int(self.shape[0]) // WINDOW)

    @property
    def n_blocks(self) -> int:
        return int(self.tc_offset.shape[0]) - 1

    @property
    def nnz(self) -> int:
        return int(self.data.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes of the five arrays (what a device copy costs)."""
        return int(sum(a.nbytes for a in (self.row_window_offset, self.tc_offset, self.tc_local_id,
                                          self.sparse_a_to_b, self.data)))

    @property
    def mean_nnz_tc(self) -> float:
        """Mean nonzeros per 16 x width TC block (0.0 when there are no blocks); 16 x width is a dense block."""
        return self.nnz / self.n_blocks if self.n_blocks else 0.0

    def block_window(self) -> np.ndarray:
        """Window id of each block, [n_blocks] (the inverse of row_window_offset)."""
        return segment_ids(self.row_window_offset, index_dtype(self.n_windows))

    def validate(self, full: bool = False) -> None:
        """Raise ValueError naming the broken invariant, observed vs expected. O(1) unless ``full`` (O(nnz))."""
        n_rows, n_cols = (int(s) for s in self.shape)
        if n_rows < 0 or n_cols < 0:
            raise ValueError(f"shape {self.shape} has a negative dimension")
        rwo, tco, lid, sab = self.row_window_offset, self.tc_offset, self.tc_local_id, self.sparse_a_to_b
        nw, nb, nnz = self.n_windows, self.n_blocks, self.nnz
        checks_1d = [("row_window_offset", rwo, nw + 1, "n_windows + 1"), ("tc_offset", tco, None, None),
                     ("tc_local_id", lid, nnz, "nnz = len(data)"), ("data", self.data, None, None)]
        for name, arr, n_expected, what in checks_1d:
            if arr.ndim != 1:
                raise ValueError(f"{name} has {arr.ndim} dimensions, expected 1")
            if n_expected is not None and arr.shape[0] != n_expected:
                raise ValueError(f"{name} has {arr.shape[0]} entries, expected {what} = {n_expected}")
        if tco.shape[0] < 1:
            raise ValueError("tc_offset has 0 entries, expected n_blocks + 1 >= 1")
        width = int(sab.shape[1]) if sab.ndim == 2 else -1
        if sab.ndim != 2 or width not in WIDTHS or sab.shape[0] != nb:
            raise ValueError(f"sparse_a_to_b has shape {sab.shape}, expected (n_blocks, width) = ({nb}, 8 or 16)")
        shift = width.bit_length() - 1  # local id = r * width + c: r = id >> shift, c = id & (width - 1)
        if lid.dtype != np.uint8:
            raise ValueError(f"tc_local_id has dtype {lid.dtype}, expected uint8")
        for name, arr, size in (("row_window_offset", rwo, nb), ("tc_offset", tco, nnz),
                                ("sparse_a_to_b", sab, n_cols)):
            want = index_dtype(size)
            if arr.dtype != want:
                raise ValueError(f"{name} has dtype {arr.dtype}, expected {np.dtype(want)} for size {size}")
        if int(rwo[0]) != 0 or int(rwo[-1]) != nb:
            raise ValueError(f"row_window_offset runs {int(rwo[0])}..{int(rwo[-1])}, expected 0..n_blocks = 0..{nb}")
        if int(tco[0]) != 0 or int(tco[-1]) != nnz:
            raise ValueError(f"tc_offset runs {int(tco[0])}..{int(tco[-1])}, expected 0..nnz = 0..{nnz}")
        if not full:
            return
        decreasing = np.flatnonzero(np.diff(rwo) < 0)
        if decreasing.size:
            w = int(decreasing[0])
            raise ValueError(f"row_window_offset decreases at window {w}: {int(rwo[w])} -> {int(rwo[w + 1])}")
        per_block = np.diff(tco)
        if nb and np.any(per_block <= 0):
            b = int(np.flatnonzero(per_block <= 0)[0])
            raise ValueError(f"tc_offset: block {b} holds {int(per_block[b])} nonzeros, expected >= 1")
        if nnz and int(lid.max()) >= WINDOW * width:
            i = int(np.argmax(lid))
            raise ValueError(f"tc_local_id[{i}] = {int(lid[i])}, expected < {WINDOW * width} (r * {width} + c)")
        bw = self.block_window()
        nz_block = segment_ids(tco)
        rows = WINDOW * bw[nz_block].astype(np.int64) + (lid >> shift)
        if nnz and int(rows.max()) >= n_rows:
            i = int(np.argmax(rows))
            raise ValueError(f"nonzero {i} lies in row {int(rows[i])}, expected < n_rows = {n_rows}")
        later = np.ones(nnz, dtype=bool)
        later[tco[:-1]] = False  # first nonzero of each block has no predecessor inside the block
        if np.any(later[1:] & (lid[1:] <= lid[:-1])):
            i = int(np.flatnonzero(later[1:] & (lid[1:] <= lid[:-1]))[0]) + 1
            raise ValueError(f"tc_local_id not strictly increasing within block {int(nz_block[i])} at nonzero {i}: "
                             f"{int(lid[i - 1])} then {int(lid[i])}")
        cols = sab[nz_block, lid & (width - 1)]
        if np.any(cols < 0):
            i = int(np.flatnonzero(cols < 0)[0])
            raise ValueError(f"nonzero {i} uses padding slot {int(lid[i]) & (width - 1)} of block {int(nz_block[i])}")
        flat = sab.reshape(-1)
        pad = flat < 0
        if np.any(flat >= n_cols):
            raise ValueError(f"sparse_a_to_b holds column {int(flat.max())}, expected < n_cols = {n_cols}")
        # Canonical order: within a window the slot columns strictly increase; padding only at the window's tail.
        slot_window = np.repeat(bw, width)
        same = slot_window[1:] == slot_window[:-1]
        bad_pad = same & pad[:-1] & ~pad[1:]
        bad_order = same & ~pad[:-1] & ~pad[1:] & (flat[1:] <= flat[:-1])
        if np.any(bad_pad | bad_order):
            s = int(np.flatnonzero(bad_pad | bad_order)[0])
            raise ValueError(f"sparse_a_to_b block {s // width}: slot columns {int(flat[s])}, {int(flat[s + 1])} "
                             "are not ascending distinct columns with -1 padding at the window's tail")
        used = np.zeros(nb * width, dtype=bool)
        used[nz_block * width + (lid & (width - 1))] = True
        if np.any(used != ~pad):
            s = int(np.flatnonzero(used != ~pad)[0])
            raise ValueError(f"sparse_a_to_b slot {s % width} of block {s // width} is "
                             f"{'unused by any nonzero' if not used[s] else 'padding but used'}")


def csr_to_metcf(A, *, chunk_nnz: int = DEFAULT_CHUNK_NNZ, width: int = WIDTH) -> METCF:
    """Convert any SciPy sparse matrix (CSR preferred; rectangular, empty rows, int64 indices) to canonical ME-TCF
    with 16 x ``width`` TC blocks (8: TF32 m16n8k8; 16: FP16/BF16 m16n8k16): the window tiles of
    ``kernels.formats.condense`` (which Tiled-CSR shares), a TC block per tile.

    Values and explicit zeros are kept as they are (A's dtype); duplicates are summed first. Work is done per
    chunk of consecutive windows holding about ``chunk_nnz`` nonzeros: peak extra memory is O(chunk_nnz) plus
    the output (~9 bytes per nonzero for float64 data, 8 slots per block).
    """
    return METCF(*condense_windows(A, width=width, chunk_nnz=chunk_nnz, who="csr_to_metcf"))


def metcf_concat(pieces: list[METCF]) -> METCF:
    """ME-TCF of the row-stacked matrix of ``pieces`` (consecutive row blocks of one matrix, converted apart):
    equal, array by array, to `csr_to_metcf` of the stacked CSR. Every piece but the last must have a multiple
    of 16 rows, so windows never straddle two pieces."""
    check_pieces(pieces, "metcf_concat", WINDOW,
                 lambda P: f"{int(P.shape[1])} columns, {P.width}-wide TC blocks")
    n_cols = int(pieces[0].shape[1])
    rwo = stack_offsets([P.row_window_offset for P in pieces])
    tco = stack_offsets([P.tc_offset for P in pieces])
    n_rows, n_blocks, nnz = sum(int(P.shape[0]) for P in pieces), int(rwo[-1]), int(tco[-1])
    return METCF((n_rows, n_cols), rwo.astype(index_dtype(n_blocks)), tco.astype(index_dtype(nnz)),
                 np.concatenate([P.tc_local_id for P in pieces]),
                 np.concatenate([P.sparse_a_to_b for P in pieces]).astype(index_dtype(n_cols), copy=False),
                 np.concatenate([P.data for P in pieces]))


def metcf_from_arrays(arrays: dict) -> METCF:
    """A METCF from ``store.read_format`` output (a dict of the five arrays and ``shape``), offsets recast to
    ``index_dtype`` of its own sizes (a shard's offsets restart at 0)."""
    rwo, tco = arrays["row_window_offset"], arrays["tc_offset"]
    n_blocks, nnz = int(rwo[-1]) if len(rwo) else 0, int(tco[-1]) if len(tco) else 0
    shape = tuple(int(s) for s in arrays["shape"])
    return METCF(shape, rwo.astype(index_dtype(n_blocks), copy=False), tco.astype(index_dtype(nnz), copy=False),
                 arrays["tc_local_id"], arrays["sparse_a_to_b"], arrays["data"])


def expand(M: METCF, w0: int = 0, w1: int | None = None):
    """Triplets (rows int64, cols int64, data) of windows [w0, w1), in ME-TCF order (the inverse map)."""
    w1 = M.n_windows if w1 is None else w1
    b0, b1 = int(M.row_window_offset[w0]), int(M.row_window_offset[w1])
    p0, p1 = int(M.tc_offset[b0]), int(M.tc_offset[b1])
    blocks = segment_ids(M.tc_offset[b0:b1 + 1], start=b0)
    windows = segment_ids(M.row_window_offset[w0:w1 + 1], start=w0)
    lid = M.tc_local_id[p0:p1]
    width = M.width
    rows = WINDOW * windows[blocks - b0] + lid // width
    cols = M.sparse_a_to_b[blocks, lid % width].astype(np.int64)
    return rows, cols, M.data[p0:p1]


def metcf_to_csr(M: METCF) -> sp.csr_array:
    """The inverse of `csr_to_metcf`: canonical CSR (sorted indices, explicit zeros kept, A's value dtype,
    indptr/indices dtype ``index_dtype(max(shape), nnz)``)."""
    n_rows, n_cols = M.shape
    rows, cols, data = expand(M)
    # Sort by (row, col). Canonical ME-TCF lists a row's columns ascending across its window's blocks, so a stable
    # sort by row alone is enough (0.2 s against lexsort's 1.5 s at 18M nonzeros); a METCF whose blocks were
    # remapped (e.g. a shard's columns renumbered for its halo) need not be, and the flags below promise sorted
    # rows: checked, and sorted by (row, col) where it is not.
    order = np.argsort(rows, kind="stable")
    cols = cols[order]
    rows = rows[order]
    if cols.shape[0] > 1 and not np.all((rows[1:] != rows[:-1]) | (cols[1:] > cols[:-1])):
        again = np.lexsort((cols, rows))
        order, cols = order[again], cols[again]
    idx = index_dtype(max(n_rows, n_cols), M.nnz)
    indptr = np.zeros(n_rows + 1, dtype=idx)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    out = sp.csr_array((data[order], cols.astype(idx), indptr), shape=(n_rows, n_cols))
    out.indices, out.indptr = out.indices.astype(idx, copy=False), out.indptr.astype(idx, copy=False)
    out.has_sorted_indices = True
    out.has_canonical_format = True
    return out


def balanced_items(row_window_offset: np.ndarray, blocks_per_tb: int, *, within_windows: bool = False):
    """Work items for the strict-balance kernel (DTC-SpMM section 4.5.1): returns (item_window, item_block_begin).

    Default (the paper's strict balance): item i covers global blocks
    ``[i * blocks_per_tb, min((i + 1) * blocks_per_tb, n_blocks))`` -- every item but the last has exactly
    ``blocks_per_tb`` blocks, which may come from several windows; ``item_window[i]`` is the window of its first
    block, and the kernel advances windows via ``row_window_offset`` (a window split across items gets partial
    sums, which a second pass combines in a fixed order: no atomics).
    ``within_windows=True``: each window's blocks are cut into items of <= ``blocks_per_tb`` blocks that never
    cross a window (windows without blocks get no item). Either way item ends are ``item_block_begin[1:]`` plus
    n_blocks, items are in block order, and every block is covered exactly once.
    Dtypes: item_window ``index_dtype(n_windows)``, item_block_begin ``row_window_offset.dtype``.
    """
    bpt = int(blocks_per_tb)
    if bpt < 1:
        raise ValueError(f"blocks_per_tb is {bpt}, expected >= 1")
    rwo = np.asarray(row_window_offset)
    n_windows, n_blocks = rwo.shape[0] - 1, int(rwo[-1])
    w_dtype = index_dtype(n_windows)
    if not within_windows:
        begin = np.arange(0, n_blocks, bpt, dtype=rwo.dtype)
        window = np.searchsorted(rwo, begin, side="right") - 1
        return window.astype(w_dtype), begin
    items_per_window = -(-np.diff(rwo).astype(np.int64) // bpt)
    window = np.repeat(np.arange(n_windows, dtype=np.int64), items_per_window)
    first_item = np.concatenate([[0], np.cumsum(items_per_window)[:-1]])
    begin = rwo[window] + bpt * (np.arange(window.shape[0], dtype=np.int64) - first_item[window])
    return window.astype(w_dtype), begin.astype(rwo.dtype)


def balance(M: METCF, blocks_per_tb: int = 32, *, within_windows: bool = False) -> dict:
    """The strict-balance split of `balanced_items` as a dict with explicit item ends (for inspection and tests;
    the CUDA launcher derives its own slot layout from `balanced_items` in ``kernels.launch.balance_metadata``).

    Keys: ``item_window``, ``item_block_start``, ``item_block_end`` (half-open block range per item),
    ``n_items``, ``blocks_per_tb``, ``within_windows``, ``max_blocks_per_item``.
    """
    window, begin = balanced_items(M.row_window_offset, blocks_per_tb, within_windows=within_windows)
    end = np.empty_like(begin)
    end[:-1] = begin[1:]
    if end.shape[0]:
        end[-1] = M.n_blocks
    if within_windows and end.shape[0]:
        end = np.minimum(end, M.row_window_offset[window.astype(np.int64) + 1])
    return {"item_window": window, "item_block_start": begin, "item_block_end": end,
            "n_items": int(begin.shape[0]), "blocks_per_tb": int(blocks_per_tb),
            "within_windows": bool(within_windows),
            "max_blocks_per_item": int((end - begin).max()) if end.shape[0] else 0}


def metcf_stats(M: METCF, A_csr_nbytes: int | None = None) -> dict:
    """Size and density numbers: MeanNnzTC, ME-TCF bytes vs CSR bytes, blocks per window min/mean/max.

    CSR bytes default to indptr + indices + data with ``index_dtype(max(shape), nnz)`` indices and the same data
    dtype; pass ``A_csr_nbytes`` to compare against an actual CSR's bytes instead.
    """
    n_rows, n_cols = M.shape
    if A_csr_nbytes is None:
        idx = np.dtype(index_dtype(max(n_rows, n_cols), M.nnz)).itemsize
        A_csr_nbytes = (n_rows + 1) * idx + M.nnz * (idx + M.data.dtype.itemsize)
    bpw = np.diff(M.row_window_offset)
    return {"shape": (int(n_rows), int(n_cols)), "nnz": M.nnz, "n_windows": M.n_windows, "n_blocks": M.n_blocks,
            "mean_nnz_tc": M.mean_nnz_tc, "metcf_bytes": M.nbytes, "csr_bytes": int(A_csr_nbytes),
            "metcf_over_csr": M.nbytes / A_csr_nbytes if A_csr_nbytes else float("nan"),
            "blocks_per_window_min": int(bpw.min()) if bpw.shape[0] else 0,
            "blocks_per_window_mean": float(bpw.mean()) if bpw.shape[0] else 0.0,
            "blocks_per_window_max": int(bpw.max()) if bpw.shape[0] else 0}
