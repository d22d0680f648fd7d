"""What the two block-format cuSPARSE baselines share (kernels/cusparse_bsr.py, kernels/cusparse_bell.py): A held
in b x b blocks with rows and columns padded to multiples of b, B and C passed already padded, and one cusparseSpMM
per call on arguments bound once per (B, C) pair through nvmath-python's bindings (kernels.cusparse)."""
from __future__ import annotations

import numpy as np

from kernels.cusparse import CUDA_R_32F, VALUE_TYPES, DescriptorOwner, bindings, checked


class PaddedBlockSpmm(DescriptorOwner):
    """Base of a block-format baseline. A subclass sets ``ALGORITHM`` (cusparseSpMMAlg_t value) and ``ALGORITHM_NAME``,
    calls ``_setup`` first in its ``__init__``, then sets ``padded_shape`` and ``descr_a``."""

    ALGORITHM: int
    ALGORITHM_NAME: str

    def _setup(self, dtype: str) -> None:
        import cupy

        ncs = bindings()
        self.dtype, self._ncs, self._cupy, self.descr_a = dtype, ncs, cupy, 0
        self._per_n: dict = {}  # (B ptr, C ptr, N) -> {"b", "c": descriptors, "buf", "args": sp_mm's arguments}
        self._ctype, self._np_dtype = VALUE_TYPES[dtype]
        self._op, self._order = int(ncs.Operation.NON_TRANSPOSE), int(ncs.Order.ROW)
        self._alpha, self._beta = np.ones(1, np.float32), np.zeros(1, np.float32)
        self.handle = cupy.cuda.device.get_cusparse_handle()

    def padded_b(self, B):
        """B [K, N] -> the zero-padded [K_pad, N] copy cuSPARSE reads (in the value dtype)."""
        out = self._cupy.zeros((self.padded_shape[1], B.shape[1]), dtype=self._np_dtype)
        out[:B.shape[0]] = B
        return out

    def padded_c(self, N: int):
        return self._cupy.empty((self.padded_shape[0], N), dtype=self._np_dtype)

    def run(self, Bp, Cp):
        """Cp = A @ Bp on padded operands (C's first M rows are A @ B)."""
        key = (Bp.data.ptr, Cp.data.ptr, int(Bp.shape[1]))
        st = self._per_n.get(key)
        if st is None:
            st = self._per_n[key] = self._bind(Bp, Cp)
        try:  # per call: one set_stream + one sp_mm on the bound arguments (capturable into a CUDA graph)
            self._ncs.set_stream(self.handle, self._cupy.cuda.get_current_stream().ptr)
            self._ncs.sp_mm(*st["args"])
        except self._ncs.cuSPARSEError as err:
            raise RuntimeError(f"cusparseSetStream or cusparseSpMM({self.ALGORITHM_NAME}) returned {err}") from err
        return Cp

    def _bind(self, Bp, Cp) -> dict:
        """Dense descriptors on Bp and Cp (create_dn_mat(rows, cols, ld, values, value type, order)), the buffer,
        and sp_mm's arguments in C's order: handle, opA, opB, &alpha, A, B, &beta, C, compute type, alg, buffer."""
        ncs, cupy, N = self._ncs, self._cupy, int(Bp.shape[1])
        st = {"b": checked(ncs, "cusparseCreateDnMat", ncs.create_dn_mat, self.padded_shape[1], N, N, Bp.data.ptr,
                           self._ctype, self._order),
              "c": checked(ncs, "cusparseCreateDnMat", ncs.create_dn_mat, self.padded_shape[0], N, N, Cp.data.ptr,
                           self._ctype, self._order)}
        args = (self.handle, self._op, self._op, self._alpha.ctypes.data, self.descr_a, st["b"],
                self._beta.ctypes.data, st["c"], CUDA_R_32F, self.ALGORITHM)
        size = checked(ncs, f"cusparseSpMM_bufferSize({self.ALGORITHM_NAME})", ncs.sp_mm_buffer_size, *args)
        st["buf"] = cupy.empty(max(int(size), 1), dtype=cupy.uint8)
        st["args"] = (*args, st["buf"].data.ptr)
        return st
