"""tcspmm's public entry: ``import tcspmm``.

    plan = tcspmm.SpmmPlan(A, dtype="float32")     # convert, upload, select a kernel once
    C = plan.run(B)                                # per call; tcspmm.spmm(A, B) does both
    A = tcspmm.load_csr("igb.tiny")                # what the pipeline stored (data root: TCSPMM_DATA or ./data)
    edge_index = tcspmm.load_edge_index("igb.tiny")

Everything here is re-exported from the project's top-level packages (``kernels``, ``storage``), which are still
installed under their own names: moving them under ``tcspmm.`` would rewrite every import in the tree (README,
"Installed names"). Code outside the project should import from ``tcspmm`` only; the rest is internal.
"""
from __future__ import annotations

from kernels.spmm import SpmmPlan, gpu_available, spmm
from storage import BlockStore, load_csr, load_edge_index, load_node_array

__version__ = "0.1.0"
__all__ = ["SpmmPlan", "spmm", "gpu_available", "BlockStore", "load_csr", "load_edge_index", "load_node_array",
           "__version__"]
