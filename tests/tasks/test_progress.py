"""tasks.progress: bars with rate and ETA on a terminal, nothing when stderr is not a TTY (CI, logs, pipes); and the
pipeline's long steps (download, extraction, parsing, reordering, conversion) draw them."""
from __future__ import annotations

import io
import re
import sys

import pytest

from tasks import progress, stages

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def _text(stream: io.StringIO) -> str:
    return ANSI.sub("", stream.getvalue())


def test_quiet_when_not_a_tty(monkeypatch):
    monkeypatch.delenv("TCSPMM_PROGRESS", raising=False)
    stream = io.StringIO()
    assert not progress.enabled(stream)
    with progress.task("download x", total=100, unit="B", stream=stream) as bar:
        bar.advance(50)
        assert not bar.drawn
    assert list(progress.track(range(3), "items", stream=stream)) == [0, 1, 2]
    assert stream.getvalue() == ""


def test_bar_with_count_rate_and_eta_on_a_tty(monkeypatch):
    monkeypatch.delenv("TCSPMM_PROGRESS", raising=False)
    stream = FakeTTY()
    assert progress.enabled(stream)
    with progress.task("convert m to metcf", total=4_000_000, unit="B", stream=stream) as bar:
        for _ in range(4):
            bar.advance(1_000_000)
        assert bar.drawn
    out = _text(stream)
    assert "convert m to metcf" in out and "4.0 MB/4.0 MB" in out and re.search(r"[\d.]+ [kMG]?B/s", out)
    assert "eta" in out
    stream = FakeTTY()
    assert list(progress.track([1, 2, 3], "catalog: 3 matrices", unit="matrices", stream=stream)) == [1, 2, 3]
    out = _text(stream)
    assert "3/3 matrices" in out and "matrices/s" in out


def test_environment_forces_either_way(monkeypatch):
    monkeypatch.setenv("TCSPMM_PROGRESS", "0")
    assert not progress.enabled(FakeTTY())
    monkeypatch.setenv("TCSPMM_PROGRESS", "1")
    assert progress.enabled(io.StringIO())


def test_concurrent_bars_share_one_display(monkeypatch):
    stream = FakeTTY()
    with progress.task("a", total=2, stream=stream) as a, progress.task("b", total=2, stream=stream) as b:
        a.advance(2)
        b.advance(1)
    assert progress._LIVE["progress"] is None and progress._LIVE["users"] == 0
    out = _text(stream)
    assert "a" in out and "b" in out


@pytest.mark.parametrize("tty", [True, False])
def test_pipeline_steps_draw_bars_only_on_a_tty(data_root, monkeypatch, tty):
    monkeypatch.delenv("TCSPMM_PROGRESS", raising=False)
    stream = FakeTTY() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    out = stages.ingest("HB/west0067", str(data_root))  # download + tar extraction + MatrixMarket parse
    mid = out["matrix_id"]
    key = stages.reorder(mid, "auto", str(data_root))["perm_key"]
    stages.convert(mid, key, str(data_root))
    text = _text(stream)
    if not tty:
        assert text == ""
        return
    for step in ("download ", "extract ", "parse HB/west0067", f"reorder {mid} (auto)", "reorder auto: ",
                 f"convert {mid} to metcf float32"):
        assert step in text, f"no bar for {step!r} in:\n{text}"
    assert re.search(r"[\d.]+ [kMG]?B/s", text) and "eta" in text
