"""What a plan costs per format and size (issue 32): ``SpmmPlan(A, format=...)`` built and decided as a user calls it,
next to the reordering it follows and the kernel it picks.

    PYTHONPATH=. python3 benchmarks/plan_time.py [--sizes 1M 10M] [--kinds rmat sbm mesh] [--dtypes float32 float16]
                                                 [--ns 256] [--budget-s 420] [--out PATH]
    PYTHONPATH=. python3 benchmarks/plan_time.py --cpu      # logic smoke test on the CPU path, tiny sizes

Per matrix (a seeded generator at about the named nonzeros, rows reordered by ``tasks.reorder.auto_reorder`` with
the precision's block width, its seconds recorded after an untimed reordering of the kind's tiny matrix at that
width: the first reordering in a process compiles its Numba kernels, which a user's later runs load from Numba's
cache; cold, rmat-1M's took 7.5-9.9 s against 1.3-1.5 s warm on the H200) and precision, per plan: each GPU-ready
registered format alone, ``hybrid``, ``auto`` (the default: the cost model's first two built and timed, ME-TCF
always among them, none predicted above twice the cheapest) and ``auto-all`` (every candidate built and timed, what
``auto`` cost before the ranking):

- ``build_s``: ``SpmmPlan(A, dtype=..., format=..., out_dtype=float32)`` wall time (statistics and ranking,
  conversion, upload, compilation; kernels already compiled by an earlier plan of the run come from the cache, as
  they do for a user's second plan);
- ``decide_s``: the first ``run(B, out)`` for N (the choice among formats and kernels, autotune timings included),
  synchronized;
- ``kernel_ms``: ``plan.benchmark(B)`` (CUDA-graph replay of the chosen kernel, median) and ``issued_ms``
  (``kernels.launch.issued_ms`` of ``plan.run(B, out)``: per call as issued);
- the chosen format and kernel; C checked against float64 on sampled rows in the same run (the precision's
  tolerance, ``kernels.precision``; a miss fails the run);
- where the time went: ``statistics_s`` (the ranking's window statistics, auto plans), ``build_parts_s`` (the
  plan's own timings in seconds: ranking, each format's conversion and upload) and ``decide_parts_s`` (the host
  seconds of each kernel the decision timed: bind, a tune of its own, timing; `kernels.choice.decide`).

Prints a table last; writes benchmarks/results/plan-time-<device>-<date>.json (device, versions, command, date),
rewritten after each matrix. The targets (``PLAN_TARGETS``): ``auto`` (build + decide) within 10% of the
reordering time and under 2 s at 10M nonzeros; its kernel within 3% of the default format's or faster.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from configs.names import BASE_FORMAT  # noqa: E402
from kernels.formats import structure  # noqa: E402
from kernels.precision import precision as as_precision  # noqa: E402
from storage.atomic import atomic_path  # noqa: E402

# (kind, size label) -> generator params: about 1M and 10M nonzeros (R-MAT: scale 16 / 19 x 16 edges; SBM: n x
# (deg_in + deg_out); mesh: a 27-point 3D stencil on nx^3 points)
MATRICES = {
    ("rmat", "1M"): "scale=16&edge_factor=16", ("rmat", "10M"): "scale=19&edge_factor=16",
    ("sbm", "1M"): "n=50000&blocks=50&deg_in=18&deg_out=2", ("sbm", "10M"): "n=500000&blocks=500&deg_in=18&deg_out=2",
    ("mesh", "1M"): "nx=34&ny=34&nz=34&stencil=27", ("mesh", "10M"): "nx=72&ny=72&nz=72&stencil=27",
    ("rmat", "tiny"): "scale=9&edge_factor=8", ("sbm", "tiny"): "n=600&blocks=6&deg_in=8&deg_out=2",
    ("mesh", "tiny"): "nx=8&ny=8&nz=8&stencil=27",
}
PLAN_TARGETS = {"auto_over_reorder": 0.10, "auto_s_at_10M": 2.0, "auto_kernel_over_default": 1.03}
SAMPLE_ROWS = 512


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, file=sys.stderr, flush=True)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["1M", "10M"], help="size labels: 1M, 10M (tiny: --cpu)")
    ap.add_argument("--kinds", nargs="+", default=["rmat", "sbm", "mesh"])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float16"])
    ap.add_argument("--ns", nargs="+", type=int, default=[256])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=420.0, help="start no new matrix after this many seconds")
    ap.add_argument("--cpu", action="store_true", help="the CPU path at tiny sizes: checks the script, times nothing "
                                                       "worth reporting")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.cpu:
        args.sizes = ["tiny"]
    unknown = [f"{k} {s}" for k in args.kinds for s in args.sizes if (k, s) not in MATRICES]
    if unknown:
        ap.error(f"no generator parameters for {', '.join(unknown)}; known: "
                 f"{', '.join(sorted({f'{k} {s}' for k, s in MATRICES}))}")
    for name in args.dtypes:
        as_precision(name)  # one-line ValueError for an unknown precision
    return args


def plan_kinds(dtype: str, on_gpu: bool) -> list[str]:
    """What is timed for ``dtype``: every registered format with kernels for it (GPU-ready ones on a GPU), the
    hybrid, ``auto`` and ``auto-all``."""
    from kernels.formats import candidates

    names = [f.name for f in candidates("auto", dtype) if f.gpu_ready or not on_gpu]
    return [*names, "hybrid", "auto", "auto-all"]


def plan_options(kind: str, dtype: str, on_gpu: bool) -> dict:
    """SpmmPlan keyword arguments of a plan kind."""
    if kind == "auto-all":
        return {"format": "auto", "auto_candidates": len(plan_kinds(dtype, on_gpu))}
    return {"format": kind}


def sample_check(A, B32, C, prec, rows) -> float:
    """Relative error of C[rows] against the float64 product of A's rows with B rounded to the precision."""
    ref = sp.csr_array(A[rows]).astype(np.float64) @ prec.rounded(B32).astype(np.float64)
    got = np.asarray(C, dtype=np.float64)[rows]
    den = float(np.linalg.norm(ref))
    return float(np.linalg.norm(got - ref) / den) if den else float(np.linalg.norm(got))


