"""Command-line plumbing shared by the flows: options checked in the parser, quiet logs, one-line errors, the
result on stdout, and a temporary Prefect API whose life is the run's.

- Option types (``positive_int``, ``matrix_spec``, ...) fail in the parser, before Prefect or the pipeline start.
- Logs go to stderr; Prefect's at WARNING unless ``--verbose``. Bad input ends with one last line
  ``error: <source>: <problem>`` on stderr and exit status 1 (130 after Ctrl-C, 143 after SIGTERM).
- ``run_cli`` turns SIGTERM and SIGHUP into the same unwinding as Ctrl-C, so the flow's Dask cluster and the
  temporary Prefect API server (which would otherwise outlive the run, holding the caller's pipes) are stopped.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Callable

from configs import data_root as resolve_data_root
from configs.errors import InputError
from configs.names import BASE_FORMAT, DEFAULT_FORMAT, REORDER_METHODS  # noqa: F401 (the parser's choices)

_PREFECT_LOGGERS = ("prefect", "prefect.extra", "prefect.client", "prefect.infrastructure", "prefect.server",
                    "uvicorn", "fastapi")
_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def data_root(path: str | None = None) -> str:
    """The data root (``configs.data_root``) as an absolute path, so tasks and workers agree on it."""
    return str(resolve_data_root(path).resolve())




class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``error: -N/--n-cols: must be a positive integer, got 0`` and exit status 2
    (a bad option), without the usage block; ``--help`` shows the usage. ``late_check(option, dest, check)``: a
    check that imports part of the pipeline runs after every other option passed, so a bad option answers at once."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._late: list[tuple[str, str, Callable[[str], object]]] = []
        self._joint: list[tuple[str, Callable[[argparse.Namespace], object]]] = []

    def late_check(self, option: str, dest: str, check: Callable[[str], object]) -> None:
        self._late.append((option, dest, check))

    def joint_check(self, options: str, check: Callable[[argparse.Namespace], object]) -> None:
        """A check of several options together (``options`` names them in its error), after the late checks."""
        self._joint.append((options, check))

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        for option, dest, check in self._late:
            value = getattr(namespace, dest, None)
            if value is not None:
                try:
                    check(value)
                except argparse.ArgumentTypeError as err:
                    self.error(f"{option}: {err}")
        for options, check in self._joint:
            try:
                check(namespace)
            except argparse.ArgumentTypeError as err:
                self.error(f"{options}: {err}")
        return namespace, extras

    def error(self, message: str):
        self.exit(2, f"error: {message.removeprefix('argument ')} (see --help)\n")


# -- option types: each raises ArgumentTypeError, which argparse prints as "error: argument X: <message>" --------

def positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def nonnegative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def size_bytes(text: str) -> str:
    """A memory or disk size (``16G``); kept as text, it becomes an environment variable (``configs.limits``)."""
    from configs.limits import parse_size

    try:
        parse_size(text, "size")
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("size: ")) from None
    return text


def devices(text: str) -> str:
    from tasks.execute import parse_devices

    try:
        parse_devices(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err).split(": ", 1)[-1]) from None
    return text


def format_name(text: str) -> str:
    """``auto``, a registered format (kernels.formats.REGISTRY, imported here: after the other options) or a
    composite of them (kernels.hybrid.COMPOSITES: ``hybrid``)."""
    from kernels.formats import REGISTRY
    from kernels.hybrid import COMPOSITES

    if text != "auto" and text not in REGISTRY and text not in COMPOSITES:
        raise argparse.ArgumentTypeError(f"{text!r} is not a registered format; choose auto, "
                                         f"{', '.join(COMPOSITES)} or one of {', '.join(REGISTRY)}")
    return text


def format_devices(args: argparse.Namespace) -> None:
    """``--format`` and ``--devices`` together: a composite (the hybrid) runs on one device only."""
    from tasks.execute import check_format_devices

    try:
        check_format_devices(args.fmt, args.devices)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err).split(": ", 1)[-1]) from None


def matrix_spec(text: str) -> str:
    """A spec ``tasks.fetch`` accepts, checked without touching the network: a local file must exist (and not be
    a directory); a generator's parameters must be valid."""
    from tasks.fetch.generators import canonical_params
    from tasks.fetch.spec import parse_spec

    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; give a .mtx, .mtx.gz or .tar.gz file in it")
    try:
        spec = parse_spec(text)
        if spec.kind == "file" and not spec.path.is_file():
            raise InputError(f"{text}: no such file")
        if spec.kind == "gen":
            canonical_params(spec.gen_kind, spec.query)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


# -- running -----------------------------------------------------------------------------------------------------

