"""Command-line plumbing shared by the flows: one-line errors for bad input, exit codes, the data root."""
from __future__ import annotations

import logging
import sys
from typing import Callable

from configs import data_root as resolve_data_root
from configs.errors import InputError


def data_root(path: str | None = None) -> str:
    """The data root (``configs.data_root``) as an absolute path, so tasks and workers agree on it."""
    return str(resolve_data_root(path).resolve())


class _OneLineInputErrors(logging.Filter):
    """Drop the traceback from log records about bad input: the message already names the source and problem."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], InputError):
            record.exc_info = None
            record.exc_text = None
        return True


def run_cli(run: Callable[[], object]) -> int:
    """Run ``run()``; bad input prints ``error: <message>`` (one line) on stderr and returns 1."""
    one_line = _OneLineInputErrors()
    for handler in logging.getLogger().handlers + logging.getLogger("prefect").handlers:
        handler.addFilter(one_line)
    for name in ("prefect", "prefect.flow_runs", "prefect.task_runs"):
        logging.getLogger(name).addFilter(one_line)
    try:
        run()
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return 0
