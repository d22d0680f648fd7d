"""The format ranking's cost estimates against measured per-format times (issue 32). No GPU needed.

    PYTHONPATH=. python3 benchmarks/rank_check.py [--results FILE ...] [--fit] [--leave-one-out] [--out-dir DIR]

For every row of the recorded runs of benchmarks/formats.py (default: benchmarks/results/formats-*.json; one GPU;
per row a matrix label, an order, N and "ms" per format), the matrix is regenerated as formats.py made it
(seeded generators, fixtures, the recorded reorderings, checked against the counts the run recorded), its
statistics computed once (`kernels.formats.structure`, as a plan computes them: sampled above 1M nnz) and every
measured format's estimate (``Format.estimate``) ranks them at the row's N, in the precision the run timed (its
meta's "dtype": float16 or float32; files from before formats.py's --dtype have none and are float16). Per row: the
measured best, the predicted order, whether the measured best is predicted first (top 1) or among the first two
(top 2), and how much slower the predicted first ran than the measured best. "plan top 2": what
``SpmmPlan(format="auto")`` builds and times, ranked at N = 128 (`kernels.formats.ranking.select`: the first two, a
format timed as another's fallback taking no slot), holds the best measured at the row's N.

Measured times: a format's "ms" is its plan's choice. A choice that ran another format's kernel (ME-TCF's fallback
to the CUDA-core CSR kernel) is that format's time, and the recording format's own is the fastest of its own
kernels' autotuned times. A fallback that was timed and not chosen ran slower than the choice it was timed
against: its time is known only as a lower bound (">"), which settles that it was not the best.

--fit: per format, non-negative least squares of the measured microseconds on its cost terms (each row weighted
by 1 / measured: relative error) over the given files' rows; prints the ``us`` constants of its CostModel and the
fit's spread. The files of one fit share one dtype (a mix is refused, exit 2): FP16 and TF32 rows cost differently.
--leave-one-out (one dtype, as --fit): every matrix's rows ranked with constants fitted on the other matrices' rows;
its summary (JSON "leave_one_out") says how the ranking does on a matrix its constants never saw.

JSON: benchmarks/results/rank-check-<device of the recorded data>-<date>[-<dtypes> unless float16].json (command,
date, recorded files with device and dtype, the precision, per-row results, summary); the table and the summary
print last.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # (not benchmarks/: its gnn.py would shadow the gnn package for an importer)

def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, file=sys.stderr, flush=True)


def load(paths) -> list[dict]:
    docs = []
    for p in paths:
        doc = json.loads(Path(p).read_text())
        if not {"meta", "rows"} <= set(doc):
            raise SystemExit(f"{p}: not a benchmarks/formats.py result (no meta and rows)")
        width = doc["meta"].get("order_width", 16)  # runs before formats.py recorded it: 16 x 16 in both dtypes
        rows = [{**row, "_order_width": width} for row in doc["rows"]]
        docs.append({"path": str(p), "meta": doc["meta"], "rows": rows})
    return docs


def dtype_of(doc: dict) -> str:
    """The precision a recorded run timed in: its meta's "dtype" (absent before formats.py's --dtype: float16)."""
    return (doc.get("meta") or {}).get("dtype") or "float16"


def one_dtype(docs) -> str:
    """The dtype every doc shares; ValueError naming the files of each where they differ."""
    by = {}
    for doc in docs:
        by.setdefault(dtype_of(doc), []).append(Path(doc.get("path", "?")).name)
    if len(by) > 1:
        raise ValueError("--fit needs runs of one dtype, got " + "; ".join(f"{d}: {', '.join(f)}" for d, f in
                                                                          by.items()) + "; fit each dtype apart")
    return next(iter(by))


def matrices(docs) -> dict:
    """{(label, order, order width): CSR} for every recorded (matrix, applied order, the block width its run
    reordered for), regenerated and checked against the counts the run recorded for its reorderings."""
    import formats  # benchmarks/formats.py: its matrices and reorderings (the script's folder is on sys.path)

    wanted: dict = {}
    for doc in docs:
        width = doc["meta"].get("order_width", 16)
        for label, m in doc["meta"]["matrices"].items():
            # the first run's dtype: the values differ (FP16's [-1, 1] replacement), the structure does not
            seen = wanted.setdefault((label, width), {"source": m["source"], "dtype": dtype_of(doc), "orders": {}})
            if seen["source"] != m["source"]:
                raise SystemExit(f"{label}: recorded with sources {seen['source']} and {m['source']}")
            seen["orders"].update({o: i for o, i in m["orders"].items() if i.get("applied")})
    out = {}
    for (label, width), m in wanted.items():
        t0 = time.perf_counter()
        built = formats.build(tuple(m["source"]), m["dtype"])
        if built is None:
            raise SystemExit(f"{label}: fixture {m['source'][1]} not found (set TCSPMM_FIXTURES)")
        A = built[0]
        perms, info = formats.reorders(A, list(m["orders"]), width)
        for order, recorded in m["orders"].items():
            mine = info[order]
            if not mine["applied"] or any(mine.get(k) != v for k, v in recorded.items() if k.endswith("_after")):
                raise SystemExit(f"{label} {order}: the regenerated order differs from the recorded one ({mine} vs "
                                 f"{recorded})")
            out[(label, order, width)] = A if perms[order] is None else A[perms[order]]
        log(f"{label}: {A.shape} nnz {A.nnz:,}, orders {', '.join(m['orders'])} ({time.perf_counter() - t0:.1f} s)")
    return out


def measured(row: dict, owner: dict) -> tuple[dict, dict]:
    """({format: ms} known, {format: ms} lower bounds) of one recorded row (module docstring)."""
    from kernels.formats import REGISTRY

    known, lower = {}, {}
    for name, ms in row["ms"].items():
        if name not in REGISTRY:  # baselines (cuSPARSE, dense) and extra columns
            continue
        choice = row["choice"].get(name, {})
        ran = owner.get(choice.get("kernel"), name)
        known[ran] = min(known.get(ran, math.inf), ms)
        if ran != name:
            own = [v for k, v in (choice.get("measured_ms") or {}).items() if owner.get(k) == name]
            if own:
                known[name] = min(known.get(name, math.inf), min(own))
    for name in list(known):
        for kernel in REGISTRY[name].fallbacks:
            if owner[kernel] not in known:
                lower[owner[kernel]] = max(lower.get(owner[kernel], 0.0), row["ms"][name])
    return known, lower


def check_row(row: dict, stats, owner: dict, dtype: str) -> dict | None:
    from kernels.formats import REGISTRY
    from kernels.formats.ranking import AUTO_CANDIDATES, RANK_N, pick, rank, within_margin

    known, lower = measured(row, owner)
    if not known:
        return None
    fmts = [REGISTRY[n] for n in REGISTRY if n in known or n in lower]
    order = [f.name for f, _ in rank(fmts, stats, dtype, row["N"])]
    plan = [f.name for group in pick(within_margin(rank(fmts, stats, dtype, RANK_N))[0], AUTO_CANDIDATES)
            for f in group]  # built, and timed as their fallbacks
    best = min(known, key=known.get)
    first = order[0]
    loss = (known[first] if first in known else lower[first]) / known[best]
    return {"matrix": row["matrix"], "order": row["order"], "N": row["N"], "best": best,
            "best_ms": known[best], "predicted": order, "top1": first == best, "top2": best in order[:2],
            "loss": loss, "loss_is_lower_bound": first not in known, "plan_top2": best in plan,
            "estimate_us": {f.name: round(f.estimate(stats, dtype, row["N"]), 3) for f in fmts if f.estimate},
            "measured_ms": known, "lower_bound_ms": lower}


def fit(docs, stats_of, owner: dict) -> dict:
    """{format: {"us": constants, "rows", "bounded_rows", "ratio": spread of predicted / measured}} (module
    docstring), in the docs' one dtype (`one_dtype`). A row where the format's time is only a lower bound joins the
    fit, at that bound, while the fit predicts less (censored rows; five rounds at most): otherwise a format measured
    only where it won (the CSR fallback) would be fitted on its best cases alone."""
    from scipy.optimize import nnls

    from kernels.formats import REGISTRY
    from kernels.formats.ranking import TERMS
    from kernels.precision import precision

    prec = precision(one_dtype(docs))
    out = {}
    for name, fmt in REGISTRY.items():
        if fmt.estimate is None:
            continue
        rows = {"known": ([], []), "lower": ([], [])}
        for doc in docs:
            for row in doc["rows"]:
                for kind, times in zip(("known", "lower"), measured(row, owner)):
                    if name in times:
                        terms = fmt.estimate.terms(stats_of(row), prec, row["N"])
                        rows[kind][0].append([terms.get(t, 0.0) for t in TERMS])
                        rows[kind][1].append(times[name] * 1e3)
        X, y = (np.array(v, dtype=float).reshape(-1, len(TERMS)) if i == 0 else np.array(v, dtype=float)
                for i, v in enumerate(rows["known"]))
        if not y.size:
            continue
        Xl, yl = (np.array(v, dtype=float).reshape(-1, len(TERMS)) if i == 0 else np.array(v, dtype=float)
                  for i, v in enumerate(rows["lower"]))
        bound = np.zeros(yl.size, dtype=bool)
        for _ in range(5):
            Xf, yf = np.vstack([X, Xl[bound]]), np.concatenate([y, yl[bound]])
            scale = np.where(Xf.max(axis=0) > 0, Xf.max(axis=0), 1.0)
            coef = nnls(Xf / scale / yf[:, None], np.ones(yf.size))[0] / scale
            below = bound | (Xl @ coef < yl)
            if (below == bound).all():
                break
            bound = below
        ratio = X @ coef / y
        out[name] = {"us": {t: float(f"{c:.4g}") for t, c in zip(TERMS, coef) if c > 0}, "rows": int(y.size),
                     "bounded_rows": int(bound.sum()),
                     "ratio": {q: round(float(np.percentile(ratio, p)), 3)
                               for q, p in (("p10", 10), ("median", 50), ("p90", 90))}}
    return out


def leave_one_out(docs, stats_of, owner: dict) -> dict:
    """`summarize` of every row checked with constants fitted (`fit`) on the other matrices' rows only, in the docs'
    one dtype: how the ranking does on a matrix its constants never saw. The registry's estimates are swapped for
    each matrix's fit (each from the saved ones) and restored at the end."""
    from kernels.formats import REGISTRY

    dtype = one_dtype(docs)
    saved = dict(REGISTRY)
    results = []
    try:
        for label in sorted({row["matrix"] for doc in docs for row in doc["rows"]}):
            train = [{**doc, "rows": [r for r in doc["rows"] if r["matrix"] != label]} for doc in docs]
            for name, found in fit(train, stats_of, owner).items():
                est = saved[name].estimate
                REGISTRY[name] = dataclasses.replace(saved[name], estimate=dataclasses.replace(
                    est, per_precision={**est.per_precision, dtype: found["us"]}))
            results += [r for doc in docs for r in (check_row(row, stats_of(row), owner, dtype)
                                                     for row in doc["rows"] if row["matrix"] == label) if r]
    finally:
        REGISTRY.update(saved)
    return summarize(results)


