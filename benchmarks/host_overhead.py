"""Per-call cost of SpmmPlan.run as a user calls it (issue 15): per call as issued next to the GPU's time.

    PYTHONPATH=. python3 benchmarks/host_overhead.py [--ns 128 256] [--label after] [--before FILE] [--code DIR]

For each matrix (the SuiteSparse fixtures in .fixtures, 2.6k-370k nnz, and three generated 1.7-2M nnz graphs in
their shuffled order), each N, and five plans (the defaults, format "auto", in float32 and float16; ME-TCF
alone, deterministic float32: our kernels only; deterministic=False float32: cuSPARSE allowed; deterministic
float16), with B and out prepared once:
- ``issued_us``: plan.run(B, out) per call as issued: CUDA events around a Python loop of back-to-back calls,
  divided by the calls (median of 5 loops; the automatic graph replay of repeated calls is on, as by default);
  every plan of a (matrix, N) is built first, then timed in ``--rounds`` alternating rounds (default 3), and
  each number is the plan's fastest round (each round's in ``*_rounds``; files before 2026-11-30-s43c: one pass);
- ``issued_nograph_us``: the same with ``plan.graphs = False`` (the bound launch every call);
- ``graph_us``: the GPU's time of the chosen kernel (kernels.launch.graph_ms: replays of a captured graph of
  back-to-back launches); ``overhead_us`` = issued - graph.
cuSPARSE is timed the same ways on the same matrix and B, in each plan's precision (``cus_dtype``; float32 for
every plan in files written before it was recorded): its best CSR algorithm through a bound call (CusparseBound:
descriptors and buffer made once, cusparseSpMM through nvmath's bindings, through ctypes in the files before the
bindings change of 2026-11-25: the cheapest call CuPy's process allows) as issued and by graph replay, and for
float32 ``cupyx.scipy.sparse`` ``A @ B`` as issued (what a CuPy user writes; it allocates C). Correctness in
the same run: every plan's C against float64 SciPy. ``--code DIR`` imports ``kernels`` from DIR (the tree before a
change; only features both trees have are used then); ``--before FILE`` puts that run's numbers beside these.
JSON under benchmarks/results/, the table last.
"""
from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import sys
import tarfile
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

from machine import gpu_meta, write_json  # benchmarks/ is the script folder; machine.py imports nothing from the tree
from summarize_host import cusparse_us  # the faster cuSPARSE call as issued, as the docs section reads it

REPO = Path(__file__).resolve().parents[1]
FIXTURES = ["LPnetlib/lp_e226", "HB/young1c", "HB/jagmesh7", "HB/bcspwr10", "HB/bcsstk13", "Pajek/Erdos971",
            "SNAP/email-Enron"]
GENERATED = [("sbm-100k", "sbm", "n=100000&blocks=100&deg_in=16&deg_out=2"),
             ("mesh3d-40", "mesh", "nx=40&ny=40&nz=40&stencil=27"),
             ("rmat-s17", "rmat", "scale=17&edge_factor=16")]
# --reorder auto adds these (the 0.1-3M nnz classes, larger than the fixtures): a SNAP-like power-law graph,
# a community graph, a 2D FEM-like mesh and a banded matrix, all in shuffled order
GENERATED_MORE = [("rmat-s16", "rmat", "scale=16&edge_factor=12"),
                  ("sbm-50k", "sbm", "n=50000&blocks=50&deg_in=12&deg_out=2"),
                  ("mesh2d-300", "mesh", "nx=300&ny=300&nz=1&stencil=9"),
                  ("banded-200k", "banded", "n=200000&bandwidth=4")]
TARGET_NNZ = (100_000, 3_000_000)  # issue 15's real-matrix range
# det-* / nondet-*: ME-TCF alone (SpmmPlan's default until 2026-11-28); auto-*: format="auto", the default since
# (issue 32: the cost model's first format and ME-TCF built and timed, the faster kept)
PLANS = {"det-f32": {"dtype": "float32", "format": "metcf"},
         "nondet-f32": {"dtype": "float32", "format": "metcf", "deterministic": False},
         "det-f16": {"dtype": "float16", "format": "metcf"},
         "auto-f32": {"dtype": "float32", "format": "auto"}, "auto-f16": {"dtype": "float16", "format": "auto"}}
