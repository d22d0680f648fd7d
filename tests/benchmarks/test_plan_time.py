"""benchmarks/plan_time.py on the CPU path (its logic: every plan kind built, decided, checked, summarized) and the
plan-time section of docs/benchmarks.md from its file."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def plan_time(load_script):
    return load_script(REPO / "benchmarks" / "plan_time.py")


def test_cpu_run_times_every_plan_kind_and_checks_c(plan_time, tmp_path, capsys):
    out = tmp_path / "pt.json"
    assert plan_time.main(["--cpu", "--kinds", "sbm", "--dtypes", "float32", "--ns", "32", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    plans = [r["plan"] for r in doc["rows"]]
    assert plans[-3:] == ["hybrid", "auto", "auto-all"] and "metcf" in plans and not doc["failures"]
    assert all(r["rel_err"] <= r["tolerance"] and r["plan_s"] == r["build_s"] + r["decide_s"] for r in doc["rows"])
    assert all(isinstance(r["build_parts_s"], dict) and "decide_parts_s" in r for r in doc["rows"])  # where it went
    (key, s), = doc["summary"].items()
    assert key == "sbm-tiny float32 N=32" and s["auto_over_reorder"] == pytest.approx(s["auto_plan_s"] / s["reorder_s"])
    assert capsys.readouterr().out.splitlines()[-1].startswith("sbm-tiny")  # the table last


def test_failures_name_errors_and_misses(plan_time):
    ok = {"matrix": "m", "dtype": "float16", "plan": "bcsr", "N": 8, "rel_err": 1e-3, "tolerance": 1e-2}
    rows = [ok, {**ok, "plan": "cvse", "rel_err": 0.5}, {**ok, "plan": "hybrid", "rel_err": float("nan")},
            {"matrix": "m", "dtype": "float16", "plan": "auto", "N": 8, "error": "RuntimeError: boom"}]
    bad = plan_time.failures(rows)
    assert len(bad) == 3 and "auto: RuntimeError: boom" in bad[0] and "cvse N=8: rel err 0.5 > 0.01" in bad[1]


def test_refusals(plan_time, capsys):
    with pytest.raises(SystemExit):
        plan_time.parse_args(["--sizes", "5M"])
    assert "no generator parameters for rmat 5M" in capsys.readouterr().err
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "plan_time.py")], capture_output=True, text=True,
                          cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith("error: plan_time: no CUDA")


def row(matrix, nnz, dtype, plan, plan_s, kernel_ms, reorder_s=10.0, fmt="metcf"):
    return {"matrix": matrix, "nnz": nnz, "dtype": dtype, "N": 256, "plan": plan, "plan_s": plan_s,
            "build_s": plan_s, "decide_s": 0.0, "kernel_ms": kernel_ms, "reorder_s": reorder_s, "format": fmt,
            "rel_err": 1e-4, "tolerance": 2e-3}


def test_section_and_targets(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    rows = [row("rmat-10M", 10_000_000, "float32", "metcf", 0.4, 2.0), row("rmat-10M", 10_000_000, "float32",
                                                                           "auto", 1.5, 2.1, fmt="hybrid"),
            row("sbm-1M", 1_000_000, "float32", "metcf", 0.1, 0.5), row("sbm-1M", 1_000_000, "float32", "auto",
                                                                       0.2, 0.45),
            {"matrix": "sbm-1M", "nnz": 1_000_000, "dtype": "float32", "N": 256, "plan": "cvse", "reorder_s": 10.0,
             "error": "boom"}]
    (results / "plan-time-Test_GPU-2026-01-02.json").write_text(json.dumps({
        "meta": {"benchmark": "plan-time", "device": "Test GPU", "command": "python benchmarks/plan_time.py",
                 "date": "2026-01-02T00:00:00+00:00"}, "rows": rows}))
    out = tmp_path / "bench.md"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "summarize.py"), "--results", str(results), "--out",
                    str(out)], check=True, capture_output=True)
    body = out.read_text().split("## Plan time per format and size", 1)[1].split("\n## ", 1)[0]
    assert "| rmat-10M | 10.00M | float32 | 256 | 10.00 | 0.40 (2.000) | 1.50 (2.100) | – | hybrid |" in body
    assert "| sbm-1M | 1.00M | float32 | 256 | 10.00 | 0.10 (0.500) | 0.20 (0.450) | ERROR | metcf |" in body
    targets = {ln.split("|")[1].strip(): ln for ln in body.splitlines() if ln.startswith("| `auto`")}
    assert "rmat-10M float32 N=256: 0.150" in targets["`auto` plan (build + decide) / reordering time"]
    assert targets["`auto` plan (build + decide) / reordering time"].rstrip().endswith("| **missed** |")
    assert "1.50 s" in targets["`auto` plan at 10M nonzeros"] and \
        targets["`auto` plan at 10M nonzeros"].rstrip().endswith("| **met** |")
    assert "1.050" in targets["`auto` kernel / the default format's"] and "0.900" in \
        targets["`auto` kernel / the default format's"]


def test_parts_table_says_where_each_auto_plan_went(monkeypatch):
    """Per auto row with the parts: the build's wall, statistics, the ranking's rest, each built format's
    conversion (an unprefixed key is the one built format's), each timed kernel, and the rest of the decision's
    seconds; rows without parts (older files) and other plans are left out."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from summarize_plan import parts_table

    one = {**row("rmat-1M", 1_000_000, "float32", "auto", 0.050, 0.1, reorder_s=0.25, fmt="csr"),
           "ranking": ["metcf"], "statistics_s": 0.008, "build_s": 0.030,
           "build_parts_s": {"format_ranking_s": 0.010, "convert_upload_s": 0.007},
           "decide_parts_s": {"metcf-window": 0.006, "csr-rows": 0.012}}
    two = {**row("mesh-1M", 1_000_000, "float16", "auto", 0.060, 0.1, reorder_s=0.3),
           "ranking": ["metcf", "cvse"], "statistics_s": 0.007, "build_s": 0.040,
           "build_parts_s": {"format_ranking_s": 0.009, "metcf:convert_upload_s": 0.008,
                             "cvse:convert_gpu_s": 0.005, "cvse:convert_upload_s": 0.006},
           "decide_parts_s": {"metcf-window": 0.002, "cvse-vector": 0.002, "csr-rows": 0.015}}
    older = row("sbm-1M", 1_000_000, "float32", "auto", 0.07, 0.1)
    got = parts_table([one, two, older, {**one, "plan": "metcf"}])
    assert got == [
        ("rmat-1M", "float32", 256, "50.0", "0.200", "30.0", "8.0", "2.0", "metcf 7.0",
         "metcf-window 6.0, csr-rows 12.0", "2.0"),
        ("mesh-1M", "float16", 256, "60.0", "0.200", "40.0", "7.0", "2.0", "metcf 8.0, cvse 6.0",
         "metcf-window 2.0, cvse-vector 2.0, csr-rows 15.0", "1.0")]