def summarize(results: list[dict]) -> dict:
    if not results:
        return {"rows": 0}
    loss = np.array([r["loss"] for r in results])

    def share(key):
        return round(float(np.mean([r[key] for r in results])), 3)

    return {"rows": len(results), "top1": share("top1"), "top2": share("top2"), "plan_top2": share("plan_top2"),
            "loss_median": round(float(np.median(loss)), 3),
            "loss_geomean": round(float(np.exp(np.log(loss).mean())), 3), "loss_max": round(float(loss.max()), 3),
            "loss_lower_bounds": int(sum(r["loss_is_lower_bound"] for r in results))}


def table(per_file: dict, summary: dict) -> list[str]:
    lines = [f"{'file':>12} {'matrix':26} {'order':10} {'N':>5} {'best':>8} {'ms':>8}  {'predicted order':38} "
             f"{'top1':>4} {'top2':>4} {'loss':>6}"]
    for tag, results in per_file.items():
        for r in results:
            loss = ('>' if r['loss_is_lower_bound'] else '') + format(r['loss'], '.2f')
            lines.append(f"{tag:>12} {r['matrix'][:26]:26} {r['order']:10} {r['N']:>5} {r['best']:>8} "
                         f"{r['best_ms']:8.4f}  {' > '.join(r['predicted'])[:38]:38} "
                         f"{'yes' if r['top1'] else '-':>4} {'yes' if r['top2'] else '-':>4} {loss:>6}")
    lines.append("")
    lines.append(f"{'file':>12} {'rows':>5} {'top1':>6} {'top2':>6} {'plan top2':>9} {'loss median':>11} "
                 f"{'geomean':>8} {'max':>6}")
    for tag, s in summary.items():
        if s["rows"]:
            lines.append(f"{tag:>12} {s['rows']:5d} {s['top1']:6.1%} {s['top2']:6.1%} {s['plan_top2']:9.1%} "
                         f"{s['loss_median']:11.3f} {s['loss_geomean']:8.3f} {s['loss_max']:6.2f}")
    return lines


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", nargs="+", type=Path, help="benchmarks/formats.py JSON files (default: "
                                                            "benchmarks/results/formats-*.json)")
    ap.add_argument("--fit", action="store_true", help="also fit each format's cost constants on these rows")
    ap.add_argument("--leave-one-out", action="store_true", help="also check each matrix's rows with constants "
                    "fitted on the other matrices' rows (one dtype, as --fit)")
    ap.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    args.results = args.results or sorted((REPO / "benchmarks" / "results").glob("formats-*.json"))
    missing = [str(p) for p in args.results if not Path(p).exists()]
    if missing or not args.results:
        ap.error(f"--results: no such file {missing[0]}" if missing else "no benchmarks/results/formats-*.json")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from kernels.formats import REGISTRY
    from kernels.formats.metcf.selector import slug
    from kernels.formats.structure import structure

    docs = load(args.results)
    if args.fit or args.leave_one_out:
        try:
            one_dtype(docs)
        except ValueError as err:
            print(f"rank_check: {err}", file=sys.stderr)
            return 2
    owner = {k: f.name for f in REGISTRY.values() for k in f.device_class().kernels}
    mats = matrices(docs)
    stats = {key: structure(A) for key, A in mats.items()}

    def stats_of(row):
        return stats[(row["matrix"], row["order"], row["_order_width"])]

    per_file = {}
    for doc in docs:
        tag = Path(doc["path"]).stem.replace("formats-", "").replace(slug(doc["meta"].get("device", "")) + "-", "")
        results = [r for r in (check_row(row, stats_of(row), owner, dtype_of(doc)) for row in doc["rows"])
                   if r is not None]
        per_file[tag] = results
    summary = {tag: summarize(res) for tag, res in per_file.items()}
    summary["all"] = summarize([r for res in per_file.values() for r in res])
    devices = sorted({doc["meta"].get("device", "unknown") for doc in docs})
    dtypes = sorted({dtype_of(d) for d in docs})
    out = {"meta": {"command": " ".join(sys.argv), "date": dt.datetime.now(dt.timezone.utc).isoformat(
               timespec="seconds"), "recorded": [{"file": Path(d["path"]).name, "device": d["meta"].get("device"),
                                                  "date": d["meta"].get("date"), "dtype": dtype_of(d)} for d in docs],
               "device_of_recorded_data": devices, "precision": ", ".join(dtypes),
               "statistics_s": {f"{k[0]} {k[1]}" + ("" if k[2] == 16 else f" (16 x {k[2]})"): round(s.seconds, 4)
                                for k, s in stats.items()}},
           "summary": summary, "rows": per_file}
    if args.fit:
        out["fit"] = fit(docs, stats_of, owner)
    if args.leave_one_out:
        out["leave_one_out"] = leave_one_out(docs, stats_of, owner)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    suffix = "" if dtypes == ["float16"] else "-" + "-".join(dtypes)  # beside a same-day FP16 check, not over it
    path = args.out_dir / f"rank-check-{slug('-'.join(devices))}-{dt.date.today().isoformat()}{suffix}.json"
    path.write_text(json.dumps(out, indent=1))
    lines = table(per_file, summary)
    if args.fit:
        lines += ["", "fitted constants (us per unit of each term; ratio = predicted / measured):"]
        lines += [f"  {name}: {f['us']}  rows {f['rows']}, ratio {f['ratio']}" for name, f in out["fit"].items()]
    if args.leave_one_out:
        s = out["leave_one_out"]
        lines += ["", f"fitted leaving each matrix out ({s['rows']} rows): top1 {s['top1']:.1%}, top2 {s['top2']:.1%}, "
                  f"plan top2 {s['plan_top2']:.1%}, loss geomean {s['loss_geomean']:.3f}, max {s['loss_max']:.2f}"]
    print("\n".join(lines + ["", f"wrote {path}"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
