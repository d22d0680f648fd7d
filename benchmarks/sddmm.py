"""SDDMM as users call it (issue 33): ``SddmmPlan(S, dtype=..., format="cvse").run(A, B)`` with CuPy A and B
already in the plan's storage dtype, against cuSPARSE SDDMM as PyTorch users call it, on one GPU.

    PYTHONPATH=. python3 benchmarks/sddmm.py [--kd 64 256] [--matrices graph dnn rmat-s16 ...] [--repeats 20]
                                             [--budget-s 400] [--out PATH]

Baseline: ``torch.sparse.sampled_addmm(S, A, B.T, beta=0.0)`` on CUDA float32 (torch has no half SDDMM), S a torch
sparse CSR tensor of unit values. Per torch's docs it computes ``alpha (mat1 @ mat2) * spy(input) + beta input``
(spy: 1 where ``input`` stores a value) and returns a sparse CSR tensor of ``input``'s pattern; with ``beta=0``,
``alpha=1`` its values are ``A[row_k] . B[col_k]`` for every stored nonzero k in S's CSR order, which is what
``SddmmPlan.run`` returns (S's values are all one here, so ``(.) S`` multiplies by one). ``B.T`` is a view
(column-major), as a user passes it. Timed as issued: torch.cuda.Event pairs around a Python loop of calls
(``torch_issued_ms``: the rule of kernels.launch.issued_ms), each call building its descriptors and buffer and
allocating its result, as a user's does.

Ours, per S and Kd, on the same seeded A [M, Kd] and B [K, Kd] (float32; each precision's copy made once, before
timing):

- issued (kernels.launch.issued_ms: CUDA events around a Python loop of back-to-back calls, median per call):
  ``SddmmPlan(S, dtype=p, format="cvse").run(Ad, Bd)`` for p in float32 (TF32), float16, bfloat16 (uint16 bits),
  and the same with ``out=`` (a float32 [nnz] made once); ``SddmmPlan(S, format="csr")`` (our cuSPARSE route:
  TF32-rounded copies of A and B, cuSPARSE SDDMM, x S's values) with and without ``out``;
- graph (kernels.launch.graph_ms: CUDA-graph replay, the GPU's time without host launch cost): the plan's CVSE
  kernel alone (``kernels.formats.cvse.launch.sddmm`` on the plan's device arrays into a preallocated vector-order
  buffer), the plan's whole call with ``out`` (kernel + gather into CSR order), and cuSPARSE SDDMM float32 through
  ``kernels.cusparse_sddmm`` (the routine torch calls, without torch's per-call setup).

Correctness in the same run: every result on a sample of up to 65,536 nonzeros against ``kernels.sddmm.csr_sddmm``
in float64, twice: on the inputs rounded to the precision (``rel_err``: what the kernel must compute, summation
order aside) and on the float32 inputs (``rel_err_contract``: the README's precision contract). Either above the
precision's tolerance (kernels.precision) fails the run (exit 1, failures listed last); a call that raises too.

Matrices: ``graph``: generated (2D 5-point mesh in grid order; R-MAT scale 13, 16 and 17 as directed power-law
graphs and an SBM with 100 communities, labels shuffled: tasks/fetch/generators.py), the SNAP/email-Enron fixture
and the IGB tiny fixture archive (it carries PubMed's citation graph, ``A[dst, src]`` as tasks/parse/igb.py reads
it) when the fixtures are found (TCSPMM_FIXTURES, .fixtures or ../shared/fixtures; skipped with a note otherwise),
all built by benchmarks/graph_suite.py (shared with benchmarks/gnn.py);
``dnn``: weights pruned at V x 1 = 8 x 1 to 80 % sparsity, M = K = 4096 (``gen:dlmc``, what benchmarks/cvse.py
uses: the DLMC collection is not reachable here). S keeps each matrix's pattern with unit values.

JSON: benchmarks/results/sddmm-<device>-<date>.json (or --out: a file, or a folder for that name; device, versions,
command, date), rewritten after each matrix; no new matrix is started after --budget-s. The table prints last, then
the targets (benchmarks/summarize_sddmm.py) and any failures. Without CuPy and a CUDA device it exits 2.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/: machine, summarize_sddmm

from summarize_sddmm import PRECISIONS, TIMING, target_rows, text_table  # noqa: E402
from graph_suite import Skipped, build, graph_cases, log, run_cases  # noqa: E402  (shared with gnn.py)

from kernels.precision import precision  # noqa: E402
from kernels.sddmm import csr_sddmm  # noqa: E402

CLASSES = ("graph", "dnn")
DNN = (("dlmc-4096-V8-s80", "rows=4096&cols=4096&sparsity=0.8&vector=8&seed=1"),)
SAMPLE_NNZ = 1 << 16


# ------------------------------------------------------------------------------------------------- matrices

def cases(args) -> list[dict]:
    """The matrices in run order (small graphs first, the pruned weights after the first graph so a budget stop
    leaves both classes), filtered by --matrices (a class, or a label prefix). Graphs: benchmarks/graph_suite.py."""
    graphs = graph_cases()
    dnn = [{"label": lab, "class": "dnn", "source": ("dlmc", prm)} for lab, prm in DNN]
    out = graphs[:1] + dnn + graphs[1:]
    if args.matrices:
        out = [c for c in out if c["class"] in args.matrices or c["label"].startswith(tuple(args.matrices))]
    return out


# ------------------------------------------------------------------------------------------------ correctness

def sample(S: sp.csr_array, rng, max_nnz: int = SAMPLE_NNZ) -> tuple[np.ndarray, np.ndarray]:
    """(positions in S's CSR order, their rows): up to ``max_nnz`` nonzeros drawn without replacement, sorted."""
    pos = np.sort(rng.choice(S.nnz, min(max_nnz, S.nnz), replace=False))
    return pos, np.searchsorted(S.indptr, pos, side="right") - 1


def reference(S: sp.csr_array, pos, rows, A, B, p=None) -> np.ndarray:
    """float64 SDDMM values at S's nonzeros ``pos`` (rows ``rows``): kernels.sddmm.csr_sddmm on the sub-matrix
    holding those nonzeros (one per row, its columns renumbered), reading only the A and B rows they touch, rounded
    to precision ``p`` first (None: as given)."""
    ucols, inv = np.unique(S.indices[pos], return_inverse=True)
    sub = sp.csr_array((np.asarray(S.data)[pos], inv, np.arange(len(pos) + 1)), shape=(len(pos), len(ucols)))
    A, B = np.asarray(A)[rows], np.asarray(B)[ucols]
    if p is not None:
        A, B = p.rounded(A), p.rounded(B)
    return csr_sddmm(sub, A, B)


def rel_err(got, ref) -> float:
    """Relative Frobenius error; NaN when ``got`` holds a non-finite value."""
    got = np.asarray(got, dtype=np.float64)
    if not np.isfinite(got).all():
        return float("nan")
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))


