"""Summarize benchmarks/results/*.json into docs/benchmarks.md; every number is read from the files or computed.

    python benchmarks/summarize.py [--results benchmarks/results] [--out docs/benchmarks.md]

Per family (spmm, calibration, reorder, multi_gpu, convert, parse): the newest file by its recorded date (reorder:
the newest per tag, as a 16-core 100M run and a small-size run are separate files; *-v0.json files are only
mentioned as an earlier kernel version) with machine, versions, exact command and date, a table of its rows and a
Targets table computed from them. A family or target without data says "not run". The doc is written atomically.
"""
from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import math
import re
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # summarize_precision, beside this script

from storage.atomic import atomic_path  # noqa: E402

import plots  # noqa: E402  (benchmarks/plots.py: charts beside the doc, optional matplotlib)
from summarize_bcsr import bcsr_section  # noqa: E402  (benchmarks/ is the script folder)
from summarize_cpu import cpu_section  # noqa: E402
from summarize_csr import csr_section  # noqa: E402
from summarize_cvse import cvse_section, svc_slack_section  # noqa: E402
from summarize_formats import formats_section  # noqa: E402
from summarize_gnn import gnn_section  # noqa: E402
from summarize_host import bindings_section, host_section  # noqa: E402
from summarize_precision import precision_section, seam_section  # noqa: E402
from startup_summary import startup_section  # noqa: E402
from summarize_ab import ab_section  # noqa: E402
from summarize_rank import rank_section  # noqa: E402
from summarize_plan import plan_section  # noqa: E402
from summarize_sddmm import sddmm_section  # noqa: E402
from summarize_store_io import store_io_section  # noqa: E402
from summarize_weak import weak_section  # noqa: E402

DEFAULT_CMD = {"spmm": "benchmarks/spmm.py --calibrate --suite full", "csr_rows": "benchmarks/csr_rows.py",
               "calibration": "benchmarks/spmm.py --calibrate",
               "reorder": "benchmarks/reorder.py --sizes 1M,10M,100M --workers 16 --fixtures",
               "multi_gpu": "benchmarks/multi_gpu.py --nnz 100e6 --orders none,natural,tca",
               "multi_gpu_weak": "benchmarks/multi_gpu.py --weak 25e6 --kinds sbm,mesh,rmat --gpus 1,2,4",
               "formats": "benchmarks/formats.py",
               "convert": "benchmarks/convert.py", "parse": "benchmarks/parse.py",
               "precision": "benchmarks/precision.py --suite full", "gnn": "benchmarks/gnn.py --budget-s 300",
               "bcsr": "benchmarks/bcsr.py", "cpu_spmm": "benchmarks/cpu_spmm.py --repeats 7",
               "host-overhead": "benchmarks/host_overhead.py --reorder auto --plans det-f32 nondet-f32",
               "bindings": "benchmarks/bindings.py --ns 128",
               "cvse": "benchmarks/cvse.py --ns 256 1024 --sizes 4096 --budget-s 480",
               "svc-slack": "benchmarks/svc_slack.py", "startup": "benchmarks/startup.py --repeats 3",
               "rank-check": "benchmarks/rank_check.py",
               "plan-time": "benchmarks/plan_time.py --sizes 1M 10M --dtypes float32 float16",
               "sddmm": "benchmarks/sddmm.py --kd 64 256", "store_io": "benchmarks/store_io.py",
               "ab": "scripts/ab_timings.sh BEFORE_TREE"}
VERSION_KEYS = ("python", "numpy", "scipy", "numba", "cupy", "cuda_runtime", "driver", "fast_matrix_market",
                "pyarrow", "dask", "distributed", "dask_cuda", "torch")
SIZE_RE = re.compile(r"^([a-z0-9]+)-(\d+(?:\.\d+)?)([KMG])$", re.I)  # reorder's generated labels, e.g. sbm-10M
NOT_RUN = "not run"
NNZ_100M_FLOOR = 0.9e8  # multi_gpu rows of the 100e6 target size (the generators land within a few % of it)
LINEAR_K = 1.1  # "near-linear": seconds ~ nnz^k with k <= this (criterion chosen here, stated in the doc)


def load(path: Path) -> SimpleNamespace:
    doc = json.loads(path.read_text())
    meta = doc.get("meta") or {k: v for k, v in doc.items() if k not in ("rows", "samples")}
    try:
        date = dt.datetime.fromisoformat(str(meta["date"]))
        date = date if date.tzinfo else date.replace(tzinfo=dt.timezone.utc)
    except (KeyError, ValueError):
        date = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc)
    return SimpleNamespace(path=path, meta=meta, rows=doc.get("rows", doc.get("samples", [doc])), date=date)


def series(path: Path) -> str:
    return re.sub(r"-\d{4}-\d{2}-\d{2}", "", path.stem)


def pooled(runs) -> SimpleNamespace:
    """The runs of the newest run's day as one: rows concatenated, ``skipped`` merged, meta of the newest run
    (with every command listed)."""
    day = [r for r in runs if r.date.date() == runs[0].date.date()]
    meta = {**runs[0].meta, "command": " ; ".join(r.meta.get("command", "?") for r in reversed(day)),
            "skipped": [s for r in day for s in r.meta.get("skipped") or []],
            "files": [r.path.name for r in reversed(day)]}
    rows = [{**row, "_gpus": r.meta.get("gpus") or []} for r in reversed(day) for row in r.rows]
    return SimpleNamespace(path=runs[0].path, meta=meta, rows=rows, date=runs[0].date)


NEWEST_PER_KEY = {  # families whose runs each cover part of a table: every run pooled, the newest row per key kept
    "plan-time": ("matrix", "dtype", "N", "plan"),
    "multi_gpu_weak": ("kind", "order", "P"),
    "multi_gpu": ("kind", "order", "nnz", "P"),
    "gnn": ("graph", "model", "hidden", "precision"),  # a --cuda-graph run of a few graphs beside the full suite
}
# families whose reference-GPU (H100) runs predate the code they describe: the newest run's GPU instead
NEWEST_GPU = {"plan-time"}  # session 25: the window count kept per A and counted afresh per timed plan


REFERENCE_GPU = "H100"  # the reference for timings (the H100 x1 and its multi-GPU kinds); H200s are lent at times


def model_of(gpus) -> str:
    """The GPU model of a list of GPU names, whatever their count (``"NVIDIA H100,..."``; "" for none)."""
    return ",".join(sorted(set(gpus or [])))


def gpu_model(run) -> str:
    """The GPU model a run ran on (one name per GPU in multi-GPU files, ``device`` in single-GPU ones)."""
    return model_of(run.meta.get("gpus")) or str(run.meta.get("device") or "?")


def newest_per_key(runs, key: tuple, *, reference: bool = True) -> SimpleNamespace:
    """The runs (newest first) on one GPU model (see below) as one: per ``key`` the newest run's row, its fields
    that run did not measure (a run of fewer modes) filled from older runs' rows of the same key (each field keeps
    the run it came from: ``_origin`` maps each filled field to its file, ``_file`` names them all, newest first; an
    older row's error is not carried over), rows in their run's order, oldest run first; meta of the newest run
    (keys it lacks from the older ones, e.g. a GNN run's fixed-cost table), with the commands and files of the runs
    that gave a row or a field. The model is the reference GPU's (REFERENCE_GPU) where any run has it, so a newer
    run on a lent H200 does not replace the H100 tables (``reference=False``: the newest run's, for families whose
    reference-GPU files predate the code they describe); runs on other GPUs are left out (listed as older files)."""
    model = next((gpu_model(r) for r in runs if reference and REFERENCE_GPU in gpu_model(r)), gpu_model(runs[0]))
    runs = [r for r in runs if gpu_model(r) == model]
    seen, kept, used = {}, [], []
    for r in runs:
        rows, filled = [], False
        for row in r.rows:
            k = tuple(row.get(c) for c in key)
            first = seen.get(k)
            if first is None:
                seen[k] = {**row, "_gpus": r.meta.get("gpus") or [], "_file": r.path.name, "_origin": {}}
                rows.append(seen[k])
                continue
            extra = {f: v for f, v in row.items() if v is not None and first.get(f) is None and f != "error"}
            if extra:
                first.update(extra, _file=f"{first['_file']} + {r.path.name}")
                first["_origin"].update(dict.fromkeys(extra, r.path.name))
                filled = True
        if rows:
            kept.append((r, rows))
        if rows or filled:
            used.append(r)
    kept.reverse()
    used.reverse()
    meta = {**{k: v for r in used for k, v in r.meta.items()}, **runs[0].meta,  # what the newest run lacks
            "command": " ; ".join(r.meta.get("command", "?") for r in used),
            "skipped": [s for r in used for s in r.meta.get("skipped") or []],
            "files": [r.path.name for r in used]}
    rows = [row for _, rs in kept for row in rs]
    return SimpleNamespace(path=runs[0].path, meta=meta, rows=rows, date=runs[0].date)


