"""SpMM benchmark on one GPU: ME-TCF TC kernels (window, strict balance) vs the best cuSPARSE CSR algorithm.

    PYTHONPATH=. python3 benchmarks/spmm.py [--calibrate] [--suite quick|full] [--out-dir DIR] [--budget-s S]

Matrices: fixture matrices (.fixtures) and seeded generators (tasks.fetch.generators: rmat, sbm, mesh, banded,
longrow) from ~1M to 100M+ nonzeros. Orders: "none" (the generator's shuffled labels: the ORIGINAL matrix),
"tca" (tasks.reorder, only below --tca-max-nnz so it finishes in time), "natural" (the generator's own order,
labelled as the ideal). Per (matrix, order, N): median ms of >= 20 timed runs after warm-up of each kernel and
of every cuSPARSE algorithm, each run a replay of a captured CUDA graph between CUDA events, divided by the calls
it holds (kernels.launch.graph_ms: the GPU's time without Python's launch overhead; the window kernel's and
cuSPARSE's host-inclusive single-call times are kept beside them), GFLOP/s (2 nnz N), speedup of the selected
path over the best cuSPARSE algorithm on the original and on the same matrix, % of the memory floor (A, B, C
moved once at the device-to-device copy bandwidth measured in this run), MeanNnzTC/128, the selector's AR and choice.
Beside the replay times, every case is also timed as a user calls it (issue 15): ``SpmmPlan(A)`` (the defaults:
format "auto" since 2026-11-28 (ME-TCF before), deterministic TF32, automatic graph replay of repeated calls) with
``plan.run(B, out)`` in a Python loop between CUDA events (kernels.launch.issued_ms), against cuSPARSE's best
algorithm through a bound cusparseSpMM timed the same way (the cheapest call from CuPy's process), with speedups as
issued on the original and on the same matrix.
Correctness is checked in the same run on fresh random B (a 2048-row sample against float64 SciPy), the plan's C
included. --calibrate first fits kernels.formats.metcf.selector's constants on
uniform matrices and writes calibration-<device>.json next to the results. JSON and a table, the table last.
"""
from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from machine import gpu_meta  # noqa: E402  (benchmarks/ is the script folder)
from configs import fixture_roots  # noqa: E402
from kernels import launch  # noqa: E402
from kernels.formats.metcf import launch as metcf_launch  # noqa: E402
from kernels.formats.metcf import selector  # noqa: E402
from kernels.formats.metcf.config import CONFIG, V0_CONFIG, KernelConfig  # noqa: E402
from kernels.cusparse import CusparseSpmm  # noqa: E402
from kernels.formats.metcf.gpu import csr_to_metcf_gpu  # noqa: E402
from kernels.formats.metcf.plugin import wants_autotune  # noqa: E402

SUITES = {  # (label, generator kind, params without shuffle/seed); sizes chosen to fit one ~6-minute device call
    "quick": [("rmat-s17", "rmat", "scale=17&edge_factor=16"),
              ("sbm-100k", "sbm", "n=100000&blocks=100&deg_in=16&deg_out=2")],
    "full": [("rmat-s17", "rmat", "scale=17&edge_factor=16"),
             ("sbm-100k", "sbm", "n=100000&blocks=100&deg_in=16&deg_out=2"),
             ("mesh3d-160", "mesh", "nx=160&ny=160&nz=160&stencil=27"),
             ("banded-1M", "banded", "n=1000000&bandwidth=8"),
             ("sbm-1M", "sbm", "n=1000000&blocks=2000&deg_in=20&deg_out=2"),
             ("rmat-s20", "rmat", "scale=20&edge_factor=16"),
             ("longrow-40k", "longrow", "rows=40000&min_row_nnz=300&max_row_nnz=600"),
             ("mesh3d-80", "mesh", "nx=80&ny=80&nz=80&stencil=27")],
}
FIXTURES = ["SNAP/email-Enron", "HB/bcsstk13", "Pajek/Erdos971"]
NS = (128, 256, 512)
TIMING = ("`ms`: device time per call: median of the replays of a CUDA graph holding back-to-back calls (enough "
          "for ~0.5 ms), CUDA events around each replay, divided by the calls (kernels.launch.graph_ms), for the TC "
          "kernels, every cuSPARSE algorithm and torch.sparse.mm alike; `ms_issued`: per call as issued, CUDA "
          "events around a Python loop of back-to-back calls divided by the calls, median of 5 loops "
          "(kernels.launch.issued_ms), for SpmmPlan.run (defaults) and cuSPARSE's best algorithm through a bound "
          "call; `ms_single_call`: one call between events, synchronized each time, for the window kernel and "
          "cuSPARSE")
