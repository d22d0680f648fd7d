"""The start-up section of docs/benchmarks.md (benchmarks/startup.py's files), for benchmarks/summarize.py.

Targets (issue 30): the fixed cost of an ad hoc run on a small matrix, warm (every artifact reused), at most 10 s
on 2 cores; ``--help`` and a bad option answer in under 1 s.
"""
from __future__ import annotations

FIXED_COST_S = 10.0
ANSWER_S = 1.0


def startup_section(runs, v0, older, *, h) -> list[str]:
    title = "Start-up: the fixed cost of an ad hoc run"
    if not runs:
        return h.absent("startup", title, [("warm run, small matrix", f"<= {FIXED_COST_S:g} s"),
                                           ("--help and a bad option", f"< {ANSWER_S:g} s")])
    run = runs[0]
    m = run.meta
    cases = [c for c in ("warm", "warm-cluster", "first") if c in m["cases"]]
    out = h.opening(
        title, run,
        f"`flows/spmm.py --matrix '{m['matrix']}' --devices cpu --json` (`make run`'s matrix), each run a fresh "
        f"process; seconds, median of {m['repeats']} runs (first: one run on an empty data root). warm: every "
        "artifact reused; warm-cluster: the same with the Dask cluster forced (TCSPMM_CLUSTER_MIN_NNZ=0), what "
        "a one-device run paid before issue 30; first: the Prefect template database migrated, the matrix "
        f"generated and reordered. Load average {h.f(m.get('loadavg_at_start'), 2)} at the start and "
        f"{h.f(m.get('loadavg_at_end'), 2)} at the end (2 cores shared with other jobs).")
    rows = []
    for group in ("phases_s", "stages_s"):
        for key in m["cases"]["warm"][group]:
            name = key if group == "phases_s" else f"flow: {key}"
            rows.append((name, *(h.f(m["cases"][c][group][key], 2) for c in cases)))
    rows.append(("**total wall**", *(f"**{h.f(m['cases'][c]['wall_s'], 2)}**" for c in cases)))
    rows.append(("stderr characters", *(m["cases"][c]["stderr_chars"] for c in cases)))
    out += h.table(("phase", *cases), rows)
    quick = m.get("quick_s", {})
    if "other" in m:
        runs = ", ".join(h.f(x, 2) for x in m["other"]["runs_wall_s"])
        out += [f"The same warm run through `{m['other']['path']}` (another checkout, the code before issue 30): "
                f"{h.f(m['other']['wall_s'], 2)} s (median; runs {runs}).", ""]
    out += h.table(("command", "seconds (median)"), [(f"`{k}`", h.f(v, 2)) for k, v in quick.items()])
    warm = m["cases"]["warm"]["wall_s"]
    slowest = max(quick.values()) if quick else None
    out += h.targets([(f"warm run on a small matrix, {m.get('cpu_count', '?')} cores", f"<= {FIXED_COST_S:g} s",
                       f"{h.f(warm, 2)} s", h.status(warm <= FIXED_COST_S)),
                      ("--help, a bad option, a bad --matrix (slowest)", f"< {ANSWER_S:g} s",
                       f"{h.f(slowest, 2)} s", h.status(slowest < ANSWER_S if slowest is not None else None))])
    return out + h.older_note(older) + [h.reproduce("startup", run), ""]