class _Terminated(KeyboardInterrupt):
    """SIGTERM/SIGHUP, raised in the main thread: unwinds like Ctrl-C (context managers stop what they started)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_terminated(signum: int, _frame) -> None:
    for sig in _SIGNALS:  # a second signal while cleaning up ends the process the default way
        signal.signal(sig, signal.SIG_DFL)
    raise _Terminated(signum)


def _our_error_names() -> str:
    names, todo = set(), [InputError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return "|".join(sorted(names))


class _OneLineInputErrors(logging.Filter):
    """Bad input is reported once, by ``run_cli``: drop its tracebacks from log records, and (``quiet``) the
    records Prefect writes about it (task failed, flow failed, finished in state Failed)."""

    def __init__(self, quiet: bool) -> None:
        super().__init__()
        self.quiet = quiet
        self.mentions = re.compile(rf"\b({_our_error_names()})\b")

    def filter(self, record: logging.LogRecord) -> bool:
        about_input = bool(record.exc_info and isinstance(record.exc_info[1], InputError))
        if self.quiet and record.levelno >= logging.ERROR and (about_input or
                                                               self.mentions.search(record.getMessage())):
            return False
        if about_input:
            record.exc_info = None
            record.exc_text = None
        return True


def quiet_environment(verbose: bool) -> None:
    """What must be in the environment before Prefect is imported (it reads its settings once, then): its loggers
    at WARNING unless ``verbose``, the API server's at WARNING (its access log is no news, even verbose) and
    without telemetry (which fails without a network and says so at ERROR)."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "WARNING")
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


def configure_logging(verbose: bool) -> None:
    """Prefect's logs at WARNING (INFO with ``verbose``) on stderr, bad input's records without tracebacks; Dask's
    below WARNING dropped, and at default verbosity its notices about its own housekeeping (a port taken, a
    worker killed at close) too. Call after Prefect is imported (its import configures its loggers)."""
    quiet_environment(verbose)
    level = logging.INFO if verbose else logging.WARNING
    for name in _PREFECT_LOGGERS:
        logging.getLogger(name).setLevel(level)
    one_line = _OneLineInputErrors(quiet=not verbose)
    for handler in logging.getLogger().handlers + logging.getLogger("prefect").handlers:
        handler.addFilter(one_line)
    for name in ("prefect", "prefect.flow_runs", "prefect.task_runs"):
        logging.getLogger(name).addFilter(one_line)
    if not verbose:
        logging.getLogger("distributed.nanny").setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", message="Port .* is already in use", category=UserWarning)


def temporary_servers() -> list:
    """Prefect's own temporary API servers running in this process (a test harness's, or one Prefect started for a
    caller outside `run_cli`). ``_instances`` is Prefect's own registry of them (prefect/server/api/server.py)."""
    server_module = sys.modules.get("prefect.server.api.server")
    return list(server_module.SubprocessASGIServer._instances.values()) if server_module else []


def drain_prefect_workers() -> None:
    """Send what the run logged and emitted while its API is still up (else: "Error logging to API" on stderr
    after our last line). Prefect drains these workers at exit too; then there is nothing left."""
    for module, worker in (("prefect.logging.handlers", "APILogWorker"), ("prefect.events.worker", "EventsWorker")):
        if module in sys.modules:
            getattr(sys.modules[module], worker).drain_all(timeout=5)


def stop_temporary_servers(keep: list | tuple = ()) -> None:
    """Stop Prefect's temporary API servers started since ``keep`` was taken (Prefect stops them only at
    interpreter exit, which a signal skips); one a caller started before (a test harness) keeps running."""
    servers = [server for server in temporary_servers() if not any(server is kept for kept in keep)]
    if servers:
        drain_prefect_workers()
    for server in servers:
        server.stop()


_MARKS: list[tuple[str, float]] = []


def mark(phase: str) -> None:
    """Note the time (epoch seconds) a phase of the run ended; ``TCSPMM_PHASES_FILE`` (benchmarks/startup.py)
    gets them as JSON when the run ends."""
    _MARKS.append((phase, time.time()))


def _write_marks() -> None:
    path = os.environ.get("TCSPMM_PHASES_FILE")
    if path:
        Path(path).write_text(json.dumps(_MARKS))


