"""The before/after section of docs/benchmarks.md (benchmarks/compare_timings.py --out files, ab-*.json), for
benchmarks/summarize.py: one row per benchmark script of a change, the change's label first, newest first.

Target (issues 31 and the like): a change that should not move speed leaves every timing within 3% and the
geometric mean within 1% (the limits each file records). Where each side has two or more rounds, a case above the
limit is also judged against the rounds' own spread (compare_timings.beyond_noise: every after round slower than
every before round).
"""
from __future__ import annotations

import json
from pathlib import Path


def ab_section(runs, v0, older, *, h) -> list[str]:
    title = "Before / after a change, same machine (benchmarks/compare_timings.py)"
    if not runs:
        return [f"## {title}", "", "Status: not run yet (no `ab-*.json` in the results folder).", ""]
    docs = sorted((json.loads(p.read_text()) | {"_file": p.name} for p in Path(runs[0].path).parent.glob("ab-*.json")),
                  key=lambda d: (d["meta"]["date"], d["_file"]), reverse=True)
    out = [f"## {title}", "",
           "Each row: one benchmark script run from the tree before a change and from the tree after it, on the same "
           "machine (alternating rounds where several: each timing's minimum); every timing of a case (ms / us) as "
           "after / before. Worst: the largest ratios. Beyond noise: of the cases above the limit, those whose every "
           "after round is slower than every before round (files with one round a side: not judged, –).", ""]
    rows = []
    for d in docs:
        m, s = d["meta"], d["summary"]
        worst = sorted(d["rows"], key=lambda r: -r["ratio"])[:3]
        rows.append((m.get("label") or "–", f"`{d['_file']}`", m.get("device") or "?", m["date"][:10],
                     len(m["before"]), s["timings"], h.f(s["geomean"], 4), s["above"],
                     s["above_beyond_noise"] if "above_beyond_noise" in s and len(m["before"]) > 1 else "–",
                     "; ".join(f"{r['case']} {h.f(r['ratio'], 2)}" for r in worst),
                     h.status(s["ok"]),
                     h.status(s["ok_beyond_noise"]) if "ok_beyond_noise" in s and len(m["before"]) > 1 else "–"))
    out += h.table(("change", "file", "device", "date", "rounds", "timings", "geomean", "above case limit",
                    "of them beyond noise", "worst", "within limits", "within limits beyond noise"), rows)
    cmds = sorted({c for d in docs for c in d["meta"].get("after_commands", [])})
    out += ["Commands of the compared runs: " + "; ".join(f"`{c}`" for c in cmds), "",
            "How to reproduce: `bash scripts/ab_timings.sh BEFORE_TREE` on one GPU (BEFORE_TREE from `git archive "
            "<commit before the change> | tar x -C .ab/before`), then `benchmarks/compare_timings.py ... --out`.", ""]
    return out