V0 = V0_CONFIG  # v0: A tiles through shared memory, one barrier per TC block (docs/kernels-notes.md)
SWEEP = {  # --sweep: window-kernel variants timed on the same matrices (docs/kernels-notes.md, versions v2-v6)
    "v0-smem": V0,
    "v2-u1-mb9": KernelConfig(unroll=1, min_blocks_per_sm=9),
    "v6-dense-u2-mb8": KernelConfig(a_dense=True, unroll=2, min_blocks_per_sm=8),
    "v6-dense-s2-mb6": KernelConfig(a_dense=True, warp_slices=2, min_blocks_per_sm=6, balanced_min_blocks_per_sm=6),
    "v6-dense-s2-mb7": KernelConfig(a_dense=True, warp_slices=2, min_blocks_per_sm=7, balanced_min_blocks_per_sm=6),
    "v6-dense-s2-u2-mb5": KernelConfig(a_dense=True, warp_slices=2, unroll=2, min_blocks_per_sm=5,
                                       balanced_min_blocks_per_sm=5),
}
SWEEP_MATRICES = [("sbm-1M", "sbm", "n=1000000&blocks=2000&deg_in=20&deg_out=2"),
                  ("mesh3d-80", "mesh", "nx=80&ny=80&nz=80&stencil=27"),
                  ("banded-1M", "banded", "n=1000000&bandwidth=8"),
                  ("longrow-40k", "longrow", "rows=40000&min_row_nnz=300&max_row_nnz=600")]


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def fixture_path(rel: str) -> Path | None:
    """``rel`` under the first fixtures folder holding it (configs.fixture_roots: TCSPMM_FIXTURES, .fixtures or
    ../shared/fixtures, the tests' order); None when none does."""
    return next((r / rel for r in fixture_roots(REPO) if (r / rel).is_file()), None)


def fixture(name: str):
    """A SuiteSparse fixture as float32 CSR (`fixture_path`); None when no fixtures folder holds it."""
    path = fixture_path(f"suitesparse/MM/{name}.tar.gz")
    if path is None:
        return None
    with tarfile.open(path) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".mtx"))
        return sp.csr_array(scipy.io.mmread(io.BytesIO(tar.extractfile(member).read())), dtype=np.float32)


def generated(kind: str, params: str, shuffle: int):
    from tasks.fetch.generators import generate

    return generate(kind, f"{params}&seed=1&shuffle={shuffle}")