def gpus_text(names) -> str:
    """``["NVIDIA H200", "NVIDIA H200"]`` -> ``"2 x NVIDIA H200"``."""
    counts = collections.Counter(names or [])
    return ", ".join(f"{n} x {g}" if n > 1 else g for g, n in counts.items())


def pick(results: Path, family: str):
    """(runs to summarize, earlier-version (-v0) runs, names of older files left out)."""
    earlier = re.compile(r"-v\d+\.json$")  # runs of earlier or discarded code: listed, not summarized
    runs = [load(p) for p in sorted(results.glob(f"{family}-*.json")) if not earlier.search(p.name)]
    runs.sort(key=lambda r: (r.date, r.path.name), reverse=True)
    if family == "reorder":
        chosen = list({series(r.path): r for r in reversed(runs)}.values())
    elif family == "host-overhead" and runs:  # --reorder auto runs on the newest run's GPU, newest row per case
        auto = [r for r in runs if r.meta.get("reorder") == "auto"]
        chosen = [newest_per_key(auto, ("matrix", "N", "order", "plan"), reference=False)] if auto else runs[:1]
    elif family in NEWEST_PER_KEY and runs:
        chosen = [newest_per_key(runs, NEWEST_PER_KEY[family], reference=family not in NEWEST_GPU)]
    elif family in ("spmm", "precision", "bcsr", "sddmm") and runs:
        chosen = [pooled(runs)]  # one suite split over several device calls (--part): pool the newest day's
    else:
        chosen = runs[:1]
    v0 = [load(p) for p in sorted(results.glob(f"{family}-*.json")) if earlier.search(p.name)]
    used = {name for c in chosen for name in c.meta.get("files") or [c.path.name]}
    return chosen, v0, [r.path.name for r in runs if r.path.name not in used]


def f(v, p=2, suffix="") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:.{p}f}{suffix}" if isinstance(v, float) else f"{v}{suffix}"


def secs(v) -> str:
    return f"{v:.2f}" if v >= 1 else f"{v:.3g}"


def mnnz(n) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e4 else str(n)


def geo(xs):
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def status(ok) -> str:
    return NOT_RUN if ok is None else ("**met**" if ok else "**missed**")


def table(head, rows) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return out + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows] + [""]


def targets(rows) -> list[str]:
    return ["**Targets**", ""] + table(("target", "threshold", "measured", "status"), rows)


def env(run) -> list[str]:
    m = run.meta
    mach = m.get("machine") if isinstance(m.get("machine"), dict) else {}
    parts = [x for x in (m.get("device"), mach.get("device")) if x]
    machines = sorted({gpus_text(r.get("_gpus")) for r in run.rows if r.get("_gpus")})
    if len(machines) > 1:  # pooled files from different machines: each row names its own
        parts.append("GPUs: " + "; ".join(machines) + " (per row: column \"GPUs\")")
    elif m.get("gpus"):  # one name per GPU (multi_gpu) or the distinct names
        parts.append("GPUs: " + gpus_text(m["gpus"]))
    if m.get("sm_count"):
        parts.append(f"{m['sm_count']} SMs, measured device copy {f(m.get('copy_gbs'), 0)} GB/s")
    cpu, cores = m.get("cpu_model") or mach.get("cpu"), m.get("cpu_count") or mach.get("cores")
    if cpu or cores:
        parts.append(f"CPU {cpu or '?'}, {cores or '?'} cores")
    if isinstance(m.get("machine"), str):
        parts.append(f"host {m['machine']}")
    vers = {**{k: m.get(k) for k in VERSION_KEYS}, **{k: mach[k] for k in VERSION_KEYS if k in mach},
            **(m.get("versions") or {})}
    cmd = f"`{m['command']}`" if m.get("command") else "not recorded"
    files = ", ".join(f"`{name}`" for name in m.get("files") or [run.path.name])
    return [f"- File: {files}", f"- Machine: {'; '.join(parts) or 'not recorded'}",
            f"- Versions: {', '.join(f'{k} {v}' for k, v in vers.items() if v is not None) or 'not recorded'}",
            f"- Command: {cmd}", f"- Date: {m.get('date', 'not recorded')}", ""]


def reproduce(family, run=None) -> str:
    cmd = (run.meta.get("command") if run else None) or DEFAULT_CMD[family]
    return f"How to reproduce: `{'PYTHONPATH=. python3 ' if cmd.split()[0].endswith('.py') else ''}{cmd}`"


def opening(title, run, *paragraphs) -> list[str]:
    """A section's first lines: its heading, the run's environment (`env`), then each paragraph and a blank line."""
    return [f"## {title}", "", *env(run)] + [line for p in paragraphs for line in (p, "")]


def absent(family, title, target_rows=()) -> list[str]:
    out = [f"## {title}", "", f"Status: {NOT_RUN} yet (no `{family}-*.json` in the results folder).", ""]
    if target_rows:
        out += targets([(t, thr, "–", NOT_RUN) for t, thr, *_ in target_rows])
    return out + [reproduce(family), ""]


def older_note(older) -> list[str]:
    return ["Older files not summarized: " + ", ".join(f"`{p}`" for p in older), ""] if older else []


# ---------------------------------------------------------------------------------------------- spmm

# (target, threshold text, threshold, N, min nnz); speedup of the selected path vs cuSPARSE on the ORIGINAL matrix
# "Reordered" = what the pipeline does (tca); the generator's natural order is an ideal shown beside it, not a case.
SPMM_TARGETS = [(f"geomean speedup vs ORIGINAL-matrix cuSPARSE, tca-reordered cases, N={n}", "≥ 1.8x", 1.8, n, 0)
                for n in (128, 256)]
SPMM_TARGETS += [(f"same, tca-reordered cases with nnz ≥ 10M, N={n}", "≥ 1.4x", 1.4, n, 10_000_000)
                 for n in (128, 256)]
SPMM_SAME = ("min speedup of the selected path vs SAME-matrix cuSPARSE (all rows; the benchmark selects the "
             "fastest measured candidate, so this only shows the selector can fall back)", "≥ 0.95x", 0.95)


def issued_cells(r) -> tuple:
    if "ms_issued" not in r:
        return ("–",) * 4
    ms = r["ms_issued"]
    return (f"{ms['plan']:.3f} ({r['plan_kernel']})", f"{ms['cusparse']:.3f}",
            f(r["issued_speedup_vs_original_cusparse"]), f(r["issued_speedup_vs_same_cusparse"]))


