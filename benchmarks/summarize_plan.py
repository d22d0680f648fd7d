"""The plan-time section of docs/benchmarks.md (benchmarks/plan_time.py's files), for benchmarks/summarize.py: what
``SpmmPlan`` costs to build and decide per format, size and precision, next to the reordering it follows (issue 32),
and the targets: ``auto`` within 10% of the reordering time and under 2 s at 10M nonzeros, its kernel within 3% of
the default format's.
"""
from __future__ import annotations

from plan_time import PLAN_TARGETS, summary  # benchmarks/ is the script folder (summarize.py puts it on the path)

TITLE = "Plan time per format and size (`SpmmPlan` build + first decision)"


def plan_table(rows: list, mnnz=str) -> tuple[list[str], list[tuple]]:
    """(plan kinds in first-seen order, one row per (matrix, dtype, N): matrix, nnz, dtype, N, reorder s, then each
    plan's "build + decide s (kernel ms)" or ERROR, auto's chosen format)."""
    kinds = list(dict.fromkeys(r["plan"] for r in rows))
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["matrix"], r["dtype"], r["N"]), {})[r["plan"]] = r
    out = []
    for (matrix, dtype, N), plans in groups.items():
        any_row = next(iter(plans.values()))
        cells = []
        for k in kinds:
            r = plans.get(k)
            cells.append("–" if r is None else "ERROR" if "error" in r else
                         f"{r['plan_s']:.2f} ({r['kernel_ms']:.3f})")
        auto = plans.get("auto") or {}
        out.append((matrix, mnnz(any_row["nnz"]), dtype, N, f"{any_row['reorder_s']:.2f}", *cells,
                    auto.get("format") or "–"))
    return kinds, out


def parts_table(rows: list) -> list[tuple]:
    """Where each ``auto`` plan's time went, for files whose rows carry the parts (benchmarks/plan_time.py from
    session 38's code on): matrix, dtype, N, plan ms and its share of the reordering, the build's wall and its
    parts (the ranking's window statistics, the rest of the ranking, each built format's conversion and upload:
    since session 40 the base format's build runs beside the ranking, so they may sum past the wall), each kernel
    the decision timed (its bind, a tune of its own on the first bind, the timing: `kernels.choice.decide`'s
    ``timing_s``), and the rest of the decision (its own logic, the first run's launch)."""
    out = []
    for r in rows:
        if r.get("plan") != "auto" or "error" in r or r.get("decide_parts_s") is None:
            continue
        build, timed = r.get("build_parts_s") or {}, r["decide_parts_s"]
        stats = r.get("statistics_s") or 0.0
        ranking = build.get("format_ranking_s", 0.0)
        alone = (r.get("ranking") or [r.get("format") or "?"])[0]  # one format built: its keys carry no prefix
        convert = {k.split(":")[0] if ":" in k else alone: v for k, v in build.items()
                   if k.endswith("convert_upload_s")}
        rest = r["plan_s"] - r["build_s"] - sum(timed.values())
        out.append((r["matrix"], r["dtype"], r["N"], f"{1e3 * r['plan_s']:.1f}",
                    f"{r['plan_s'] / r['reorder_s']:.3f}" if r.get("reorder_s") else "–", f"{1e3 * r['build_s']:.1f}",
                    f"{1e3 * stats:.1f}",
                    f"{1e3 * (ranking - stats):.1f}",
                    ", ".join(f"{k} {1e3 * v:.1f}" for k, v in convert.items()) or "–",
                    ", ".join(f"{k} {1e3 * v:.1f}" for k, v in timed.items()) or "–", f"{1e3 * rest:.1f}"))
    return out


TARGET_NAMES = (("`auto` plan (build + decide) / reordering time", f"≤ {PLAN_TARGETS['auto_over_reorder']:g}"),
                ("`auto` plan at 10M nonzeros", f"≤ {PLAN_TARGETS['auto_s_at_10M']:g} s"),
                ("`auto` kernel / the default format's", f"≤ {PLAN_TARGETS['auto_kernel_over_default']:g}"))


def plan_targets(rows: list, h) -> list[tuple]:
    """The targets' rows from the runs' rows (benchmarks/plan_time.py's `summary`: per matrix, dtype and N)."""
    s = summary(rows)
    ratio = [(k, v["auto_over_reorder"]) for k, v in s.items() if v.get("auto_over_reorder") is not None]
    big = [(k, v["auto_plan_s"]) for k, v in s.items() if v["nnz"] >= 5e6]  # the 10M class (R-MAT scale 19: 8M)
    kern = [(k, v["auto_kernel_over_default"]) for k, v in s.items() if v.get("auto_kernel_over_default") is not None]
    out = []
    for (name, thr), pairs, limit, fmt in zip(TARGET_NAMES, (ratio, big, kern),
                                               (PLAN_TARGETS["auto_over_reorder"], PLAN_TARGETS["auto_s_at_10M"],
                                                PLAN_TARGETS["auto_kernel_over_default"]),
                                               ("{:.3f}", "{:.2f} s", "{:.3f}")):
        got = "; ".join(f"{k}: {fmt.format(v)}" for k, v in pairs) or "–"
        out.append((name, thr, got, h.status(max(v for _, v in pairs) <= limit if pairs else None)))
    return out


def plan_section(runs, v0, older, *, h) -> list[str]:
    if not runs:
        return h.absent("plan-time", TITLE, TARGET_NAMES)
    run = runs[0]
    kinds, rows = plan_table(run.rows, h.mnnz)
    out = h.opening(
        TITLE, run,
        "Per matrix (seeded generator, rows reordered by `auto_reorder` at the precision's block width: its "
        "seconds in \"reorder s\") and precision, each plan's build + first decision in seconds, and in "
        "parentheses its kernel's ms (CUDA-graph replay of the chosen kernel). `auto`: the cost model's first "
        "two built and timed, ME-TCF always among them and formats predicted above twice the cheapest left out (the "
        "default); `auto-all`: every candidate built and timed (what `auto` cost "
        "before the ranking); `hybrid`: dense windows on a Tensor Core format, the rest on the CUDA-core CSR "
        "kernel. Kernels compiled by an earlier plan of the run come from the compile cache, as for a user's "
        "second plan. Every C was checked against float64 on sampled rows in the run.")
    out += h.table(("matrix", "nnz", "dtype", "N", "reorder s", *kinds, "auto chose"), rows)
    out += ["Skipped: " + "; ".join(run.meta["skipped"]), ""] if run.meta.get("skipped") else []
    parts = parts_table(run.rows)
    if parts:
        out += ["Where each `auto` plan's time went (ms; \"/ reorder\": the plan over the reordering's seconds): the "
                "build's wall (`SpmmPlan(...)`) and its parts, the ranking's window statistics, the rest of the "
                "ranking and each built format's conversion and upload (the base format's build runs on a "
                "background thread beside the ranking, as does the CSR fallback's, which is not listed: the parts "
                "may sum past the wall); each kernel the decision timed (its bind, a tune of its own on the first "
                "bind, then its timing; the CSR fallback's own tune times its mappings and the decision reuses the "
                "kept one's time), and the rest of the decision (its logic, the first run's launch).", ""]
        out += h.table(("matrix", "dtype", "N", "auto plan ms", "/ reorder", "build", "statistics",
                        "ranking, rest", "conversion + upload", "timed in the decision", "decision, rest"), parts)
    return out + h.older_note(older) + h.targets(plan_targets(run.rows, h)) + [h.reproduce("plan-time", run), ""]
