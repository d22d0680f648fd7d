"""benchmarks/cpu_spmm.py --quick: JSON under --out with every product checked against float64, table last."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_writes_checked_json_and_prints_the_table_last(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cpu_spmm.py"), "--quick", "--repeats", "1",
                           "--n-cols", "8", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (path,) = tmp_path.glob("cpu_spmm-quick-*cpu-*.json")
    doc = json.loads(path.read_text())
    assert doc["machine"]["cpus_usable"] >= 1 and doc["versions"]["numba"]
    assert {r["case"] for r in doc["rows"]} == {"rmat-small", "banded-small"}
    for r in doc["rows"]:
        assert r["N"] == 8 and r["plan"]["correct"] and r["scipy"]["correct"] and r["cpu_1thread"]["correct"]
        assert r["speedup_vs_scipy"] > 0 and r["plan"]["median_ms"] > 0
    lines = proc.stdout.strip().splitlines()
    assert lines[-3].startswith("case") and lines[-1].endswith("yes")