def spmm_targets(rows) -> list[tuple]:
    out = []
    for name, text, lim, n, min_nnz in SPMM_TARGETS:
        sel = [r for r in rows if r["order"] == "tca" and r["N"] == n and r["nnz"] >= min_nnz]
        ideal = [r for r in rows if r["order"] == "natural(ideal)" and r["N"] == n and r["nnz"] >= min_nnz]
        g = geo(r["speedup_vs_original_cusparse"] for r in sel)
        worst = min(sel, key=lambda r: r["speedup_vs_original_cusparse"], default=None)
        meas = (f"{f(g)}x over {len(sel)} cases (min {f(worst['speedup_vs_original_cusparse'])}x, "
                f"{worst['matrix']}); natural order (ideal) {f(geo(r['speedup_vs_original_cusparse'] for r in ideal))}x"
                f" over {len(ideal)}") if sel else "–"
        out.append((name, text, meas, status(None if g is None else g >= lim)))
    w = min(rows, key=lambda r: r["speedup_vs_same_cusparse"], default=None)
    meas = f"{f(w['speedup_vs_same_cusparse'])}x ({w['matrix']} {w['order']} N={w['N']}; {len(rows)} rows)" \
        if w else "–"
    out.append((*SPMM_SAME[:2], meas, status(w["speedup_vs_same_cusparse"] >= SPMM_SAME[2] if w else None)))
    # The flow (tasks/execute.py) also times cuSPARSE on the ORIGINAL order and runs it when faster than every path
    # on the reordered matrix: its speedup over that baseline is max(1, x orig), computed from the same rows.
    for n in sorted({r["N"] for r in rows if r["N"] in (128, 256)}):
        sel = [r for r in rows if r["order"] == "tca" and r["N"] == n]
        fb = [max(1.0, r["speedup_vs_original_cusparse"]) for r in sel]
        below = [r for r in sel if r["speedup_vs_original_cusparse"] < SPMM_SAME[2]]
        out.append((f"with the flow's original-order fallback (tasks/execute.py; both branches GPU-tested in "
                    f"tests/tasks/test_execute.py; computed here from the rows), tca-reordered cases, N={n}: "
                    "geomean (min) vs ORIGINAL-matrix cuSPARSE", "≥ 1.8x (≥ 0.95x)",
                    f"{f(geo(fb))}x (min {f(min(fb, default=None))}x) over {len(sel)} cases; without the fallback "
                    f"{len(below)} cases fall below 0.95x", status(geo(fb) >= 1.8 if fb else None)))
    for n in (128, 256):  # issue 15: the 10M+ set keeps its speedup when timed as a user calls it
        sel = [r for r in rows if r["order"] == "tca" and r["N"] == n and r["nnz"] >= 10_000_000 and "ms_issued" in r]
        g = geo(r["issued_speedup_vs_original_cusparse"] for r in sel)
        out.append((f"as issued (SpmmPlan defaults vs bound cuSPARSE), tca-reordered cases with nnz ≥ 10M, N={n}",
                    "≥ 1.4x", f"{f(g)}x over {len(sel)} cases" if sel else "–",
                    status(None if g is None else g >= 1.4)))
    return out


TC_KERNELS = ("metcf-window", "metcf-balanced", "metcf-split")
SMALL_MS = 0.2  # "small" cases for the host-overhead sentence (above it, run-to-run noise swamps the difference)


def short_tc(rows):
    """The TC kernels these rows timed, short names (files before the split kernel have two)."""
    return [k.removeprefix("metcf-") for k in TC_KERNELS if any(k in r["ms"] for r in rows)]


def where_time_goes(rows, meta) -> str:
    tcx = lambda r: r["tc_speedup_vs_same_cusparse"]  # noqa: E731  best TC kernel vs cuSPARSE, same matrix
    wins, loss = [r for r in rows if tcx(r) > 1], [r for r in rows if tcx(r) <= 1]
    s = [f"The TC kernel (fastest of {'/'.join(short_tc(rows))}) beats cuSPARSE on the same matrix in {len(wins)} "
         f"of {len(rows)} (matrix, order, N) cases"]
    if wins:
        s[-1] += (f" ({'; '.join(sorted({r['matrix'] + ' ' + r['order'] for r in wins}))}); all of them have "
                  f"MeanNnzTC ≥ {min(r['mean_nnz_tc'] for r in wins):.1f}, up to {max(map(tcx, wins)):.2f}x")
    if loss:
        s[-1] += (f"; the other cases have MeanNnzTC {min(r['mean_nnz_tc'] for r in loss):.1f}–"
                  f"{max(r['mean_nnz_tc'] for r in loss):.1f} and reach {min(map(tcx, loss)):.2f}–"
                  f"{max(map(tcx, loss)):.2f}x")
    thr = (meta.get("calibration") or {}).get("balance_threshold")
    hubs = [r for r in rows if thr is not None and r["ar"] > thr]
    if hubs:
        s.append(f"{len(hubs)} cases have AR above the calibrated balance threshold {thr:.2f} (hub rows); there the "
                 f"TC kernel reaches at most {max(map(tcx, hubs)):.2f}x of cuSPARSE")
    sel = [r["floor_pct_selected"] for r in rows]
    tc = [100 * r["memory_floor_ms"] / min(r["ms"][k] for k in TC_KERNELS if k in r["ms"]) for r in rows]
    s.append(f"The selected path runs at a median {statistics.median(sel):.0f}% of the memory floor "
             f"({min(sel):.1f}–{max(sel):.1f}%), the TC kernel at a median {statistics.median(tc):.0f}% "
             f"({min(tc):.1f}–{max(tc):.1f}%)")
    kinds = (*TC_KERNELS, "cusparse")
    s.append("Selected path: " + ", ".join(f"{k} {sum(r['selected'] == k for r in rows)}" for k in kinds) +
             f" of {len(rows)}")
    reord = [r for r in rows if r["order"] != "none" and r["N"] in (128, 256)]
    if reord:
        own = geo(r["speedup_vs_original_cusparse"] / r["speedup_vs_same_cusparse"] for r in reord)
        same = geo(r["speedup_vs_same_cusparse"] for r in reord)
        s.append(f"On the reordered cases at N = 128/256 the speedup over original-matrix cuSPARSE is cuSPARSE's own "
                 f"gain from the reordering (geomean {own:.2f}x) times the selected path's gain over cuSPARSE on the "
                 f"same reordered matrix (geomean {same:.2f}x)")
    host = {k: [(r["ms_single_call"][k] - r["ms"][k]) * 1e3 for r in rows
                if k in r.get("ms_single_call", {}) and r["ms"][k] < SMALL_MS] for k in ("metcf-window", "cusparse")}
    if all(host.values()):
        s.append(f"On the cases whose device time is under {SMALL_MS} ms, one call from Python timed with events "
                 "around the call itself takes a median " + " and ".join(
                     f"{statistics.median(v):.0f} us ({min(v):.0f}–{max(v):.0f}) more for {k}"
                     for k, v in host.items()) + " than the graph-replayed device time: the host launch path, "
                 "which `SpmmPlan.capture` removes for iterative callers")
    conv = [r["convert_over_spmm"] for r in rows if r["N"] == 128 and "convert_over_spmm" in r]
    if conv:
        s.append(f"GPU conversion to ME-TCF costs {min(conv):.1f}–{max(conv):.1f} selected SpMMs at N = 128 "
                 f"(median {statistics.median(conv):.1f})")
    return ". ".join(s) + "."


def reproducibility(run) -> list[str]:
    """The rerun (``benchmarks/spmm.py --prefix reproduce-spmm``, same commands) against the summarized run."""
    files = sorted(run.path.parent.glob("reproduce-spmm-*.json"))
    loaded = [r for r in (load(p) for p in files) if r.meta.get("device") == run.meta.get("device")]
    if not loaded:  # a rerun on another device is no reproduction of this run
        return [f"**Reproducibility.** not run on {run.meta.get('device', 'this device')} (rerun the commands with "
                "`--prefix reproduce-spmm`).", ""]
    loaded.sort(key=lambda r: (r.date, r.path.name), reverse=True)
    rerun = pooled(loaded)
    key = lambda r: (r["matrix"], r["order"], r["N"])  # noqa: E731
    first = {key(r): r for r in run.rows}
    pairs = [(first[key(r)], r) for r in rerun.rows if key(r) in first]
    if not pairs:
        return ["**Reproducibility.** the rerun shares no (matrix, order, N) case with the summarized run.", ""]

    def spread(get):
        d = sorted(abs(get(b) / get(a) - 1) * 100 for a, b in pairs)
        return f"median {statistics.median(d):.1f}%, max {d[-1]:.1f}%"

    same = sum(a["selected"] == b["selected"] for a, b in pairs)
    g = {n: (geo(r["speedup_vs_original_cusparse"] for r in run.rows if r["order"] == "tca" and r["N"] == n),
             geo(r["speedup_vs_original_cusparse"] for r in rerun.rows if r["order"] == "tca" and r["N"] == n))
         for n in (128, 256)}
    return [f"**Reproducibility.** Rerun `{', '.join(rerun.meta['files'])}` ({rerun.meta.get('date')}, same "
            f"commands with `--prefix reproduce-spmm`) on {len(pairs)} shared (matrix, order, N) cases: |rerun / "
            f"first - 1| of the selected path's ms {spread(lambda r: r['selected_ms'])}; window kernel "
            f"{spread(lambda r: r['ms']['metcf-window'])}; best cuSPARSE {spread(lambda r: r['ms']['cusparse'])}; "
            f"same selected kernel in {same} of {len(pairs)}; tca geomean vs original cuSPARSE "
            + "; ".join(f"N={n} {f(a)}x first, {f(b)}x rerun" for n, (a, b) in g.items()) + ".", ""]