def precision_of(key: str) -> str:
    """The precision a result key is held to: ``cvse-<precision>[-out|-kernel]``; float32 for torch, cuSPARSE and
    the csr plan."""
    parts = key.split("-")
    return parts[1] if parts[0] == "cvse" else "float32"


def failures_of(row: dict) -> list[str]:
    """One line per rel err over its precision's tolerance (NaN included) or call that raised."""
    out = []
    where = f"{row['matrix']} Kd={row['Kd']}"
    for field in ("rel_err", "rel_err_contract"):
        for key, e in row.get(field, {}).items():
            tol = precision(precision_of(key)).tolerance
            if not e <= tol:
                out.append(f"{where}: {key} {field} {e:.3g} > {tol:g}")
    return out + [f"{where}: {key} raised {msg}" for key, msg in row.get("errors", {}).items()]


# ------------------------------------------------------------------------------------------------ timing

def torch_sddmm(St, At, Bt):
    """``torch.sparse.sampled_addmm(St, At, Bt.T, beta=0.0)``: values ``At[row_k] . Bt[col_k]`` (St of unit values)
    as a sparse CSR tensor of St's pattern."""
    import torch

    return torch.sparse.sampled_addmm(St, At, Bt.T, beta=0.0)


def torch_csr(S: sp.csr_array, device: str):
    """S as a torch sparse CSR tensor (int64 indices, float32 values) on ``device``."""
    import warnings

    import torch

    with warnings.catch_warnings():  # "sparse CSR support is in beta": torch's notice, nothing to act on
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(torch.from_numpy(S.indptr.astype(np.int64)),
                                       torch.from_numpy(S.indices.astype(np.int64)), torch.from_numpy(S.data),
                                       size=S.shape, check_invariants=False).to(device)


