"""The Parquet block store: ``BlockStore(data_root)`` and one ``MatrixStore`` per matrix.

Layout under the data root (env ``TCSPMM_DATA``, default ``./data``)::

    matrices/<matrix_id>/manifest.json                       complete artifacts + checksums (storage.manifest)
    matrices/<matrix_id>/csr/part-<r0>-<r1>.parquet          canonical CSR, row-range blocks (storage.csr)
    matrices/<matrix_id>/perm/<key>.parquet                  permutations, perm[new] = old, int64
    matrices/<matrix_id>/formats/<fmt>/<perm_key>/part-<w0>-<w1>.parquet   converted formats (storage.formats)
    matrices/<matrix_id>/results/<run_id>/C-part-<r0>-<r1>.parquet         dense C (storage.results)
    runs/part-<timestamp>-<uuid>.parquet                     the runs table, append-only (storage.runs)

Contract of every ``write_*``: the artifact's entry is dropped from the manifest, its old files and stray temp
files are removed, each new file is written atomically, and the entry (with sizes and checksums) is added last.
A writer killed at any moment leaves the artifact "not complete" (``has_*`` False, ``read_*`` raises StorageError,
``read_perm`` returns None); writing it again repairs it. One writer per artifact at a time (``building(artifact)``,
a lock across processes); writers of different artifacts of one matrix may run concurrently. Disk full ->
StorageError, no partial file.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import fnmatch
import logging
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import scipy.sparse as sp

from configs.errors import InputError, StorageError
from storage import csr as csr_io
from storage import formats as fmt_io
from storage import parquet_io as pio
from storage import results as res_io
from storage import runs as runs_io
from storage.atomic import TEMP_PREFIX
from storage.manifest import Manifest
from storage.naming import default_data_root, validate_id
from storage.schemas import PERM_DIRECTION, file_meta, perm_schema, with_meta
from storage.writes import write_files

_PER_FILE_KEYS = ("range", "block_nnz")
_log = logging.getLogger(__name__)


class _MatrixManifest(Manifest):
    """A matrix's manifest whose ``require`` tells a matrix that was never stored ("not found", with the ids that
    are) from an artifact that is missing or damaged ("not complete")."""

    def require(self, name: str) -> dict:
        if not self.path.is_file():
            base = self.folder.parent
            stored = sorted(p.parent.name for p in base.glob("*/manifest.json")) if base.is_dir() else []
            listing = ", ".join(stored[:5]) + (f" and {len(stored) - 5} more" if len(stored) > 5 else "")
            raise StorageError(f"matrix '{self.matrix_id}' not found under {base} "
                               f"({'stored: ' + listing if stored else 'no matrix is stored there'}); "
                               f"run flows/spmm.py --matrix <spec> first, or check TCSPMM_DATA")
        return super().require(name)


class BlockStore:
    """The data root. ``matrix(id)`` opens one matrix's folder; ``append_runs``/``read_runs`` own the runs table."""

    def __init__(self, data_root: str | Path | None = None):
        self.root = default_data_root(data_root)

    def matrix(self, matrix_id: str) -> "MatrixStore":
        return MatrixStore(self.root, matrix_id)

    def matrices(self) -> list[str]:
        """Ids of matrices with a manifest."""
        base = self.root / "matrices"
        return sorted(p.parent.name for p in base.glob("*/manifest.json")) if base.is_dir() else []

    def append_runs(self, rows: list[dict]) -> Path | None:
        """Append rows (keys from ``storage.schemas.RUNS_SCHEMA``; ``extra`` a dict or JSON text; ``timestamp``
        defaults to now, UTC) as one new file. Safe under concurrent appenders."""
        return runs_io.append_runs(self.root, rows)

    def read_runs(self) -> pa.Table:
        return runs_io.read_runs(self.root)


