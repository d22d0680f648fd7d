"""The four registered formats (ME-TCF, BCSR, Tiled-CSR, CVSE) and the hybrid plan on one GPU, in FP16 against
cuSPARSE half CSR (default) or in float32 (TF32 Tensor Core products) against cuSPARSE float32 CSR (--dtype float32:
the rows `benchmarks/rank_check.py --fit` fits the ranking's float32 constants on).

    PYTHONPATH=. python3 benchmarks/formats.py [--dtype float16|float32] [--ns 128 256 512 1024]
                                               [--matrices dnn graph ...] [--budget-s 420] [--quick] [--tag T]

Matrices, four classes: ``dnn``: DNN-style pruned weights (tasks/fetch/generators.py ``gen:dlmc``: magnitude pruning
at V x 1, M = K = --size, V = --vectors at --sparsities, plus unstructured V = 1 at --v1-sparsities, the Tiled-CSR
paper's setting; generated, as the DLMC collection is not reachable here); ``graph``: rmat (scale 16, 17), sbm (100k
nodes) and R-MAT with a planted dense community (``gen:core``) from the project generators with shuffled labels;
``suitesparse``: the fixtures in .fixtures/ (skipped with a note when absent); ``fem``: a 3-D FEM matrix with 3 dof
per node in its mesh order (benchmarks/bcsr.py's ``fem``) and a scalar 27-point 3-D mesh with shuffled labels (not
in --quick). In FP16 only, values outside [-1, 1] (bcsstk13) are replaced by uniform(-1, 1) to stay in FP16's range
(float32 holds them; the values note says which); the structure is what is measured. Orders: as given, then each
format paper's reordering where the project has it (rowshuffle: Tiled-CSR, smat: BCSR, tca: ME-TCF; DNN weights:
rowshuffle only, as the Tiled-CSR paper), each kept only when it improves its own measure (effective computation
rate, BCSR blocks, TC blocks); smat and tca on the precision's Tensor Core blocks (16 x 16 in FP16, 16 x 8 in TF32
as DTC-SpMM's, meta "order_width"; runs without it: 16 x 16 in both), rowshuffle on its paper's 16 x 16 tiles. Every
format runs on every order.

Per (matrix, order, N): each format, and the hybrid (``format="hybrid"``: its split by the cost model, its
TC part autotuned; in the rows beside the formats, not in the summary's wins), through ``SpmmPlan(A, device="gpu",
dtype=--dtype, format=...)`` autotuned among its own kernels, B and C in the precision's storage dtype: device ms by
CUDA-graph replay (``plan.benchmark``, kernels.launch.graph_ms)
and as issued (``plan.run(B, out)`` in a Python loop between CUDA events, kernels.launch.issued_ms); cuSPARSE CSR
in the same dtype (half or float32, FP32 compute on CUDA cores) at its best algorithm (``CusparseSpmm.tune``, graph
replay; one bound call as issued); in FP16, cuSPARSE Blocked-ELL FP16 16 x 16 (graph replay; skipped where its
padding exceeds --bell-max-gib; in float32 not run: it is cuSPARSE's half-precision Tensor Core path, and meta
says so); for the DNN class dense cuBLAS GEMM in the same dtype (benchmarks/dense.py, float32 with TF32 allowed:
torch.matmul in torch's own CUDA graph; cupy.matmul without torch) and CVSE at the generator's V where Sparse
Vector Compression chose another. Every C is checked on sampled rows against float64 SciPy of the unrounded inputs
(tolerance of kernels.precision for the dtype: 1e-2 FP16, 2e-3 TF32); a failure or a format that raises makes the
run exit 1 after the table.

Matrix preparation (generation, reorderings, effective rates) runs in worker processes ahead of the GPU loop; classes
are interleaved so a --budget-s stop leaves each class partly covered. JSON: benchmarks/results/formats-<device>-
<date>[-<dtype> unless float16][-tag].json (device, versions, command, date, dtype with its precision and tolerance,
per-matrix orders); the table and the summary print last.
"""
from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/: spmm, bcsr, summarize_formats

from dense import Dense  # noqa: E402
from summarize_formats import EXTRA, FORMATS, text_report  # noqa: E402

