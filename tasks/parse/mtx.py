"""MatrixMarket reader: ``fast_matrix_market`` (C++) for the text, vectorized NumPy for the rest.

Accepts ``coordinate`` and ``array``; ``real``, ``integer``, ``pattern`` and (with ``complex_mode``) ``complex``;
``general``, ``symmetric``, ``skew-symmetric``, ``hermitian``. Contract of ``read_mtx``:

- Symmetric files store one triangle; the other is added (skew-symmetric negated, hermitian conjugated). A file
  that stores entries on both sides of the diagonal under a symmetric banner is an error (it would double them).
- Duplicates are summed; explicit zeros are kept. ``array`` files keep their nonzero values only (a dense file has
  no explicit entries to keep).
- ``complex_mode=None`` refuses complex files; ``'real'`` keeps the real part, ``'abs'`` the modulus (after
  hermitian expansion).
- Indices are checked against the header (1-based); a missing or extra entry, a bad banner, a truncated file or
  a malformed number raises ``InputError`` with one line ``<label> line <n>: <problem>``.
- Data is float64 (real, integer, complex converted) or float32 (pattern); index dtype per ``index_dtype``.
- The header's size is checked against the memory limit (``tasks.parse.sizes``) before anything is read.
- A ``pattern`` file whose entries carry values is refused (they would be dropped).
- NaN and Inf values are refused with their count and the first one's line, row and column, unless
  ``allow_nonfinite``; ``nonfinite_entries`` counts them either way.

``nonzero_entries`` counts stored entries with a nonzero value after expansion and duplicate summing but before
any complex conversion: the number SuiteSparse's ``ssstats.csv`` calls ``nnz``.
"""
from __future__ import annotations

import dataclasses
import itertools
import re
from pathlib import Path
from typing import Literal

import fast_matrix_market as fmm
import numpy as np
import scipy.sparse as sp

from configs.errors import InputError
from configs.limits import Limits
from tasks.parse.csr import coo_to_csr
from tasks.parse.sizes import check_csr_memory

ComplexMode = Literal["real", "abs"] | None
COMPLEX_MODES = ("real", "abs")
_FMM_LINE = re.compile(r"^Line (\d+): (.*)$")
_FMM_SHORT = re.compile(r"^Truncated file\. Expected another (\d+) (?:lines|values)")


@dataclasses.dataclass(frozen=True)
class MtxMatrix:
    csr: sp.csr_array
    format: str
    field: str
    symmetry: str
    nonzero_entries: int
    nonfinite_entries: int = 0


def read_mtx(path: Path, label: str, *, complex_mode: ComplexMode = None, parallelism: int = 1,
             allow_nonfinite: bool = False, limits: Limits | None = None) -> MtxMatrix:
    """Read ``path`` into canonical CSR; errors name ``label`` (e.g. ``HB/bcsstk17.mtx``) and the line."""
    if complex_mode not in (None, *COMPLEX_MODES):
        raise InputError(f"{label}: complex_mode must be None, 'real' or 'abs', got {complex_mode!r}")
    try:
        header = fmm.read_header(str(path))
    except (ValueError, RuntimeError) as err:
        raise _translate(err, path, label, None) from None
    fmt, field, symmetry = header.format, header.field, header.symmetry
    if field == "complex" and complex_mode is None:
        raise InputError(f"{label} is complex; pass complex_mode='real'|'abs' to convert")
    _check_header_size(header, label, limits)
    if fmt == "coordinate" and field == "pattern":
        _check_pattern_entries(path, label)
    try:
        if fmt == "array":
            dense = fmm.read_array(str(path), parallelism=parallelism)
            rows, cols = np.nonzero(dense)
            data, shape = dense[rows, cols], dense.shape
        else:
            (data, (rows, cols)), shape = fmm.read_coo(str(path), parallelism=parallelism,
                                                        generalize_symmetry=False)
    except (ValueError, RuntimeError) as err:
        raise _translate(err, path, label, header) from None
    shape = (int(shape[0]), int(shape[1]))
    nonfinite = 0
    if field != "pattern":
        nonfinite = int(data.size - np.count_nonzero(np.isfinite(data)))
        if nonfinite and not allow_nonfinite:
            raise _nonfinite_error(path, label, fmt, rows, cols, data, nonfinite)
    if fmt != "array" and symmetry != "general":
        rows, cols, data = _expand(rows, cols, data, symmetry, label)
    if field == "pattern":
        data = data.astype(np.float32, copy=False)
    elif field == "integer":
        data = data.astype(np.float64, copy=False)
    A = coo_to_csr(rows, cols, data, shape)
    nonzero = int(np.count_nonzero(A.data))
    if field == "complex":
        A.data = np.abs(A.data) if complex_mode == "abs" else A.data.real.copy()
    return MtxMatrix(A, fmt, field, symmetry, nonzero, nonfinite)