def spmm_section(runs, v0, older) -> list[str]:
    if not runs:
        return absent("spmm", "SpMM (one GPU)", SPMM_TARGETS + [SPMM_SAME])
    run = runs[0]
    out = ["## SpMM (one GPU)", ""] + env(run)
    head = ("matrix", "order", "nnz", "MeanNnzTC", "AR", "cuSPARSE best (alg ms)", "window ms", "balanced ms",
            "split ms (ksplit)", "selected (ms)", "x orig cuSP", "x same cuSP", "floor %", "as issued: plan (kernel)",
            "cuSP", "x orig", "x same", "max rel err")
    timing = run.meta.get("timing")
    out += [f"Times: {timing}." if timing else "Times: CUDA events around one call each (host launch overhead "
            "included; files before the graph-replay timing).", ""]
    for n in sorted({r["N"] for r in run.rows}):
        out += [f"N = {n}:", ""] + table(head, [
            (r["matrix"], r["order"], mnnz(r["nnz"]), f(r["mean_nnz_tc"], 1), f(r["ar"]),
             f"{r['cusparse_best']} {r['ms']['cusparse']:.3f}", f(r["ms"]["metcf-window"], 3),
             f(r["ms"]["metcf-balanced"], 3),
             f"{r['ms']['metcf-split']:.3f} ({r['split_ksplit']})" if "metcf-split" in r["ms"] else "–",
             f"{r['selected']} {r['selected_ms']:.3f}",
             f(r["speedup_vs_original_cusparse"]), f(r["speedup_vs_same_cusparse"]), f(r["floor_pct_selected"], 0),
             *issued_cells(r), f"{max(r['rel_err_n128'].values()):.1e}") for r in run.rows if r["N"] == n])
    out += ["Speedups are of the selected path (SpmmPlan's policy): `x orig cuSP` = best cuSPARSE algorithm on the "
            "order `none` matrix / selected, `x same cuSP` = best cuSPARSE algorithm on the same (reordered) matrix / "
            "selected; `floor %` = time to move A (ME-TCF), B and C once at the measured copy bandwidth / selected "
            "time; `as issued` = per call as a user issues it (`ms_issued` above): `SpmmPlan(A)` with its defaults "
            "(deterministic) and cuSPARSE's best algorithm through a bound call, ms and speedups on the original / "
            "same matrix (– in files before this timing); rel err = worst kernel (the plan's too) on 2048 sampled "
            "rows vs float64 SciPy at N = 128.", ""]
    out += targets(spmm_targets(run.rows)) + ["**Where the time goes.** " + where_time_goes(run.rows, run.meta), ""]
    out += reproducibility(run)
    for old in v0:
        key = lambda r: (r["matrix"], r["order"], r["N"])  # noqa: E731
        now = {key(r): r for r in run.rows}
        pairs = [(r, now[key(r)]) for r in old.rows if key(r) in now]
        ratio = geo(a["ms"]["metcf-window"] / b["ms"]["metcf-window"] for a, b in pairs)
        tg = {n: geo(r["speedup_vs_original_cusparse"] for r in old.rows if r["order"] != "none" and r["N"] == n)
              for n in (128, 256)}
        same_timing = old.meta.get("timing") == run.meta.get("timing")
        out += [f"Earlier kernel version: `{old.path.name}` ({old.meta.get('date')}, `{old.meta.get('command')}`, "
                f"{len(old.rows)} rows{'; ' + old.meta['note'] if old.meta.get('note') else ''}). On the "
                f"{len(pairs)} (matrix, order, N) cases in both files its window kernel took a geomean {f(ratio)}x of "
                f"this version's time (earlier ms / this ms"
                + ("" if same_timing else "; its times are single calls with the host launch path included, so the "
                   "ratio overstates the kernel's gain on cases under ~0.1 ms")
                + f"); its reordered geomean speedup vs original cuSPARSE was {f(tg[128])}x at N=128 and "
                f"{f(tg[256])}x at N=256.", ""]
    return out + older_note(older) + [reproduce("spmm", run), ""]


def calibration_section(runs, v0, older) -> list[str]:
    if not runs:
        return absent("calibration", "Selector calibration")
    run = runs[0]
    out = ["## Selector calibration", ""] + env(run) + [f"Method (from the file): {run.meta.get('method')}", ""]
    out += table(("constant", "value"), [(k, f"{v:.4g}") for k, v in (run.meta.get("calibration") or {}).items()])
    out += table(("rows", "deg", "N", "nnz", "TC blocks", "window ms", "balanced ms", "cuSPARSE ms"),
                 [(r.get("rows", 1 << 18), r.get("deg"), r.get("N"), mnnz(r.get("nnz", 0)), r.get("n_blocks"),
                   f(r.get("metcf-window"), 3),
                   f(r.get("metcf-balanced"), 3), f(r.get("cusparse"), 3)) for r in run.rows])
    return out + [reproduce("calibration") + " (writes calibration-<device>.json beside the spmm results)", ""]


# ---------------------------------------------------------------------------------------------- reorder

REORDER_TARGETS = [("tca time at 100M nnz on 16 cores", "≤ 600 s"),
                   ("near-linear growth of tca time (seconds ∝ nnz^k, smallest → largest size of a generator)",
                    f"k ≤ {LINEAR_K}"),
                   ("tca MeanNnzTC gain vs none, sbm (communities, short rows)", "≥ 1.13x", 1.13, "sbm"),
                   ("tca MeanNnzTC gain vs none, longrow (communities, long rows)", "≥ 1.72x", 1.72, "longrow"),
                   ("no applied method increases TC blocks", "applied blocks ≤ none")]


def size_of(label):
    m = SIZE_RE.match(label)
    return (m[1], float(m[2]) * {"K": 1e3, "M": 1e6, "G": 1e9}[m[3].upper()]) if m else (None, None)