def torch_issued_ms(fn, **kw) -> float:
    """kernels.launch.issued_ms on torch's current stream (CuPy's events recorded there, where torch launches)."""
    import cupy
    import torch

    from kernels import launch
    with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        return launch.issued_ms(fn, **kw)


def run_matrix(case: dict, S: sp.csr_array, args, torch_ok: bool) -> list[dict]:
    """One row per Kd: every call of the module docstring timed and checked."""
    import cupy

    from kernels import launch
    from kernels.cusparse_sddmm import CusparseSddmm
    from kernels.formats.cvse import launch as launch_cvse
    from kernels.sddmm import SddmmPlan

    plans, setup_s, errors = {}, {}, {}
    for p in PRECISIONS:
        t0 = time.perf_counter()
        try:
            plans[f"cvse-{p}"] = SddmmPlan(S, dtype=p, format="cvse", device="gpu")
        except Exception as err:  # recorded; fails the run, the other plans still measured
            errors[f"cvse-{p}"] = f"{type(err).__name__}: {err}"
        setup_s[f"cvse-{p}"] = time.perf_counter() - t0
    plans["csr"] = SddmmPlan(S, format="csr", device="gpu")
    op = CusparseSddmm(S.indptr, S.indices, S.shape)
    St = torch_csr(S, "cuda") if torch_ok else None
    pos, rows_of = sample(S, np.random.default_rng(0))
    rows = []
    for Kd in args.kd:
        t0 = time.time()
        rng = np.random.default_rng(Kd)
        A32 = rng.standard_normal((S.shape[0], Kd), dtype=np.float32)
        B32 = rng.standard_normal((S.shape[1], Kd), dtype=np.float32)
        ref = {p: reference(S, pos, rows_of, A32, B32, precision(p)) for p in PRECISIONS}
        ref32 = reference(S, pos, rows_of, A32, B32)
        row = {"matrix": case["label"], "class": case["class"], "shape": list(S.shape), "nnz": int(S.nnz), "Kd": Kd,
               "vector": {}, "ms": {}, "issued_ms": {}, "rel_err": {}, "rel_err_contract": {}, "errors": dict(errors),
               "notes": {}, "plan_s": setup_s}
        A32d, B32d = cupy.asarray(A32), cupy.asarray(B32)
        out = cupy.empty(S.nnz, dtype=cupy.float32)
        pos_d = cupy.asarray(pos)

        def check(key, vals, p="float32"):  # vals: the [nnz] result in CSR order, CuPy or NumPy
            got = cupy.asnumpy(vals[pos_d]) if isinstance(vals, cupy.ndarray) else vals[pos]
            row["rel_err"][key] = rel_err(got, ref[p] if key.startswith(("cvse", "csr")) else ref32)
            row["rel_err_contract"][key] = rel_err(got, ref32)

        def measure(key, fn):  # one call kind; an exception is recorded and fails the run, the rest goes on
            try:
                fn()
            except Exception as err:
                row["errors"][key] = f"{type(err).__name__}: {err}"

        def torch_case():
            import torch

            At, Bt = torch.from_dlpack(A32d), torch.from_dlpack(B32d)
            cupy.cuda.Device().synchronize()  # synchronize! (A, B made on CuPy's stream)
            res = torch_sddmm(St, At, Bt)
            check("torch", res.values().cpu().numpy())
            row["issued_ms"]["torch"] = torch_issued_ms(lambda: torch_sddmm(St, At, Bt), repeats=args.repeats)

        def plan_case(key, plan, Ad, Bd, p):
            check(key, plan.run(Ad, Bd), p)
            row["issued_ms"][key] = launch.issued_ms(lambda: plan.run(Ad, Bd), repeats=args.repeats)
            out.fill(cupy.nan)
            row["issued_ms"][f"{key}-out"] = launch.issued_ms(lambda: plan.run(Ad, Bd, out=out), repeats=args.repeats)
            check(f"{key}-out", out, p)
            row.setdefault("route", {})[key] = plan.choices.get(Kd)  # what "auto" timed and kept for this Kd
            cv = plan._dev.get("cvse")  # the CVSE route's device form (kernels.formats.cvse.sddmm)
            if cv is None:  # no CVSE kernel in this plan (format csr)
                return
            row["vector"][key] = plan.svc["vector"]
            row.setdefault("vector_density", {})[key] = 1.0 - plan.svc["new_sparsity"]  # nnz / (V n_vectors)
            vec = cupy.full((cv.dm.n_vectors, cv.dm.vector), cupy.nan, dtype=cupy.float32)
            row["ms"][key] = launch.graph_ms(lambda: launch_cvse.sddmm(cv.dm, Ad, Bd, out=vec),
                                             repeats=args.repeats)
            check(f"{key}-kernel", cupy.asnumpy(vec).reshape(-1)[plan._host.gather], p)
            try:  # the plan's whole call (kernel + gather) on the device: issued minus this is host time
                row["ms"][f"{key}-call"] = launch.graph_ms(lambda: plan.run(Ad, Bd, out=out), repeats=args.repeats)
            except Exception as err:  # a capture the call does not allow: noted, not a failure
                row["notes"][f"{key}-call"] = f"not capturable: {type(err).__name__}: {err}"

        def cusparse_case():
            out.fill(cupy.nan)
            row["ms"]["cusparse-sddmm"] = launch.graph_ms(lambda: op.run(A32d, B32d, out), repeats=args.repeats)
            check("cusparse-sddmm", out)

        if St is not None:
            measure("torch", torch_case)
        for p in PRECISIONS:
            key = f"cvse-{p}"
            if key in plans:
                Ad, Bd = (cupy.asarray(precision(p).to_storage(X)) for X in (A32, B32))  # the plan's storage dtype
                measure(key, lambda: plan_case(key, plans[key], Ad, Bd, p))
                del Ad, Bd
        measure("csr", lambda: plan_case("csr", plans["csr"], A32d, B32d, "float32"))
        measure("cusparse-sddmm", cusparse_case)
        row["wall_s"] = time.time() - t0
        rows.append(row)
        log(f"{case['label']} Kd={Kd}: " + " ".join(f"{k}={v:.4f}" for k, v in row["issued_ms"].items())
            + f" ({row['wall_s']:.1f} s)")
    op.close()
    plans.clear()
    cupy.get_default_memory_pool().free_all_blocks()
    if St is not None:
        import torch

        del St
        torch.cuda.empty_cache()  # torch's cached blocks back before the next matrix's plans upload
    return rows


