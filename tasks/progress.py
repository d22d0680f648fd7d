"""Progress of long steps (downloads, extraction, parsing, reordering, conversion, catalog runs) on a terminal.

    with progress.task("download HB/bcsstk17", total=n_bytes, unit="B") as bar:
        bar.advance(len(chunk))
    with progress.task("reorder tca"):            # no total: a spinner with the elapsed time
        ...

A bar (rich, which Prefect brings) with count, rate and ETA is drawn on stderr only when stderr is a TTY; in CI,
logs and pipes every call is a no-op that costs a branch. ``TCSPMM_PROGRESS=1`` or ``0`` forces it on or off; an
explicit ``enabled=`` wins over both. Bars of concurrent steps (the catalog's subflows, Dask futures) share one
live display; it stops when its last bar ends. No Prefect or Dask import here: stages and block functions may use it.
"""
from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

_LOCK = threading.Lock()
_LIVE: dict = {"progress": None, "users": 0}


def enabled(stream=None) -> bool:
    """Whether bars are drawn: ``TCSPMM_PROGRESS`` (1/0) if set, else whether ``stream`` (stderr) is a TTY."""
    env = os.environ.get("TCSPMM_PROGRESS", "").strip().lower()
    if env in ("1", "true", "yes", "on"):
        return True
    if env in ("0", "false", "no", "off"):
        return False
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced stream
        return False


class Bar:
    """Handle of one step: ``advance(n)``, ``update(completed)``, ``set_total(n)``; no-ops when not drawn."""

    def __init__(self, progress=None, task_id=None, unit: str = "") -> None:
        self._progress, self._id, self._unit = progress, task_id, unit

    @property
    def drawn(self) -> bool:
        return self._progress is not None

    def advance(self, n: float = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._id, n)
            self._refresh()

    def update(self, completed: float) -> None:
        if self._progress is not None:
            self._progress.update(self._id, completed=completed)
            self._refresh()

    def set_total(self, total: float | None) -> None:
        if self._progress is not None:
            self._progress.update(self._id, total=total)
            self._refresh()

    def _refresh(self) -> None:
        """The count and rate texts: sizes and MB/s for bytes, else counts and ``<unit>/s``."""
        t = next(t for t in self._progress.tasks if t.id == self._id)
        speed = t.speed or (t.completed / t.elapsed if t.elapsed else None)  # recent rate, else the mean so far
        if self._unit == "B":
            from rich.filesize import decimal

            count = decimal(int(t.completed)) + (f"/{decimal(int(t.total))}" if t.total else "")
            rate = f"{decimal(int(speed))}/s" if speed else ""
        else:
            unit = f" {self._unit}" if self._unit else ""
            count = f"{t.completed:,.0f}" + (f"/{t.total:,.0f}" if t.total else "") + unit
            rate = f"{speed:,.1f}{unit}/s" if speed else ""
        self._progress.update(self._id, count=count, rate=rate)


@contextmanager
def task(description: str, total: float | None = None, unit: str = "", *, enabled: bool | None = None,
         stream=None) -> Iterator[Bar]:
    """A bar for one step (``unit="B"``: bytes, shown as sizes and MB/s; else counts of ``unit`` per second).
    Without ``total``, a spinner with the elapsed time."""
    draw = globals()["enabled"](stream) if enabled is None else enabled
    if not draw:
        yield Bar()
        return
    from rich.console import Console
    from rich.progress import (BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    with _LOCK:
        if _LIVE["progress"] is None:
            _LIVE["progress"] = Progress(
                SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[count]}"),
                TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                console=Console(file=stream or sys.stderr, force_terminal=True), refresh_per_second=5,
                redirect_stdout=False, redirect_stderr=False)  # stdout carries the result table
            _LIVE["progress"].start()
        _LIVE["users"] += 1
        prog = _LIVE["progress"]
        task_id = prog.add_task(description, total=total, count="", rate="")
    bar = Bar(prog, task_id, unit)
    try:
        yield bar
    finally:
        with _LOCK:
            if total is None:  # a spinner: show it as done
                prog.update(task_id, total=1, completed=1)
            prog.stop_task(task_id)
            _LIVE["users"] -= 1
            if _LIVE["users"] == 0:
                prog.stop()
                _LIVE["progress"] = None


def track(iterable, description: str, total: float | None = None, unit: str = "", *, weight=None, **kw):
    """Iterate ``iterable``, advancing a bar by one per item, or by ``weight(item)`` (e.g. a tar member's size with
    ``unit="B"``) once the caller is done with it. ``total``: from ``len`` (or the sum of weights of a list) when
    not given. ``kw``: as ``task``."""
    if total is None and hasattr(iterable, "__len__"):
        total = sum(weight(x) for x in iterable) if weight is not None else len(iterable)
    with task(description, total=total, unit=unit, **kw) as bar:
        for item in iterable:
            yield item
            bar.advance(1 if weight is None else weight(item))
