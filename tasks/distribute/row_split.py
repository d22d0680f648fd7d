"""The boundary-first row split of a resident shard (the "rows" overlap of `tasks.distribute.resident`).

Shard k's own rows split in two: the boundary rows, those some peer receives (the union of k's ``sends``), and the
interior rows, all the others. Each part gets its own plan over just its rows (`kernels.formats.shard.csr_rows`:
any registered format, exact), so every row of C is computed once, by one kernel, with no accumulate pass. C of a
split iteration is kept in the split order, ``C_split[j] = C[rows[j]]`` with ``rows`` = [boundary rows ascending |
interior rows ascending], so the boundary kernel writes the contiguous slice ``C_split[:n_bnd]`` and the interior
kernel ``C_split[n_bnd:]``.

Only C is renumbered. B's own rows stay in their natural order inside the extended B, so A's columns, the ``sends``
and ``recv`` layouts and the peers are untouched and each part's rows keep exactly the columns (and column order)
they have in the whole shard: on the CPU path a row's product is bitwise the plain loop's, and on the GPU each row
keeps the column locality of the shard's order. The price is that C -> B (`store`) is a row scatter,
``B_own[rows] = C_split``, instead of a contiguous copy: the same bytes (read C, write B) plus one int64 per row,
which at N = 256 is 1/128 of a float32 row. Renumbering B's own rows as well would make that copy contiguous but
would rename A's columns (re-sorting each row's columns: no longer bitwise on the CPU path) and every peer's
receive order. Plain NumPy / CuPy; no Dask.
"""
from __future__ import annotations

import numpy as np

from tasks.distribute import device as dev


class RowSplit:
    """Shard ``S``'s rows split into boundary (rows the peers receive) and interior rows, a plan for each.

    - ``rows`` int64 [n_own]: own rows in the split order (``C_split[j] = C[rows[j]]``); ``n_bnd`` boundary rows;
    - ``pos`` int64 [n_own]: the inverse, ``pos[rows[j]] = j`` (where natural row i sits in ``C_split``);
    - ``plan_bnd`` / ``plan_int``: plans of S's boundary / interior rows (an empty part: a zero-fill plan).
    ``sends``: {peer: own rows it receives (host int arrays)}.
    """

    def __init__(self, S, sends: dict, prec, on_gpu: bool, spmm_kw: dict | None = None):
        from kernels.formats.shard import csr_rows
        n_own = int(S.shape[0])
        bnd = np.zeros(n_own, dtype=bool)
        for idx in sends.values():
            bnd[np.asarray(idx, dtype=np.int64)] = True
        self.n_own, self.n_bnd = n_own, int(np.count_nonzero(bnd))
        self.rows = np.concatenate([np.flatnonzero(bnd), np.flatnonzero(~bnd)]).astype(np.int64)
        self.pos = np.empty(n_own, dtype=np.int64)
        self.pos[self.rows] = np.arange(n_own, dtype=np.int64)
        self.prec, self.on_gpu = prec, on_gpu
        parts = (csr_rows(S, self.rows[:self.n_bnd], prec), csr_rows(S, self.rows[self.n_bnd:], prec))
        self.plan_bnd, self.plan_int = (dev.make_spmm_plan(p, on_gpu, prec.name, spmm_kw=spmm_kw) for p in parts)
        rows_dev = dev.to_device(self.rows, on_gpu)
        self._rows = {"boundary": rows_dev[:self.n_bnd], "interior": rows_dev[self.n_bnd:], None: rows_dev}
        self._slices = {"boundary": slice(0, self.n_bnd), "interior": slice(self.n_bnd, n_own)}

    def kernels(self) -> str:
        return f"{self.plan_bnd.choice.get('kernel')}+{self.plan_int.choice.get('kernel')}"

    def run(self, part: str, B_in, C_split):
        """``C_split``'s slice of ``part`` ("boundary" or "interior") = that part's rows of A_k @ ``B_in``, on the
        current stream (a bound call, CUDA-graph replayed from its third call on the same buffers)."""
        plan = self.plan_bnd if part == "boundary" else self.plan_int
        return plan.run(B_in, C_split[self._slices[part]])

    def store(self, B_own, C_split, part: str | None = None) -> None:
        """Own rows of B (natural order) <- ``C_split`` rounded to the precision: the rows of ``part``, or all."""
        src = C_split if part is None else C_split[self._slices[part]]
        dev.scatter_rows(dev.to_storage(src, self.prec), self._rows[part], B_own)

    def natural(self, C_split) -> np.ndarray:
        """Host C in the natural row order from ``C_split`` (host or device)."""
        Ch = dev.to_host(C_split)
        out = np.empty_like(Ch)
        out[self.rows] = Ch
        return out

    def info(self) -> dict:
        return {"boundary_rows": self.n_bnd, "interior_rows": self.n_own - self.n_bnd}

    def release(self) -> None:
        self.plan_bnd = self.plan_int = None
        self._rows = {}