def reorder_targets(runs) -> list[tuple]:
    tca = [(run, r) for run in runs for r in run.rows if r["method"] == "tca"]
    tag = (lambda run: f" [{series(run.path)[len('reorder-'):]}]") if len(runs) > 1 else (lambda run: "")
    out = []
    big = [(run, r) for run, r in tca if (size_of(r["matrix"])[1] or 0) >= 1e8]
    if big:
        times = [r.get("seconds") for _, r in big]
        cores = min(run.meta.get("cpu_count") or 0 for run, _ in big)
        wk = {m[1] for run, _ in big if (m := re.search(r"--workers[ =](\d+)", run.meta.get("command", "")))}
        meas = "; ".join(f"{r['matrix']}{tag(run)} "
                         + (f"{r['seconds']:.0f} s" if "seconds" in r else r["skipped"]) for run, r in big)
        meas += f" on {cores} cores" + "".join(f", --workers {w}" for w in sorted(wk))
        ok = None if None in times else max(times) <= 600
        # Fewer cores than 16 within the limit meets it a fortiori; over it on fewer cores says nothing.
        if cores < 16 and not ok:
            ok = None
        out.append((*REORDER_TARGETS[0], meas, status(ok) + (f" (on {cores} cores; no 16-core run)"
                                                                if cores < 16 else "")))
    else:
        out.append((*REORDER_TARGETS[0], "no 100M tca row", NOT_RUN))
    growth = []
    # Pooled over the files of one set-up (core count and --workers), smallest to largest size.
    def setup(run):
        m = re.search(r"--workers[ =](\d+)", run.meta.get("command", ""))
        return run.meta.get("cpu_count"), int(m.group(1)) if m else 0

    for key in sorted({setup(run) for run in runs}, key=str):
        cores = key[0]
        mine = [r for rn, r in tca if setup(rn) == key and size_of(r["matrix"])[0] and "seconds" in r]
        for kind in dict.fromkeys(size_of(r["matrix"])[0] for r in mine):
            # One point per size: the fastest of repeated runs (a run on a busy machine only adds time).
            best: dict = {}
            for r in mine:
                if size_of(r["matrix"])[0] == kind:
                    size = size_of(r["matrix"])[1]
                    best[size] = min(best.get(size, (size, r["nnz"], r["seconds"])), (size, r["nnz"], r["seconds"]),
                                     key=lambda p: p[2])
            pts = sorted(best.values())
            if len(pts) >= 2:
                (s0, n0, t0), (s1, n1, t1) = pts[0], pts[-1]
                growth.append((kind, s0, s1, 1e6 * t0 / n0, 1e6 * t1 / n1,
                               math.log(t1 / t0) / math.log(n1 / n0), cores))
    if growth:
        meas = "; ".join(f"{k} {mnnz(a)}→{mnnz(b)}: {u0:.2f}→{u1:.2f} µs/nnz, k={kk:.2f} ({c} cores)"
                         for k, a, b, u0, u1, kk, c in growth)
        top = max(g[2] for g in growth)
        out.append((*REORDER_TARGETS[1], meas, status(max(g[5] for g in growth) <= LINEAR_K)
                    + ("" if top >= 1e8 else f" (up to {mnnz(top)} only; 100M {NOT_RUN})")))
    else:
        out.append((*REORDER_TARGETS[1], "fewer than 2 sizes of one generator", NOT_RUN))
    for name, text, lim, kind in REORDER_TARGETS[2:4]:
        g = [(r["matrix"] + tag(run), r["mean_nnz_tc"] / r["none_mean_nnz_tc"], r) for run, r in tca
             if size_of(r["matrix"])[0] == kind and "mean_nnz_tc" in r]
        nat = lambda r: r["natural_mean_nnz_tc"] and r["natural_mean_nnz_tc"] / r["none_mean_nnz_tc"]  # noqa: E731
        meas = "; ".join(f"{m} {x:.2f}x" + (f" (natural order {nat(r):.2f}x)" if nat(r) else "") for m, x, r in g)
        out.append((name, text, meas or "–", status(min(x for _, x, _ in g) >= lim if g else None)))
    done = [r for run in runs for r in run.rows if "blocks" in r and r["method"] != "none"]
    if done:
        applied = [r for r in done if min(r["blocks"], r["none_blocks"]) > r["none_blocks"]]  # reorder_checked's rule
        raw = [r for r in done if r["blocks"] > r["none_blocks"]]
        tca_raw = [r["matrix"] for r in raw if r["method"] == "tca"]
        meas = (f"applied (reorder_checked / auto keep the identity unless blocks strictly fall, so this holds by "
                f"construction): {len(applied)} increases in {len(done)} runs; raw permutations that would raise "
                f"blocks: {len(raw)} of {len(done)}, tca {len(tca_raw)}")
        meas += f" ({', '.join(tca_raw)})" if tca_raw else ""
        out.append((*REORDER_TARGETS[4], meas, status(not applied)))
    else:
        out.append((*REORDER_TARGETS[4], "–", NOT_RUN))
    return out


def reorder_section(runs, v0, older) -> list[str]:
    if not runs:
        return absent("reorder", "Reordering", REORDER_TARGETS)
    out = ["## Reordering", ""]
    for run in runs:
        methods = [m for m in dict.fromkeys(r["method"] for r in run.rows) if m != "none"]
        mats = {r["matrix"]: r for r in run.rows}  # any row of the matrix, for nnz and the none / natural columns
        by = {(r["matrix"], r["method"]): r for r in run.rows}
        cell = lambda r, key, fmt: fmt(r[key]) if r and key in r else ("skipped" if r else "–")  # noqa: E731
        out += [f"### `{series(run.path)}`", ""] + env(run)
        out += ["MeanNnzTC after each method (none and the generator's natural order for reference):", ""]
        out += table(("matrix", "nnz", "none", "natural", *methods),
                     [(m, mnnz(r["nnz"]), f(r["none_mean_nnz_tc"]), f(r["natural_mean_nnz_tc"]),
                       *(cell(by.get((m, x)), "mean_nnz_tc", f) for x in methods)) for m, r in mats.items()])
        out += ["Seconds per method (fresh process; tca peak RSS in MB in the last column):", ""]
        out += table(("matrix", *methods, "tca peak MB"),
                     [(m, *(cell(by.get((m, x)), "seconds", secs) for x in methods),
                       cell(by.get((m, "tca")), "peak_rss_mb", lambda v: f(v, 0))) for m in mats])
        if any("bcsr_blocks" in r for r in run.rows):
            out += ["BCSR 16x8 blocks (aligned, no condensing) and TC blocks per window (max / cv) after each method:",
                    ""]
            def spread(r):
                return f"{r['bpw_max']} / {f(r['bpw_cv'])}" if r and "bpw_max" in r else cell(r, "-", str)

            out += table(("matrix", "none BCSR", *(f"{x} BCSR" for x in methods), *(f"{x} spread" for x in methods)),
                         [(m, r.get("none_bcsr_blocks", "–"),
                           *(cell(by.get((m, x)), "bcsr_blocks", str) for x in methods),
                           *(spread(by.get((m, x))) for x in methods)) for m, r in mats.items()])
        square = [m for m, r in mats.items() if r.get("none_halo_pct_p2") is not None]
        if square:
            def halo(r, prefix):
                if not r or "skipped" in r:
                    return "skipped" if r else "–"
                return " / ".join(f(r.get(f"{prefix}{P}"), 1) for P in (2, 4))

            out += ["Halo of a resident multi-GPU iteration after each method (rows of B the P row-window shards "
                    "receive, % of the rows; P = 2 / P = 4; square matrices):", ""]
            out += table(("matrix", "none", "natural", *methods),
                         [(m, halo(mats[m], "none_halo_pct_p"), halo(mats[m], "natural_halo_pct_p"),
                           *(halo(by.get((m, x)), "halo_pct_p") for x in methods)) for m in square])
        skipped = [f"{r['matrix']} {r['method']}: {r['skipped']}" for r in run.rows if "skipped" in r]
        out += (["Skipped: " + "; ".join(skipped), ""] if skipped else []) + [reproduce("reorder", run), ""]
    out += older_note(older) + [f"Targets over the files above ({', '.join(f'`{r.path.name}`' for r in runs)}):", ""]
    return out + targets(reorder_targets(runs))


# ---------------------------------------------------------------------------------------------- multi_gpu

MGPU_LIMITS = {"kernel_eff": 0.95, "iter_eff_2gpu_100M": 0.85, "iter_eff_4gpu_100M": 0.70,
               "oneshot_e2e_ratio_2gpu": 0.6, "oneshot_e2e_ratio_4gpu": 0.35}  # a file's own "targets" win
MGPU_TARGETS = [("kernel-only strong-scaling efficiency, every P > 1 row", "≥ 95%"),
                (f"resident per-iteration efficiency at 2 GPUs, nnz ≥ {NNZ_100M_FLOOR / 1e6:.0f}M (batched: the "
                 "steady state inside one actor call per GPU, the best of plain and overlapped halo exchange, "
                 "where measured; else the batch's wall time; else per call)", "≥ 85%"),
                ("same at 4 GPUs", "≥ 70%"),
                ("one-shot end to end (driver-free, store to C in the store) / 1-GPU time, 2 GPUs", "≤ 0.6"),
                ("same, 4 GPUs", "≤ 0.35"),
                ("halo shrink from reordering (halo bytes received, none / reordered, P > 1)", "> 1x")]

