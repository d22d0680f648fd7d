"""The plan's call cache and graph capture: `Call`, one bound call of ``SpmmPlan.run`` on fixed buffers (the lean launch through
the operator's ``bind``, then a CUDA graph of it replayed on the caller's current stream). ``SpmmPlan.run`` keys
its cache on the buffers' pointers, shapes, strides and dtypes, and a hit costs one dict lookup and this call:
keep it that lean (benchmarks/host_overhead.py measures it: a few microseconds per call). `capture(plan, B, out)`
is ``SpmmPlan.capture``: one explicit graph for an iterative caller; `bind(plan, ...)` is ``SpmmPlan.bind``.

``SpmmPlan.bind(B, out)`` hands a `Call` to a caller that owns it (a GNN layer's product: gnn.products): its
``set_io(B, out)`` re-points the bound launch at new buffers of the same shapes and dtypes (the packed arguments
rewritten in place, no check and no rebuild), so a caller whose buffers move between calls (torch's caching
allocator) pays a few pointer writes instead of a new binding; the graph captured on the old pointers is kept
(`KEPT_GRAPHS` of them) and replayed again when those pointers come back, as they do epoch after epoch.
"""
from __future__ import annotations

from kernels import gather as row_gather


AUTO_GRAPH_AFTER = 3  # run replays a captured graph from the 3rd call on the same buffers: one capture (~20-50 us)
# pays back after a few calls (a replay costs ~2 us of host time against ~4 us for the bare launch on the H200),
# while a one-off call on fresh buffers never captures
MAX_BOUND_CALLS = 8  # bound (B, out) pairs a plan keeps (each holds its B and out alive): a GNN layer's forward and
# backward buffers, a solver's few vectors
KEPT_GRAPHS = 4  # (graph, call count) pairs a re-pointed Call keeps, one per (B, out) pointer pair: a training
# loop's forward (train and eval) and backward buffers come back at a few addresses; a graph holds no memory
# Graphs (and the calls holding them) let go of while the current stream captures: a graph's destructor calls
# cudaGraphExecDestroy, which a capture in global mode (torch.cuda.graph's default) does not permit anywhere in the
# process: it invalidates the caller's capture (cudaErrorStreamCaptureUnsupported, a GAT training step under
# torch.cuda.graph on the H100, whose products re-point to the graph pool's buffers and push old graphs out of
# KEPT_GRAPHS). They wait here until the next call outside a capture.
RETIRED: list = []


def retire(obj) -> None:
    """Let go of ``obj`` (a graph, a (graph, calls) pair, a `Call`, a list of them): at once, unless the current
    stream is capturing, where it waits in `RETIRED` for the next call made outside a capture."""
    if obj is not None and _current_stream().is_capturing():
        RETIRED.append(obj)


class Call:
    """One bound call of ``run`` on fixed buffers: the lean launch, then (``graphs``) a CUDA graph of it replayed
    on the caller's current stream. Inside a caller's own stream capture it launches (a graph launch is not
    permitted there: cudaErrorStreamCaptureUnsupported, seen on the H200), so the caller's graph records the
    kernels themselves."""

    __slots__ = ("bound", "ret", "choice", "graphs", "calls", "graph", "ptrs", "kept", "rebinds")

    def __init__(self, bound, ret, choice, graphs: bool, ptrs=None):
        self.bound, self.ret, self.choice, self.graphs, self.calls, self.graph = bound, ret, choice, graphs, 0, None
        self.ptrs, self.kept, self.rebinds = ptrs, {}, 0  # (B, out) pointers bound; graphs of other pointers

    @property
    def kernel(self) -> str:
        return self.choice["kernel"]

    def set_io(self, B, out) -> None:
        """Point the call at new B and out of the same shapes and dtypes (the caller checked that): the bound
        launch's arguments are rewritten (``bound.set_io``); the old pointers' graph and call count are kept aside
        and the new ones' come back, if kept from before (a graph replays the addresses it was captured on; a
        caller alternating between a few buffer pairs, a layer's forward and backward, still reaches
        AUTO_GRAPH_AFTER calls on each)."""
        ptrs = (B.data.ptr, out.data.ptr)
        if ptrs == self.ptrs:
            return
        if self.ptrs is not None:
            if len(self.kept) >= KEPT_GRAPHS:
                retire(self.kept.pop(next(iter(self.kept))))
            self.kept[self.ptrs] = (self.graph, self.calls)
        self.bound.set_io(B, out)
        self.ptrs, self.ret, self.rebinds = ptrs, out, self.rebinds + 1
        self.graph, self.calls = self.kept.pop(ptrs, (None, 0))

    def __call__(self, stream=None):
        """Launch (or replay) on ``stream`` (a CuPy stream object; None: CuPy's current stream, whose device must be
        the current one either way)."""
        if stream is None:
            stream = _current_stream()
        if RETIRED and not stream.is_capturing():
            RETIRED.clear()
        if self.graph is not None:
            if stream.is_capturing():
                self.bound(stream.ptr)
            else:
                self.graph.launch(stream)
            return self.ret
        self.calls += 1
        if self.graphs and self.calls >= AUTO_GRAPH_AFTER and not stream.is_capturing():
            self.graph = self._capture()
            if self.graph is not None:
                self.graph.launch(stream)
                return self.ret
        self.bound(stream.ptr)
        return self.ret

    def _capture(self):
        """The bound launch captured on a private stream; None (and no more tries) if it cannot be captured."""
        import cupy

        side = cupy.cuda.Stream(non_blocking=True)
        try:
            with side:  # current too: an operator without a packed bind launches on the current stream (PerCall)
                side.begin_capture()
                try:
                    self.bound(side.ptr)
                finally:
                    graph = side.end_capture()
            return graph
        except Exception:  # a launch that allocates or synchronizes: keep launching it directly
            self.graphs = False
            return None