DEFAULT_PLANS = ("auto-f32", "det-f32", "nondet-f32", "auto-f16", "det-f16")


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def fixture(name: str):
    path = REPO / ".fixtures" / "suitesparse" / "MM" / f"{name}.tar.gz"
    if not path.exists():
        return None
    with tarfile.open(path) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".mtx"))
        with warnings.catch_warnings():  # SciPy's spmatrix-default notice
            warnings.simplefilter("ignore")
            A = scipy.io.mmread(io.BytesIO(tar.extractfile(member).read()))
    A = sp.csr_array(A, dtype=np.float32)
    A.sum_duplicates()
    return A


def issued_us(fn, calls: int | None = None, repeats: int = 5) -> float:
    """Microseconds per call as issued (events around a loop of back-to-back calls); the same method as
    kernels.launch.issued_ms, written here so that --code can time a tree without it."""
    import cupy

    for _ in range(5):
        fn()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    if calls is None:  # ~0.5 ms per loop, 20 to 200 calls
        start.record(), fn(), stop.record(), stop.synchronize()
        calls = int(min(200, max(20, 0.5 / max(cupy.cuda.get_elapsed_time(start, stop), 1e-3))))
    times = []
    for _ in range(repeats):
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()  # synchronize!
        times.append(cupy.cuda.get_elapsed_time(start, stop) * 1e3 / calls)
    return float(np.median(times))


def measure(label, A, N, rng, plans, rounds: int = 3):
    """Each plan built and decided for N, then its GPU time and per-call times taken in ``rounds`` alternating
    rounds (plans in order, then reversed, ...): each number is its fastest round's, every round's in
    ``*_rounds``. A 4-6 us call is host-bound, and one plan timed after another moved by up to 1.24x on the same
    kernel in one pass (HB/bcspwr10 N = 256, H200, docs/kernels-notes.md "Session 43"): rounds take the host's
    drift out of the comparison between plans."""
    import cupy

    from kernels import launch
    from kernels.spmm import SpmmPlan

    rows = np.sort(rng.choice(A.shape[0], min(2048, A.shape[0]), replace=False))
    Bh = rng.standard_normal((A.shape[1], N)).astype(np.float32)
    ref = A[rows].astype(np.float64) @ Bh.astype(np.float64)
    built = []
    for name in plans:
        if PLANS[name]["dtype"] == "float16" and float(np.abs(A.data).max(initial=0)) > 6e4:
            log(f"  {label}: values beyond float16's range, {name} left out")
            continue
        plan = SpmmPlan(A, device="gpu", **PLANS[name])
        B = cupy.asarray(plan.precision.to_storage(Bh))
        out = cupy.empty((A.shape[0], N), dtype=plan.out_dtype)
        plan.run(B, out)  # decides (and autotunes) for this N
        built.append((name, plan, B, out))
    times = {name: {"graph_us": [], "issued_us": [], "issued_nograph_us": []} for name, *_ in built}
    errors = {}
    for r in range(rounds):
        for name, plan, B, out in (built if r % 2 == 0 else built[::-1]):
            ch = plan.choices[N]
            t = times[name]
            try:
                t["graph_us"].append(1e3 * launch.graph_ms(lambda: plan._launch(ch["kernel"], B, out, choice=ch),
                                                           repeats=20, warmup=3))
            except Exception as err:  # recorded, not fatal: the rest of the suite still runs
                errors[name] = f"{type(err).__name__}: {err}"
                log(f"  {label} N={N} {name}: graph timing failed: {errors[name]}")
            t["issued_us"].append(issued_us(lambda: plan.run(B, out)))
            if hasattr(plan, "graphs"):
                plan.graphs = False
                t["issued_nograph_us"].append(issued_us(lambda: plan.run(B, out)))
                plan.graphs = True
    out_rows = []
    for name, plan, B, out in built:
        kernel, t = plan.choices[N]["kernel"], times[name]
        graph_us = min(t["graph_us"]) if t["graph_us"] else float("nan")
        row = {"graph_error": errors.get(name), "matrix": label, "nnz": int(A.nnz), "shape": list(A.shape), "N": N,
               "plan": name, "kernel": kernel, "graph_us": graph_us, "issued_us": min(t["issued_us"]),
               "rounds": rounds, **{f"{k}_rounds": v for k, v in t.items() if v}}
        mapping = getattr(plan._op(kernel), "mapping", None)  # the CSR kernel's tuned mapping (csr_spmm.cu)
        if mapping is not None:
            row["csr_mapping"] = mapping(N)
        if t["issued_nograph_us"]:
            row["issued_nograph_us"] = min(t["issued_nograph_us"])
        out.fill(np.nan)
        plan.run(B, out)
        C = plan.precision.to_float32(cupy.asnumpy(out)[rows]).astype(np.float64)
        row["rel_err"] = float(np.linalg.norm(C - ref) / max(np.linalg.norm(ref), 1e-30)) if np.isfinite(C).all() \
            else float("nan")
        row["tolerance"] = plan.precision.tolerance
        row["overhead_us"] = row["issued_us"] - graph_us
        out_rows.append(row)
        log(f"  {label} N={N} {name}: {kernel} graph {graph_us:.1f} us, issued {row['issued_us']:.1f} us"
            + (f" (no graph {row['issued_nograph_us']:.1f})" if "issued_nograph_us" in row else "")
            + f", err {row['rel_err']:.1e} (fastest of {rounds} rounds)")
    built.clear()
    plan = B = out = None  # noqa: F841 (the plans and their device arrays freed before cuSPARSE is timed)
    for dtype in sorted({PLANS[r["plan"]]["dtype"] for r in out_rows}):  # cuSPARSE in each plan's precision
        cus = cusparse_times(A, Bh, rows, ref, dtype)
        for r in out_rows:
            if PLANS[r["plan"]]["dtype"] == dtype:
                r.update(cus)
        log(f"  {label} N={N} cuSPARSE {dtype} {cus['cus_alg']}: graph {cus['cus_graph_us']:.1f} us, issued "
            f"{cus['cus_issued_us']:.1f} us" + (f", cupyx A @ B {cus['cupyx_issued_us']:.1f} us"
                                                if "cupyx_issued_us" in cus else ""))
    return out_rows