HALO_ORDERS = ("community",)  # tasks.reorder methods that order rows for small row-partition halos
MGPU_ERRS = ("oneshot_rel_err", "stored_rel_err", "resident_rel_err", "resident_overlap_rel_err",
             "resident_batched_rel_err", "resident_batched_overlap_rel_err", "resident_batched_advance_rel_err",
             "resident_batched_rowoverlap_rel_err", "resident_batched_rowoverlap_advance_rel_err")
ROW = "resident_batched_rowoverlap"  # the row-split overlap (boundary rows first; multi_gpu.py --modes rowoverlap)
LOOP_EFFS = ("resident_batched_loop_eff", "resident_batched_overlap_loop_eff", f"{ROW}_loop_eff")  # in the call
BATCHED_EFFS = ("resident_batched_iter_eff", "resident_batched_overlap_iter_eff", f"{ROW}_iter_eff")  # batch wall


def resident_eff(r):
    """The resident efficiency a row is judged by: the better steady-state (in-call loop) one when measured, else
    the better batched wall-time one, else the best per-call one."""
    for keys in (LOOP_EFFS, BATCHED_EFFS):
        got = [r[k] for k in keys if r.get(k) is not None]
        if got:
            return max(got)
    return max((x for x in (r.get("iter_eff"), r.get("iter_eff_overlap")) if x is not None), default=None)


def resident_measured(r) -> str:
    per_call = f"plain {f(r.get('iter_eff'), 3)}, overlap {f(r.get('iter_eff_overlap'), 3)}"
    if all(r.get(k) is None for k in BATCHED_EFFS):
        return per_call
    rows = lambda key: "" if r.get(key) is None else f", row-overlapped {f(r[key], 3)}"  # noqa: E731 (only if run)
    loop = "" if all(r.get(k) is None for k in LOOP_EFFS) else (
        f"in-call loop {f(r.get('resident_batched_loop_eff'), 3)}, overlapped "
        f"{f(r.get('resident_batched_overlap_loop_eff'), 3)}{rows(f'{ROW}_loop_eff')}; ")
    return (f"{loop}batch wall {f(r.get('resident_batched_iter_eff'), 3)}, overlapped "
            f"{f(r.get('resident_batched_overlap_iter_eff'), 3)}{rows(f'{ROW}_iter_eff')} (per call: {per_call})")


def with_resident_kernel(rows) -> list[dict]:
    """Rows without a one-shot kernel time get the resident one: the batched iterations' median kernel ms (else
    the per-call ones'), each the slowest shard's CUDA-event time, with its efficiency against the P = 1 row of the
    same matrix, order and GPU model (a P = 1 run may have seen fewer of the machine's GPUs); ``kernel_from`` says
    which."""
    out = [dict(r) for r in rows]
    for r in out:
        if r.get("kernel_ms") is None and "error" not in r:
            ms = r.get("resident_batched_kernel_ms") or r.get("iter_kernel_ms")
            if ms is not None:
                r.update(kernel_ms=ms, kernel_from="resident")
    one = {(r["kind"], r["order"], r["nnz"], model_of(r.get("_gpus"))): r["kernel_ms"] for r in out
           if r["P"] == 1 and r.get("kernel_from") == "resident"}
    for r in out:
        t1 = one.get((r["kind"], r["order"], r["nnz"], model_of(r.get("_gpus"))))
        if r.get("kernel_from") == "resident" and t1:
            r["kernel_eff"] = t1 / (r["P"] * r["kernel_ms"])
    return out


def mgpu_targets(run) -> list[tuple]:
    tg = {**MGPU_LIMITS, **(run.meta.get("targets") or {})}
    rows = [r for r in with_resident_kernel(run.rows) if "error" not in r]
    ke = [r for r in rows if r["P"] > 1 and r.get("kernel_eff") is not None]
    w = min(ke, key=lambda r: r["kernel_eff"], default=None)
    src = " (resident kernel times)" if w and w.get("kernel_from") == "resident" else ""
    out = [(MGPU_TARGETS[0][0], f"≥ {tg['kernel_eff']:.0%}",
            f"min {w['kernel_eff']:.1%} ({w['kind']} {w['order']} {mnnz(w['nnz'])} P={w['P']}{src}; {len(ke)} rows)"
            if w else "–", status(w["kernel_eff"] >= tg["kernel_eff"] if w else None))]
    for P, key, label in ((2, "iter_eff_2gpu_100M", MGPU_TARGETS[1][0]), (4, "iter_eff_4gpu_100M",
                                                                           MGPU_TARGETS[2][0])):
        got = [(r, resident_eff(r)) for r in rows if r["P"] == P and r["nnz"] >= NNZ_100M_FLOOR]
        got = [(r, e) for r, e in got if e is not None]
        meas = "; ".join(f"{r['kind']} {r['order']} {mnnz(r['nnz'])}: {resident_measured(r)}" for r, _ in got)
        lim = tg.get(key, MGPU_LIMITS[key])
        out.append((label, f"≥ {lim:.0%}", meas or "–", status(min(e for _, e in got) >= lim if got else None)))
        if P == 2:
            it = got
    lim = tg.get("iter_eff_2gpu_100M", MGPU_LIMITS["iter_eff_2gpu_100M"])
    halo_ordered = [(r, e) for r, e in it if r["order"] in HALO_ORDERS]
    if halo_ordered:  # the same target judged on the halo-reducing reordering alone (also counted above)
        out.append((f"same, with the `{'/'.join(HALO_ORDERS)}` reordering (label propagation: the order meant for "
                    "row partitions)", f"≥ {lim:.0%}",
                    "; ".join(f"{r['kind']} {mnnz(r['nnz'])}: {e:.3f}" for r, e in halo_ordered),
                    status(min(e for _, e in halo_ordered) >= lim)))
    halo = {}
    for r in rows:
        if r["P"] > 1 and r.get("halo_recv_bytes") is not None:
            halo.setdefault((r["kind"], r["shape"][0], r["P"]), {})[r["order"]] = sum(r["halo_recv_bytes"])
    shrink = [(k, o, h["none"] / b if b else math.inf) for k, h in halo.items() if "none" in h
              for o, b in h.items() if o != "none"]
    ideal = " (the ideal order, not a reordering method)"
    meas = "; ".join(f"{k[0]} {mnnz(k[1])} rows P={k[2]} {o}{ideal if o == 'natural' else ''}: {x:.2f}x"
                     for k, o, x in shrink)
    for P, key, label in ((2, "oneshot_e2e_ratio_2gpu", MGPU_TARGETS[3][0]), (4, "oneshot_e2e_ratio_4gpu",
                                                                               MGPU_TARGETS[4][0])):
        got = [(r, *x) for r, x in ((r, oneshot_ratio(r, rows)) for r in rows if r["P"] == P) if x is not None]
        lim = tg.get(key, MGPU_LIMITS[key])
        out.append((label, f"≤ {lim:g}", "; ".join(f"{r['kind']} {r['order']} {mnnz(r['nnz'])}: {x:.2f}"
                                                   + (" (B read once, halo exchanged)" if how == "exchanged" else "")
                                                   for r, x, how in got) or "–",
                    status(max(x for _, x, _ in got) <= lim if got else None)))
    return out + [(*MGPU_TARGETS[5], meas or "–", status(min(x for *_, x in shrink) > 1 if shrink else None))]


def exchanged_cell(r: dict, what: str, p: int = 2) -> str:
    """`` / <value>`` of the one-shot that reads B once (halo exchanged) for ``what`` ("e2e_ms", "e2e_ratio"),
    where it ran."""
    v = r.get(f"exchanged_{what}")
    return f" / {f(v, p)}" if v is not None else ""


ONESHOTS = ("stored", "exchanged")  # the driver-free one-shot (every worker reads its B rows); the one that reads B
# once and exchanges the halo


def origin(row: dict, field: str) -> str:
    """The result file a pooled row's ``field`` came from (`newest_per_key`)."""
    return (row.get("_origin") or {}).get(field) or (row.get("_file") or "").split(" + ")[0]


