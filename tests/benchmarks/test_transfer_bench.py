"""benchmarks/transfer.py refuses sizes it cannot use in one line, before it allocates or touches a GPU."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "transfer.py"


@pytest.mark.parametrize("args", [["--rows", "0"], ["--cols", "-3"], ["--repeats", "0"]])
def test_bad_sizes_exit_2_in_one_line(args):
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "must be positive" in r.stderr