class Case:
    """One matrix in one order on the device: ME-TCF (GPU conversion), cuSPARSE op, selector predictions."""

    def __init__(self, A, device_model, cal):
        import cupy

        self.A, self.nnz, self.shape = A, int(A.nnz), tuple(int(s) for s in A.shape)
        d = [cupy.asarray(x) for x in (A.indptr, A.indices, A.data)]

        def conv():  # CSR on the device -> the arrays the kernels read (ME-TCF + fragments or bitmaps)
            a = csr_to_metcf_gpu(d[0], d[1], d[2], self.shape)
            dm = metcf_launch.from_device_arrays(a.shape, a["row_window_offset"], a["tc_offset"], a["tc_local_id"],
                                           a["sparse_a_to_b"], a["data"])
            metcf_launch.a_arrays(dm, CONFIG)  # what the default kernels read besides ME-TCF (bitmaps or fragments)
            return a, dm

        self.convert_ms = launch.median_ms(conv, repeats=9, warmup=2)  # host syncs inside: a median of few is noisy
        a, self.dm = conv()
        self.metcf_bytes = int(sum(x.nbytes for x in (a["row_window_offset"], a["tc_offset"], a["tc_local_id"],
                                                       a["sparse_a_to_b"], a["data"])))
        del a, d
        self.cus = CusparseSpmm(A)
        self.device_model, self.cal = device_model, cal
        self.ws = None
        self.torch_timing = None  # "graph" or "single call", once torch_ms ran
        self.split_by_k = {}  # ksplit -> device ms of metcf_spmm_split at the last measured N

    def run(self, kernel, B, out):
        if kernel == "metcf-window":
            return metcf_launch.spmm_window(self.dm, B, out)
        if kernel == "metcf-window-v0":  # the shared-memory version, for the same-run comparison
            return metcf_launch.spmm_window(self.dm, B, out, V0)
        if kernel.startswith("sweep:"):
            return metcf_launch.spmm_window(self.dm, B, out, SWEEP[kernel[6:]])
        if kernel.startswith("metcf-split-k"):  # metcf-split-k<ksplit>
            return metcf_launch.spmm_split(self.dm, B, out, ksplit=int(kernel[len("metcf-split-k"):]))
        if kernel == "metcf-balanced":
            need = metcf_launch.workspace_elems(self.dm, B.shape[1])
            if self.ws is None or self.ws.size < need:
                import cupy

                self.ws = cupy.empty(max(need, 1), dtype=cupy.float32)
            return metcf_launch.spmm_balanced(self.dm, B, out, self.ws)
        return self.cus.run(B, out)

    def measure(self, N, repeats, plan=None):
        """Device ms (launch.graph_ms) of each kernel at N, the split kernel at its fastest ksplit; cuSPARSE's
        fastest algorithm timed the same way; host-inclusive single-call ms (launch.median_ms) of the window
        kernel and cuSPARSE; and, with ``plan`` (an SpmmPlan of the same matrix), ms per call as issued
        (launch.issued_ms) of ``plan.run`` and of cuSPARSE's best algorithm through a bound call."""
        import cupy

        B = cupy.random.default_rng(N).standard_normal((self.shape[1], N), dtype=cupy.float32)
        out = cupy.empty((self.shape[0], N), dtype=cupy.float32)
        pred = selector.predict(self.dm.row_window_offset_host, self.nnz, self.shape, N, self.device_model,
                                self.cal)
        ks = metcf_launch.ksplits(N) if pred["split_ksplit"] else []
        kernels = ["metcf-window", "metcf-balanced", *(f"metcf-split-k{k}" for k in ks)]
        self.run("metcf-balanced", B, out)  # its workspace: allocated outside the capture
        times = {k: launch.graph_ms(lambda k=k: self.run(k, B, out), repeats=repeats, warmup=5) for k in kernels}
        self.split_by_k = {k: times.pop(f"metcf-split-k{k}") for k in ks}  # SpmmPlan's autotune tries every k
        if ks:
            times["metcf-split"] = min(self.split_by_k.values())
        tuned = self.cus.tune(B, out, repeats=repeats, warmup=3)
        times["cusparse"] = tuned["ms"][tuned["best"]]
        single = {"metcf-window": launch.median_ms(lambda: self.run("metcf-window", B, out), repeats=repeats),
                  "cusparse": launch.median_ms(lambda: self.cus.run(B, out), repeats=repeats)}
        if N == 128:  # version comparison and the torch cross-check baseline at N = 128 only (time budget)
            times["metcf-window-v0"] = launch.graph_ms(lambda: self.run("metcf-window-v0", B, out),
                                                       repeats=repeats, warmup=5)
            times.update(self.torch_ms(B, repeats))
        choice = selector.choose(pred, self.cal)
        if plan is not None:
            single["issued"] = self.issued(plan, B, out, tuned["best"])
        return times, tuned, pred, choice, single

    def issued(self, plan, B, out, cus_alg) -> dict:
        """ms per call as issued of plan.run(B, out) (its first call decides and autotunes for this N) and of
        cuSPARSE's `cus_alg` through a bound call; the plan's kernel."""
        import cupy

        plan.run(B, out)
        ms = {"plan": launch.issued_ms(lambda: plan.run(B, out))}
        bound, sptr = self.cus.bind(B, out, cus_alg), cupy.cuda.get_current_stream().ptr
        ms["cusparse"] = launch.issued_ms(lambda: bound(sptr))
        return {"ms": ms, "plan_kernel": plan.choices[int(B.shape[1])]["kernel"]}

    def check_plan(self, plan, N, rng) -> float:
        """Relative error of plan.run on a fresh B (2048 sampled rows against float64 SciPy); NaN-poisoned C."""
        import cupy

        B = rng.standard_normal((self.shape[1], N)).astype(np.float32)
        rows = np.sort(rng.choice(self.shape[0], min(2048, self.shape[0]), replace=False))
        ref = self.A[rows].astype(np.float64) @ B.astype(np.float64)
        out = cupy.full((self.shape[0], N), np.nan, dtype=cupy.float32)
        C = cupy.asnumpy(plan.run(cupy.asarray(B), out)[cupy.asarray(rows)]).astype(np.float64)
        return float(np.linalg.norm(C - ref) / max(np.linalg.norm(ref), 1e-30)) if np.isfinite(C).all() \
            else float("nan")

    def torch_ms(self, B, repeats):
        """torch.sparse.mm (CSR, fp32) on the same B: a second baseline; {} without torch/CUDA."""
        try:
            import torch
        except ImportError:
            return {}
        if not torch.cuda.is_available():
            return {}
        A = self.A
        with torch.sparse.check_sparse_tensor_invariants(False):
            At = torch.sparse_csr_tensor(torch.as_tensor(A.indptr.astype(np.int64)),
                                         torch.as_tensor(A.indices.astype(np.int64)), torch.as_tensor(A.data),
                                         size=A.shape, device="cuda")
        Bt = torch.as_tensor(B, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the default stream, as torch's graph capture requires
            for _ in range(5):
                torch.sparse.mm(At, Bt)
        torch.cuda.current_stream().wait_stream(side)
        try:  # timed like launch.graph_ms: one captured call, replayed
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                torch.sparse.mm(At, Bt)
            call, how = graph.replay, "graph"
        except RuntimeError as err:  # torch refused to capture its sparse path: single calls, said so
            log(f"  torch.sparse.mm graph capture failed ({err}); timing single calls")
            call, how = (lambda: torch.sparse.mm(At, Bt)), "single call"
        call()
        ts = []
        for _ in range(repeats):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            call()
            e1.record()
            e1.synchronize()  # synchronize!
            ts.append(e0.elapsed_time(e1))
        self.torch_timing = how
        return {"torch": float(np.median(ts))}

    def check(self, N, rng):
        """Max relative error (norm-wise, 2048 sampled rows) of each kernel on a fresh B; NaN-poisoned C."""
        import cupy

        B = rng.standard_normal((self.shape[1], N)).astype(np.float32)
        rows = np.sort(rng.choice(self.shape[0], min(2048, self.shape[0]), replace=False))
        ref = self.A[rows].astype(np.float64) @ B.astype(np.float64)
        Bd, errs = cupy.asarray(B), {}
        kmax = metcf_launch.max_ksplit(N)
        for k in ("metcf-window", "metcf-balanced", *(f"metcf-split-k{kmax}",) * (kmax > 1), "cusparse"):
            out = cupy.full((self.shape[0], N), np.nan, dtype=cupy.float32)
            C = cupy.asnumpy(self.run(k, Bd, out)[cupy.asarray(rows)])
            errs[k] = float(np.linalg.norm(C - ref) / max(np.linalg.norm(ref), 1e-30)) if np.isfinite(C).all() \
                else float("nan")
        return errs


def calibrate(out_dir: Path, device_model) -> dict:
    """Fit Calibration on uniform matrices (AR ~ 1): window kernel, balanced kernel and cuSPARSE at N 128/256.

    Sizes from 2^10 to 2^18 rows, so the fixed costs (launch and host overhead, which decide small matrices) are
    measured, not extrapolated; least squares on RELATIVE errors (each sample weighted by 1 / its time), so the
    small samples count as much as the large ones.
    """
    from tasks.fetch.generators import generate

    rows_tc, rows_cus, ratios, samples = [], [], [], []
    for n_rows, deg in ((1 << 10, 8), (1 << 13, 8), (1 << 18, 2), (1 << 18, 8), (1 << 18, 32)):
        A = generate("uniform", f"rows={n_rows}&nnz={deg * n_rows}&seed=2")
        case = Case(A, device_model, selector.Calibration())
        for N in (128, 256):
            times, tuned, pred, _, _ = case.measure(N, 20)
            chunks, slots = pred["plain_column_chunks"], pred["plain_slots"]  # as selector.predict schedules
            rows_tc.append(([1.0, pred["n_windows"] * chunks / slots, pred["n_blocks"] * chunks / slots],
                            times["metcf-window"] * 1e3))
            rows_cus.append(([1.0, A.nnz * N / 1e3, A.shape[0] * N / 1e3], times["cusparse"] * 1e3))
            if n_rows >= 1 << 18:  # the balance overhead to win back, where the kernels (not launches) dominate
                ratios.append(times["metcf-balanced"] / times["metcf-window"])
            samples.append({"rows": n_rows, "deg": deg, "N": N, "nnz": int(A.nnz), "n_blocks": pred["n_blocks"],
                            **times})
            log(f"calibrate uniform rows={n_rows} deg={deg} N={N}: {times}")

    def fit(rows):  # min sum ((x . c - t) / t)^2
        X = np.array([r[0] for r in rows]) / np.array([[r[1]] for r in rows])
        return np.linalg.lstsq(X, np.ones(len(rows)), rcond=None)[0]

    launch_us, tb_us, block_us = (max(float(x), 0.0) for x in fit(rows_tc))
    a_us, b_ns, c_ns = (max(float(x), 0.0) for x in fit(rows_cus))
    cal = {"launch_us": launch_us, "tb_us": tb_us, "block_us": block_us,
           "balance_threshold": max(1.0, float(np.median(ratios))), "cus_a_us": a_us, "cus_b_ns": b_ns,
           "cus_c_ns": c_ns}
    doc = {"device": device_model.name, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "command": " ".join(sys.argv), "kernel_config": CONFIG.__dict__,
           "method": "least squares of RELATIVE errors of measured ms on uniform matrices (rows 2^10 and 2^13 at "
                     "8 nnz per row, 2^18 at 2/8/32; N 128/256); balance_threshold = median(balanced / window) "
                     "at 2^18 rows (AR ~ 1, so the overhead to win back)",
           "calibration": cal, "samples": samples}
    path = out_dir / f"calibration-{selector.slug(device_model.name)}.json"
    path.write_text(json.dumps(doc, indent=1))
    log(f"calibration -> {path}: {cal}")
    return cal


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=sorted(SUITES), default="full")
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--ns", type=int, nargs="+", default=list(NS))
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--tca-max-nnz", type=int, default=25_000_000)
    ap.add_argument("--matrices", nargs="+", help="only these labels (e.g. fixture:HB/bcsstk13 sbm-1M); one "
                    "suite split over several device calls, each with its own --part")
    ap.add_argument("--part", help="suffix of the results file (spmm-<device>-<date>-<part>.json); "
                    "benchmarks/summarize.py pools the parts of the newest day")
    ap.add_argument("--prefix", default="spmm", choices=("spmm", "reproduce-spmm"),
                    help="results file family: spmm (summarized) or reproduce-spmm (a rerun of the same commands, "
                    "compared against it in docs/benchmarks.md)")
    ap.add_argument("--sweep", action="store_true", help="time the window-kernel variants of SWEEP on "
                    "SWEEP_MATRICES (tca and natural order, N 128/256), check each, write kernel-sweep-*.json, exit")
    ap.add_argument("--table-from", type=Path, help="reprint the table of a results JSON and exit (no GPU)")
    ap.add_argument("--budget-s", type=float, default=330.0, help="stop starting new matrices after this")
    args = ap.parse_args(argv)
    if args.table_from:
        print_table(json.loads(args.table_from.read_text())["rows"], args.table_from)
        return 0
    import cupy

    t_start = time.time()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    dev = selector.device_model()
    copy_gbs = dev.copy_gbs
    log(f"device {dev.name}: {dev.sm_count} SMs, resident blocks/SM window {dev.blocks_per_sm_plain} "
        f"balanced {dev.blocks_per_sm_balanced}, copy {copy_gbs:.0f} GB/s")
    cal = selector.Calibration(**calibrate(args.out_dir, dev), source="this run") if args.calibrate else \
        selector.Calibration.load(dev.name, args.out_dir)
    if args.sweep:
        return sweep(args, dev, cal, t_start)
    rng = np.random.default_rng(0)
    matrices = [(f"fixture:{n}", "fixture", lambda n=n: fixture(n), None) for n in FIXTURES]
    matrices += [(label, kind, lambda k=kind, p=params: generated(k, p, 1), lambda k=kind, p=params: generated(k, p, 0))
                 for label, kind, params in SUITES[args.suite]]
    if args.matrices:
        unknown = set(args.matrices) - {m[0] for m in matrices}
        if unknown:
            raise SystemExit(f"benchmarks/spmm.py: unknown --matrices {sorted(unknown)}; suite {args.suite} has "
                             f"{[m[0] for m in matrices]}")
        matrices = [m for m in matrices if m[0] in args.matrices]
    rows = []
    meta = {**gpu_meta(), "copy_gbs": copy_gbs, "kernel_config": CONFIG.__dict__, "timing": TIMING,
            "command": " ".join(sys.argv), "calibration": cal.__dict__,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    part = f"-{args.part}" if args.part else ""
    path = args.out_dir / f"{args.prefix}-{selector.slug(dev.name)}-{dt.date.today().isoformat()}{part}.json"
    for label, kind, make, make_natural in matrices:
        if time.time() - t_start > args.budget_s:
            log(f"budget reached: skipping {label} and the rest")
            break
        t0 = time.time()
        A = make()
        if A is None:
            continue
        log(f"{label}: {A.shape} nnz {A.nnz} generated in {time.time() - t0:.1f}s")
        orders = [("none", A)]
        if A.nnz <= args.tca_max_nnz:
            from tasks.reorder import reorder

            t0 = time.time()
            perm = reorder(A, "tca", seed=0)
            orders.append(("tca", A[perm]))
            log(f"  tca in {time.time() - t0:.1f}s")
        if make_natural is not None:
            orders.append(("natural(ideal)", make_natural()))
        base_cus, base_cus_issued = {}, {}
        for order, Ao in orders:
            from kernels.spmm import SpmmPlan

            case = Case(sp.csr_array(Ao), dev, cal)
            plan = SpmmPlan(case.A, device="gpu")  # what a user builds: the defaults
            errs = case.check(128, rng)
            errs["plan"] = case.check_plan(plan, 128, rng)
            for N in args.ns:
                times, tuned, pred, choice, single = case.measure(N, args.repeats, plan)
                issued = single.pop("issued")
                if order == "none":
                    base_cus[N], base_cus_issued[N] = times["cusparse"], issued["ms"]["cusparse"]
                cands = {k: times[k] for k in ("metcf-window", "metcf-balanced", "metcf-split", "cusparse")
                         if k in times}
                # SpmmPlan's policy (kernels.spmm.wants_autotune): the fastest measured, else the model's choice
                tuned_here = wants_autotune("auto", case.nnz, pred, cal.balance_threshold)
                selected = min(cands, key=cands.get) if tuned_here else choice["kernel"]
                sel_ms = times[selected]
                if selected == "metcf-split" and not tuned_here:  # the model's ksplit, not the fastest
                    sel_ms = case.split_by_k[pred["split_ksplit"]]
                best_tc = min(v for k, v in cands.items() if k != "cusparse")
                floor_ms = (case.metcf_bytes + 4 * N * (case.shape[0] + case.shape[1])) / (copy_gbs * 1e6)
                rows.append({
                    "matrix": label, "kind": kind, "order": order, "shape": case.shape, "nnz": case.nnz, "N": N,
                    "mean_nnz_tc": pred["mean_nnz_tc"], "tc_util": pred["mean_nnz_tc"] / 128,
                    "n_blocks": pred["n_blocks"], "ar": pred["approximation_ratio"], "ms": times,
                    "cusparse_algs_ms": tuned["ms"], "cusparse_best": tuned["best"], "selected": selected,
                    "model_choice": choice["kernel"], "model_predicted_ms": choice["predicted_ms"],
                    "autotuned": tuned_here, "ms_single_call": single,
                    "split_ksplit": min(case.split_by_k, key=case.split_by_k.get) if case.split_by_k else 0,
                    "split_model_ksplit": pred["split_ksplit"], "split_ms_by_ksplit": case.split_by_k,
                    "torch_timing": case.torch_timing,
                    "selected_ms": sel_ms, "selector_reason": choice["reason"], "predicted": pred,
                    "gflops_selected": 2 * case.nnz * N / (sel_ms * 1e-3) / 1e9,
                    "speedup_vs_original_cusparse": base_cus[N] / sel_ms,
                    "speedup_vs_same_cusparse": times["cusparse"] / sel_ms,
                    "tc_speedup_vs_same_cusparse": times["cusparse"] / best_tc,
                    "memory_floor_ms": floor_ms, "floor_pct_selected": 100 * floor_ms / sel_ms,
                    "convert_gpu_ms": case.convert_ms, "convert_over_spmm": case.convert_ms / sel_ms,
                    "ms_issued": issued["ms"], "plan_kernel": issued["plan_kernel"],
                    "issued_speedup_vs_original_cusparse": base_cus_issued[N] / issued["ms"]["plan"],
                    "issued_speedup_vs_same_cusparse": issued["ms"]["cusparse"] / issued["ms"]["plan"],
                    "rel_err_n128": errs})
                log(f"  {order} N={N}: {({k: round(v, 3) for k, v in times.items()})} sel {selected} "
                    f"(model {choice['kernel']}) AR {pred['approximation_ratio']:.2f} as issued: plan "
                    f"{issued['plan_kernel']} {issued['ms']['plan']:.3f} ms, cuSPARSE {issued['ms']['cusparse']:.3f}"
                    f" ms; err {errs}")
            case.cus.close()
            del case, plan
            cupy.get_default_memory_pool().free_all_blocks()
        write(path, meta, rows, t_start)  # after every matrix, so a cut-off run keeps what it measured
    write(path, meta, rows, t_start)
    print_table(rows, path)
    return 0


def sweep(args, dev, cal, t_start) -> int:
    """Window-kernel variants (SWEEP) on the same matrices and B, each checked against float64 SciPy."""
    import cupy

    rng = np.random.default_rng(0)
    rows = []
    meta = {**gpu_meta(), "command": " ".join(sys.argv),
            "configs": {k: c.__dict__ for k, c in SWEEP.items()},
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    path = args.out_dir / f"kernel-sweep-{selector.slug(dev.name)}-{dt.date.today().isoformat()}.json"
    for label, kind, params in SWEEP_MATRICES:
        if time.time() - t_start > args.budget_s:
            log(f"budget reached: skipping {label} and the rest")
            break
        from tasks.reorder import reorder

        A = generated(kind, params, 1)
        for order, Ao in (("tca", A[reorder(A, "tca", seed=0)]), ("natural(ideal)", generated(kind, params, 0))):
            case = Case(sp.csr_array(Ao), dev, cal)
            for N in (128, 256):
                B = rng.standard_normal((case.shape[1], N)).astype(np.float32)
                sample = np.sort(rng.choice(case.shape[0], min(2048, case.shape[0]), replace=False))
                ref = case.A[sample].astype(np.float64) @ B.astype(np.float64)
                Bd = cupy.asarray(B)
                out = cupy.full((case.shape[0], N), np.nan, dtype=cupy.float32)
                row = {"matrix": label, "order": order, "nnz": case.nnz, "N": N, "ms": {}, "rel_err": {},
                       "mean_nnz_tc": case.nnz / max(case.dm.n_blocks, 1)}
                for name in SWEEP:
                    k = f"sweep:{name}"
                    out.fill(np.nan)
                    C = cupy.asnumpy(case.run(k, Bd, out)[cupy.asarray(sample)])
                    row["rel_err"][name] = float(np.linalg.norm(C - ref) / max(np.linalg.norm(ref), 1e-30))
                    row["ms"][name] = launch.graph_ms(lambda k=k: case.run(k, Bd, out), repeats=args.repeats,
                                                      warmup=5)
                tuned = case.cus.tune(Bd, out, repeats=args.repeats, warmup=3)
                row["ms"]["cusparse"] = tuned["ms"][tuned["best"]]
                rows.append(row)
                log(f"  {label} {order} N={N}: {({k: round(v, 3) for k, v in row['ms'].items()})} "
                    f"err max {max(row['rel_err'].values()):.1e}")
            case.cus.close()
            del case
            cupy.get_default_memory_pool().free_all_blocks()
        path.write_text(json.dumps({"meta": {**meta, "wall_s": time.time() - t_start}, "rows": rows}, indent=1))
    names = [*SWEEP, "cusparse"]
    print(f"{'matrix':<14}{'order':<16}{'N':>5}{'MeanTC':>7}" + "".join(f"{n:>12}" for n in names) + f"{'max err':>9}")
    for r in rows:
        print(f"{r['matrix']:<14}{r['order'][:15]:<16}{r['N']:>5}{r['mean_nnz_tc']:>7.1f}"
              + "".join(f"{r['ms'][n]:>12.3f}" for n in names) + f"{max(r['rel_err'].values()):>9.1e}")
    for n in SWEEP:
        print(f"{n}: geomean ms ratio vs v0-smem {geomean([r['ms'][n] / r['ms']['v0-smem'] for r in rows]):.3f}, "
              f"vs cuSPARSE (same matrix) {geomean([r['ms']['cusparse'] / r['ms'][n] for r in rows]):.3f}x")
    print(f"results: {path}")
    return 0


def write(path, meta, rows, t_start):
    path.write_text(json.dumps({"meta": {**meta, "wall_s": time.time() - t_start}, "rows": rows}, indent=1,
                               default=float))


def geomean(x):
    x = [v for v in x if v > 0]
    return float(np.exp(np.mean(np.log(x)))) if x else float("nan")


def short(kernel):
    return {"metcf-window": "window", "metcf-balanced": "balanced", "metcf-split": "split",
            "cusparse": "cusparse"}.get(kernel, kernel)


def split_text(r):
    """The split kernel's ms and ksplit ("0.123 k4"), "-" where the model had no split shape (older files too)."""
    return f"{r['ms']['metcf-split']:.3f} k{r['split_ksplit']}" if "metcf-split" in r["ms"] else "-"


def extra(r):
    ms = r["ms"]
    if "metcf-window-v0" not in ms:
        return "-"
    return f"{ms['metcf-window-v0']:.3f}/{ms['torch']:.3f}" if "torch" in ms else f"{ms['metcf-window-v0']:.3f}/-"


def issued_text(r):
    """As issued: plan ms (its kernel), cuSPARSE ms, speedups on the original / same matrix; "-" in older files."""
    if "ms_issued" not in r:
        return f"{'-':>35}{'-':>7}{'-':>7}"
    ms = r["ms_issued"]
    return (f"{ms['plan']:>9.3f} {short(r['plan_kernel'])[:13]:<14}{ms['cusparse']:>10.3f}"
            f"{r['issued_speedup_vs_original_cusparse']:>7.2f}{r['issued_speedup_vs_same_cusparse']:>7.2f}")


def print_table(rows, path):
    """Two timings side by side: graph replay (win .. vsSame) and per call as issued (plan .. vsSame)."""
    hdr = (f"{'matrix':<22}{'order':<15}{'nnz':>11}{'N':>5}{'MeanTC':>7}{'AR':>6}{'win ms':>9}{'bal ms':>9}"
           f"{'split ms':>12}{'cus ms':>9}{'v0/torch@128':>15}{'model':>9}{'selected':>15}{'vsOrig':>7}{'vsSame':>7}"
           f"{'floor%':>7}{'  | plan issued, kernel':<24}{'cus issued':>11}{'vsOrig':>7}{'vsSame':>7}{'err':>9}")
    print(hdr)
    for r in rows:
        print(f"{r['matrix'][:21]:<22}{r['order'][:14]:<15}{r['nnz']:>11}{r['N']:>5}{r['mean_nnz_tc']:>7.1f}"
              f"{r['ar']:>6.2f}{r['ms']['metcf-window']:>9.3f}{r['ms']['metcf-balanced']:>9.3f}"
              f"{split_text(r):>12}{r['ms']['cusparse']:>9.3f}{extra(r):>15}"
              f"{short(r.get('model_choice', r['selected'])):>9}"
              f"{r['selected']:>15}{r['speedup_vs_original_cusparse']:>7.2f}"
              f"{r['speedup_vs_same_cusparse']:>7.2f}{r['floor_pct_selected']:>7.1f}{issued_text(r)}"
              f"{max(r['rel_err_n128'].values()):>9.1e}")
    vs_orig = lambda rs: geomean([r["speedup_vs_original_cusparse"] for r in rs])  # noqa: E731
    vs_orig_issued = lambda rs: geomean([r["issued_speedup_vs_original_cusparse"] for r in rs  # noqa: E731
                                         if "issued_speedup_vs_original_cusparse" in r])
    for N in sorted({r["N"] for r in rows}):
        at_n = [r for r in rows if r["N"] == N]
        parts = []
        for order in ("tca", "natural(ideal)"):
            sel = [r for r in at_n if r["order"] == order]
            big = [r for r in sel if r["nnz"] >= 10_000_000]
            parts.append(f"{order} {vs_orig(sel):.2f}x ({len(sel)} cases; 10M+ nnz {vs_orig(big):.2f}x)")
        worst = min((r["speedup_vs_same_cusparse"] for r in at_n), default=float("nan"))
        print(f"N={N}: geomean speedup vs original cuSPARSE: {'; '.join(parts)}; min vs same-matrix cuSPARSE "
              f"{worst:.2f}x")
        tca = [r for r in at_n if r["order"] == "tca" and "ms_issued" in r]
        if tca:
            big = [r for r in tca if r["nnz"] >= 10_000_000]
            worst = min(r["issued_speedup_vs_original_cusparse"] for r in tca)
            print(f"N={N} as issued (SpmmPlan defaults vs bound cuSPARSE): tca {vs_orig_issued(tca):.2f}x over the "
                  f"original ({len(tca)} cases, min {worst:.2f}x; 10M+ nnz {vs_orig_issued(big):.2f}x)")
    print(f"results: {path}")


if __name__ == "__main__":
    sys.exit(main())
