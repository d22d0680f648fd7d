"""Dense cuBLAS GEMM, the baseline of the DNN-style benchmarks (benchmarks/cvse.py, benchmarks/formats.py): C = A @ B
with A the sparse matrix made dense, in FP16 (FP16 C) or in float32 with TF32 Tensor Cores allowed (float32 C, the
float32 mode of benchmarks/formats.py: the dense counterpart of our TF32 kernels), timed both ways users call it, by
CUDA-graph replay (device time) and as issued (a Python loop of calls between CUDA events).

torch.matmul where torch has CUDA: it launches on torch's stream, which a CuPy capture would miss (the first H200
run so timed 0.1 us), so it is captured and timed with torch's own CUDA graph and events; in float32,
torch.backends.cuda.matmul.allow_tf32 is set for the timing (warm-up, capture and the issued loop) and restored
after. Without torch, cupy.matmul through kernels.launch; where its capture is refused, the graph column is the
as-issued time and ``graph_timed`` says so. CuPy's float32 GEMM uses TF32 only when CUPY_TF32=1 was set before its
first float32 matmul (CuPy reads it once), so its name says which one ran.
"""
from __future__ import annotations

import os

import numpy as np


def cupy_matmul():
    """(name, fn(A, B) -> C) for cuBLAS GEMM through cupy.matmul into a C of A's dtype kept per shape, on CuPy's
    current stream."""
    import cupy

    outs = {}

    def run(A, B):
        C = outs.get((A.shape[0], B.shape[1]))
        if C is None:
            C = outs[(A.shape[0], B.shape[1])] = cupy.empty((A.shape[0], B.shape[1]), dtype=A.dtype)
        return cupy.matmul(A, B, out=C)
    return f"cupy.matmul (cuBLAS, CuPy {cupy.__version__})", run


DTYPES = ("float16", "float32")


class Dense:
    """cuBLAS GEMM of the dense A in ``dtype``: FP16 (FP16 C; checked on the H200: 4096^2 x 128 in 9.4 us,
    457 TFLOP/s) or float32 with TF32 allowed (float32 C)."""

    def __init__(self, A, dtype: str = "float16"):
        if dtype not in DTYPES:
            raise ValueError(f"Dense runs {' or '.join(DTYPES)}, got dtype {dtype!r}")
        self.dtype = dtype
        try:
            import torch

            self.torch = torch if torch.cuda.is_available() else None
        except ImportError:
            self.torch = None
        dense = A.toarray().astype(dtype)
        self.graph_timed = True  # False after a refused cupy capture: the graph column is then the issued time
        if self.torch is None:
            import cupy

            self.name, self.gemm = cupy_matmul()
            if dtype == "float32":
                tf32 = os.environ.get("CUPY_TF32", "0") not in ("", "0")
                self.name += f"; float32, {'TF32 (CUPY_TF32=1)' if tf32 else 'FP32 SGEMM (CUPY_TF32 unset)'}"
            self.A = cupy.asarray(dense)
        else:
            self.name = f"torch.matmul (cuBLAS, torch {self.torch.__version__})"
            if dtype == "float32":
                self.name += "; float32, TF32 allowed"
            self.A = self.torch.as_tensor(dense, device="cuda")

    def time(self, B, repeats: int, issued_repeats: int):
        """(graph-replay ms, issued ms, C as a cupy array of the dtype) for C = A @ B (B: a cupy array of the
        dtype)."""
        if self.torch is None:
            from kernels import launch

            fn = lambda: self.gemm(self.A, B)  # noqa: E731
            issued = launch.issued_ms(fn, repeats=issued_repeats)
            try:
                graph = launch.graph_ms(fn, repeats=repeats)
            except RuntimeError:  # the capture refused (CUDA or cuBLAS error)
                graph, self.graph_timed = issued, False
            return graph, issued, fn()
        if self.dtype == "float16":
            return self._torch_time(B, repeats, issued_repeats)
        matmul = self.torch.backends.cuda.matmul
        saved, matmul.allow_tf32 = matmul.allow_tf32, True  # cuBLAS picks its kernel per call: set for all of them
        try:
            return self._torch_time(B, repeats, issued_repeats)
        finally:
            matmul.allow_tf32 = saved

    def _torch_time(self, B_cupy, repeats: int, issued_repeats: int):
        """`time` through torch: its own CUDA graph and events."""
        import cupy

        torch = self.torch
        cupy.cuda.Device().synchronize()  # synchronize! B was written on CuPy's stream; torch's may differ
        B = torch.as_tensor(B_cupy, device="cuda")
        C = torch.empty((self.A.shape[0], B.shape[1]), dtype=getattr(torch, self.dtype), device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up (cuBLAS workspace) off the capture
            for _ in range(3):
                torch.matmul(self.A, B, out=C)
        torch.cuda.current_stream().wait_stream(side)

        def events(fn, calls, n):
            ts = []
            for _ in range(n):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                fn(calls)
                e1.record()
                e1.synchronize()  # synchronize!
                ts.append(e0.elapsed_time(e1) / calls)
            return float(np.median(ts))

        loop = lambda k: [torch.matmul(self.A, B, out=C) for _ in range(k)]  # noqa: E731
        calls = int(min(200, max(1, round(0.5 / max(events(loop, 1, 3), 1e-3)))))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            loop(calls)
        graph.replay()
        replay_ms = events(lambda k: graph.replay(), calls, repeats)
        issued_ms = events(loop, max(3, calls), issued_repeats)
        torch.cuda.synchronize()  # synchronize! C is read on CuPy's stream next
        return replay_ms, issued_ms, cupy.asarray(C)