def time_plan(A, kind: str, dtype: str, N: int, args, rng) -> dict:
    from kernels.spmm import SpmmPlan

    prec = as_precision(dtype)
    B32 = rng.standard_normal((A.shape[1], N)).astype(np.float32)
    rows = np.sort(rng.choice(A.shape[0], min(SAMPLE_ROWS, A.shape[0]), replace=False))
    row = {"plan": kind, "dtype": dtype, "N": N}
    structure.forget()  # each plan counts A's windows as a user's first plan would (no count kept from the last)
    t0 = time.perf_counter()
    plan = SpmmPlan(A, dtype=dtype, out_dtype=np.float32, device="cpu" if args.cpu else "auto",
                    **plan_options(kind, dtype, not args.cpu))
    row["build_s"] = time.perf_counter() - t0
    if args.cpu:
        B, out = prec.to_storage(B32), np.empty((A.shape[0], N), np.float32)
        t0 = time.perf_counter()
        plan.run(B, out)
        row["decide_s"] = time.perf_counter() - t0
        row.update(kernel_ms=plan.benchmark(B, repeats=2, warmup=1)["median_ms"], issued_ms=None)
        C = out
    else:
        import cupy

        from kernels import launch
        B, out = cupy.asarray(prec.to_storage(B32)), cupy.empty((A.shape[0], N), dtype=cupy.float32)
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        plan.run(B, out)
        cupy.cuda.Device().synchronize()  # synchronize! (the decision's timings included)
        row["decide_s"] = time.perf_counter() - t0
        row["kernel_ms"] = plan.benchmark(B, repeats=args.repeats)["median_ms"]
        row["issued_ms"] = launch.issued_ms(lambda: plan.run(B, out))
        C = cupy.asnumpy(out)
    choice = plan.choices.get(N, plan.choice)
    row.update(format=choice.get("format"), kernel=choice.get("kernel"),
               ranking=(plan.ranking or {}).get("built"), rel_err=sample_check(A, B32, C, prec, rows),
               tolerance=prec.tolerance, statistics_s=(plan.ranking or {}).get("statistics_s"),
               build_parts_s={k: v for k, v in plan.timings.items() if isinstance(v, float)},
               decide_parts_s=choice.get("timing_s"))
    row["plan_s"] = row["build_s"] + row["decide_s"]
    plan.release()
    return row


def summary(rows: list[dict]) -> dict:
    """Per (matrix, dtype, N): auto's plan seconds over the reordering's and its kernel over the default format's."""
    out = {}
    for r in rows:
        if r["plan"] != "auto" or "error" in r:
            continue
        key = f"{r['matrix']} {r['dtype']} N={r['N']}"
        default = next((d for d in rows if d["matrix"] == r["matrix"] and d["dtype"] == r["dtype"]
                        and d["N"] == r["N"] and d["plan"] == BASE_FORMAT and "error" not in d), None)
        out[key] = {"nnz": r["nnz"], "auto_plan_s": r["plan_s"], "reorder_s": r["reorder_s"],
                    "auto_over_reorder": r["plan_s"] / r["reorder_s"] if r["reorder_s"] else None,
                    "auto_kernel_over_default": (r["kernel_ms"] / default["kernel_ms"]
                                                 if default and default.get("kernel_ms") else None)}
    return out


