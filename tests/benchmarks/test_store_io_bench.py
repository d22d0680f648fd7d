"""benchmarks/store_io.py on a tiny B: JSON under --out with every API call timed (and checked bitwise inside the
run), the workers, steps and options tables, the API table last."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_tiny_run_writes_json_and_prints_the_api_table_last(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "store_io.py"), "--rows", "2000", "--cols", "6",
                           "--repeats", "1", "--workers", "2", "--tag", "t", "--dir", str(tmp_path),
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (path,) = tmp_path.glob("store_io-*cpu-*-t.json")
    doc = json.loads(path.read_text())
    assert doc["shape"] == [2000, 6] and doc["versions"]["pyarrow"] and doc["machine"]["cores"] >= 1
    assert [r["op"] for r in doc["api"]] == ["store_b", "read_rows all", "read_rows half", "write_block all",
                                            "write_block 1/4", "read_c (perm)"]
    assert all(r["median_s"] > 0 for r in doc["api"])
    assert {(r["workers"], r["op"]) for r in doc["workers"]} == {(2, "read_rows half"), (2, "write_block 1/2")}
    assert {s["op"] for s in doc["steps"]} == {r["op"] for r in doc["api"]}
    assert any(r["config"].startswith("flat, none, no stats") for r in doc["options"])
    assert not list(tmp_path.glob("store-io-*")), "the scratch store was left behind"
    lines = proc.stdout.strip().splitlines()
    assert lines[-7].startswith("op") and lines[-1].startswith("read_c (perm)")