# ------------------------------------------------------------------------------------------------ report

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kd", type=int, nargs="+", default=[64, 256], help="columns of A and B")
    ap.add_argument("--matrices", nargs="+", help="only these classes (graph dnn) or labels starting with one of "
                                                  "these (e.g. rmat-s16 fixture:SNAP dlmc)")
    ap.add_argument("--repeats", type=int, default=20, help="graph replays and issued loops per timing (median)")
    ap.add_argument("--budget-s", type=float, default=400.0, help="start no new matrix after this many seconds")
    ap.add_argument("--out", type=Path, help="results file, or a folder for sddmm-<device>-<date>.json (default "
                                             "benchmarks/results)")
    args = ap.parse_args(argv)
    if any(k < 1 for k in args.kd):
        ap.error(f"--kd must be positive, got {args.kd}")
    if args.repeats < 3 or args.budget_s <= 0:
        ap.error(f"--repeats must be >= 3 and --budget-s > 0, got {args.repeats} and {args.budget_s}")
    known = {c["label"] for c in cases(argparse.Namespace(matrices=None))} | set(CLASSES)
    unknown = [m for m in args.matrices or [] if not any(k.startswith(m) for k in known)]
    if unknown:
        ap.error(f"--matrices: {unknown} match no class or label; choose from {' '.join(sorted(known))}")
    return args