def oneshot_ratio(r: dict, rows: list):
    """(ratio, which) for a row's faster one-shot: its end to end over the faster one-shot's at 1 GPU on the same
    case, both from one run, the newest that has both (pooled rows mix runs of different code; each path's own
    ratio flatters a path whose 1-GPU run is slow: the one over the exchange pays its actors' setup there too),
    ``which`` in ONESHOTS; the per-path ratios where the 1-GPU row has no times; None when neither ran."""
    one = next((o for o in rows if o["P"] == 1 and all(o.get(k) == r.get(k) for k in ("kind", "order", "nnz"))),
               {})
    for src in (r.get("_file") or "").split(" + "):  # newest run first: both times from one run (one code version)
        e2e = {w: r[f"{w}_e2e_ms"] for w in ONESHOTS if r.get(f"{w}_e2e_ms") is not None
               and origin(r, f"{w}_e2e_ms") == src}
        e1 = [one[f"{w}_e2e_ms"] for w in ONESHOTS if one.get(f"{w}_e2e_ms") is not None
              and origin(one, f"{w}_e2e_ms") == src]
        if e2e and e1:
            which = min(e2e, key=e2e.get)
            return e2e[which] / min(e1), which
    got = {w: r[f"{w}_e2e_ratio"] for w in ONESHOTS if r.get(f"{w}_e2e_ratio") is not None}
    return (min(got.values()), min(got, key=got.get)) if got else None


def via(r: dict) -> str:
    """The resident exchange of a multi_gpu row, "+ce" where its row overlap copied the halo on the copy engines."""
    t = r.get("transport", "–")
    return f"{t}+ce" if r.get("rowoverlap_halo_copy") == "ce" and r.get(f"{ROW}_loop_ms") else t


def multi_gpu_section(runs, v0, older) -> list[str]:
    if not runs:
        return absent("multi_gpu", "Multi-GPU strong scaling", MGPU_TARGETS)
    run, rows = runs[0], []
    for r in with_resident_kernel(run.rows):
        if "error" in r:
            rows.append((r["kind"], r["order"], mnnz(r["nnz"]), r["P"], "ERROR: " + r["error"][:80], *("",) * 25))
            continue
        err = max(r.get(k) or 0.0 for k in MGPU_ERRS)
        batched = f(r.get("resident_batched_iter_ms")) + (" (failed)" if r.get("batched_error") else "")
        if r.get("resident_batched_iters"):
            batched += f" ({r['resident_batched_iters']}/batch)"
        res = " (res.)" if r.get("kernel_from") == "resident" else ""
        b = "resident_batched"  # the breakdown of the plain batched loop (the overlapped one is in the JSON)
        per_gpu = r.get(f"{b}_kernel_ms_per_gpu")
        rows.append((r["kind"], r["order"], mnnz(r["nnz"]), r["P"], f(r.get("kernel_ms")) + res,
                     f(r.get("kernel_eff"), 3), f(r.get("stored_e2e_ms"), 0) + exchanged_cell(r, "e2e_ms", 0),
                     f(r.get("stored_e2e_ratio")) + exchanged_cell(r, "e2e_ratio"),
                     f(r.get("iter_ms")), f(r.get("iter_eff"), 3), batched, f(r.get("resident_batched_iter_eff"), 3),
                     f(r.get("resident_batched_overlap_iter_eff"), 3), f(r.get(f"{b}_loop_ms")),
                     f(r.get(f"{b}_loop_eff"), 3), f(r.get("resident_batched_overlap_loop_ms")),
                     f(r.get("resident_batched_overlap_loop_eff"), 3), f(r.get(f"{ROW}_loop_ms")),
                     f(r.get(f"{ROW}_loop_eff"), 3), f(r.get(f"{ROW}_boundary_ms")), f(r.get(f"{ROW}_exposed_ms")),
                     "–" if not per_gpu else "/".join(f"{x:.2f}" for x in per_gpu), f(r.get(f"{b}_exchange_ms")),
                     f(r.get(f"{b}_exposed_ms")), f(r.get(f"{b}_gap_ms"), 3), via(r),
                     f"{max(r.get('halo_recv_bytes') or [0]) / 2**20:.1f}", f"{err:.1e}",
                     ",".join(sorted(set(r.get("kernels") or []))) or "–", gpus_text(r.get("_gpus")) or "–",
                     f"`{r['_file']}`" if r.get("_file") else "–"))
    out = ["## Multi-GPU strong scaling", ""] + env(run)
    out += table(("kind", "order", "nnz", "P", "kernel ms", "kernel eff", "one-shot e2e ms", "e2e / 1 GPU",
                  "iter ms (per call)", "iter eff", "batch wall ms", "batch eff", "overlap batch eff", "loop ms",
                  "loop eff", "overlap loop ms",
                  "overlap loop eff", "row-overlap loop ms", "row-overlap loop eff", "row-overlap boundary ms",
                  "row-overlap exposed ms", "kernel ms per GPU", "exchange ms", "exposed ms", "gap ms", "via",
                  "halo MB/GPU", "max rel err", "kernel per shard", "GPUs", "file"), rows)
    if any(r.get("exchanged_e2e_ms") is not None for r in run.rows):
        out += ["\"one-shot e2e ms\" and \"e2e / 1 GPU\": the driver-free one-shot (every worker reads the B rows its "
                "shard references), then after \"/\" the one that reads B once (each worker its own rows, the halo "
                "by the resident exchange; `tasks/distribute/exchanged.py`), each over its own 1-GPU run; the "
                "targets judge the faster one-shot against the faster one at 1 GPU.", ""]
    out += ["Each (kind, order, nnz, P) row comes from the newest file that has it, the fields that run did not "
            "measure from older files of the same case (column \"file\", newest first); \"via\": the "
            "resident exchange (NCCL or Dask actor calls), \"+ce\" where the row overlap's halo went over the copy "
            "engines (the default since 2026-11-28; NCCL's kernels before).", ""]
    if any(r.get("kernel_from") == "resident" for r in with_resident_kernel(run.rows)):
        out += ["\"(res.)\": no one-shot run; the kernel time is the resident iterations' median slowest-shard kernel "
                "(CUDA events; batched where measured), its efficiency against the P = 1 row of the same matrix, "
                "order and machine.", ""]
    if any(r.get("checked_rows") for r in run.rows):
        checked = max(r.get("checked_rows") or 0 for r in run.rows)
        out += [f"Correctness: every C (P = 1 included) is compared with a float64 product on up to {checked:,} "
                "rows (random 16-row windows, decoded from the matrix's own arrays), fetched from their shards "
                "(max rel err column; the TF32 contract is 2e-3).", ""]
    out += ["\"kernel per shard\" is what each shard's selector ran: where it says cusparse, the efficiencies are "
            "those of cuSPARSE split over the GPUs, not of the Tensor Core kernel.", ""]
    if any(r.get("resident_batched_iter_ms") is not None for r in run.rows):
        out += ["\"iter ms\" is one driver call per iteration (Dask actor round trip included); \"batch wall ms\" "
                "is a batch of iterations in one actor call per GPU, its wall time / iterations; \"loop ms\" the "
                "slowest GPU's time inside that call / iterations (the steady state of a long run: no host sync "
                "between iterations); each efficiency is T1 / (P · TP) against the P = 1 row of the same mode. "
                "Breakdown of the plain batched loop (medians, CUDA events): the kernel per GPU (imbalance), the "
                "exchange (pack + NCCL, including the wait for a late peer), the exposed exchange (what the kernel "
                "waited for), the GPU's idle time between iterations (gap). \"overlap\": the column split (the "
                "own-column kernel beside the exchange, the halo-column kernel adding into C); \"row-overlap\": the "
                "row split (the boundary rows' kernel first, then their exchange for the next iteration beside the "
                "interior rows' kernel; each row computed once), with its boundary kernel's ms (part of its kernel) "
                "and the exchange it left exposed.", ""]
    out += oneshot_breakdown(run.rows)
    out += ["Skipped: " + "; ".join(run.meta["skipped"]), ""] if run.meta.get("skipped") else []
    if v0:  # -v<n> files: runs of earlier code, kept for reference
        out += ["Runs of other code (earlier versions, or variants not kept; not summarized): " + ", ".join(
            f"`{r.path.name}` ({len(r.rows)} rows, {r.date.date()})" for r in v0), ""]
    return out + older_note(older) + targets(mgpu_targets(run)) + [reproduce("multi_gpu", run), ""]