class MatrixStore:
    """Artifacts of one matrix: CSR, permutations, formats, results. ``last_read`` holds the stats of the last
    row-range read (files opened, row groups decoded)."""

    def __init__(self, data_root: str | Path, matrix_id: str):
        self.matrix_id = validate_id(matrix_id, "matrix_id")
        self.folder = Path(data_root) / "matrices" / matrix_id
        self.manifest = _MatrixManifest(self.folder, matrix_id)
        self.last_read: dict = {}

    # ---- artifact lifecycle -------------------------------------------------------------------------------------
    def _clear(self, home: Path, pattern: str, keep: set[str] = frozenset()) -> None:
        if not home.is_dir():
            return
        for path in home.iterdir():
            own = fnmatch.fnmatch(path.name, pattern) or fnmatch.fnmatch(path.name, TEMP_PREFIX + pattern + "*")
            if own and path.is_file() and path.name not in keep:
                path.unlink(missing_ok=True)

    def _write_artifact(self, name: str, kind: str, home: str, pattern: str,
                        parts: Iterable[tuple[str, tuple, pa.Table]], *, threads: int | None = 1,
                        **write_kw) -> dict:
        """``threads``: files written at once (`storage.writes.write_files`; 1 streams ``parts``, the default for
        blocks built one by one; None for views of an array in memory, such as the dense writers')."""
        home_dir = self.folder / home
        with self.manifest.update() as m:
            m["artifacts"].pop(name, None)
        self._clear(home_dir, pattern)
        last: dict = {}

        def in_home():
            for rel, rng, table in parts:
                last["meta"] = file_meta(table.schema)
                yield f"{home}/{rel}", rng, table
        records = write_files(self.folder, in_home(), threads=threads, **write_kw)
        meta = {k: v for k, v in last.get("meta", {}).items() if k not in _PER_FILE_KEYS}
        entry = {"kind": kind, "meta": meta, "files": records,
                 "written_at": dt.datetime.now(dt.timezone.utc).isoformat()}
        with self.manifest.update() as m:
            self._clear(home_dir, pattern, keep={Path(r["path"]).name for r in records})
            m["artifacts"][name] = entry
        return entry

    @contextlib.contextmanager
    def building(self, artifact: str) -> Iterator[None]:
        """Hold the exclusive right to build ``artifact`` (an ``fcntl.flock`` on ``locks/<artifact>.lock``, released
        when the holder exits, however it exits). Builders check for the artifact again once inside: a second run
        of the same matrix waits for the first's permutation or conversion and reuses it instead of computing it."""
        lock_path = self.folder / "locks" / (artifact.replace("/", "--") + ".lock")
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def intact(self, artifact: str) -> bool:
        """Complete and every file's sha256 as written: what a stage may reuse. A damaged artifact (a block whose
        bytes changed after it was written) is reported as a warning and counts as missing, so it is rebuilt."""
        if self.manifest.complete(artifact) is None:
            return False
        problems = self.verify(artifact)
        if problems:
            _log.warning("%s: %s; rebuilding it from its source", artifact, problems[0])
        return not problems

    def verify(self, artifact: str) -> list[str]:
        """Full check of one artifact (sha256 of each file): the list of problems, empty when intact."""
        return self.manifest.verify(artifact)

    def artifacts(self) -> list[str]:
        """Names of the artifacts the manifest lists (complete or not on disk)."""
        return sorted(self.manifest.read()["artifacts"])

    # ---- CSR ----------------------------------------------------------------------------------------------------
    def write_csr(self, csr, meta: dict | None = None, *, max_block_nnz: int = csr_io.DEFAULT_MAX_BLOCK_NNZ,
                  max_block_rows: int = csr_io.DEFAULT_MAX_BLOCK_ROWS,
                  row_group_size: int = pio.DEFAULT_ROW_GROUP_SIZE) -> dict:
        """Store a scipy sparse matrix (converted with ``tocsr()`` if not CSR) as row-range blocks.

        Indices are stored in ``index_dtype(max(shape), nnz)``, values in their own dtype, in-row order as given.
        ``meta`` (source_url, sha256, ...) is copied into every file and the manifest. Returns the manifest entry.
        """
        if not sp.issparse(csr) or len(csr.shape) != 2:
            raise InputError(f"write_csr needs a 2-D scipy sparse matrix, got {type(csr).__name__}")
        A = csr if csr.format == "csr" else csr.tocsr()
        bounds = csr_io.plan_blocks(A.indptr, max_block_nnz, max_block_rows)
        parts = csr_io.block_tables(A.indptr, A.indices, A.data, A.shape, bounds, meta or {})
        return self._write_artifact("csr", "csr", "csr", "part-*.parquet", parts,
                                    row_group_size=row_group_size, encodings=csr_io.encodings())

    def has_csr(self) -> bool:
        return self.manifest.complete("csr") is not None

    def csr_meta(self) -> dict:
        """shape, nnz, dtypes, block ranges and the caller's ``source`` meta (StorageError if not complete)."""
        return self.manifest.require("csr")["meta"]

    def read_coo(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(row, col, data)`` of every nonzero in row order; indices in the stored index dtype."""
        return csr_io.read_coo(self.folder, self.manifest.require("csr"))

    def read_csr(self) -> sp.csr_array:
        """The whole matrix as ``scipy.sparse.csr_array``, bit-exact: dtypes, shape, in-row order as written."""
        entry = self.manifest.require("csr")
        row, col, data = csr_io.read_coo(self.folder, entry)
        shape = tuple(entry["meta"]["shape"])
        indptr = csr_io.indptr_from_rows(row, shape[0], col.dtype)
        return sp.csr_array((data, col, indptr), shape=shape, copy=False)

    def read_edge_index(self) -> np.ndarray:
        """PyG-style ``edge_index`` [2, nnz] int64 for message passing ``out = A @ x``: row 0 = source = column
        index j, row 1 = destination = row index i of each nonzero A[i, j] (PyG's ``flow="source_to_target"``).
        ``edge_index[:, k]`` pairs with ``read_coo()[2][k]`` (edge weights)."""
        row, col, _ = self.read_coo()
        out = np.empty((2, len(row)), dtype=np.int64)
        out[0], out[1] = col, row
        return out

    def read_csr_rows(self, r0: int, r1: int) -> sp.csr_array:
        """Rows [r0, r1) as a ``csr_array`` of shape (r1 - r0, n_cols), reading only the blocks whose row range
        overlaps and only their overlapping row groups (stats in ``self.last_read``)."""
        entry = self.manifest.require("csr")
        n_rows, n_cols = entry["meta"]["shape"]
        r0, r1 = int(r0), int(r1)
        if not 0 <= r0 <= r1 <= n_rows:
            raise InputError(f"row range [{r0}, {r1}) is outside the matrix's {n_rows} rows")
        indptr, indices, data, self.last_read = csr_io.read_rows(self.folder, entry, r0, r1)
        return sp.csr_array((data, indices, indptr), shape=(r1 - r0, n_cols), copy=False)

    # ---- permutations -------------------------------------------------------------------------------------------
    def write_perm(self, key: str, perm, meta: dict | None = None) -> dict:
        """Store ``perm`` (``perm[new] = old``, a permutation of range(n), stored int64) under ``key`` (see
        ``storage.perm_key``). ``meta`` may carry ``method`` and ``params``; it is kept whole under ``source``."""
        validate_id(key, "perm key")
        perm = np.asarray(perm)
        if perm.ndim != 1 or perm.dtype.kind not in "iu":
            raise InputError(f"perm must be a 1-D integer array, got shape {perm.shape} dtype {perm.dtype}")
        n = len(perm)
        if n and (perm.min() < 0 or perm.max() >= n or np.bincount(perm, minlength=n).max() != 1):
            raise InputError(f"perm '{key}' is not a permutation of range({n})")
        meta = dict(meta or {})
        file_m = {"format": "perm", "direction": PERM_DIRECTION, "n": n, "shape": [n],
                  "method": meta.get("method", key.rsplit("-", 1)[0]), "params": meta.get("params", {}),
                  "dtypes": {"perm": "int64"}, "range": [0, n], "ranges": [[0, n]], "source": meta}
        table = pa.Table.from_arrays([pa.array(perm.astype(np.int64, copy=False))],
                                     schema=with_meta(perm_schema(), file_m))
        return self._write_artifact(f"perm/{key}", "perm", "perm", f"{key}.parquet",
                                    [(f"{key}.parquet", (0, n), table)])

    def has_perm(self, key: str) -> bool:
        return self.manifest.complete(f"perm/{validate_id(key, 'perm key')}") is not None

    def perm_meta(self, key: str) -> dict:
        return self.manifest.require(f"perm/{validate_id(key, 'perm key')}")["meta"]

    def read_perm(self, key: str) -> np.ndarray | None:
        """The stored permutation (int64, ``perm[new] = old``), or None when it is not complete."""
        entry = self.manifest.complete(f"perm/{validate_id(key, 'perm key')}")
        if entry is None:
            return None
        table = pio.read(pio.open_file(self.folder / entry["files"][0]["path"]))
        return pio.numpy_column(table, "perm", np.int64)

    # ---- converted formats --------------------------------------------------------------------------------------
    def write_format(self, fmt: str, perm_key: str, arrays, meta: dict | None = None, window_ranges=None, *,
                     max_block_nnz: int = csr_io.DEFAULT_MAX_BLOCK_NNZ,
                     max_block_rows: int = csr_io.DEFAULT_MAX_BLOCK_ROWS) -> dict:
        """Store a tiled format (dict of its layout's arrays, or an object with those attributes) as window shards.

        ``window_ranges``: a partptr over windows ``[0, w1, ..., n_windows]`` or ``[(w0, w1), ...]``: one file per
        non-empty shard. None: shards bounded by ``max_block_nnz`` nonzeros and ``max_block_rows`` rows.
        """
        validate_id(fmt, "format")
        validate_id(perm_key, "perm key")
        lay = fmt_io.layout_of(fmt)
        names = (lay.group_offset, lay.item_offset, *lay.fixed, *lay.ragged, "shape")
        arrays = arrays if isinstance(arrays, dict) else {n: getattr(arrays, n) for n in names}
        gofs, _ = fmt_io.check_arrays(arrays, lay)
        if window_ranges is None:
            shards = fmt_io.auto_shards(arrays, lay, max_block_nnz, max_block_rows)
        else:
            shards = fmt_io.shard_ranges(window_ranges, len(gofs) - 1)
        parts = fmt_io.format_tables(fmt, arrays, lay, shards, meta or {})
        # 8192 tiles (~100-300K nonzeros) per row group: a few-window read decodes little
        return self._write_artifact(f"formats/{fmt}/{perm_key}", "format", f"formats/{fmt}/{perm_key}",
                                    "part-*.parquet", parts, row_group_size=fmt_io.ROW_GROUP_TILES)

    def has_format(self, fmt: str, perm_key: str) -> bool:
        return self.manifest.complete(self._fmt_name(fmt, perm_key)) is not None

    def format_meta(self, fmt: str, perm_key: str) -> dict:
        """shape, nnz, n_tiles, n_windows, dtypes, shard ranges, caller's ``source`` meta."""
        return self.manifest.require(self._fmt_name(fmt, perm_key))["meta"]

    def read_format(self, fmt: str, perm_key: str, w0: int | None = None, w1: int | None = None) -> dict:
        """Arrays of windows [w0, w1) (default all), offsets rebuilt from 0 (see ``storage.formats.read_format``)."""
        entry = self.manifest.require(self._fmt_name(fmt, perm_key))
        return fmt_io.read_format(self.folder, entry, fmt_io.layout_of(fmt), w0, w1)

    @staticmethod
    def _fmt_name(fmt: str, perm_key: str) -> str:
        return f"formats/{validate_id(fmt, 'format')}/{validate_id(perm_key, 'perm key')}"

    # ---- results ------------------------------------------------------------------------------------------------
    def write_result(self, run_id: str, C, block_rows: int | None = None, meta: dict | None = None) -> dict:
        """Store dense C [n_rows, N] in row blocks of ``block_rows`` rows (default: about 2**24 values each)."""
        validate_id(run_id, "run_id")
        C = np.asarray(C)
        return self._write_artifact(f"results/{run_id}", "result", f"results/{run_id}", "C-part-*.parquet",
                                    res_io.result_tables(C, block_rows, meta or {}), threads=None,
                                    **res_io.write_options(C.dtype, C.shape[-1] if C.ndim else 1))

    def has_result(self, run_id: str) -> bool:
        return self.manifest.complete(f"results/{validate_id(run_id, 'run_id')}") is not None

    def read_result(self, run_id: str, perm=None) -> np.ndarray:
        """Stored C; ``perm`` (``perm[new] = old``): C was stored in the reordered row order, return it in the
        original one (``out[perm] = C_stored``, rows put in place as they are decoded)."""
        entry = self.manifest.require(f"results/{validate_id(run_id, 'run_id')}")
        return res_io.read_dense(self.folder, entry, perm=perm)[0]

