"""benchmarks/host_overhead.py: its rounds (CPU: the argument's check; GPU: each plan's fastest of alternating
rounds, checked against float64)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "host_overhead.py"


def test_rounds_below_one_is_refused_in_one_line(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "0", "--out-dir", str(tmp_path)],
                         capture_output=True, text=True)
    assert run.returncode != 0
    assert run.stderr.strip().splitlines()[-1] == "benchmarks/host_overhead.py: --rounds is 0, expected at least 1"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.gpu
def test_each_plan_reports_its_fastest_round():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import host_overhead

    from tasks.fetch.generators import generate

    A = generate("rmat", "scale=10&edge_factor=8&seed=1&shuffle=1").astype(np.float32).tocsr()
    rows = host_overhead.measure("rmat-s10", A, 64, np.random.default_rng(0), ["det-f32", "auto-f16"], rounds=3)
    assert [r["plan"] for r in rows] == ["det-f32", "auto-f16"]
    for r in rows:
        assert r["rounds"] == 3 and len(r["issued_us_rounds"]) == 3 and len(r["graph_us_rounds"]) == 3
        assert r["issued_us"] == min(r["issued_us_rounds"]) and r["graph_us"] == min(r["graph_us_rounds"])
        assert r["issued_nograph_us"] == min(r["issued_nograph_us_rounds"])
        assert r["graph_error"] is None and r["rel_err"] < r["tolerance"]