ORDERS = ("given", "rowshuffle", "smat", "tca")
# plans composed of registered formats, timed beside them (in each row's "ms" / "issued_ms"; the summary tables and
# wins count FORMATS only): the hybrid (kernels.hybrid: dense windows on Tensor Cores, the rest on CUDA cores)
COMPOSED = ("hybrid",)
CLASSES = ("dnn", "graph", "suitesparse", "fem")
SPARSITIES = (0.5, 0.7, 0.8, 0.9, 0.95, 0.98)
GRAPHS = (("rmat-s16", "rmat", "scale=16&edge_factor=16"),
          ("sbm-100k", "sbm", "n=100000&blocks=100&deg_in=16&deg_out=2"),
          ("rmat-s17", "rmat", "scale=17&edge_factor=16"),
          # R-MAT with a planted dense community (4096 rows x 256 shared columns, 2.0M nnz): after TCA the cost model
          # splits it (predicted hybrid 88 / 54 us against 135 / 65 on CUDA cores alone, float32 / FP16, N = 128),
          # where on plain R-MAT, SBM and meshes the hybrid measured within 1 % of its better part
          ("core-s16", "core", "scale=16&edge_factor=16&members=4096&targets=256"))
FIXTURES = ("HB/bcsstk13", "SNAP/email-Enron", "Pajek/Erdos971")
# the "fem" class's scalar 27-point 3-D mesh is plan_time.py's mesh-1M: CVSE led ME-TCF on it in FP16 (0.056 against
# 0.064 ms at N = 256, plan-time-nvidia-h200-2026-11-29-s35.json) where the FEM matrix (3 dof per node) had it behind
SAMPLE_ROWS = 512
DTYPES = ("float16", "float32")
PRECISION_TEXT = {"float16": "FP16 A and B, FP32 accumulation, FP16 C (cuSPARSE: CUDA_R_16F, FP32 compute)",
                  "float32": "float32 A, B and C; TF32 Tensor Core products (mma.m16n8k8), FP32 accumulation "
                             "(cuSPARSE: CUDA_R_32F, FP32 compute on CUDA cores; dense: cuBLAS, TF32 allowed)"}
BELL_ABSENT = ("not run in float32: kernels.cusparse_bell's Blocked-ELL is cuSPARSE's half-precision Tensor Core "
               "path (FP16 / BF16 values); the float32 baselines are cuSPARSE float32 CSR and dense cuBLAS")


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------- matrices (workers)

def cases(args) -> list[dict]:
    """The matrices, classes interleaved (one of each in turn) so a budget stop leaves every class partly run."""
    from plan_time import MATRICES  # benchmarks/ (on sys.path): the plan-time matrices' generator parameters

    size, sps, v1, vectors, graphs, fem_n = args.size, args.sparsities, args.v1_sparsities, args.vectors, GRAPHS, 24
    if args.quick:
        size, sps, v1, vectors, fem_n = 2048, [0.9], [], args.vectors[:1], 12
        graphs = (("rmat-s13", "rmat", "scale=13&edge_factor=16"),)
    first = [0.9, 0.5, 0.98, 0.7, 0.95, 0.8]  # spread, so a budget stop still leaves the range's ends
    order = sorted(set(sps) | set(v1), key=lambda s: (first.index(s) if s in first else len(first), s))
    dnn = [(V, s) for s in order for V in [*(V for V in vectors if s in sps), *([1] if s in v1 else [])]]
    per = {"dnn": [{"label": f"dlmc-{size}-V{V}-s{round(100 * s)}", "class": "dnn", "V": V,
                    "source": ("dlmc", f"rows={size}&cols={size}&sparsity={s}&vector={V}&seed=1")} for V, s in dnn],
           "graph": [{"label": lab, "class": "graph", "source": ("gen", kind, prm)} for lab, kind, prm in graphs],
           "suitesparse": [{"label": f"fixture:{n}", "class": "suitesparse", "source": ("fixture", n)}
                           for n in (FIXTURES[-1:] if args.quick else FIXTURES)],
           "fem": [{"label": f"fem{fem_n}-dof3", "class": "fem", "source": ("fem", fem_n, 3)},
                   *([] if args.quick else [{"label": "mesh27-34", "class": "fem",
                                                 "source": ("gen", "mesh", MATRICES[("mesh", "1M")])}])]}
    out = [c for group in itertools.zip_longest(*per.values()) for c in group if c is not None]
    if args.matrices:
        out = [c for c in out if c["class"] in args.matrices or c["label"].startswith(tuple(args.matrices))]
    for c in out:
        c["orders"] = [o for o in args.orders if c["class"] != "dnn" or o in ("given", "rowshuffle")]
    return out


