"""The format-ranking section of docs/benchmarks.md (benchmarks/rank_check.py's files), for
benchmarks/summarize.py: how often the cost estimates that `SpmmPlan(format="auto")` ranks formats by put the
measured fastest format first, in the first two, and among what a plan builds (issue 32).
"""
from __future__ import annotations

import json
from types import SimpleNamespace

from kernels.formats.ranking import FIT_SOURCE, FIT_SOURCE_TF32


def rank_section(runs, v0, older, *, h) -> list[str]:
    title = "Format ranking for `format=\"auto\"` (cost estimates against recorded per-format times)"
    if not runs:
        return h.absent("rank-check", title)
    run = runs[0]
    m = run.meta
    summary = json.loads(run.path.read_text()).get("summary") or {}
    out = [f"## {title}", ""] + h.env(SimpleNamespace(path=run.path, meta=m, rows=[]))  # rows: per recorded run
    recorded = ", ".join(f"`{r['file']}` ({r['device']}, {r['date'][:10]})" for r in m.get("recorded", []))
    stats = m.get("statistics_s") or {}
    out += [f"Recorded runs ranked again (no GPU needed): {recorded}; precision {m.get('precision', '?')}. top 1 / "
            "top 2: the measured fastest format is the estimates' first / among their first two; plan: it is among "
            "the formats an auto plan builds (the first two, a format another one times as its fallback taking no "
            "place); loss: the predicted best's measured time over the measured best's (rows where only a lower "
            "bound of a time is known are counted as such). Statistics time per matrix: "
            f"max {h.f(max(stats.values()) if stats else None, 3)} s over {len(stats)} matrices and orders (on the "
            "machine that ran the check, no GPU). The estimates' constants were fitted on one run per precision "
            f"(FP16 and BF16: `{FIT_SOURCE}`; float32: `{FIT_SOURCE_TF32}`): their rows are in-sample. Earlier runs "
            "timed earlier kernels (a refit follows a kernel change): their rows say how far the kernels moved "
            "since, not how the estimates rank today's.", ""]
    rows = [(name, s["rows"], h.f(s["top1"], 2), h.f(s["top2"], 2), h.f(s["plan_top2"], 2),
             h.f(s["loss_median"], 3), h.f(s["loss_geomean"], 3), h.f(s["loss_max"], 2))
            for name, s in summary.items()]
    out += h.table(("recorded run", "rows", "top 1", "top 2", "plan", "loss median", "loss geomean", "loss max"),
                   rows)
    return out + h.older_note(older) + [h.reproduce("rank-check", run), ""]