def cusparse_times(A, Bh, rows, ref, dtype: str = "float32") -> dict:
    """cuSPARSE on A in ``dtype`` (a plan's precision: float16 values, B and C for the half plans; its CSR SpMM
    computes in fp32 on CUDA cores) the cheapest ways: its best CSR algorithm (graph replay) through a bound call
    (as issued), and for float32 cupyx's ``A @ B`` as issued (cupyx has no float16 sparse product); its C checked
    on ``rows`` against ``ref``. ``cus_dtype`` says which."""
    import cupy
    import cupyx.scipy.sparse as csp

    from kernels.cusparse import CusparseSpmm
    from kernels.precision import precision

    p = precision(dtype)
    B = cupy.asarray(p.to_storage(Bh))
    out = cupy.empty((A.shape[0], B.shape[1]), dtype=p.storage_dtype)
    op = CusparseSpmm(A, dtype=dtype)
    tuned = op.tune(B, out)
    cus = {"cus_dtype": dtype, "cus_alg": tuned["best"], "cus_graph_us": 1e3 * tuned["ms"][tuned["best"]]}
    if hasattr(op, "bind"):
        bound = op.bind(B, out)
        sptr = cupy.cuda.get_current_stream().ptr
        cus["cus_issued_us"] = issued_us(lambda: bound(sptr))
    else:
        cus["cus_issued_us"] = issued_us(lambda: op.run(B, out))
    if dtype == "float32":
        Ad = csp.csr_matrix((cupy.asarray(A.data), cupy.asarray(A.indices), cupy.asarray(A.indptr)), shape=A.shape)
        cus["cupyx_issued_us"] = issued_us(lambda: Ad @ B)
    C = p.to_float32(cupy.asnumpy(out)[rows]).astype(np.float64)
    cus["cus_rel_err"] = float(np.linalg.norm(C - ref) / max(np.linalg.norm(ref), 1e-30))
    op.close()
    return cus