def build(source, dtype: str = "float16"):
    """(CSR float32, values note) of a case's source; None when a fixture file is absent. In float16, values outside
    [-1, 1] are replaced (FP16's range); float32 keeps them."""
    import bcsr
    import spmm

    kind = source[0]
    if kind == "dlmc":
        from tasks.fetch.generators import generate

        A, note = generate("dlmc", source[1]), "gen:dlmc values (He-scaled, magnitude-pruned)"
    elif kind == "gen":
        A, note = spmm.generated(source[1], source[2], 1), "generator values, labels shuffled"
    elif kind == "fixture":
        A, note = spmm.fixture(source[1]), "as stored"
    else:
        A, note = bcsr.fem(source[1], source[2], 27), "uniform(-1, 1) values"
        A = bcsr.with_values(A, 1)
    if A is None:
        return None
    A = sp.csr_array(A, dtype=np.float32)
    A.sum_duplicates()
    top = float(np.abs(A.data).max()) if A.nnz else 0.0
    if top > 1.0 and dtype == "float16":
        note = f"max |x| {top:.3g} out of FP16's safe range: replaced by uniform(-1, 1)"
        A = bcsr.with_values(A, 1)
    elif top > 1.0:
        note += f"; max |x| {top:.3g} kept (the [-1, 1] replacement is for FP16's range only)"
    return A, note


def prepare(case: dict, dtype: str = "float16"):
    """Worker: the matrix and its orders. {"A", "note", "perms": {order: perm or None}, "orders": {order: info}}."""
    built = build(case["source"], dtype)
    if built is None:
        return None
    A, note = built
    perms, info = reorders(A, case["orders"], order_width(dtype))
    return {"A": A, "note": note, "perms": perms, "orders": info}


def order_width(dtype: str) -> int:
    """The block width smat and tca reorder for in ``dtype``: its Tensor Core blocks' (16 FP16 / BF16, 8 TF32)."""
    from kernels.precision import precision

    return precision(dtype).block_width


def reorders(A, orders, width: int = 16) -> tuple[dict, dict]:
    """({order: perm, or None for "given"} of the orders applied, {order: info}): each format paper's reordering,
    kept only when it improves its own measure, smat and tca on 16 x ``width`` blocks (benchmarks/rank_check.py
    regenerates the recorded orders here)."""
    from kernels.formats.tiledcsr.container import effective_rate
    from tasks.reorder import reorder, reorder_checked
    from tasks.reorder.smat import bcsr_score

    perms, info = {"given": None}, {"given": {"applied": True}}
    for method in (o for o in orders if o != "given"):
        t0 = time.perf_counter()
        if method == "rowshuffle":  # the paper's parameters for 16 x 16 tiles (benchmarks/rowshuffle.py)
            perm = reorder(A, "rowshuffle", slot_rows=16, k_cols=16)
            before, after = effective_rate(A, 16, 16), effective_rate(A[perm], 16, 16)
            applied = after["effective_rate"] > before["effective_rate"]
            extra = {"rate_before": before["effective_rate"], "rate_after": after["effective_rate"],
                     "gain_over_srbcrs": after["gain_over_srbcrs"]}
        elif method == "smat":  # identity when it does not lower the BCSR blocks
            perm = reorder(A, "smat", width=width)
            applied = not np.array_equal(perm, np.arange(A.shape[0]))
            extra = {"bcsr_blocks_before": bcsr_score(A, width)["bcsr_blocks"],
                     "bcsr_blocks_after": bcsr_score(A[perm], width)["bcsr_blocks"]}
        else:  # tca, the flow's rule: kept only when it lowers the TC blocks
            perm, before, after, applied = reorder_checked(A, "tca", seed=0, width=width, n_threads=1)
            extra = {"tc_blocks_before": before["n_tc_blocks"], "tc_blocks_after": after["n_tc_blocks"]}
        info[method] = {"applied": bool(applied), "seconds": time.perf_counter() - t0, **extra}
        if applied:
            perms[method] = perm
    return perms, info


# ------------------------------------------------------------------------------------------------ GPU timing

def rel_err(got, ref) -> float:
    got = np.asarray(got, dtype=np.float64)
    if not np.isfinite(got).all():
        return float("nan")
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))


