"""The operator every plan may hold besides its formats' own, under the device-operator contract
(``kernels.formats.contract``): cuSPARSE's CSR SpMM (`CusparseOperator`, kernel "cusparse": a candidate of a plan
that need not be deterministic). It runs on A as CSR and builds its device state on first use, so a plan that never
times it pays nothing. `BASELINES` is what `SpmmPlan` builds. (The deterministic CUDA-core CSR kernel is a format,
kernels/formats/csr/.)
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from kernels.cusparse import CusparseSpmm
from kernels.formats.contract import Choice


class CusparseOperator:
    """cuSPARSE generic SpMM on A's CSR in the plan's precision (kernels.cusparse.CusparseSpmm, algorithm tuned
    per N on first use). Writes C in B's storage type (``out_dtype``)."""

    format_name, kernels, config = "csr", ("cusparse",), None
    out_dtype = None  # per instance: the precision's storage dtype (C in B's type)
    summary = "cuSPARSE CSR SpMM, not bitwise repeatable"

    def __init__(self, csr_of, precision):
        self._csr_of, self.precision, self._op = csr_of, precision, None
        self.out_dtype = precision.storage_dtype
        self.timings: dict = {}

    def _get(self):
        if self._op is None:
            csr = self._csr_of()
            if self.precision.name == "bfloat16" and csr.dtype == np.uint16:
                csr = sp.csr_array((self.precision.to_float32(csr.data), csr.indices, csr.indptr), shape=csr.shape)
            self._op = CusparseSpmm(csr, dtype=self.precision.name)
        return self._op

    def decide(self, N: int, B, time_fn) -> Choice:
        return Choice(kernel="cusparse", N=N, format=self.format_name, reason=self.summary)

    def launch(self, kernel: str, B, out, *, accumulate: bool = False, ksplit=None, choice=None):
        op = self._get()
        if B.shape[1] not in op.best:
            op.tune(B)  # into a scratch C: out may hold what accumulate adds to
        return op.run(B, out, accumulate=accumulate)

    def bind(self, kernel: str, B, out, *, accumulate: bool = False, ksplit=None, choice=None):
        return self._get().bind(B, out, accumulate=accumulate)


BASELINES = (CusparseOperator,)