ONESHOT_PARTS = ("scatter_ms", "load_ms", "remap_ms", "h2d_ms", "plan_ms", "d2h_ms", "worker_ms",
                 "last_gather_ms", "other_ms")


STORED_PARTS = ("stored_load_ms", "stored_b_ms", "stored_b_wait_ms", "stored_remap_ms", "stored_h2d_ms",
                "stored_plan_ms", "stored_first_ms", "stored_d2h_ms", "stored_write_ms", "stored_overhead_ms")


def parts_table(rows, intro: str, e2e: str, parts: tuple, prefix: str = "") -> list[str]:
    """``intro`` and a table of each measured row's end to end (field ``e2e``) and ``parts`` (ms, headed by their
    names less ``prefix`` and "_ms"); nothing for rows without the parts."""
    have = [r for r in rows if "error" not in r and r.get(parts[-1]) is not None]
    if not have:
        return []
    return [intro, ""] + table(
        ("kind", "order", "nnz", "P", "e2e", *(k[len(prefix):-3] for k in parts)),
        [(r["kind"], r["order"], mnnz(r["nnz"]), r["P"], f(r.get(e2e), 0), *(f(r.get(k), 0) for k in parts))
         for r in have])


def oneshot_breakdown(rows) -> list[str]:
    """Where one-shot end-to-end time goes: the driver's one-shot, then the driver-free one (rows with itemized
    timings only)."""
    return parts_table(
        rows, "One-shot end-to-end breakdown (ms; driver: scatter of shards and B or halo rows, gather of C; per GPU, "
        "the slowest: load from Parquet, halo remap, host to device, plan (conversion, compile, selection), device to "
        "host; along the path of the shard placed last: `worker` = its whole task less its timing runs, `gather` its "
        "block, `other` = the rest of that path: Dask scheduling, inputs moving to the worker, the block serialized "
        "back):", "e2e_ms", ONESHOT_PARTS) + parts_table(
        rows, "Driver-free one-shot (each worker reads its shard and B rows from Parquet and writes its C block), the "
        "shard placed last (ms): load = its shard from Parquet, b = its rows of B, b_wait = what was left of that "
        "read when the remap and the plan (run beside it since 2026-11-28; '–' before) were done, remap = its halo "
        "columns renamed, h2d / d2h = copies, plan = the SpmmPlan's build, first = the product's first run (kernel "
        "selection and autotune included; '–' in runs before it was recorded), write = its C block, overhead = "
        "Dask's share; e2e excludes the timed repeats only:", "stored_e2e_ms", STORED_PARTS, "stored_")


# ---------------------------------------------------------------------------------------------- convert, parse

def convert_section(runs, v0, older) -> list[str]:
    if not runs:
        return absent("convert", "CSR → ME-TCF conversion")
    run = runs[0]
    gpu = any("gpu_ms" in r for r in run.rows)
    out = ["## CSR → ME-TCF conversion", ""] + env(run)
    out += table(("size", "matrix", "nnz", "CPU s", "Mnnz/s", "peak MB", "inverse s", "MeanNnzTC", "TC blocks",
                  "blocks/window max", "ME-TCF/CSR bytes") + (("GPU ms",) if gpu else ()),
                 [(r["size"], f"`{r['matrix']}`", mnnz(r["nnz"]), f(r["cpu_s"], 3), f(r["cpu_mnnz_per_s"]),
                   f(r["cpu_peak_mb"], 0), f(r["inverse_s"], 3), f(r["mean_nnz_tc"]), r["n_blocks"],
                   r["blocks_per_window_max"], f(r["metcf_over_csr"], 3)) + ((f(r.get("gpu_ms")),) if gpu else ())
                  for r in run.rows])
    return out + older_note(older) + ["No targets are defined for this benchmark.", "", reproduce("convert", run), ""]


def parse_section(runs, v0, older) -> list[str]:
    if not runs:
        return absent("parse", "MatrixMarket parse throughput")
    run = runs[0]
    out = ["## MatrixMarket parse throughput", ""] + env(run)
    out += table(("matrix", "nnz", "text MB", "fast_matrix_market.read_coo s (MB/s)", "read_mtx s (MB/s)",
                  "threads", "best of"),
                 [(f"`{r['matrix']}`", mnnz(r["nnz"]), f(r["text_mb"], 1),
                   f"{r['fmm_read_coo_s']} ({r['fmm_mb_per_s']})", f"{r['read_mtx_s']} ({r['read_mtx_mb_per_s']})",
                   r.get("threads"), r.get("repeats")) for r in run.rows])
    return out + older_note(older) + ["No targets are defined for this benchmark.", "", reproduce("parse", run), ""]


SECTIONS = {"spmm": spmm_section, "precision": lambda *a: precision_section(*a, h=SimpleNamespace(**globals())),
            "seam-ab": lambda *a: seam_section(*a, h=SimpleNamespace(**globals())),
            "gnn": lambda *a: gnn_section(*a, h=SimpleNamespace(**globals())),
            "bcsr": lambda *a: bcsr_section(*a, h=SimpleNamespace(**globals())),
            "formats": lambda *a: formats_section(*a, h=SimpleNamespace(**globals())),
            "cvse": lambda *a: cvse_section(*a, h=SimpleNamespace(**globals())),
            "svc-slack": lambda *a: svc_slack_section(*a, h=SimpleNamespace(**globals())),
            "sddmm": lambda *a: sddmm_section(*a, h=SimpleNamespace(**globals())),
            "calibration": calibration_section, "reorder": reorder_section, "multi_gpu": multi_gpu_section,
            "multi_gpu_weak": lambda *a: weak_section(*a, h=SimpleNamespace(**globals())),
            "host-overhead": lambda *a: host_section(*a, h=SimpleNamespace(**globals())),
            "csr_rows": lambda *a: csr_section(*a, h=SimpleNamespace(**globals())),
            "bindings": lambda *a: bindings_section(*a, h=SimpleNamespace(**globals())),
            "convert": convert_section, "parse": parse_section,
            "cpu_spmm": lambda *a: cpu_section(*a, h=SimpleNamespace(**globals())),
            "startup": lambda *a: startup_section(*a, h=SimpleNamespace(**globals())),
            "store_io": lambda *a: store_io_section(*a, h=SimpleNamespace(**globals())),
            "rank-check": lambda *a: rank_section(*a, h=SimpleNamespace(**globals())),
            "plan-time": lambda *a: plan_section(*a, h=SimpleNamespace(**globals())),
            "ab": lambda *a: ab_section(*a, h=SimpleNamespace(**globals()))}


def render(results: Path) -> str:
    out = ["# Benchmarks", "",
           "Generated by `benchmarks/summarize.py` from the JSON files in `benchmarks/results/`; do not edit by hand "
           "(rerun `python benchmarks/summarize.py`). Every number below is read from those files or computed from "
           "them; a benchmark or target without data says \"not run\".", ""]
    for family, section in SECTIONS.items():
        out += section(*pick(results, family))
    return "\n".join(out).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks.md")
    args = ap.parse_args(argv)
    text = render(args.results)
    why_not = plots.unavailable()  # charts are optional: the tables are written either way
    charts = None if why_not else plots.render(
        {fam: [row for run in pick(args.results, fam)[0] for row in run.rows]
         for fam in {family for family, *_ in plots.CHARTS.values()}}, args.out.parent)
    if why_not:
        print(f"summarize: no charts: {why_not}", file=sys.stderr)
    text = plots.insert(text, plots.section(charts, why_not))
    with atomic_path(args.out) as tmp:  # temp file beside the target, fsync, rename
        tmp.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
