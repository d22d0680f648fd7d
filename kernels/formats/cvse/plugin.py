"""CVSE (VectorSparse SC'21 / SSpMM TPDS'25) on the format seam: its `Format` record and its device operator
`CvseDevice`.

The arrays and CPU conversion live in ``kernels.formats.cvse.container``, Sparse Vector Compression (the choice of V) in
``kernels.formats.cvse.svc``; the kernels in ``kernels/formats/cvse/cvse_spmm.cu`` / ``cvse_sddmm.cu`` with launchers in
``kernels.formats.cvse.launch``; its SDDMM route (``kernels.formats.cvse.sddmm``) is the record's ``sddmm``.
Stored as one Parquet row per vector, grouped by 16-row window: ``indices`` (its column), ``vec_row`` (its vector
row within the window, uint8) and ``values`` (its V values) over ``value_offset``.

V on the seam: ``convert(csr_block, precision)`` runs per row block (Dask), so it cannot look at the whole matrix:
it uses ``DEFAULT_VECTOR`` (the paper's V = 8 of its ablation and DNN runs). A device operator given the whole CSR
chooses V with Sparse Vector Compression; pass a converted CVSE to fix V.

Sharded (`CVSE_SHARD`, ``kernels.formats.shard``): V divides 16, so a 16-row window is 16 / V whole vector rows and
its vectors (``window_ptr``) are its tiles; a shard is a slice of the arrays at its first vector row, with the V of
the whole matrix; its halo the distinct ``indices``. A vector carries one column id, so columns may be renamed by
any injective map (``any_order``); out of order, each vector row's vectors are re-sorted by their new column
(canonical form kept). The own/halo split keeps the vectors of the kept columns (exact: no value is touched).
A shard of no windows read back from the store has V = 8 (no vector on disk says V); its product is zero at any V.
"""
from __future__ import annotations

import time

import numpy as np

from kernels.formats.blocks import canonical_csr
from kernels.formats.cvse import launch as lc
from kernels.formats.cvse.container import (CVSE, WINDOW_ROWS, csr_to_cvse, cvse_concat, cvse_from_arrays, cvse_spmm,
                                  cvse_stats, cvse_to_csr)
from kernels.formats.contract import Choice, PerCall
from kernels.formats.cvse.gpu import csr_to_cvse_gpu
from kernels.formats.cvse.gpu import to_host as cvse_to_host
from kernels.formats.cvse.sddmm import SDDMM
from kernels.formats.cvse.svc import PAPER_CANDIDATES, choose, compress
from kernels.formats.ranking import FIT_SOURCE, CostModel, work_terms
from kernels.formats.registry import Format
from kernels.formats.shard import ShardOps, distinct_columns, keeps_order, rebase, relabel, window_bytes
from kernels.operands import vector_path
from storage.formats import BlockLayout
from storage.indexing import index_dtype
from kernels.precision import Precision
from kernels.transfer import to_device

DEFAULT_VECTOR = 8
# vectors per vector row and 128 columns of K from which the tiled kernel is the a priori choice. H200, M = K = 4096,
# gen:dlmc (benchmarks/results/cvse-nvidia-h200-2026-11-25-1653.json, best of two launch shapes, graph replay):
# tiled / per-vector time 0.39-0.71x at >= 25.6 (V = 4 and 8, N = 256 and 1024); at 12.8: 0.78x (V = 4) and 1.03x
# (V = 8) at N = 256, 0.65-0.69x at N = 1024; at 6.4: 1.13-1.62x at N = 256, 0.88-0.98x at N = 1024. The product
# with N separates them no better (with a B, autotune times both anyway)
TILED_DENSITY = 10


def convert(A, precision: Precision, *, vector: int = DEFAULT_VECTOR) -> CVSE:
    """Canonical CSR (one row block) -> CVSE with V = ``vector`` in the precision's storage dtype."""
    return csr_to_cvse(A, vector=vector, to_storage=precision.to_storage)