def reference(A, rows, B32) -> np.ndarray:
    """float64 (A @ B)[rows] of the unrounded inputs, reading only the columns the sampled rows touch."""
    sub = sp.csr_array(A[rows])
    cols = np.unique(sub.indices)
    sub = sub[:, cols].astype(np.float64)
    Bc = B32[cols].astype(np.float64)
    return (sub.toarray() @ Bc) if sub.nnz > 0.1 * sub.shape[0] * max(sub.shape[1], 1) else sub @ Bc


def slim(choice: dict) -> dict:
    return {k: choice[k] for k in ("kernel", "reason", "measured_ms", "ksplit", "bands", "vector",
                                   "predicted_kernel") if k in choice}


def run_order(case, prep, order, ctx) -> None:
    """Every format and baseline on one order of one matrix, at every N (budget permitting); rows into ctx."""
    import cupy

    from kernels import launch
    from kernels.cusparse import CusparseSpmm
    from kernels.cusparse_bell import CusparseBlockedEll
    from kernels.formats.cvse.container import VECTORS
    from kernels.formats.cvse.svc import compress
    from kernels.spmm import SpmmPlan

    args, p, label, A = ctx["args"], ctx["precision"], case["label"], prep["A"]
    dtype = p.name
    perm = prep["perms"][order]
    Ao = A if perm is None else sp.csr_array(A[perm])
    inv = None if perm is None else np.argsort(perm)
    minfo = ctx["matrices"][label]
    setup, errors = {}, {}
    plans = {}
    wanted = [(f, f) for f in args.formats]
    if case["class"] == "dnn" and order == "given" and "cvse" in args.formats and case["V"] in VECTORS:
        wanted.append((EXTRA, "cvse"))  # V = 1 is not a CVSE vector length: SVC's choice only
    for key, fmt in wanted:
        t0 = time.perf_counter()
        try:
            if key == EXTRA:
                svc = plans.get("cvse") and plans["cvse"]._ops["cvse"].svc
                if not svc or svc["vector"] == case["V"]:
                    continue  # Sparse Vector Compression chose the generator's V already
                plans[key] = SpmmPlan(compress(Ao, p, vector=case["V"])[0], device="gpu", dtype=dtype)
            else:
                plans[key] = SpmmPlan(Ao, device="gpu", dtype=dtype, format=fmt, autotune=True)
            setup[key] = time.perf_counter() - t0
        except Exception as err:  # recorded and failing the run, the other formats still measured
            errors[key] = f"{type(err).__name__}: {err}"
            ctx["failures"].append(f"{label} {order}: {key} plan raised {errors[key]}")
    if "cvse" in plans:
        svc = plans["cvse"]._ops["cvse"].svc
        minfo.setdefault("cvse_svc", {})[order] = {k: svc.get(k) for k in ("vector", "reason", "padding",
                                                                         "new_sparsity")}
    minfo.setdefault("setup_s", {})[order] = setup
    cus = CusparseSpmm(Ao, dtype=dtype)
    bell = None  # float32: none (meta's "blocked_ell" says why)
    if dtype == "float16":
        try:
            bell = CusparseBlockedEll(Ao, block=16, dtype="float16", max_bytes=int(args.bell_max_gib * 2**30))
            minfo.setdefault("bell", {})[order] = {"fill": bell.info["fill"],
                                                   "value_bytes": bell.info["value_bytes"]}
        except ValueError as err:  # padding every block row to the longest does not fit
            minfo.setdefault("bell", {})[order] = {"why": str(err)}
    dense = Dense(A, dtype) if case["class"] == "dnn" and order == "given" else None  # its time ignores row order
    if dense is not None:
        ctx["meta"]["dense"] = dense.name
    stream = cupy.cuda.get_current_stream().ptr
    issued_repeats = max(5, args.repeats // 4)
    for N in args.ns:
        if time.time() - ctx["t_start"] > args.budget_s:
            ctx["skipped"].append(f"{label} {order} N={N}")
            continue
        t0 = time.time()
        B, ref, rows = ctx["operands"](N)
        pick = cupy.asarray(rows if inv is None else inv[rows])
        M = Ao.shape[0]
        row = {"matrix": label, "class": case["class"], "order": order, "N": N, "shape": list(Ao.shape),
               "nnz": int(Ao.nnz), "ms": {}, "issued_ms": {}, "choice": {}, "rel_err": {}, "errors": dict(errors)}

        def check(key, C):  # the worse of the key's checks is kept (NaN stays NaN)
            e, prev = rel_err(p.to_float32(cupy.asnumpy(C[pick])), ref), row["rel_err"].get(key)
            row["rel_err"][key] = e if prev is None or np.isnan(e) or (not np.isnan(prev) and e > prev) else prev

        def measure(key, fn):  # one candidate; an exception is recorded and fails the run, the rest goes on
            try:
                fn()
            except Exception as err:
                row["errors"][key] = f"{type(err).__name__}: {err}"

        def plan_case(key, plan):
            out = cupy.empty((M, N), dtype=p.storage_dtype)
            out.view(cupy.uint8).fill(0xFF)  # poisoned: all-ones bytes are NaN in float16 and float32 alike
            plan.run(B, out)  # decides (autotunes) for this N
            check(key, out)
            row["choice"][key] = slim(plan.choices[N])
            row["ms"][key] = plan.benchmark(B, repeats=args.repeats)["median_ms"]
            row["issued_ms"][key] = launch.issued_ms(lambda: plan.run(B, out), repeats=issued_repeats)
            check(key, out)  # after the bound call's graph replays too

        def cusparse_case():
            C = cupy.empty((M, N), dtype=p.storage_dtype)
            t = cus.tune(B, C, repeats=args.repeats)
            row["ms"]["cusparse"], row["cusparse_alg"] = t["ms"][t["best"]], t["best"]
            cus.run(B, C)
            check("cusparse", C)
            bound = cus.bind(B, C)
            row["issued_ms"]["cusparse"] = launch.issued_ms(lambda: bound(stream), repeats=issued_repeats)
            bound.close()

        def bell_case():
            Bp, Cp = bell.padded_b(B), bell.padded_c(N)
            bell.run(Bp, Cp)
            check("cusparse-bell", Cp[:M])
            row["ms"]["cusparse-bell"] = launch.graph_ms(lambda: bell.run(Bp, Cp), repeats=args.repeats)

        def dense_case():
            row["ms"]["dense"], row["issued_ms"]["dense"], C = dense.time(B, args.repeats, issued_repeats)
            check("dense", cupy.asarray(C))

        for key, plan in plans.items():
            measure(key, lambda: plan_case(key, plan))
        measure("cusparse", cusparse_case)
        if bell is not None:
            measure("cusparse-bell", bell_case)
        if dense is not None:
            measure("dense", dense_case)
        for key, e in row["rel_err"].items():
            if not e <= p.tolerance:
                ctx["failures"].append(f"{label} {order} N={N} {key}: rel err {e:.3g} > {p.tolerance}")
        for key in set(row["errors"]) - set(errors):
            ctx["failures"].append(f"{label} {order} N={N}: {key} raised {row['errors'][key]}")
        if order == "given":
            ctx["cus_orig"][(label, N)] = (row["ms"].get("cusparse"), row["issued_ms"].get("cusparse"))
        row["cusparse_original_ms"], row["cusparse_original_issued_ms"] = ctx["cus_orig"].get((label, N), (None,) * 2)
        row["wall_s"] = time.time() - t0
        ctx["rows"].append(row)
        log(f"{label} {order} N={N}: " + " ".join(f"{k}={v:.4f}" for k, v in row["ms"].items())
            + f" ({row['wall_s']:.1f} s)")
    for plan in plans.values():
        plan.release()
    cus.close()
    if bell is not None:
        bell.close()
    plans.clear()
    cupy.get_default_memory_pool().free_all_blocks()


# ------------------------------------------------------------------------------------------------- reporting

def results_name(slug: str, date: str, dtype: str, tag: str | None) -> str:
    """formats-<device>-<date>[-<dtype>][-tag].json: float16 files keep the name they had before the float32 mode."""
    return f"formats-{slug}-{date}{'' if dtype == 'float16' else '-' + dtype}{'-' + tag if tag else ''}.json"


def precision_meta(dtype: str) -> dict:
    """The meta keys that say what a run's numbers mean: dtype, the precision in words, the accuracy contract, and in
    float32 why Blocked-ELL is absent."""
    from kernels.precision import precision

    out = {"dtype": dtype, "tolerance": precision(dtype).tolerance, "precision": PRECISION_TEXT[dtype],
           "order_width": order_width(dtype)}
    if dtype != "float16":
        out["blocked_ell"] = BELL_ABSENT
    return out


def write(path, ctx):
    ctx["meta"]["wall_s"] = time.time() - ctx["t_start"]
    ctx["meta"]["skipped"] = ctx["skipped"]
    ctx["meta"]["matrices"] = ctx["matrices"]
    doc = {"meta": ctx["meta"], "rows": ctx["rows"], "failures": ctx["failures"]}
    path.write_text(json.dumps(doc, indent=1, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))


# ------------------------------------------------------------------------------------------------------ main

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", choices=DTYPES, default="float16",
                    help="precision of A, B and C (float32: TF32 Tensor Core products, against cuSPARSE float32 CSR "
                         "and dense cuBLAS with TF32; no Blocked-ELL)")
    ap.add_argument("--ns", type=int, nargs="+", default=[128, 256, 512, 1024], help="dense columns N")
    ap.add_argument("--size", type=int, default=4096, help="M = K of the DNN-style matrices (multiple of 16)")
    ap.add_argument("--sparsities", type=float, nargs="+", default=list(SPARSITIES), help="0.5 .. 0.98")
    ap.add_argument("--vectors", type=int, nargs="+", default=[8, 4], help="gen:dlmc V (1, 2, 4, 8, 16); issue "
                                                                          "13's DNN set is V = 4 and 8")
    ap.add_argument("--v1-sparsities", type=float, nargs="*", default=[0.5, 0.9],
                    help="also gen:dlmc V = 1 (unstructured, the Tiled-CSR paper's DLMC setting) at these "
                         "sparsities (default: the paper's endpoints, 1.82x at 90%% and 3.89x at 50%%)")
    ap.add_argument("--matrices", nargs="+", help="only these classes (dnn graph suitesparse fem) or labels "
                                                  "starting with one of these (e.g. dlmc-4096-V8-s90 fixture:HB)")
    ap.add_argument("--formats", nargs="+", default=list(FORMATS + COMPOSED),
                    help="subset of " + " ".join(FORMATS + COMPOSED))
    ap.add_argument("--orders", nargs="+", default=list(ORDERS), help="subset of " + " ".join(ORDERS))
    ap.add_argument("--repeats", type=int, default=20, help="graph replays per timing")
    ap.add_argument("--bell-max-gib", type=float, default=0.5,
                    help="skip Blocked-ELL where its padded values exceed this many GiB (host build time)")
    ap.add_argument("--budget-s", type=float, default=420.0, help="start no new case after this many seconds")
    ap.add_argument("--workers", type=int, default=None, help="matrix-preparation processes (default cores - 2)")
    ap.add_argument("--quick", action="store_true", help="tiny run: M = K = 2048 at 90%% (first of --vectors), "
                                                         "rmat scale 13, Erdos971, fem12, N = 128 and 512")
    ap.add_argument("--tag", help="suffix of the results file")
    ap.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    if any(n < 1 for n in args.ns):
        ap.error(f"--ns must be positive, got {args.ns}")
    if any(not 0.5 <= s <= 0.98 for s in args.sparsities + args.v1_sparsities):
        ap.error(f"--sparsities and --v1-sparsities must lie in [0.5, 0.98] (gen:dlmc's DLMC range), got "
                 f"{args.sparsities} and {args.v1_sparsities}")
    if any(v not in (1, 2, 4, 8, 16) for v in args.vectors):
        ap.error(f"--vectors must be among 1, 2, 4, 8, 16, got {args.vectors}")
    if args.size < 16 or args.size % 16:
        ap.error(f"--size must be a positive multiple of 16 (V and 16-row windows), got {args.size}")
    for name, given, known in (("--formats", args.formats, FORMATS + COMPOSED), ("--orders", args.orders, ORDERS)):
        if set(given) - set(known):
            ap.error(f"{name}: unknown {sorted(set(given) - set(known))}; choose from {' '.join(known)}")
    if args.orders[0] != "given":
        args.orders = ["given"] + [o for o in args.orders if o != "given"]  # the baseline order comes first
    if args.repeats < 3 or args.budget_s <= 0 or args.bell_max_gib <= 0:
        ap.error("--repeats must be >= 3, --budget-s and --bell-max-gib > 0")
    if args.quick:
        args.ns = [128, 512]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from kernels.formats import get

    unready = [f for f in args.formats if f not in COMPOSED and not get(f).gpu_ready]  # hybrid: a plan, not a format
    if unready:
        print(f"formats {unready} are registered gpu_ready=False ({get(unready[0]).gpu_not_ready_why}); flip them in "
              f"kernels/formats/<name>/plugin.py once their GPU tests pass, or pass --formats without them",
              file=sys.stderr)
        return 2
    import multiprocessing

    todo = cases(args)
    # a few processes, one thread each: the GPU loop's host timings ("issued") need their core undisturbed
    workers = args.workers or max(1, min(4, (os.cpu_count() or 2) - 2, len(todo)))
    pool = multiprocessing.get_context("spawn").Pool(workers)  # before CUDA is touched; matrices prepared ahead
    first = sorted(range(len(todo)), key=lambda i: todo[i]["class"] != "graph")  # smat on graphs takes longest
    jobs = {i: pool.apply_async(prepare, (todo[i], args.dtype)) for i in first}
    pending = [jobs[i] for i in range(len(todo))]
    try:
        return _run(args, todo, pending)
    finally:
        pool.terminate()