def reordered(label, A, rng_seed: int = 0):
    """The order a new user gets: tasks.reorder.auto_reorder (TF32 blocks), its rows permuted; (A', report)."""
    from tasks.reorder import auto_reorder

    t0 = time.perf_counter()
    method, perm, report = auto_reorder(A, seed=rng_seed)
    log(f"  {label}: auto_reorder chose {method} in {time.perf_counter() - t0:.1f} s ({report['reason']})")
    return sp.csr_array(A[perm]), {"order": method, "reorder_s": time.perf_counter() - t0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--plans", nargs="+", default=list(DEFAULT_PLANS), choices=list(PLANS))
    ap.add_argument("--label", default="after")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of each (matrix, N)'s timings: each "
                    "plan's fastest is reported (default 3)")
    ap.add_argument("--reorder", choices=("none", "auto"), default="none",
                    help="auto: time the plans on tasks.reorder.auto_reorder's order (what a new user runs), with "
                         "cuSPARSE on the original and on the same reordered matrix (speedups both ways)")
    ap.add_argument("--code", type=Path, help="import kernels from this tree (e.g. the code before a change)")
    ap.add_argument("--before", type=Path, help="a results file of this script to put beside these numbers")
    ap.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--table-from", type=Path, help="reprint the table of a results file and exit (no GPU)")
    ap.add_argument("--matrices", nargs="+", help="only these labels (fixture names like SNAP/email-Enron, or "
                    "generated labels like banded-200k)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        raise SystemExit(f"benchmarks/host_overhead.py: --rounds is {args.rounds}, expected at least 1")
    sys.path.insert(0, str(REPO))
    if args.table_from:
        doc = json.loads(args.table_from.read_text())
        print_table(doc["rows"], doc.get("before_rows", []), args.table_from)
        return 0
    if args.code:
        sys.path.insert(0, str(args.code.resolve()))
    import kernels
    from tasks.fetch.generators import generate

    meta = {**gpu_meta(), "label": args.label, "kernels_from": str(Path(kernels.__file__).parent),
            "command": " ".join(sys.argv), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "method": __doc__}
    rng = np.random.default_rng(0)
    matrices = [(n, lambda n=n: fixture(n)) for n in FIXTURES]
    matrices += [(label, lambda k=kind, p=params: generate(k, f"{p}&seed=1&shuffle=1")) for label, kind, params
                 in GENERATED + (GENERATED_MORE if args.reorder == "auto" else [])]
    if args.matrices:
        unknown = set(args.matrices) - {m[0] for m in matrices}
        if unknown:
            raise SystemExit(f"benchmarks/host_overhead.py: unknown --matrices {sorted(unknown)}; known: "
                             f"{[m[0] for m in matrices]}")
        matrices = [m for m in matrices if m[0] in args.matrices]
    rows = []
    t0 = time.time()
    path = args.out_dir / f"host-overhead-{meta['slug']}-{dt.date.today().isoformat()}-{args.label}.json"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    meta["reorder"] = args.reorder
    for label, make in matrices:
        A = make()
        if A is None:
            log(f"{label}: fixture not present, skipped")
            continue
        A = sp.csr_array(A)
        if args.reorder == "none":
            for N in args.ns:
                rows.extend(measure(label, A, N, rng, args.plans, args.rounds))
            continue
        Ar, order = reordered(label, A)
        for N in args.ns:
            # cuSPARSE on the original matrix, as given, first (C's rows are permuted by the order, not its values)
            sample = np.sort(rng.choice(A.shape[0], min(2048, A.shape[0]), replace=False))
            Bh = rng.standard_normal((A.shape[1], N)).astype(np.float32)
            exact = A[sample].astype(np.float64) @ Bh.astype(np.float64)
            orig = {dtype: cusparse_times(A, Bh, sample, exact, dtype)
                    for dtype in sorted({PLANS[name]["dtype"] for name in args.plans})}
            for dtype, o in orig.items():
                log(f"  {label} N={N} cuSPARSE {dtype} on the original {o['cus_alg']}: issued "
                    f"{o['cus_issued_us']:.1f} us")
            got = measure(label, Ar, N, rng, args.plans, args.rounds)
            for r in got:
                r.update(order, **{f"orig_{k}": v for k, v in orig[PLANS[r["plan"]]["dtype"]].items()})
            rows.extend(got)
        write_json(path, {"meta": {**meta, "partial": True}, "rows": rows, "before_rows": []})
    meta["wall_s"] = time.time() - t0
    before = json.loads(args.before.read_text())["rows"] if args.before else []
    write_json(path, {"meta": meta, "rows": rows, "before_rows": before})
    print_table(rows, before, path)
    return 0


def summary(rows, key="overhead_us"):
    v = np.array([r[key] for r in rows if key in r])
    return (float(np.median(v)), float(v.max())) if v.size else (float("nan"), float("nan"))


def target_summary(rows) -> None:
    """Issue 15's target: on 0.1-3M nnz, N = 128 and 256, each plan as issued over the strongest cuSPARSE as issued
    (its bound call or cupyx, whichever is faster) on the original matrix (and on the same one): geomean >= 1.3x,
    none below 0.95x."""
    for plan in sorted({r["plan"] for r in rows if "cus_dtype" in r or r["plan"].endswith("f32")}):  # same precision
        sel = [r for r in rows if r["plan"] == plan and r["N"] in (128, 256)
               and TARGET_NNZ[0] <= r["nnz"] <= TARGET_NNZ[1]]
        if not sel:
            continue
        for ref, tag in (("orig_", "original"), ("", "same matrix")):
            if not all(f"{ref}cus_issued_us" in r for r in sel):
                continue
            x = np.array([cusparse_us(r, ref) / r["issued_us"] for r in sel])
            worst = sel[int(np.argmin(x))]
            met = "met" if np.exp(np.log(x).mean()) >= 1.3 and x.min() >= 0.95 else "missed"
            print(f"target {plan} vs cuSPARSE {sel[0].get('cus_dtype', 'float32')} as issued on the {tag} "
                  f"({len(sel)} cases, 0.1-3M nnz, N 128/256): "
                  f"geomean {np.exp(np.log(x).mean()):.2f}x, min {x.min():.2f}x ({worst['matrix']} N={worst['N']}, "
                  f"{worst['kernel']}) -> {met} (>= 1.3x, none < 0.95x)")


def print_table(rows, before, path):
    prev = {(r["matrix"], r["N"], r["plan"]): r for r in before}
    print(f"{'matrix':<18}{'nnz':>9}{'N':>5} {'plan':<11}{'kernel':<15}{'graph':>8}{'issued':>8}{'no-graph':>9}"
          f"{'before':>8}{'cus graph':>10}{'cus iss.':>9}{'cupyx':>8}{'vs cus':>7}{'err':>9}")
    for r in rows:
        b = prev.get((r["matrix"], r["N"], r["plan"]))
        best_cus = cusparse_us(r, "")
        print(f"{r['matrix'][:17]:<18}{r['nnz']:>9}{r['N']:>5} {r['plan']:<11}{r['kernel']:<15}{r['graph_us']:>8.1f}"
              f"{r['issued_us']:>8.1f}{r.get('issued_nograph_us', float('nan')):>9.1f}"
              f"{(b['issued_us'] if b else float('nan')):>8.1f}{r['cus_graph_us']:>10.1f}{r['cus_issued_us']:>9.1f}"
              f"{r.get('cupyx_issued_us', float('nan')):>8.1f}{best_cus / r['issued_us']:>7.2f}{r['rel_err']:>9.1e}")
    print("times in us per call; issued = plan.run(B, out) in a Python loop between CUDA events (graph replay "
          "on by default), no-graph = plan.graphs False, before = --before's issued, vs cus = the faster cuSPARSE "
          "as issued / ours as issued")
    for plan in sorted({r["plan"] for r in rows}):
        sel = [r for r in rows if r["plan"] == plan]
        med, mx = summary(sel)
        line = f"{plan}: overhead (issued - graph) median {med:.1f} us, max {mx:.1f} us"
        if any("issued_nograph_us" in r for r in sel):
            ng = [dict(r, overhead_ng=r["issued_nograph_us"] - r["graph_us"]) for r in sel]
            line += "; without graphs median {:.1f} us, max {:.1f} us".format(*summary(ng, "overhead_ng"))
        bsel = [b for b in before if b["plan"] == plan]
        if bsel:
            line += "; before median {:.1f} us, max {:.1f} us".format(*summary(bsel))
        print(line)
    cus = [dict(r, o=r["cus_issued_us"] - r["cus_graph_us"]) for r in rows if r["plan"] == rows[0]["plan"]]
    if cus:
        print("cuSPARSE bound call: overhead median {:.1f} us, max {:.1f} us".format(*summary(cus, "o")))
    target_summary(rows)
    bad = [r for r in rows if not r["rel_err"] <= r["tolerance"]]
    print(f"correctness: {len(rows) - len(bad)}/{len(rows)} plans within their precision's tolerance"
          + (f"; FAILED: {[(r['matrix'], r['N'], r['plan']) for r in bad]}" if bad else ""))
    print(f"results: {path}")


if __name__ == "__main__":
    sys.exit(main())