def failures(rows: list[dict]) -> list[str]:
    bad = [f"{r['matrix']} {r['dtype']} {r['plan']}: {r['error']}" for r in rows if "error" in r]
    bad += [f"{r['matrix']} {r['dtype']} {r['plan']} N={r['N']}: rel err {r['rel_err']:.3g} > {r['tolerance']:g}"
            for r in rows if "error" not in r and not r["rel_err"] <= r["tolerance"]]
    return bad


def table(rows: list[dict]) -> str:
    head = (f"{'matrix':12} {'nnz':>10} {'dtype':8} {'plan':9} {'reorder s':>9} {'build s':>8} {'decide s':>8} "
            f"{'kernel ms':>9} {'issued ms':>9} {'format':9} {'kernel':22} {'rel err':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['matrix']:12} {r['nnz']:>10} {r['dtype']:8} {r['plan']:9} ERROR {r['error'][:60]}")
            continue
        issued = "-" if r.get("issued_ms") is None else f"{r['issued_ms']:.4f}"
        lines.append(f"{r['matrix']:12} {r['nnz']:>10} {r['dtype']:8} {r['plan']:9} {r['reorder_s']:>9.2f} "
                     f"{r['build_s']:>8.3f} {r['decide_s']:>8.3f} {r['kernel_ms']:>9.4f} {issued:>9} "
                     f"{str(r['format']):9} {str(r['kernel'])[:22]:22} {r['rel_err']:>8.1e}")
    return "\n".join(lines)


def device_meta(cpu: bool) -> dict:
    """benchmarks/machine.py's record of the GPU and its software; on the CPU path the host and versions."""
    if not cpu:
        from machine import gpu_meta
        return gpu_meta()
    import scipy
    return {"device": f"cpu:{platform.node()}", "python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__}


def main(argv=None) -> int:
    args = parse_args(argv)
    from kernels.spmm import gpu_available
    if not args.cpu and not gpu_available():
        print("error: plan_time: no CUDA device (or CuPy); --cpu runs the logic smoke test", file=sys.stderr)
        return 2
    from tasks.fetch.generators import generate
    from tasks.reorder.api import auto_reorder

    meta = {"benchmark": "plan-time", **device_meta(args.cpu), "command": " ".join([sys.executable, *sys.argv]),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(), "args": vars(args), "targets": PLAN_TARGETS}
    tag = meta.get("slug") or meta["device"].replace(" ", "_").replace(":", "-")
    path = Path(args.out) if args.out else REPO / "benchmarks" / "results" / \
        f"plan-time-{tag}-{dt.date.today().isoformat()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows, skipped, t_start = [], [], time.time()
    warmed = set()  # (kind, width) reordered once untimed

    def write():  # after each matrix and at the end: what ran so far, replaced whole (temp file, rename)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps({"meta": {**meta, "skipped": skipped, "wall_s": time.time() - t_start},
                                       "rows": rows, "summary": summary(rows), "failures": failures(rows)},
                                      indent=1, default=float))
    for size in args.sizes:
        for kind in args.kinds:
            label = f"{kind}-{size}"
            if time.time() - t_start > args.budget_s:
                skipped.append(f"{label}: over --budget-s {args.budget_s:g}")
                continue
            A = generate(kind, f"{MATRICES[(kind, size)]}&seed=1&shuffle=1")
            for dtype in args.dtypes:
                width = 8 if dtype == "float32" else 16
                if (kind, width) not in warmed:
                    auto_reorder(generate(kind, f"{MATRICES[(kind, 'tiny')]}&seed=1&shuffle=1"), width=width)
                    warmed.add((kind, width))
                t0 = time.perf_counter()
                method, perm, _ = auto_reorder(A, width=width)
                reorder_s = time.perf_counter() - t0
                Ar = sp.csr_array(A[perm])
                for N in args.ns:
                    for plan in plan_kinds(dtype, not args.cpu):
                        base = {"matrix": label, "nnz": int(A.nnz), "shape": list(A.shape), "reorder": method,
                                "reorder_s": reorder_s}
                        try:
                            r = {**base, **time_plan(Ar, plan, dtype, N, args, np.random.default_rng(N))}
                        except Exception as err:  # one plan's failure is recorded and fails the run
                            r = {**base, "plan": plan, "dtype": dtype, "N": N,
                                 "error": f"{type(err).__name__}: {err}"}
                        rows.append(r)
                        log(label, dtype, plan, {k: r.get(k) for k in ("build_s", "decide_s", "kernel_ms", "format",
                                                                        "error")})
            write()
    write()
    print(f"wrote {path}")
    bad = failures(rows)
    if bad:
        print("FAILURES:\n" + "\n".join(bad))
    print(table(rows))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
