"""How a `SpmmPlan` on the GPU chooses its kernel for N: each format's operator decides by its own cost model and
timings, the fastest measured of several formats wins, and the fallback kernels the formats' records list are timed
against a timed choice. Runs once per N (`SpmmPlan._kernel_for`), never on the per-call path; the plan supplies the
operators (``plan._ops``, ``plan._op``), the timer (``plan._time``: the bound launch ``run`` takes) and the
fallbacks (``plan._fallbacks``)."""
from __future__ import annotations

import time

from kernels.formats.contract import Choice


def decide(plan, N: int, B) -> Choice:
    """Each format's choice for N (its own cost model / timings, cuSPARSE among its candidates); with several
    formats and a B, the fastest measured of their choices. When that choice was timed (autotune), each fallback
    kernel the formats' records list (``Format.fallbacks``: ME-TCF's, after DTC-SpMM's selector, the deterministic
    CUDA-core CSR kernel) is timed too and taken where it is faster. ``B`` None: the a-priori choice (no timing).
    A timed choice records ``timing_s``: the host seconds each timed kernel took (its bind, any tune of its own on
    the first bind, and its timing; summed over its timings), what a decision costs (benchmarks/plan_time.py)."""
    time_fn = _timer(plan, B)
    choice = decide_formats(plan, N, B, time_fn)
    if plan.ranking is not None:
        choice["format_ranking"] = plan.ranking
    timed = choice.measured_ms or choice.formats_measured_ms
    if B is None or not plan._fallbacks or not timed:
        return _with_timing(choice, time_fn)
    best_ms = (choice.measured_ms or {}).get(choice.kernel)
    if best_ms is None:
        best_ms = min(choice.formats_measured_ms.values())
    for kernel in plan._fallbacks:
        ms, op = time_fn(kernel), plan._op(kernel)
        choice = choice.replace(**{kernel.replace("-", "_") + "_ms": ms})
        if ms < best_ms:
            choice.update(kernel=kernel, format=op.format_name, reason=f"{kernel} ({op.summary}) {ms:.4f} ms "
                          f"beats {best_ms:.4f} ms of the Tensor Core choice; {choice.reason}")
            best_ms = ms
    return _with_timing(choice, time_fn)


def _with_timing(choice: Choice, time_fn) -> Choice:
    if time_fn.seconds:
        choice["timing_s"] = {k: round(v, 6) for k, v in time_fn.seconds.items()}
    return choice


def _timer(plan, B):
    """``time_fn(kernel, **params)``: ms of one candidate on B through the plan's timer, which gives up on a
    candidate whose first estimate is far above the best timed so far in this decision (kernels.launch.GIVE_UP):
    on a 10M-nonzero `auto` plan, ten candidates took 0.28 s of its 0.45 s decision (H200). ``time_fn.seconds``:
    {kernel: host seconds of its timings so far}."""
    best = [None]

    def time_fn(kernel: str, **kw) -> float:
        t0 = time.perf_counter()
        ms = plan._time(kernel, B, best_ms=best[0], **kw)
        time_fn.seconds[kernel] = time_fn.seconds.get(kernel, 0.0) + time.perf_counter() - t0
        best[0] = ms if best[0] is None else min(best[0], ms)
        return ms

    time_fn.seconds = {}
    return time_fn


def decide_formats(plan, N: int, B, time_fn) -> Choice:
    """Each format operator's own choice for N; with several and a B, the fastest measured of them (``time_fn``:
    the decision's `_timer`)."""
    per_format = {}
    for name, ops in plan._ops.items():
        ch = ops.decide(N, B, time_fn)
        per_format[name] = ch.replace(format=plan._op(ch.kernel).format_name, precision=plan.precision.name)
    if len(per_format) == 1 or B is None:
        return next(iter(per_format.values()))
    # a format that autotuned has timed its choice already (the same way, through _time): no second timing
    measured = {name: (ch.measured_ms or {}).get(ch.kernel) or time_fn(ch.kernel, choice=ch)
                for name, ch in per_format.items()}
    best = min(measured, key=measured.get)
    return per_format[best].replace(formats_measured_ms=measured, reason=f"fastest measured format of "
                                    f"{measured}: {best}; {per_format[best].reason}")