def _run(args, todo, pending) -> int:
    import cupy

    from kernels.precision import precision
    from machine import gpu_meta

    t_start = time.time()
    gpu = gpu_meta()
    versions = {}
    try:
        import torch

        versions.update(torch=torch.__version__, torch_cuda=torch.version.cuda)
    except ImportError:
        pass
    p = precision(args.dtype)
    from kernels.launch import copy_bandwidth_gbs

    meta = {**gpu, "copy_gbs": copy_bandwidth_gbs(), **versions, "command": " ".join(sys.argv),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **precision_meta(args.dtype),
            "timing": "graph: kernels.launch.graph_ms (CUDA-graph replay, median of --repeats); issued: "
                      "kernels.launch.issued_ms of plan.run(B, out) (cuSPARSE: one bound call)",
            "dnn_matrices": "gen:dlmc (DLMC-style, generated: the DLMC collection is not reachable here)",
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / results_name(gpu["slug"], dt.date.today().isoformat(), args.dtype, args.tag)
    ctx = {"args": args, "precision": p, "t_start": t_start, "meta": meta, "rows": [], "failures": [],
           "skipped": [], "matrices": {}, "cus_orig": {}}
    for case, job in zip(todo, pending):
        label = case["label"]
        if time.time() - t_start > args.budget_s:
            ctx["skipped"].append(label)
            log(f"budget reached: skipping {label}")
            continue
        try:  # a lost worker (killed for memory) would leave get() waiting: bounded by the budget
            prep = job.get(timeout=max(1.0, args.budget_s - (time.time() - t_start)) + 60.0)
        except Exception as err:  # a worker's generator or reordering raised or timed out: the rest still runs
            ctx["failures"].append(f"{label}: preparation raised {type(err).__name__}: {err}")
            continue
        if prep is None:
            ctx["skipped"].append(f"{label} (fixture file absent)")
            log(f"{label}: fixture absent (.fixtures/), skipped")
            continue
        A = prep["A"]
        ctx["matrices"][label] = {"class": case["class"], "shape": list(A.shape), "nnz": int(A.nnz),
                                  "values": prep["note"], "source": list(case["source"]), "orders": prep["orders"]}
        log(f"{label}: {A.shape} nnz {A.nnz:,}; orders " + ", ".join(
            f"{o}{'' if i['applied'] else ' (not applied)'}" for o, i in prep["orders"].items()))
        rng = np.random.default_rng(7)
        rows = np.sort(rng.choice(A.shape[0], min(SAMPLE_ROWS, A.shape[0]), replace=False))
        operands = {}

        def get_operands(N, A=A, rows=rows, operands=operands):  # B and the reference once per (matrix, N)
            if N not in operands:
                B32 = np.random.default_rng(N).standard_normal((A.shape[1], N), dtype=np.float32)
                operands[N] = (cupy.asarray(p.to_storage(B32)), reference(A, rows, B32), rows)
            return operands[N]

        ctx["operands"] = get_operands
        for order in prep["perms"]:
            if time.time() - t_start > args.budget_s:
                ctx["skipped"].append(f"{label} {order}")
                continue
            run_order(case, prep, order, ctx)
            write(path, ctx)
        operands.clear()
        cupy.get_default_memory_pool().free_all_blocks()
    write(path, ctx)
    print("\n".join(text_report(ctx["rows"], ctx["matrices"], path, p.tolerance, dtype=args.dtype)))
    if ctx["failures"]:
        print("FAILURES:\n" + "\n".join(ctx["failures"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
