"""GCN normalisation of an adjacency ``A[dst, src]`` (SciPy, no torch): ``gcn_norm`` (``D^-1/2 (A + I) D^-1/2``)
and ``with_self_loops``. They live in tasks.normalize, where the stage that stores a matrix's GCN variant
(tasks.features.gcn_variant) uses them too: tasks/ is below gnn/ and imports nothing from it."""
from __future__ import annotations

from tasks.normalize import gcn_norm, with_self_loops

__all__ = ["gcn_norm", "with_self_loops"]