def run_cli(run: Callable[[], object], *, verbose: bool = True, emit: Callable[[object], None] | None = None,
            prepare: Callable[[], object] | None = None, data_root: str | None = None) -> int:
    """Run ``run()`` against the run's Prefect API (``tasks.prefect_api``: a configured server, ``make serve``'s,
    or a temporary one started first and waited for after ``prepare()``, which imports the pipeline meanwhile);
    ``emit(result)`` writes the result (stdout). Bad input, or an API that cannot start, prints ``error:
    <message>`` as the last line on stderr and returns 1; Ctrl-C returns 130, SIGTERM 143, SIGHUP 129."""
    from tasks import prefect_api

    mark("parsed")
    quiet_environment(verbose)
    before = temporary_servers()
    previous = {sig: signal.signal(sig, _raise_terminated) for sig in _SIGNALS}
    code, message, api = 0, None, None
    try:
        api = prefect_api.open_api(data_root or resolve_data_root(None))
        mark("api chosen")
        if prepare is not None:
            prepare()
        configure_logging(verbose)
        mark("imported")
        api.wait()
        mark("api ready")
        with prefect_api.api_settings(api):
            result = run()
        mark("flow")
        if emit is not None:
            emit(result)
        mark("emitted")
    except InputError as err:
        code, message = 1, str(err)
    except KeyboardInterrupt as err:
        signum = err.signum if isinstance(err, _Terminated) else signal.SIGINT
        code, message = 128 + signum, f"interrupted by {signal.Signals(signum).name}"
    finally:
        try:
            stop_temporary_servers(keep=before)
            if api is not None:
                drain_prefect_workers()
                api.close()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            mark("stopped")
            _write_marks()
    if message is not None:
        sys.stdout.flush()
        print(f"error: {message}", file=sys.stderr, flush=True)
    return code


# -- output ------------------------------------------------------------------------------------------------------

TABLE_LEGEND = (
    "wall ms: the stage's wall-clock time in this run (spmm: the plan, warm-up runs, all --repeats timed runs and, "
    "on a GPU, the cuSPARSE baselines).\n"
    "GFLOP/s: 2 x nnz x N / kernel_ms, kernel_ms being the median of the --repeats timed runs of the chosen kernel "
    "(GPU time on a GPU).")


def spmm_result_text(result: dict, as_json: bool = False) -> str:
    """What the spmm CLI prints on stdout: the run's table with its legend, or the whole result as JSON."""
    if as_json:
        return json.dumps(result, default=str)
    ingest = result.get("ingest", {})
    shape = "x".join(str(s) for s in ingest.get("shape", ()))
    n_cols = result.get("spmm", {}).get("n_cols_b", "?")
    return (f"tcspmm run {result['run_id']}: {result['matrix_id']} {shape} nnz={ingest.get('nnz')} N={n_cols}\n"
            f"{result['table']}\n\n{TABLE_LEGEND}")


_STAGES = ("fetch", "parse", "reorder", "convert", "spmm")


def run_outcome(result: dict) -> dict:
    """The numbers a catalog summary shows of one spmm flow result."""
    ingest, order, conv, mult = (result.get(k, {}) for k in ("ingest", "reorder", "convert", "spmm"))
    ms = {"fetch": ingest.get("fetch_ms"), "parse": ingest.get("parse_ms"), "reorder": order.get("ms"),
          "convert": conv.get("ms"), "spmm": mult.get("wall_ms")}
    return {"run_id": result.get("run_id"), "matrix_id": result.get("matrix_id"), "wall_ms": ms,
            "kernel": mult.get("kernel"), "kernel_ms": mult.get("kernel_ms"), "gflops": mult.get("gflops")}


def catalog_summary(outcome: dict[str, dict]) -> str:
    """One line per catalog matrix: each stage's wall ms, the kernel, its median ms and GFLOP/s (or the error)."""
    head = f"{'matrix':<44} " + " ".join(f"{s + ' ms':>11}" for s in _STAGES) + \
        f" {'kernel ms':>10} {'GFLOP/s':>8}  kernel"
    lines = [head]
    for spec, out in outcome.items():
        if "error" in out:
            lines.append(f"{spec:<44} error: {out['error']}")
            continue
        stages = " ".join(f"{out['wall_ms'].get(s) or 0:>11.1f}" for s in _STAGES)
        lines.append(f"{spec:<44} {stages} {out['kernel_ms'] or 0:>10.4g} {out['gflops'] or 0:>8.2f}  "
                     f"{out['kernel']}")
        gnn = out.get("gnn") or {}
        if "skipped" in gnn:
            lines.append(f"  gnn: skipped, {gnn['skipped']}")
        for r in gnn.get("rows", []):
            lines.append(f"  gnn {r['model']}: {r['epoch_ms']:.2f} ms per epoch ({r['epochs']} epochs, {r['device']}), "
                         f"test accuracy {r['test_acc']:.3f}")
    return "\n".join(lines + ["", TABLE_LEGEND])