PATTERN_LINES_CHECKED = 1000


def _check_pattern_entries(path: Path, label: str) -> None:
    """A ``pattern`` file lists row and column only; one whose entries carry a third token (a value) is mislabeled,
    and the reader would drop the values without a word: refuse it, naming the first such line. The first
    `PATTERN_LINES_CHECKED` entries are read (a mislabeled file carries values on every line)."""
    with open(path, "rb") as f:
        lines = enumerate(f, start=1)
        for number, line in lines:  # the banner, comments, then the size line
            if not line.startswith(b"%") and line.strip():
                break
        for number, line in itertools.islice(lines, PATTERN_LINES_CHECKED):
            tokens = line.split()
            if len(tokens) > 2 and not line.startswith(b"%"):
                raise InputError(f"{label} line {number}: the header says 'pattern' (row and column only) but the "
                                 f"entry carries a value ({b' '.join(tokens).decode(errors='replace')!r}); declare "
                                 f"its field 'real' or 'integer' to keep the values, or remove them")


def _check_header_size(header, label: str, limits: Limits | None) -> None:
    """Refuse before reading when the declared size would not fit: symmetric files may double their entries, and
    an ``array`` file holds every value densely while it is read."""
    value_bytes = 16 if header.field == "complex" else 8
    shape = (int(header.nrows), int(header.ncols))
    if header.format == "array":
        dense = shape[0] * shape[1]
        check_csr_memory(label, shape, dense, value_bytes, limits, extra_bytes=dense * value_bytes)
    else:
        entries = int(header.nnz) * (1 if header.symmetry == "general" else 2)
        check_csr_memory(label, shape, entries, value_bytes, limits)


def _nonfinite_error(path: Path, label: str, fmt: str, rows, cols, data, count: int) -> InputError:
    """One line: how many values are NaN or Inf and where the first one is (line, row, column; 1-based)."""
    k = int(np.flatnonzero(~np.isfinite(data))[0])
    r, c = int(rows[k]) + 1, int(cols[k]) + 1
    where = f"row {r}, column {c}"
    if fmt == "coordinate":
        lineno = _data_start_line(path) + k
        tokens = _line(path, lineno).split()
        if tokens[:2] == [str(r), str(c)]:  # no blank line before it: the line number is exact
            where = f"line {lineno}, {where}"
    value = data[k]
    shown = str(value.real) if np.iscomplexobj(data) and not np.isfinite(value.real) else str(value)
    plural = "s are" if count > 1 else " is"
    return InputError(f"{label}: {count:,} value{plural} not finite (NaN or Inf), the first at {where} ({shown}); "
                      f"pass --allow-nonfinite to keep them")


