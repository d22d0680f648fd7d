"""The hybrid's device operator (the contract of kernels.formats.contract): the Tensor Core format's own operator on
the TC rows, the CUDA-core CSR kernel (kernels.formats.csr.launch.CsrRows with a row map) on the other rows, issued
in stream order on one stream: no value added atomically, every row of C written by one part, so C is bitwise
repeatable.

Launches per call: the TC format's (one or two), then csr_rows, then csr_fixup where there is something for it:
rows longer than a piece (power-law hubs) after the 16-bit mappings (csr_rows sums its own), and the TC part's
rows. Where the TC windows are one run of rows (``HybridA.tc_range``), the TC part writes that slice of C itself;
otherwise it writes float32 rows into the CSR kernel's workspace and csr_fixup copies them to their rows of C
(one workspace row each, so the sum is the value itself), with the long rows' piece sums where it makes those.
``bind`` packs both parts once; SpmmPlan's call cache replays them as one CUDA graph from the third call on, so the
host cost of a repeated call is one graph launch, as for any format.
"""
from __future__ import annotations

import time

from kernels import launch
from kernels.formats.contract import Choice, check_single_kernel
from kernels.formats.csr.launch import CSR_CONFIG, CsrRows
from kernels.formats.registry import get
from kernels.hybrid.parts import HybridA, split_matrix
from kernels.operands import check_b_out
from kernels.precision import Precision