def reference_spmm(X: CVSE, B, precision: Precision | None = None):
    """float64 C = A @ B from the vectors (bfloat16 bits widened exactly)."""
    return cvse_spmm(X, B)


def _convert_on_device(A, *, vector: int, to_storage) -> CVSE:
    """`compress`'s converter on the GPU: CSR uploaded, CVSE built there (bitwise the host's) and kept there: the
    upload takes its arrays as they are (only vec_ptr comes to the host; the 16-bit tiled layout, where it is
    built, reads a host copy)."""
    A = canonical_csr(A, "CvseDevice")
    return csr_to_cvse_gpu(to_device(A.indptr), to_device(A.indices), to_device(A.data), A.shape, vector=vector,
                           to_storage=to_storage)


class CvseDevice:
    """CVSE of one matrix on the current device at one precision: converted on the device (Sparse Vector Compression
    chooses V from the whole matrix's vector counts; or the given CVSE, V kept, converted on the host), uploaded once. Two kernels, both deterministic
    (each C element has one writer, fixed summation order): the per-vector kernel ("cvse-vector", every precision)
    and, 16-bit, the tiled kernel ("cvse-tiled": B's K chunk staged in shared memory once per block of vector rows,
    kernels/formats/cvse/tiles.py), which `decide` picks by vectors per chunk or, with B, by timing."""

    format_name, kernels, out_dtype = "cvse", ("cvse-vector", "cvse-tiled"), None  # the device-operator contract

    def __init__(self, A, precision: Precision, config=None, calibration=None, *, balance="auto",
                 autotune="auto", allow_cusparse: bool = False):
        import cupy

        self.precision, self.config = precision, lc.CVSE_CONFIG
        self.allow_cusparse = allow_cusparse
        self.timings: dict = {}
        t0 = time.perf_counter()
        if isinstance(A, CVSE):
            X, self.svc, how = A, {"vector": A.vector, "reason": "given CVSE"}, "host CVSE upload"
        else:  # V chosen from the host's vector counts, the CVSE built on the device (kernels.formats.cvse.gpu)
            X, self.svc = compress(A, precision, converter=_convert_on_device)
            how = "GPU CVSE"
            self.timings["convert_gpu_s"] = time.perf_counter() - t0
        self._dm = lc.upload(X, precision.name)
        # the tiled kernel's layout (16-bit, and only where segments of a K chunk hold >= 4 vectors on average)
        self.autotune = autotune
        self._tiles = (lc.upload_tiles(cvse_to_host(X), precision.name)
                       if precision.name in lc.TILED_PRECISIONS and lc.tiles_worthwhile(X) else None)
        self._smem_max, _, self.sm_count = lc.device_limits()
        lc.module(lc.SPMM_SOURCE)  # compile now, not in the first run
        cupy.cuda.Device().synchronize()  # synchronize!
        self.timings["convert_upload_s"] = time.perf_counter() - t0
        self.timings["conversion"] = f"{how} (V = {X.vector}: {self.svc['reason']})"
        per = WINDOW_ROWS // X.vector  # vectors per 16 rows, what SpmmPlan's callers read
        self.row_window_offset_host = self._dm.vec_ptr_host[np.minimum(
            np.arange(-(-int(X.shape[0]) // WINDOW_ROWS) + 1) * per, self._dm.n_vec_rows)]

    def _tiled(self, N: int) -> list[dict]:
        """The tiled kernel's launch shapes for N, best a priori first ([] without its layout or off the 16-byte
        path)."""
        if self._tiles is None or N % 8:
            return []
        return lc.tiled_configs(self._tiles, int(self._dm.shape[1]), N, self.sm_count, self._smem_max)

    def decide(self, N: int, B, time_fn) -> Choice:
        """A priori: the tiled kernel when its layout exists and has >= TILED_DENSITY vectors per vector row and 128
        columns of K (its fixed cost per chunk pays off with many vectors per chunk), else the per-vector
        kernel. With B (autotune): the fastest measured of the per-vector kernel and the tiled kernel's two best a
        priori launch shapes (and cuSPARSE when allowed)."""
        V = self._dm.vector
        choice = Choice(kernel="cvse-vector", N=N, reason=f"SSpMM transpose mapping, V = {V} on the mma's n8, 64 "
                        "columns per warp", extra={"vector": V, "conversion": self.timings.get("conversion")})
        tiled = self._tiled(N)
        if tiled:
            T = self._tiles.group_ptr_host.shape[0] - 1
            per_segment = self._dm.n_vectors / max(T, 1)
            if per_segment * 128 / self._tiles.bk >= TILED_DENSITY:
                c = tiled[0]
                choice.update(kernel="cvse-tiled", warps=c["warps"], halves=c["halves"],
                              reason=(f"{per_segment:.1f} vectors per vector row and {self._tiles.bk}-column K "
                                      f"chunk: B's chunk staged once per block of {c['warps']} warps x "
                                      f"{64 * c['halves']} columns"))
        if B is None or self.autotune is False or (not tiled and not self.allow_cusparse):
            return choice
        candidates = {"cvse-vector": {}}
        for k, c in enumerate(tiled[:2]):  # the a priori shape under the kernel's own name (SpmmPlan reads it back)
            candidates["cvse-tiled" + ("" if k == 0 else f"/{c['warps']}w/{c['halves']}h")] = {
                "warps": c["warps"], "halves": c["halves"]}
        if self.allow_cusparse:
            candidates["cusparse"] = {}
        measured = {name: time_fn(name.split("/")[0], choice={**choice, **extra})
                    for name, extra in candidates.items()}
        best = min(measured, key=measured.get)
        choice.update(kernel=best.split("/")[0], measured_ms=measured, reason=f"autotune: fastest measured of "
                      f"{measured}", **candidates[best])
        return choice

    def bind(self, kernel: str, B, out, **kw):
        """The launch per call (kernels.formats.contract.PerCall): this operator has no packed form."""
        return PerCall(self, kernel, B, out, **kw)

    def launch(self, kernel: str, B, out, *, accumulate: bool = False, ksplit: int | None = None, choice=None):
        """``ksplit`` is SpmmPlan's common launch argument; CVSE has no split-K variant and ignores it. The tiled
        kernel takes its launch shape from ``choice`` (`decide`); off its 16-byte path (N % 8, or a B / out not
        16-byte aligned) or with no launch shape that fits shared memory the call runs the per-vector kernel, which
        takes any B."""
        if kernel not in ("cvse-vector", "cvse-tiled"):
            raise ValueError(f"unknown CVSE kernel {kernel!r} (cvse-vector, cvse-tiled)")
        shapes = []
        if kernel == "cvse-tiled" and self._tiles is not None and vector_path(int(B.shape[1]), 8, B, out):
            shapes = [choice] if choice and "warps" in choice else self._tiled(int(B.shape[1]))
        if shapes:
            return lc.spmm_tiled(self._dm, self._tiles, B, out, warps=shapes[0]["warps"],
                                 halves=shapes[0]["halves"], accumulate=accumulate)
        return lc.spmm(self._dm, B, out, accumulate=accumulate)


def cost_terms(stats, prec: Precision, N: int) -> dict:
    """What CVSE's kernels move (kernels.formats.ranking) at the V Sparse Vector Compression would choose from the
    statistics' vector counts: per vector V values and a column id; its B row meets ceil(V / 8) n8 mma tiles (the
    transpose mapping puts V on the n8 side), counted as that many rows of work; the heaviest vector row is one
    warp's critical path."""
    V, _ = choose(stats.nnz, stats.shape, {v: int(round(stats.vectors[v])) for v in PAPER_CANDIDATES})
    vectors = stats.vectors[V]
    return work_terms(stats, prec, N, a_bytes=vectors * (V * prec.itemsize + 4), b_rows=vectors * -(-V // 8),
                      hub_rows=stats.vectors_max[V])


def _nbytes(X, partptr, tile_ptr, item_ptr):
    """vec_ptr holds 16 / V entries per window (a bound for the last, partial one)."""
    return window_bytes(partptr * (WINDOW_ROWS // X.vector), tile_ptr, item_ptr,
                        offset_bytes=X.vec_ptr.dtype.itemsize,
                        tile_bytes=X.indices.dtype.itemsize + X.vector * X.data.dtype.itemsize)


def _halo(X, t0: int, t1: int) -> np.ndarray:
    return distinct_columns(X.shape[1], X.indices[t0:t1])


def _take(X, w0, w1, t0, t1, n_rows):
    i0 = min(w0 * (WINDOW_ROWS // X.vector), X.n_vec_rows)  # the shard's first vector row (a whole window's)
    return CVSE((int(n_rows), int(X.shape[1])), rebase(X.vec_ptr, i0, i0 + -(-int(n_rows) // X.vector)),
                X.indices[t0:t1], X.data[t0:t1])


def _remap(X, cols, local, n_local):
    """Columns ``cols[i]`` renamed ``local[i]``, width ``n_local``; vectors re-sorted within their vector rows when
    the map does not keep the columns' order."""
    n_local = int(n_local)
    idx = relabel(X.indices, int(X.shape[1]), cols, local)
    data = X.data
    if not keeps_order(cols, local):
        order = np.lexsort((idx, X.vec_row_of()))
        idx, data = idx[order], data[order]
    return CVSE((int(X.shape[0]), n_local), X.vec_ptr, idx.astype(index_dtype(n_local)), data)


def _split(X, keep_col, prec=None):
    keep = np.asarray(keep_col, dtype=bool)[X.indices.astype(np.int64)]
    nv = int(keep.sum())
    vec_ptr = np.zeros(X.n_vec_rows + 1, dtype=index_dtype(nv))
    np.cumsum(np.bincount(X.vec_row_of()[keep], minlength=X.n_vec_rows), out=vec_ptr[1:])
    return CVSE(X.shape, vec_ptr, X.indices[keep], X.data[keep])


CVSE_SHARD = ShardOps(
    "cvse", tiles=lambda X: X.window_ptr, items=lambda X, tp: np.asarray(tp, dtype=np.int64) * X.vector,
    nbytes=_nbytes, halo=_halo, take=_take, remap=_remap, any_order=True, split=_split)


def _layout():
    return BlockLayout(rows_per_group=WINDOW_ROWS, group_offset="window_ptr", item_offset="value_offset",
                       fixed={"indices": 0, "vec_row": 0}, ragged=("values",))


FORMAT = Format(
    name="cvse", summary="CVSE (VectorSparse SC'21, SSpMM TPDS'25): V x 1 column vectors sharing one column index; "
                         "SSpMM's transpose-mapped mma kernels",
    block_width={"float32": 8, "float16": 16, "bfloat16": 16}, convert=convert, concat=cvse_concat,
    layout=_layout(), from_arrays=cvse_from_arrays, reference_spmm=reference_spmm,
    stats=lambda X, csr_nbytes=None: cvse_stats(X, csr_nbytes), device="kernels.formats.cvse.plugin:CvseDevice",
    to_csr=cvse_to_csr, shard=CVSE_SHARD, cuda_sources=(lc.SPMM_SOURCE, lc.SDDMM_SOURCE),
    cuda_builds=(("default", lc.CVSE_CONFIG.defines()),),
    estimate=CostModel(cost_terms, {"launch": 1.673, "b_mb": 0.01243, "c_mb": 3.05, "hub_mb": 60.57,
                                    "hub_all_mb": 5.258}, source=FIT_SOURCE,
                       per_precision={"float32": {"launch": 0.4862, "b_mb": 0.07487, "c_mb": 1.378, "hub_mb": 151.2,
                                                  "hub_all_mb": 3.942}}),
    # tests/kernels/test_gpu_cvse.py passed on an H200 (session 6): every V, precision and edge case
    gpu_ready=True, sddmm=SDDMM)