def _data_start_line(path: Path) -> int:
    """1-based number of the first entry line: after the banner, comments, blank lines and the size line."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            text = raw.strip()
            if text and not text.startswith(b"%"):
                return lineno + 1
    return 1


def _expand(rows: np.ndarray, cols: np.ndarray, data: np.ndarray, symmetry: str, label: str):
    """Add the mirrored triangle; refuse files that store both triangles or a nonzero skew diagonal."""
    below, above = rows > cols, rows < cols
    if below.any() and above.any():
        k = int(np.flatnonzero(above)[0]) if np.count_nonzero(above) <= np.count_nonzero(below) \
            else int(np.flatnonzero(below)[0])
        raise InputError(f"{label}: {symmetry} file stores both triangles (entry {k + 1} at row {rows[k] + 1}, "
                         f"column {cols[k] + 1}); a symmetric file stores one")
    diagonal = ~(below | above)
    if symmetry == "skew-symmetric" and np.any(data[diagonal] != 0):
        k = int(np.flatnonzero(diagonal & (data != 0))[0])
        raise InputError(f"{label}: skew-symmetric file has a nonzero diagonal entry at row {rows[k] + 1}")
    off = ~diagonal
    mirrored = data[off]
    if symmetry == "skew-symmetric":
        mirrored = -mirrored
    elif symmetry == "hermitian":
        mirrored = np.conj(mirrored)
    return (np.concatenate((rows, cols[off])), np.concatenate((cols, rows[off])),
            np.concatenate((data, mirrored)))


def _translate(err: Exception, path: Path, label: str, header) -> InputError:
    """Turn a fast_matrix_market message into ours: the line, the observed value and the expectation."""
    text = " ".join(str(err).split())
    short = _FMM_SHORT.match(text)
    if short and header is not None:
        declared = header.nnz if header.format == "coordinate" else header.nrows * header.ncols
        unit = "entries" if header.format == "coordinate" else "values"
        found = declared - int(short.group(1))
        return InputError(f"{label}: {found} {unit}, the header declares {declared} (file truncated?)")
    match = _FMM_LINE.match(text)
    if not match:
        return InputError(f"{label}: {text}")
    lineno, problem = int(match.group(1)), match.group(2)
    line = _line(path, lineno)
    if "Missing banner" in problem:
        return InputError(f"{label} line 1: bad MatrixMarket banner {line[:60]!r}; expected "
                          f"'%%MatrixMarket matrix coordinate|array <field> <symmetry>'")
    if "index out of bounds" in problem and header is not None:
        which = "row" if problem.startswith("Row") else "column"
        limit = header.nrows if which == "row" else header.ncols
        tokens = line.split()
        value = tokens[0 if which == "row" else 1] if len(tokens) > 1 else "?"
        if value.lstrip("-").isdigit() and int(value) < 1:
            return InputError(f"{label} line {lineno}: {which} index {value} is below 1 (indices are 1-based)")
        return InputError(f"{label} line {lineno}: {which} index {value} exceeds the declared {limit} {which}s")
    if "Too many" in problem and header is not None:
        declared = header.nnz if header.format == "coordinate" else header.nrows * header.ncols
        return InputError(f"{label} line {lineno}: more entries than the {declared} the header declares")
    if "Invalid" in problem and "value" in problem and _ends_mid_line(path, lineno):
        return InputError(f"{label} line {lineno}: file ends in the middle of an entry ({line!r}; truncated?)")
    shown = f" in {line[:60]!r}" if line else ""
    problem = problem.rstrip(".")
    return InputError(f"{label} line {lineno}: {problem[0].lower() + problem[1:]}{shown}")


def _line(path: Path, lineno: int) -> str:
    """Line ``lineno`` (1-based) of ``path``, decoded leniently; '' when there is no such line. Error path only."""
    try:
        with open(path, "rb") as f:
            raw = next(itertools.islice(f, lineno - 1, lineno), b"")
    except OSError:
        return ""
    return raw.decode("utf-8", errors="replace").rstrip("\r\n")


def _ends_mid_line(path: Path, lineno: int) -> bool:
    """True when ``lineno`` is the file's last line and the file does not end with a newline."""
    try:
        with open(path, "rb") as f:
            count = sum(1 for _ in f)
            f.seek(-1, 2)
            last = f.read(1)
    except OSError:
        return False
    return count == lineno and last not in (b"\n", b"\r")