def results_path(out: Path | None, slug: str, date: str) -> Path:
    """--out as given, or ``sddmm-<device>-<date>.json`` in --out when it is a folder, else in benchmarks/results."""
    name = f"sddmm-{slug}-{date}.json"
    if out is None:
        return REPO / "benchmarks" / "results" / name
    return out / name if out.is_dir() else out


def device_meta() -> dict:
    from machine import gpu_meta

    meta = gpu_meta()
    try:
        import torch

        meta.update(torch=torch.__version__, torch_cuda=torch.version.cuda)
        if not torch.cuda.is_available():
            meta["torch_missing"] = "torch has no CUDA device here"
    except ImportError as err:
        meta["torch_missing"] = f"torch not importable: {err}"
    return meta


def main(argv=None) -> int:
    args = parse_args(argv)
    from kernels.spmm import gpu_available

    if not gpu_available():
        print("error: benchmarks/sddmm.py needs CuPy and a CUDA device, found none", file=sys.stderr)
        return 2
    t_start = time.time()
    meta = {"benchmark": "sddmm", **device_meta(), "command": " ".join(sys.argv),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "timing": TIMING,
            "precision": "A, B in the plan's storage dtype (float32 read as TF32, float16, bfloat16 bits), products "
                         "summed in fp32, out float32; torch and cuSPARSE SDDMM: float32",
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    if meta.get("torch_missing"):
        log(f"no torch baseline: {meta['torch_missing']}")
    path = results_path(args.out, meta["slug"], dt.date.today().isoformat())
    path.parent.mkdir(parents=True, exist_ok=True)
    rows, failures, skipped, matrices = [], [], [], {}

    def write():
        meta.update(wall_s=time.time() - t_start, skipped=skipped, matrices=matrices)
        path.write_text(json.dumps({"meta": meta, "rows": rows, "failures": failures, "targets": target_rows(rows)},
                                   indent=1, default=float))

    def run_one(case):  # one that raises before any Kd (a generator, plan or upload): recorded, the rest still runs
        t0 = time.perf_counter()
        S = build(case["source"])
        if S is None:
            raise Skipped(f"{case['label']}: fixture absent")
        matrices[case["label"]] = {"class": case["class"], "shape": list(S.shape), "nnz": int(S.nnz),
                                   "source": list(case["source"]), "build_s": time.perf_counter() - t0}
        log(f"{case['label']}: {S.shape} nnz {S.nnz:,}")
        new = run_matrix(case, S, args, "torch_missing" not in meta)
        rows.extend(new)
        failures.extend(f for r in new for f in failures_of(r))

    run_cases(cases(args), run_one, budget_s=args.budget_s, skipped=skipped, failures=failures, write=write,
              start=t_start, describe=lambda err: f"{type(err).__name__}: {err}")  # the whole message, as per Kd
    write()
    print(f"\nresults: {path}")
    for name, thr, got, ok in target_rows(rows):
        print(f"target: {name} {thr}: {got} [{'not run' if ok is None else 'met' if ok else 'missed'}]")
    print("FAILURES:\n" + "\n".join(failures) if failures else "every result within its precision's tolerance")
    print("\n".join(text_table(rows)))  # the table last
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
