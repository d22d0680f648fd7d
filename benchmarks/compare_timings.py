"""Before/after timings of one benchmark on one machine: every case's ratio and their geometric mean.

    python benchmarks/compare_timings.py BEFORE.json AFTER.json [--case 0.03] [--geomean 0.01] [--only REGEX]
    python benchmarks/compare_timings.py B1.json,B2.json A1.json,A2.json    (rounds: each timing's minimum)

Both files come from the same script of benchmarks/ (spmm.py, formats.py, host_overhead.py: ``{"rows": [...]}``)
run on the same machine; a comma-separated list on a side gives that side's rounds (run alternately with the other
side's), of which each timing's minimum counts (host timings in microseconds vary from round to round). A row is
matched by its identity fields (matrix, N, order, plan, class, kind, label);
a timing is every number under a key ending in ``ms`` or ``us`` (nested dicts give one timing per entry, e.g.
``ms.metcf-window``). A ratio is after / before. ``--skip`` leaves out the timings whose name matches (the
baselines a script times beside ours, and numbers it derives rather than measures: ``BASELINES``). Exit 0 when
every ratio is within ``1 + case`` (slower; faster is fine) and the geometric mean within ``1 + geomean``; 1
otherwise; the worst cases are printed first. ``--only``
keeps the timings whose name matches (e.g. ``'^(issued_us|issued_nograph_us|graph_us)$'`` for host_overhead.py,
leaving out the CuPy and cuSPARSE baselines it also times).

Noise: with two or more rounds on each side, a timing's rounds on one side spread as much as the change being
judged where the timing is host-bound (a 5 us call, a conversion of a small matrix that waits on the device:
1.2-1.5x between rounds of the same tree, H200, 2026-11-28). A case above the case limit is counted again as
*beyond noise* only when every after round is slower than every before round (the rounds' ranges do not
overlap); the summary gives both counts, ``ok`` the strict verdict and ``ok_beyond_noise`` the one that
counts only those cases. One round a side has no spread: every case above the limit is beyond noise then.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import re
import sys
from pathlib import Path

IDENTITY = ("matrix", "label", "N", "order", "plan", "class", "kind", "dtype", "vector")
# timings that are not of our code: other libraries' (torch, cuSPARSE, cupyx, cuBLAS, PyG) and what a script
# derives rather than times (the memory floor from the copy bandwidth, the cost model's prediction)
BASELINES = r"(^|\.)(torch|cusparse|cupyx|cublas|dense|pyg)|^cus(parse)?_|^orig_|memory_floor|predicted"


def timings(row: dict, prefix: str = "") -> dict[str, float]:
    """Every timing of a row: numbers under keys ending in ms or us, nested dicts flattened with dots."""
    out = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and (key.endswith(("ms", "us")) or prefix):
            out.update(timings(value, name + "."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and (
                prefix or key.endswith(("_ms", "_us")) or key in ("ms", "us")):
            if math.isfinite(value) and value > 0:
                out[name] = float(value)
    return out


def cases(path: Path) -> dict[tuple, dict[str, float]]:
    rows = json.loads(path.read_text()).get("rows", [])
    return {tuple((k, json.dumps(r.get(k))) for k in IDENTITY if k in r): timings(r) for r in rows}


def all_rounds(paths: str) -> dict[tuple, dict[str, list[float]]]:
    """The cases of one or more files (comma-separated): each timing's values over the files that have it."""
    out: dict[tuple, dict[str, list[float]]] = {}
    for path in filter(None, str(paths).split(",")):
        for ident, ts in cases(Path(path)).items():
            mine = out.setdefault(ident, {})
            for name, value in ts.items():
                mine.setdefault(name, []).append(value)
    return out


def rounds(paths: str) -> dict[tuple, dict[str, float]]:
    """The cases of one or more files (comma-separated), each timing the minimum over the files that have it."""
    return {ident: {name: min(v) for name, v in ts.items()} for ident, ts in all_rounds(paths).items()}


def compare_rounds(before: str | Path, after: str | Path, only: str | None = None, skip: str | None = None
                   ) -> list[tuple[str, list[float], list[float]]]:
    """(case name, before rounds, after rounds) for every timing present on both sides (whose name matches
    ``only`` and not ``skip``)."""
    b, a = all_rounds(before), all_rounds(after)
    out = []
    for ident in sorted(set(b) & set(a)):
        for name in sorted(set(b[ident]) & set(a[ident])):
            if (only and not re.search(only, name)) or (skip and re.search(skip, name)):
                continue
            label = " ".join(f"{k}={json.loads(v)}" for k, v in ident) + f" {name}"
            out.append((label, b[ident][name], a[ident][name]))
    return out


