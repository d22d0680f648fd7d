"""What every section of docs/benchmarks.md shares, for benchmarks/summarize.py and its summarize_*.py sections:
loading and picking the results files per family (the newest per key, the reference GPU's first), the number
formats, the Markdown tables and targets, each file's machine / versions / command / date, the "not run" and
"older files" lines.
"""
from __future__ import annotations

import collections
import datetime as dt
import json
import math
import re
from pathlib import Path
from types import SimpleNamespace



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


def pooled(runs, key: tuple | None = None) -> SimpleNamespace:
    """The newest run of each part (a file name's `series`: device and --part) on the newest run's GPU, as one: rows
    concatenated, ``skipped`` merged, meta of the newest run (with every command listed). A part rerun replaces its
    earlier file alone (2026-11-29's issued-b beside 2026-11-25's issued-a: the file list names both). With ``key``
    (row fields), a case a newer part measured again replaces that case in older parts (a rerun of some of a
    part's matrices under a part of its own); a part left with no rows is not listed."""
    parts: dict = {}
    for r in runs:  # newest first
        if gpu_model(r) == gpu_model(runs[0]):
            parts.setdefault(series(r.path), r)

    def case(row) -> tuple:
        return tuple(row.get(c) for c in key or ())

    seen, kept = set(), []
    for r in parts.values():  # newest part first
        rows = [row for row in r.rows if not key or case(row) not in seen]
        seen.update(map(case, rows))
        if rows:
            kept.append((r, rows))
    kept.reverse()
    chosen = [r for r, _ in kept]
    meta = {**runs[0].meta, "command": " ; ".join(r.meta.get("command", "?") for r in chosen),
            "skipped": [s for r in chosen for s in r.meta.get("skipped") or []],
            "files": [r.path.name for r in chosen]}
    rows = [{**row, "_gpus": r.meta.get("gpus") or []} for r, rs in kept for row in rs]
    return SimpleNamespace(path=runs[0].path, meta=meta, rows=rows, date=runs[0].date)


POOL_KEY = {"spmm": ("matrix", "order", "N")}  # pooled families whose parts may rerun another part's cases


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
    elif family == "formats":  # the newest run per precision (meta "dtype", absent before --dtype: float16)
        chosen = list({r.meta.get("dtype") or "float16": r for r in reversed(runs)}.values())
    elif family in ("spmm", "precision", "bcsr", "sddmm") and runs:
        chosen = [pooled(runs, POOL_KEY.get(family))]  # one suite over several calls (--part): each part's newest
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
