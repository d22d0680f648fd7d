"""Tiled-CSR (Xue et al., ICCD'23, section III-A): per group of h = 16 rows, the all-zero columns are deleted and the
compressed group is cut into tiles of w columns (w = the mma's k: 8 for TF32 m16n8k8, 16 for FP16/BF16 m16n8k16);
each tile stores its nonzeros CSR-like, with tile-local row pointers and column indices in narrow integer types.

Public API: `TiledCSR`, `csr_to_tiledcsr`, `tiledcsr_concat`, `tiledcsr_from_arrays`, `tiledcsr_to_csr`,
`tiledcsr_from_tiles` / `tiledcsr_tiles` (to and from the window tiles of ``kernels.formats.condense``),
`tiledcsr_spmm` (the NumPy twin), `tiledcsr_stats`, `effective_rate` (the paper's measure for any h x w, without
building the format). The column compaction is ``kernels.formats.condense.condense_windows``, which ME-TCF's
conversion shares (the same deleted columns and the same tiles: DTC-SpMM and this paper arrived at the same
grouping), so the two formats share one tested converter and differ in how a tile stores its nonzeros.
Vectorised NumPy, chunked over window ranges.
The paper used h = 8 (wmma m8n32k16); our mma.sync instructions are m16, so h = 16 here, and `effective_rate` takes
h = 8 to compare with the paper's numbers. Registration and the device operator: ``kernels.formats.tiledcsr.plugin``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from kernels.formats.blocks import check_pieces, stack_offsets
from kernels.formats.condense import DEFAULT_CHUNK_NNZ, WindowTiles, condense_windows
from kernels.precision import from_bf16_bits
from storage.indexing import index_dtype, segment_ids

HEIGHT = 16  # h: the m16 of mma.m16n8k8 (TF32) and mma.m16n8k16 (FP16/BF16)
WIDTHS = {"float32": 8, "float16": 16, "bfloat16": 16}  # w: the k of the precision's mma


def indptr_dtype(width: int) -> np.dtype:
    """Narrowest unsigned type for a tile's local row pointers (0 .. h * w): uint8 for 16 x 8, uint16 for 16 x 16."""
    return np.dtype(np.uint8 if HEIGHT * width <= np.iinfo(np.uint8).max else np.uint16)