def compare_values(before: str | Path, after: str | Path, only: str | None = None, skip: str | None = None
                   ) -> list[tuple[str, float, float]]:
    """(case name, before, after) for every timing present on both sides (whose name matches ``only`` and not
    ``skip``): each side's minimum over its rounds."""
    return [(label, min(b), min(a)) for label, b, a in compare_rounds(before, after, only, skip)]


def beyond_noise(b: list[float], a: list[float], limit: float) -> bool:
    """After slower than before by more than ``limit`` (minima), and every after round slower than every before
    round (with one round a side, the first condition alone)."""
    return min(a) / min(b) > limit and (min(a) > max(b) or (len(a) < 2 or len(b) < 2))


def compare(before: str | Path, after: str | Path, only: str | None = None) -> list[tuple[str, float]]:
    """(case name, after / before) for every timing present on both sides (whose name matches ``only``)."""
    return [(label, x / y) for label, y, x in compare_values(before, after, only)]


def summary(values: list, args) -> dict:
    """Timings compared (``values``: compare_rounds' triples), their geometric mean ratio of minima, how many
    exceed the case limit, how many of those beyond the rounds' noise, and both verdicts."""
    ratios = [min(a) / min(b) for _, b, a in values]
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    above = sum(r > 1 + args.case for r in ratios)
    noisy = sum(beyond_noise(b, a, 1 + args.case) for _, b, a in values)
    geo_ok = geo <= 1 + args.geomean
    return {"timings": len(values), "geomean": geo, "above": above, "above_beyond_noise": noisy,
            "rounds": [max(len(b) for _, b, _ in values), max(len(a) for _, _, a in values)],
            "ok": bool(geo_ok and above == 0), "ok_beyond_noise": bool(geo_ok and noisy == 0)}


def report(before: str, after: str, values: list, args) -> dict:
    """The comparison as a results file (benchmarks/results/ab-*.json, summarized in docs/benchmarks.md)."""
    def metas(paths):
        return [json.loads(Path(p).read_text()).get("meta", {}) for p in filter(None, str(paths).split(","))]
    mb, ma = metas(before), metas(after)
    return {"meta": {"label": args.label, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                     "command": "benchmarks/compare_timings.py " + " ".join(sys.argv[1:]),
                     "device": (mb[0] if mb else {}).get("device"),
                     "before": [Path(p).name for p in str(before).split(",")],
                     "after": [Path(p).name for p in str(after).split(",")],
                     "before_commands": sorted({m.get("command", "?") for m in mb}),
                     "after_commands": sorted({m.get("command", "?") for m in ma}),
                     "case_limit": 1 + args.case, "geomean_limit": 1 + args.geomean, "only": args.only,
                     "skip": args.skip},
            "summary": summary(values, args),
            "rows": [{"case": n, "before": min(b), "after": min(a), "ratio": min(a) / min(b),
                      "before_rounds": b, "after_rounds": a, "beyond_noise": beyond_noise(b, a, 1 + args.case)}
                     for n, b, a in values]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", help="results file, or comma-separated files of several rounds")
    ap.add_argument("after", help="results file, or comma-separated files of several rounds")
    ap.add_argument("--case", type=float, default=0.03, help="largest slowdown of one timing (default 0.03)")
    ap.add_argument("--geomean", type=float, default=0.01, help="largest slowdown of the geomean (default 0.01)")
    ap.add_argument("--only", help="compare only the timings whose name matches this regular expression")
    ap.add_argument("--skip", help="leave out the timings whose name matches this regular expression (e.g. "
                    "compare_timings.BASELINES: other libraries' timings and derived numbers)")
    ap.add_argument("--out", type=Path, help="also write the comparison here as JSON (e.g. "
                    "benchmarks/results/ab-<label>-<script>-<device>-<date>.json)")
    ap.add_argument("--label", default="", help="what changed between before and after (recorded with --out)")
    args = ap.parse_args(argv)
    values = compare_rounds(args.before, args.after, args.only, args.skip)
    if not values:
        print("no timing is in both files (same script? same cases?)")
        return 1
    if args.out:
        args.out.write_text(json.dumps(report(args.before, args.after, values, args), indent=1))
    for name, b, a in sorted(values, key=lambda x: -min(x[2]) / min(x[1]))[:20]:
        spread = f"  before {min(b):.4g}-{max(b):.4g}, after {min(a):.4g}-{max(a):.4g}" if len(b) > 1 else ""
        mark = " (beyond noise)" if beyond_noise(b, a, 1 + args.case) and len(b) > 1 else ""
        print(f"{min(a) / min(b):7.4f}  {name}{spread}{mark}")
    s = summary(values, args)
    print(f"{s['timings']} timings; geomean after/before {s['geomean']:.4f} (limit {1 + args.geomean:.2f}); "
          f"{s['above']} above {1 + args.case:.2f}, {s['above_beyond_noise']} of them beyond the rounds' noise")
    return 0 if s["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