class HybridDevice:
    """A split (kernels.hybrid.parts) on the current device at one precision: one kernel, "hybrid"."""

    format_name, kernels, out_dtype = "hybrid", ("hybrid",), None  # the device-operator contract
    summary = "dense windows on Tensor Cores, the other rows on CUDA cores"

    def __init__(self, A, precision: Precision, config=None, calibration=None, *, balance="auto",
                 autotune="auto", allow_cusparse: bool = False):
        t0 = time.perf_counter()
        self.precision = precision
        self.host = H = A if isinstance(A, HybridA) else split_matrix(A, precision)
        self.shape = H.shape
        self.autotune = autotune if autotune == "auto" else bool(autotune)
        self.timings: dict = {"split_s": H.seconds}
        # the TC part never picks cuSPARSE: a part must write only its own rows, deterministically
        self.tc_op = (get(H.split.tc_format).device_class()(H.tc_csr, precision, config, calibration,
                                                             balance=balance, autotune=autotune,
                                                             allow_cusparse=False) if H.tc_rows.size else None)
        if self.tc_op is not None:
            self.timings.update({f"tc:{k}": v for k, v in self.tc_op.timings.items()})
        copy = H.tc_rows if H.tc_rows.size and H.tc_range is None else None
        self.cuda = (CsrRows(H.cuda_csr, precision, CSR_CONFIG, rows=H.cuda_rows, n_rows=H.shape[0], copy_rows=copy)
                     if H.cuda_rows.size or copy is not None else None)
        self._tc_choices: dict[int, Choice] = {}
        self.timings["convert_upload_s"] = time.perf_counter() - t0

    @property
    def config(self):
        """The TC part's kernel configuration (None without one)."""
        return self.tc_op.config if self.tc_op is not None else None

    # ----- choice -----
    def decide(self, N: int, B, time_fn) -> Choice:
        """The TC part's own choice for N (its operator's decide, its candidates timed on the TC rows alone), and,
        when B is given, the time of the whole hybrid call (so the plan may still time its fallback against it)."""
        H = self.host
        tc = self.tc_op.decide(N, B, self._tc_timer(B)) if self.tc_op is not None else None
        if tc is not None:
            self._tc_choices[N] = tc
        choice = Choice(kernel="hybrid", N=N, format="hybrid", reason=(
            f"{int(H.tc_rows.size)} rows in dense windows on {H.split.tc_format}"
            f"{' (' + tc.kernel + ')' if tc is not None else ''}, {int(H.cuda_rows.size)} on CUDA cores "
            f"({H.split.cuda_format}); split by the cost model at N = {H.split.N}: {H.split.predicted_us:.1f} us "
            f"against {H.split.tc_us:.1f} all on Tensor Cores, {H.split.cuda_us:.1f} all on CUDA cores"),
            extra={"hybrid": H.summary(), "tc_choice": dict(tc) if tc is not None else None})
        if B is not None and self.autotune is not False:
            if self.cuda is not None:  # 16-bit: the CUDA-core part's mapping, timed once per N
                self.cuda.tune(B)
                choice.update(self.cuda.mapping_fields(N, "cuda_part_"))
            choice.update(measured_ms={"hybrid": time_fn("hybrid", choice=choice)})
        return choice

    def _tc_timer(self, B):
        """time_fn for the TC operator's decide: ms of one of its candidates on the TC rows alone (a CUDA graph of
        back-to-back calls, as SpmmPlan times candidates with graphs on)."""
        if B is None:
            return None
        import cupy

        best = [None]  # the fastest candidate so far: a far slower one is not timed further (kernels.choice)

        def time_tc(kernel: str, *, ksplit=None, choice=None, **_):
            N = int(B.shape[1])
            dtype = cupy.float32 if self.host.tc_range is None else self.precision.storage_dtype
            out = cupy.empty((int(self.host.tc_rows.size), N), dtype=dtype)
            ms = launch.time_bound(self.tc_op.bind(kernel, B, out, ksplit=ksplit, choice=choice), "graph",
                                   best_ms=best[0])
            best[0] = ms if best[0] is None else min(best[0], ms)
            return ms

        return time_tc

    def _tc_choice(self, N: int, choice) -> Choice:
        given = (choice or {}).get("tc_choice")
        if given:
            return Choice.of(given)
        if N not in self._tc_choices:
            self._tc_choices[N] = self.tc_op.decide(N, None, None)
        return self._tc_choices[N]

    # ----- launch -----
    def _targets(self, B, out, accumulate: bool):
        """(out, the TC part's output and whether it accumulates) after the plan-wide B / out checks."""
        out, N, _ = check_b_out(self.shape, self.precision.name, B, out, None, accumulate, vec_elems=4)
        if self.tc_op is None:
            return out, None, False
        if self.host.tc_range is not None:
            r0, r1 = self.host.tc_range
            return out, out[r0:r1], accumulate
        return out, self.cuda.copy_view(N), False  # float32 rows csr_fixup copies (adds, with accumulate) to C

    def launch(self, kernel: str, B, out, *, accumulate: bool = False, ksplit: int | None = None, choice=None):
        self._check(kernel, ksplit)
        out, tc_out, tc_acc = self._targets(B, out, accumulate)
        if tc_out is not None:
            tc = self._tc_choice(int(B.shape[1]), choice)
            self.tc_op.launch(tc.kernel, B, tc_out, accumulate=tc_acc, choice=tc)
        if self.cuda is not None:
            self.cuda.run(B, out, accumulate=accumulate)
        return out

    def bind(self, kernel: str, B, out, *, accumulate: bool = False, ksplit: int | None = None, choice=None):
        """Both parts' launches checked and packed once (`HybridBound`)."""
        self._check(kernel, ksplit)
        out, tc_out, tc_acc = self._targets(B, out, accumulate)
        tc_bound = cuda_bound = None
        if tc_out is not None:
            tc = self._tc_choice(int(B.shape[1]), choice)
            tc_bound = self.tc_op.bind(tc.kernel, B, tc_out, accumulate=tc_acc, choice=tc)
        if self.cuda is not None:
            cuda_bound = self.cuda.bind(B, out, accumulate=accumulate)
        return HybridBound(B, out, tc_bound, cuda_bound, self.host.tc_range)

    @staticmethod
    def _check(kernel: str, ksplit) -> None:
        check_single_kernel(kernel, "hybrid", ksplit, "the hybrid takes its TC part's ksplit from its choice")


class HybridBound:
    """Both parts bound on the same B and out (kernels.launch.Bound's interface): ``bound(stream_ptr)`` issues the
    TC part's launches, then the CUDA-core part's, on that stream."""

    __slots__ = ("B", "out", "_tc", "_cuda", "_tc_range")

    def __init__(self, B, out, tc, cuda, tc_range):
        self.B, self.out, self._tc, self._cuda, self._tc_range = B, out, tc, cuda, tc_range

    def __call__(self, stream_ptr: int):
        if self._tc is not None:
            self._tc(stream_ptr)
        if self._cuda is not None:
            self._cuda(stream_ptr)
        return self.out

    def set_io(self, B, out) -> None:
        """Point both parts at new B and out of the same shape and dtype (the TC part at its slice of out, or
        still at the workspace rows the copy reads)."""
        if self._tc is not None:
            tc_out = out[self._tc_range[0]:self._tc_range[1]] if self._tc_range is not None else self._tc.out
            self._tc.set_io(B, tc_out)
        if self._cuda is not None:
            self._cuda.set_io(B, out)
        self.B, self.out = B, out