@dataclass(frozen=True)
class TiledCSR:
    """An M x K sparse matrix A in Tiled-CSR with h x w tiles (h = 16; w = 8 for TF32, 16 for FP16/BF16).

    n_groups = ceil(M / h); n_tiles = tiles over all groups; nnz = A's stored entries (explicit zeros kept).

    - ``group_ptr`` [n_groups + 1], ``index_dtype(n_tiles)``: non-decreasing from 0 to n_tiles; group g (rows
      h*g .. h*g + h-1) owns tiles ``group_ptr[g]:group_ptr[g+1]`` (none when its rows are all empty).
    - ``tile_ptr`` [n_tiles + 1], ``index_dtype(nnz)``: non-decreasing from 0 to nnz; tile t owns nonzeros
      ``tile_ptr[t]:tile_ptr[t+1]`` of ``tile_indices`` and ``data``.
    - ``tile_cols`` [n_tiles, w], ``index_dtype(K)``: the original column of each of the tile's w compressed
      columns, -1 for padding (only at the tail of a group's last tile); within a group, the non-padding entries
      are strictly increasing in (tile, slot).
    - ``tile_indptr`` [n_tiles, h + 1], uint8 (16 x 8) or uint16 (16 x 16) (`indptr_dtype`): the tile's CSR row
      pointers, local: row r of tile t owns nonzeros ``tile_ptr[t] + tile_indptr[t, r]`` up to
      ``tile_ptr[t] + tile_indptr[t, r + 1]``; ``tile_indptr[t, 0] = 0``, ``tile_indptr[t, h] = tile_ptr[t+1] -
      tile_ptr[t]``; rows h*g + r >= M are empty.
    - ``tile_indices`` [nnz], uint8: the compressed column c (0 .. w-1) of each nonzero, strictly increasing within
      a tile row; ``tile_cols[t, c]`` is never padding for a stored c.
    - ``data`` [nnz]: the values in the precision's storage dtype (float32, float16, or uint16 bfloat16 bits).

    Canonical form (what `csr_to_tiledcsr` builds): a group's distinct columns sorted ascending and cut into tiles
    of w (the last padded with -1); every tile holds >= 1 nonzero; nonzeros of a tile in (r, c) order.
    Forward map (row, col) -> (group, tile, r, c): g = row // h, r = row % h; k = position of col among group g's
    sorted distinct columns; tile = group_ptr[g] + k // w, c = k % w; the nonzero sits at tile_ptr[tile] +
    tile_indptr[tile, r] + (its rank among row r's entries in that tile). Inverse: row = h * g + r with g the group
    owning the tile and r the row whose local range holds the nonzero, col = tile_cols[tile, tile_indices[p]].
    """

    shape: tuple[int, int]
    group_ptr: np.ndarray
    tile_ptr: np.ndarray
    tile_cols: np.ndarray
    tile_indptr: np.ndarray
    tile_indices: np.ndarray
    data: np.ndarray

    format_name = "tiledcsr"  # kernels.spmm.SpmmPlan takes a converted object of a registered format by this name

    @property
    def width(self) -> int:
        return int(self.tile_cols.shape[1]) if self.tile_cols.ndim == 2 else -1

    @property
    def tile_shape(self) -> tuple[int, int]:
        return (HEIGHT, self.width)

    @property
    def n_groups(self) -> int:
        return -(-int(self.shape[0]) // HEIGHT)

    @property
    def n_tiles(self) -> int:
        return int(self.tile_ptr.shape[0]) - 1

    @property
    def n_blocks(self) -> int:
        """Tiles, under the name the shard code counts a format's tiles by (`kernels.formats.shard`)."""
        return self.n_tiles

    @property
    def nnz(self) -> int:
        return int(self.data.shape[0])

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in (self.group_ptr, self.tile_ptr, self.tile_cols, self.tile_indptr,
                                          self.tile_indices, self.data)))

    def group_of_tile(self) -> np.ndarray:
        """[n_tiles] int64: the group owning each tile."""
        return segment_ids(self.group_ptr)

    def expand(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The inverse map as triplets (rows int64, cols int64, tile of each nonzero int64) in storage order."""
        nt = self.n_tiles
        tile = segment_ids(self.tile_ptr)
        per_row = np.diff(self.tile_indptr.astype(np.int64), axis=1).reshape(-1)
        r = np.repeat(np.tile(np.arange(HEIGHT, dtype=np.int64), nt), per_row)
        rows = HEIGHT * self.group_of_tile()[tile] + r
        cols = self.tile_cols[tile, self.tile_indices.astype(np.int64)].astype(np.int64) if nt else tile
        return rows, cols, tile

    def validate(self, full: bool = False) -> None:
        """Raise ValueError naming the broken invariant, observed vs expected. O(1) unless ``full`` (O(nnz))."""
        n_rows, n_cols = (int(s) for s in self.shape)
        if n_rows < 0 or n_cols < 0:
            raise ValueError(f"shape {self.shape} has a negative dimension")
        ng, nt, nnz, w = self.n_groups, self.n_tiles, self.nnz, self.width
        if self.group_ptr.ndim != 1 or self.group_ptr.shape[0] != ng + 1:
            raise ValueError(f"group_ptr has shape {self.group_ptr.shape}, expected (ceil(M / {HEIGHT}) + 1,) = "
                             f"({ng + 1},)")
        if self.tile_cols.ndim != 2 or w not in (8, 16) or self.tile_cols.shape[0] != nt:
            raise ValueError(f"tile_cols has shape {self.tile_cols.shape}, expected (n_tiles, 8 or 16) with "
                             f"n_tiles = len(tile_ptr) - 1 = {nt}")
        if self.tile_indptr.shape != (nt, HEIGHT + 1) or self.tile_indptr.dtype != indptr_dtype(w):
            raise ValueError(f"tile_indptr is {self.tile_indptr.dtype} {self.tile_indptr.shape}, expected "
                             f"{indptr_dtype(w)} {(nt, HEIGHT + 1)}")
        if self.tile_indices.shape != (nnz,) or self.tile_indices.dtype != np.uint8:
            raise ValueError(f"tile_indices is {self.tile_indices.dtype} {self.tile_indices.shape}, expected "
                             f"uint8 ({nnz},) like data")
        for name, arr, size in (("group_ptr", self.group_ptr, nt), ("tile_ptr", self.tile_ptr, nnz),
                                ("tile_cols", self.tile_cols, n_cols)):
            if arr.dtype != index_dtype(size):
                raise ValueError(f"{name} has dtype {arr.dtype}, expected {np.dtype(index_dtype(size))} for "
                                 f"size {size}")
        for name, arr, end in (("group_ptr", self.group_ptr, nt), ("tile_ptr", self.tile_ptr, nnz)):
            if int(arr[0]) != 0 or int(arr[-1]) != end:
                raise ValueError(f"{name} runs {int(arr[0])}..{int(arr[-1])}, expected 0..{end}")
        if not full:
            return
        for name, arr in (("group_ptr", self.group_ptr), ("tile_ptr", self.tile_ptr)):
            d = np.diff(arr.astype(np.int64))
            if np.any(d < 0):
                i = int(np.flatnonzero(d < 0)[0])
                raise ValueError(f"{name} decreases at {i}: {int(arr[i])} -> {int(arr[i + 1])}")
        ip = self.tile_indptr.astype(np.int64)
        size = np.diff(self.tile_ptr.astype(np.int64))
        bad = (ip[:, 0] != 0) | (ip[:, -1] != size) | np.any(np.diff(ip, axis=1) < 0, axis=1)
        if np.any(bad):
            t = int(np.flatnonzero(bad)[0])
            raise ValueError(f"tile {t}: tile_indptr {ip[t].tolist()} is not non-decreasing from 0 to the tile's "
                             f"{int(size[t])} nonzeros")
        rows, cols_slot, tile = self.expand() if nt else (np.zeros(0, np.int64),) * 3
        c = self.tile_indices.astype(np.int64)
        if nnz and int(c.max()) >= w:
            raise ValueError(f"tile_indices holds {int(c.max())}, expected 0..{w - 1}")
        if nnz and np.any(rows >= n_rows):
            p = int(np.flatnonzero(rows >= n_rows)[0])
            raise ValueError(f"nonzero {p} is in row {int(rows[p])}, outside the {n_rows} rows (rows past M empty)")
        same_row = (tile[1:] == tile[:-1]) & (rows[1:] == rows[:-1])
        if np.any(same_row & (c[1:] <= c[:-1])):
            p = int(np.flatnonzero(same_row & (c[1:] <= c[:-1]))[0]) + 1
            raise ValueError(f"tile_indices not strictly increasing in row {int(rows[p])} of tile {int(tile[p])}")
        tc = self.tile_cols.astype(np.int64)
        if nnz and np.any(cols_slot < 0):
            p = int(np.flatnonzero(cols_slot < 0)[0])
            raise ValueError(f"nonzero {p} uses padding column slot {int(c[p])} of tile {int(tile[p])}")
        if nt and (int(tc.max()) >= n_cols or np.any(tc[:, 0] < 0)):
            raise ValueError(f"tile_cols must hold columns 0..{n_cols - 1} with a real first slot per tile, found "
                             f"{int(tc.max())} / a tile starting with padding")
        flat, grp = tc.reshape(-1), np.repeat(self.group_of_tile(), w)
        real = flat >= 0
        f, g = flat[real], grp[real]
        if np.any((g[1:] == g[:-1]) & (f[1:] <= f[:-1])):
            raise ValueError("tile_cols not strictly increasing within a group")
        pad_then_real = (grp[1:] == grp[:-1]) & ~real[:-1] & real[1:]
        if np.any(pad_then_real):
            raise ValueError("tile_cols has padding before a real column within a group (padding only at the tail)")


def csr_to_tiledcsr(A, *, width: int = 16, to_storage=None, chunk_nnz: int = DEFAULT_CHUNK_NNZ) -> TiledCSR:
    """Canonical CSR (any SciPy sparse; rectangular, empty rows, int64 indices) -> canonical Tiled-CSR with 16 x
    ``width`` tiles. ``to_storage`` maps the values to the stored dtype (``Precision.to_storage``); default
    float32."""
    if width not in (8, 16):
        raise ValueError(f"width is {width}, expected 8 (TF32 m16n8k8) or 16 (FP16/BF16 m16n8k16)")
    if not sp.issparse(A):
        raise TypeError(f"csr_to_tiledcsr needs a scipy.sparse matrix, got {type(A).__name__}")
    # the groups, their deleted columns, the tiles and the (r, c) order of their nonzeros
    T = condense_windows(A, width=width, chunk_nnz=chunk_nnz, who="csr_to_tiledcsr")
    to_storage = to_storage or (lambda x: np.asarray(x, dtype=np.float32))
    return tiledcsr_from_tiles(T._replace(data=to_storage(T.data)))


def tiledcsr_from_tiles(T: WindowTiles) -> TiledCSR:
    """The Tiled-CSR of window tiles ``T`` (same tiles, same columns, same nonzero order): local id ``r * w + c``
    becomes row r's local pointers and the compressed column c; values as they are."""
    nt, width = int(T.tile_ptr.shape[0]) - 1, int(T.slot_cols.shape[1])
    lid = T.local_id.astype(np.int64)
    tile = segment_ids(T.tile_ptr)
    counts = np.bincount(tile * HEIGHT + lid // width, minlength=nt * HEIGHT).reshape(nt, HEIGHT)
    tile_indptr = np.zeros((nt, HEIGHT + 1), dtype=indptr_dtype(width))
    np.cumsum(counts, axis=1, out=tile_indptr[:, 1:])
    return TiledCSR(T.shape, T.window_ptr, T.tile_ptr, T.slot_cols.reshape(nt, width), tile_indptr,
                    (lid % width).astype(np.uint8), T.data)


def tiledcsr_tiles(X: TiledCSR) -> WindowTiles:
    """The inverse of `tiledcsr_from_tiles`: X's tiles as window tiles (``local_id = r * w + c``), values as they
    are; what the shard operations re-condense columns with (``kernels.formats.condense.split_slots``)."""
    per_row = np.diff(X.tile_indptr.astype(np.int64), axis=1).reshape(-1)
    r = np.repeat(np.tile(np.arange(HEIGHT, dtype=np.int64), X.n_tiles), per_row)
    lid = (r * X.width + X.tile_indices).astype(np.uint8)  # <= 15 * 16 + 15 = 255
    return WindowTiles(X.shape, X.group_ptr, X.tile_ptr, lid, X.tile_cols, X.data)


def tiledcsr_concat(pieces: list[TiledCSR]) -> TiledCSR:
    """Tiled-CSR of the row-stacked matrix of ``pieces`` (consecutive row blocks of one matrix, converted apart):
    equal, array by array, to converting the stacked CSR. All pieces but the last need a multiple of 16 rows."""
    check_pieces(pieces, "tiledcsr_concat", HEIGHT,
                 lambda P: f"{int(P.shape[1])} columns, {P.width}-wide tiles, {P.data.dtype}")
    n_cols = int(pieces[0].shape[1])
    gp, tp = stack_offsets([P.group_ptr for P in pieces]), stack_offsets([P.tile_ptr for P in pieces])
    return TiledCSR((sum(int(P.shape[0]) for P in pieces), n_cols), gp.astype(index_dtype(int(gp[-1]))),
                    tp.astype(index_dtype(int(tp[-1]))),
                    np.concatenate([P.tile_cols for P in pieces]).astype(index_dtype(n_cols), copy=False),
                    np.concatenate([P.tile_indptr for P in pieces]),
                    np.concatenate([P.tile_indices for P in pieces]), np.concatenate([P.data for P in pieces]))


def tiledcsr_from_arrays(arrays: dict) -> TiledCSR:
    """A TiledCSR from ``store.read_format`` output (a dict of the six arrays and ``shape``), index arrays recast
    to ``index_dtype`` of their own sizes (a shard's offsets restart at 0)."""
    gp, tp = np.asarray(arrays["group_ptr"]), np.asarray(arrays["tile_ptr"])
    n_tiles, nnz = int(gp[-1]) if len(gp) else 0, int(tp[-1]) if len(tp) else 0
    shape = tuple(int(s) for s in arrays["shape"])
    cols = np.asarray(arrays["tile_cols"])
    return TiledCSR(shape, gp.astype(index_dtype(n_tiles), copy=False), tp.astype(index_dtype(nnz), copy=False),
                    cols.astype(index_dtype(shape[1]), copy=False), np.asarray(arrays["tile_indptr"]),
                    np.asarray(arrays["tile_indices"]), np.asarray(arrays["data"]))


def values_float64(data: np.ndarray) -> np.ndarray:
    """Stored values widened exactly to float64 (uint16 is bfloat16 bits)."""
    if data.dtype == np.uint16:
        return from_bf16_bits(data).astype(np.float64)
    return data.astype(np.float64)


def tiledcsr_to_csr(X: TiledCSR) -> sp.csr_array:
    """The inverse map: canonical CSR with every stored entry (explicit zeros kept). Values: float64 for bfloat16
    bits, float32 for float16 (exact; SciPy has no float16 sparse arrays), else data's dtype."""
    rows, cols, _ = X.expand()
    vals = values_float64(X.data) if X.data.dtype == np.uint16 else \
        X.data.astype(np.float32) if X.data.dtype == np.float16 else X.data
    n_rows, n_cols = (int(s) for s in X.shape)
    order = np.lexsort((cols, rows))
    idx = index_dtype(max(n_rows, n_cols), order.size)
    indptr = np.zeros(n_rows + 1, dtype=idx)
    np.cumsum(np.bincount(rows, minlength=n_rows)[:n_rows], out=indptr[1:])
    return sp.csr_array((vals[order], cols[order].astype(idx), indptr), shape=(n_rows, n_cols))


def tiledcsr_spmm(X: TiledCSR, B, *, chunk_elems: int = 1 << 24) -> np.ndarray:
    """float64 C = A @ B the way the kernels compute it: per group, the sum over its tiles of the dense h x w tile
    (scattered from its CSR) times the w rows of B its columns name (padding multiplies a zero row)."""
    B = np.asarray(B, dtype=np.float64)
    vector = B.ndim == 1
    B2 = B.reshape(-1, 1) if vector else B
    n_rows, n_cols = (int(s) for s in X.shape)
    if B2.shape[0] != n_cols:
        raise ValueError(f"B has {B2.shape[0]} rows, expected A's column count {n_cols}")
    N, w, ng = B2.shape[1], X.width, X.n_groups
    Bz = np.vstack([B2, np.zeros((1, N))])  # row n_cols: what a padding slot (-1) multiplies
    C = np.zeros((ng, HEIGHT, N))
    if X.n_tiles:
        rows, _, tile = X.expand()
        vals = values_float64(X.data)
        gp = X.group_ptr.astype(np.int64)
        step = max(1, chunk_elems // max(HEIGHT * w * N, 1))  # tiles per chunk
        g0 = 0
        while g0 < ng:  # chunks of whole groups, about `step` tiles each
            g1 = min(ng, max(g0 + 1, int(np.searchsorted(gp, gp[g0] + step, side="right")) - 1))
            t0, t1 = int(gp[g0]), int(gp[g1])
            if t1 > t0:
                p0, p1 = int(X.tile_ptr[t0]), int(X.tile_ptr[t1])
                dense = np.zeros((t1 - t0, HEIGHT, w))
                dense[tile[p0:p1] - t0, rows[p0:p1] % HEIGHT, X.tile_indices[p0:p1]] = vals[p0:p1]
                cols = X.tile_cols[t0:t1].astype(np.int64)
                prod = np.einsum("thw,twn->thn", dense, Bz[np.where(cols < 0, n_cols, cols)])
                per = np.diff(gp[g0:g1 + 1])
                nonempty = np.flatnonzero(per)
                C[g0 + nonempty] = np.add.reduceat(prod, (gp[g0:g1] - t0)[nonempty], axis=0)
            g0 = g1
    C = C.reshape(-1, N)[:n_rows]
    return C.reshape(-1) if vector else C


def _row_lengths_per_group(rows: np.ndarray, n_rows: int) -> np.ndarray:
    return np.bincount(rows, minlength=n_rows)[:n_rows] if n_rows else np.zeros(0, np.int64)


def effective_rate(A, height: int = HEIGHT, width: int = 16) -> dict:
    """The paper's measure for A in its current row order with h x w tiles (section III-C, Fig. 8/9): effective
    computation rate = nnz / (tiles x h x w); beside it SR-BCRS's (Magicube, vector length 1: every row cut into
    ceil(len / w) tiles that use one of the h rows: nnz / (sum ceil(len / w) x h x w)) and dense (nnz / (M K)).
    ``gain_over_srbcrs`` is the ratio the paper reports (1.82x at 90% sparsity .. 3.89x at 50%)."""
    A = sp.csr_array(A)
    if not A.has_canonical_format:
        A = A.copy()
        A.sum_duplicates()
    n_rows, n_cols = (int(s) for s in A.shape)
    nnz = int(A.nnz)
    lengths = np.diff(A.indptr.astype(np.int64))
    group = np.repeat(np.arange(n_rows, dtype=np.int64) // height, lengths)
    cols = A.indices.astype(np.int64)
    order = np.lexsort((cols, group))
    g, c = group[order], cols[order]
    first = np.ones(nnz, dtype=bool)
    first[1:] = (g[1:] != g[:-1]) | (c[1:] != c[:-1])
    distinct = np.bincount(g[first], minlength=-(-n_rows // height)) if nnz else np.zeros(0, np.int64)
    n_tiles = int((-(-distinct // width)).sum())
    sr_tiles = int((-(-lengths // width)).sum())
    slots = height * width
    rate = nnz / (n_tiles * slots) if n_tiles else 0.0
    sr = nnz / (sr_tiles * slots) if sr_tiles else 0.0
    return {"tile_shape": [height, width], "nnz": nnz, "n_tiles": n_tiles, "effective_rate": rate,
            "srbcrs_tiles": sr_tiles, "srbcrs_rate": sr, "dense_rate": nnz / (n_rows * n_cols) if n_rows * n_cols
            else 0.0, "gain_over_srbcrs": rate / sr if sr else float("nan")}


def tiledcsr_stats(X: TiledCSR, csr_nbytes: int | None = None) -> dict:
    """Tiles, the effective computation rate (nnz / (tiles x h x w)) overall and per tile (min/mean/max), tiles
    per group, SR-BCRS's rate and the gain over it, bytes vs CSR."""
    nnz, nt, w = X.nnz, X.n_tiles, X.width
    slots = HEIGHT * w
    if csr_nbytes is None:
        idx = np.dtype(index_dtype(max(X.shape), nnz)).itemsize
        csr_nbytes = (int(X.shape[0]) + 1) * idx + nnz * (idx + X.data.dtype.itemsize)
    per_tile = np.diff(X.tile_ptr.astype(np.int64)) / slots
    per_group = np.diff(X.group_ptr.astype(np.int64))
    rows, _, _ = X.expand() if nt else (np.zeros(0, np.int64),) * 3
    lengths = _row_lengths_per_group(rows, int(X.shape[0]))
    sr_tiles = int((-(-lengths // w)).sum())
    rate = nnz / (nt * slots) if nt else 0.0
    sr = nnz / (sr_tiles * slots) if sr_tiles else 0.0
    mean = float(per_group.mean()) if per_group.size else 0.0
    return {"shape": tuple(int(s) for s in X.shape), "nnz": nnz, "tile_shape": [HEIGHT, w], "n_groups": X.n_groups,
            "n_tiles": nt, "mean_nnz_tc": nnz / nt if nt else 0.0, "effective_rate": rate,
            "tile_rate_min": float(per_tile.min()) if nt else 0.0,
            "tile_rate_mean": float(per_tile.mean()) if nt else 0.0,
            "tile_rate_max": float(per_tile.max()) if nt else 0.0,
            "srbcrs_rate": sr, "gain_over_srbcrs": rate / sr if sr else float("nan"),
            "tiles_per_group_min": int(per_group.min()) if per_group.size else 0, "tiles_per_group_mean": mean,
            "tiles_per_group_max": int(per_group.max()) if per_group.size else 0,
            "tiles_per_group_cv": float(per_group.std() / mean) if mean > 0 else 0.0,
            "tiledcsr_bytes": X.nbytes, "csr_bytes": int(csr_nbytes),
            "tiledcsr_over_csr": X.nbytes / csr_nbytes if csr_nbytes else float("nan")}
