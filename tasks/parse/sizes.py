"""Memory estimates for matrices whose size comes from outside, checked before anything is allocated from them.

The canonical CSR (docs/architecture.md) has one offset per row, so a header that declares 3e9 rows needs 24 GB for
``indptr`` alone, whatever its entry count: such a matrix is refused with one line naming the size and the memory
(``configs.limits.check_memory``), never allocated and killed by the OOM killer. Per-column arrays are never built
from a declared size (a 7 x 3e9 matrix with 20 entries is fine).
"""
from __future__ import annotations

from configs.limits import Limits, check_memory

INDEX_BYTES = 8  # int64, the widest index dtype ``storage.indexing.index_dtype`` picks


def csr_parse_bytes(n_rows: int, entries: int, value_bytes: int = 8) -> int:
    """Peak bytes to read ``entries`` coordinates and build the canonical CSR: the COO triples (two int64 indices
    and a value), SciPy's CSR beside them (index and value per entry, ``indptr`` per row) and one more per-row
    array for the conversion's row counts."""
    n_rows, entries = max(int(n_rows), 0), max(int(entries), 0)
    coo = entries * (2 * INDEX_BYTES + value_bytes)
    csr = entries * (INDEX_BYTES + value_bytes) + (n_rows + 1) * INDEX_BYTES
    return coo + csr + (n_rows + 1) * INDEX_BYTES


def describe(shape: tuple[int, int], entries: int) -> str:
    return f"a {int(shape[0]):,} x {int(shape[1]):,} matrix with {int(entries):,} entries (as CSR, one offset per row)"


def check_csr_memory(label: str, shape: tuple[int, int], entries: int, value_bytes: int = 8,
                     limits: Limits | None = None, extra_bytes: int = 0) -> None:
    """Refuse ``label`` when parsing a ``shape`` matrix with ``entries`` entries would pass the memory limit.
    ``extra_bytes``: what the source needs beside the CSR (a dense array file's values, a generator's draws)."""
    need = csr_parse_bytes(shape[0], entries, value_bytes) + int(extra_bytes)
    check_memory(label, describe(shape, entries), need, limits)
