"""Fixed cost of an ad hoc run (issue 30): ``flows/spmm.py`` on a small matrix, broken down by phase.

Each run is a fresh process, as a user starts it (``python flows/spmm.py --matrix <spec> --devices cpu --json``,
no ``PREFECT_API_URL``); the CLI notes when each phase ends (``TCSPMM_PHASES_FILE``, ``tasks.cli.mark``) and the
result gives each stage's wall time. Phases: interpreter start and option parsing; choosing the Prefect API
(spawning the temporary server); importing Prefect and the pipeline (while the server starts); waiting for the
server beyond that; the flow (its stages, and the rest: Prefect's task and flow runs, a Dask cluster when one
starts); writing the result; shutdown (sending logs, stopping the server); interpreter exit.

Cases: ``warm`` (every artifact reused: the fixed cost), ``warm-cluster`` (the same with the Dask cluster forced,
``TCSPMM_CLUSTER_MIN_NNZ=0``: what a run on one device paid before), ``first`` (an empty data root: the Prefect
template database is migrated, the matrix generated and reordered). Also ``--help`` and a bad option. With
``--other PATH`` (another checkout, e.g. ``git archive main | tar -x -C /tmp/main``), that checkout's CLI is timed
on the same warm case, total wall only. JSON to ``benchmarks/results/startup-<cpus>cpu-<date>.json``; table last.

    python benchmarks/startup.py [--repeats 3] [--other /tmp/main]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from machine import cpu_model  # noqa: E402  (benchmarks/ is the script folder)

MATRIX = "gen:sbm?n=20000&blocks=200&p_in=0.02&p_out=0.00005&seed=1"  # `make run`'s
PHASES = [("start and parse", "parsed"), ("choose API, spawn server", "api chosen"),
          ("import Prefect + pipeline", "imported"), ("wait for server", "api ready"), ("flow", "flow"),
          ("write result", "emitted"), ("shutdown", "stopped")]
STAGES = [("fetch", ("ingest", "fetch_ms")), ("parse", ("ingest", "parse_ms")), ("reorder", ("reorder", "ms")),
          ("convert", ("convert", "ms")), ("spmm", ("spmm", "wall_ms"))]


def _env(extra: dict | None = None, repo: Path = REPO) -> dict:
    env = {**os.environ, "PYTHONPATH": str(repo), "PREFECT_SERVER_ANALYTICS_ENABLED": "false", **(extra or {})}
    env.pop("PREFECT_API_URL", None)
    return env


def timed(cmd: list[str], env: dict, repo: Path = REPO) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=repo, timeout=900)
    return time.time() - t0, proc


def one_run(data_root: Path, extra_env: dict | None = None) -> dict:
    """One CLI run: total wall, each phase's seconds, each stage's, the flow's remainder, stderr's length."""
    with tempfile.NamedTemporaryFile(suffix=".json") as marks_file:
        env = _env({**(extra_env or {}), "TCSPMM_PHASES_FILE": marks_file.name})
        start = time.time()
        wall, proc = timed([sys.executable, "flows/spmm.py", "--matrix", MATRIX, "--devices", "cpu", "--reorder",
                            "auto", "--json", "--data-root", str(data_root)], env)
        if proc.returncode != 0:
            raise RuntimeError(f"run failed ({proc.returncode}): {proc.stderr[-2000:]}")
        marks = dict(json.loads(Path(marks_file.name).read_text()))
    result = json.loads(proc.stdout)
    phases, last = {}, start
    for label, key in PHASES:
        phases[label], last = marks[key] - last, marks[key]
    phases["interpreter exit"] = start + wall - last
    stages = {name: result[part][key] / 1e3 for name, (part, key) in STAGES}
    stages["flow remainder (Prefect runs, cluster)"] = phases["flow"] - sum(stages.values())
    return {"wall_s": wall, "phases_s": phases, "stages_s": stages, "stderr_chars": len(proc.stderr)}


def median_run(runs: list[dict]) -> dict:
    """Per key, the median over runs."""
    out = {"wall_s": statistics.median(r["wall_s"] for r in runs), "runs_wall_s": [r["wall_s"] for r in runs]}
    for group in ("phases_s", "stages_s"):
        out[group] = {k: statistics.median(r[group][k] for r in runs) for k in runs[0][group]}
    out["stderr_chars"] = max(r["stderr_chars"] for r in runs)
    return out


def quick_answers(repeats: int) -> dict:
    """Median wall of ``--help`` and of a bad option (-N 0), and of a bad --matrix (its check imports the
    generator's parameter parser)."""
    cmds = {"--help": ["--help"], "bad option (-N 0)": ["--matrix", MATRIX, "-N", "0"],
            "bad --matrix": ["--matrix", "gen:rmat?scale=x"]}
    return {name: statistics.median(timed([sys.executable, "flows/spmm.py", *args], _env())[0]
                                    for _ in range(repeats)) for name, args in cmds.items()}


def other_checkout(path: Path, data_root: Path, repeats: int) -> dict:
    cmd = [sys.executable, "flows/spmm.py", "--matrix", MATRIX, "--devices", "cpu", "--reorder", "auto",
           "--data-root", str(data_root)]
    env = _env(repo=path)
    timed(cmd, env, path)  # its first run fills the data root
    walls = [timed(cmd, env, path)[0] for _ in range(repeats)]
    return {"path": str(path), "wall_s": statistics.median(walls), "runs_wall_s": walls}


def table(res: dict) -> str:
    cases = [c for c in ("warm", "warm-cluster", "first") if c in res["cases"]]
    lines = [f"{'phase (s, median of ' + str(res['repeats']) + ')':<40}" + "".join(f"{c:>14}" for c in cases)]
    for group in ("phases_s", "stages_s"):
        for key in res["cases"]["warm"][group]:
            name = key if group == "phases_s" else f"  flow: {key}"
            lines.append(f"{name:<40}" + "".join(f"{res['cases'][c][group][key]:>14.2f}" for c in cases))
    lines.append(f"{'total wall':<40}" + "".join(f"{res['cases'][c]['wall_s']:>14.2f}" for c in cases))
    lines.append(f"{'stderr characters':<40}" + "".join(f"{res['cases'][c]['stderr_chars']:>14d}" for c in cases))
    if "other" in res:
        other = res["other"]
        lines.append(f"{'other checkout, warm total wall':<40}{other['wall_s']:>14.2f}   ({other['path']})")
    lines += [f"{name + ' (s)':<40}{s:>14.2f}" for name, s in res["quick_s"].items()]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--other", type=Path, default=None, help="another checkout to time on the warm case")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/...)")
    args = ap.parse_args()
    from importlib.metadata import version

    with tempfile.TemporaryDirectory(prefix="tcspmm-startup-") as tmp:
        root = Path(tmp) / "data"
        cases = {"first": one_run(root)}
        cases["warm"] = median_run([one_run(root) for _ in range(args.repeats)])
        cases["warm-cluster"] = median_run([one_run(root, {"TCSPMM_CLUSTER_MIN_NNZ": "0"})
                                            for _ in range(args.repeats)])
        res = {"benchmark": "startup", "matrix": MATRIX, "repeats": args.repeats, "cases": cases,
               "quick_s": quick_answers(max(args.repeats, 5)),
               "device": "CPU only (no GPU)", "cpu_model": cpu_model(), "cpu_count": len(os.sched_getaffinity(0)),
               "loadavg_at_start": os.getloadavg()[0],
               "versions": {"python": platform.python_version(), "prefect": version("prefect"),
                            "distributed": version("distributed"), "numpy": version("numpy")},
               "command": " ".join([Path(sys.executable).name, *sys.argv]),
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        if args.other is not None:
            res["other"] = other_checkout(args.other.resolve(), Path(tmp) / "other-data", args.repeats)
    res["loadavg_at_end"] = os.getloadavg()[0]  # other work on the cores shows in every phase
    out = args.out or REPO / "benchmarks" / "results" / \
        f"startup-{res['cpu_count']}cpu-{datetime.date.today().isoformat()}.json"
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {out}\n")
    print(table(res))


if __name__ == "__main__":
    main()