def _current_stream():
    import cupy

    global _current_stream
    _current_stream = cupy.cuda.get_current_stream  # bound once
    return _current_stream()


def bind(plan, B, out, kernel: str | None, accumulate: bool):
    """``plan.bind(B, out)``: B and out checked once, the kernel chosen for B's N (or ``kernel``) bound on them."""
    if plan.device == "cpu":
        return plan._cpu.bind(B, out, accumulate, plan.shape)
    import cupy

    if not isinstance(B, cupy.ndarray) or B.dtype != plan.precision.storage_dtype or B.ndim != 2:
        raise TypeError(f"bind takes a 2-D cupy B in {plan.precision.storage_dtype}, got {type(B).__name__} "
                        f"{getattr(B, 'dtype', None)} (run() converts; a bound call reads B as it is)")
    if B.shape[0] != plan.shape[1]:
        raise ValueError(f"B has shape {tuple(B.shape)}, expected ({plan.shape[1]}, N)")
    N = int(B.shape[1])
    kernel = kernel or plan._kernel_for(N, B)
    op_dtype = plan._op(kernel).out_dtype
    if op_dtype is not None and op_dtype != plan.out_dtype:
        raise TypeError(f"kernel {kernel} writes {op_dtype}, not the plan's {plan.out_dtype}: bind needs a "
                        f"kernel that writes out directly (run() casts)")
    chosen = plan.choices.get(N, {})  # the choice made for this N, when bound to the kernel it chose
    choice = chosen if kernel == chosen.get("kernel") else plan.choice.replace(kernel=kernel)
    return Call(plan._bind(kernel, B, out, accumulate), out, choice, plan.graphs, ptrs=(B.data.ptr, out.data.ptr))


def capture(plan, B, out):
    """``plan.capture(B, out)``: a replayable CUDA graph of out = A @ B with the kernel chosen for B's N."""
    import cupy

    if plan.device == "cpu":
        raise RuntimeError("capture needs the GPU path (this plan runs the CPU reference)")
    if not isinstance(B, cupy.ndarray) or not isinstance(out, cupy.ndarray):
        raise TypeError("capture takes cupy arrays B and out (the graph holds their addresses)")
    if B.dtype != plan.precision.storage_dtype or out.dtype != plan.out_dtype:
        raise TypeError(f"capture takes B in {plan.precision.storage_dtype} and out in {plan.out_dtype} "
                        f"(got {B.dtype}, {out.dtype}): a conversion inside the graph would read a copy")
    plan.run(B, out)  # decides for this N, builds workspaces and cuSPARSE buffers outside the capture
    kernel = plan.choices[int(B.shape[1])]["kernel"]
    op_dtype = plan._op(kernel).out_dtype
    if op_dtype is not None and out.dtype != op_dtype:
        raise TypeError(f"capture of the {kernel} path needs out in the precision's dtype")
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        try:
            plan._launch(kernel, B, out)
        finally:
            graph = stream.end_capture()

    def replay(on=None):
        graph.launch(on if on is not None else cupy.cuda.get_current_stream())
        return out

    replay.kernel = kernel
    return replay


class _Gathered:
    """A bound product writing C, then C's rows gathered into out (kernels.gather): the bound-launch interface
    (``set_io``, ``__call__(stream_ptr)``) over both, so that a `Call` captures and replays them as one graph."""

    __slots__ = ("product", "gather", "C", "word")

    def __init__(self, product, gather, C, word: int):
        self.product, self.gather, self.C, self.word = product, gather, C, word

    def set_io(self, B, out) -> None:
        if out.data.ptr % self.word:
            raise ValueError(f"gathered call: out at {out.data.ptr:#x} is not {self.word}-byte aligned as bound")
        self.product.set_io(B, self.C)
        self.gather.set_io(self.C, out)

    def __call__(self, stream_ptr: int):
        self.product(stream_ptr)
        return self.gather(stream_ptr)


def gathered(call: Call, B, C, index, out, bias=None) -> Call:
    """``call`` (``plan.bind(B, C)``: C = A[perm] @ B) followed by ``out[i] = C[index[i]]`` (index: the inverse
    permutation, int64 on the device; ``+ bias`` in the same pass where given, `kernels.gather.bias_fits`), as one
    `Call` returning out: ``set_io(B, out)`` re-points B and out (C stays the product's own), and from
    AUTO_GRAPH_AFTER calls on one graph holds both launches."""
    gather, word = row_gather.bind_rows(C, index, out, bias)
    call.bound.set_io(B, C)  # the product on this B: a call bound before may have been re-pointed since
    return Call(_Gathered(call.bound, gather, C, word), out, call.choice, call.graphs, ptrs=(B.data.ptr, out.data.ptr))
