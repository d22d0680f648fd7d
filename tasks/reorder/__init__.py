"""Row reordering for Tensor-Core SpMM. Every method returns ``perm`` with ``perm[new] = old`` (int64, a
permutation of range(n_rows)); the reordered matrix is ``A[perm]`` and C goes back by ``C[perm] = C_reordered``.

Plain modules: `api` (reorder, reorder_checked, auto_reorder), `tca`, `minhash`, `greedy` (rowshuffle, jaccard),
`simple` (rcm, degree, none), `sharded` (TCA block functions on a Dask client that the caller passes in).
"""
from tasks.reorder.api import METHODS, auto_reorder, reorder, reorder_checked

__all__ = ["METHODS", "auto_reorder", "reorder", "reorder_checked"]
