"""Which Prefect API a run talks to, decided before Prefect is imported, so a temporary server starts while the run
imports the pipeline.

In order: a configured server (``PREFECT_API_URL`` in the environment or the active Prefect profile); the server
of this project's ``make serve`` when it answers (``scripts/serve.sh`` writes its URL to
``<data root>/prefect/serve.url``); else a temporary server (``tasks.prefect_server``) that lives as long as the
run. The project's Prefect state lives under ``<data root>/prefect`` (``PREFECT_HOME`` unless set): the temporary
servers' migrated template database, one folder per running server (``runs/<pid>-<id>/``: its database copy and
log, removed when it stops; a killed run's folder is swept by the next run). A server that does not answer within
the allowance (``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``, default 300 s here: a first run migrates the
template, which took 22 s on an idle 2-core machine) or exits first ends the run with one ``error:`` line that
says what to do.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
import uuid
from pathlib import Path

from configs.errors import ServerError

STARTUP_ENV = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"  # Prefect's own name for the allowance
DEFAULT_STARTUP_S = 300.0
SERVE_URL_FILE = "serve.url"
_REPO = Path(__file__).resolve().parents[1]
_ADVICE = (f"on a loaded machine raise {STARTUP_ENV} (default {DEFAULT_STARTUP_S:.0f}), or start a server once "
           "with `make serve` (or `prefect server start`) and set PREFECT_API_URL=http://127.0.0.1:4200/api")


def prefect_home(data_root: str | os.PathLike) -> Path:
    return Path(data_root) / "prefect"


def configured_url(env=os.environ) -> str | None:
    """``PREFECT_API_URL`` from the environment, else from the active profile of Prefect's profiles file."""
    if env.get("PREFECT_API_URL"):
        return env["PREFECT_API_URL"]
    home = Path(env.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    path = Path(env.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    try:
        profiles = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    active = env.get("PREFECT_PROFILE") or profiles.get("active") or "ephemeral"
    return (profiles.get("profiles", {}).get(active) or {}).get("PREFECT_API_URL") or None


def answers(api_url: str, timeout: float = 1.0) -> bool:
    """True when ``<api_url>/health`` answers 200."""
    try:
        with urllib.request.urlopen(f"{api_url.rstrip('/')}/health", timeout=timeout) as response:
            return response.status == 200
    except (OSError, ValueError):
        return False


def serve_url(home: Path) -> str | None:
    """The URL ``make serve`` recorded under this home, if that server answers."""
    try:
        url = (home / SERVE_URL_FILE).read_text().strip()
    except OSError:
        return None
    return url if url and answers(url) else None


def startup_allowance_s(env=os.environ) -> float:
    try:
        return float(env.get(STARTUP_ENV) or DEFAULT_STARTUP_S)
    except ValueError:
        raise ServerError(f"{STARTUP_ENV}: {env[STARTUP_ENV]!r} is not a number of seconds") from None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_dead_runs(home: Path) -> int:
    """Remove the server folders of runs that no longer exist (killed before they could remove them)."""
    removed = 0
    for folder in (home / "runs").glob("*-*"):
        pid = folder.name.split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed


def last_line(path, limit: int = 300) -> str:
    """The last non-empty line of a log file (at most ``limit`` characters), "" when it has none or is unreadable:
    the server's own reason, carried into the one-line error."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:limit] if lines else ""


class TemporaryServer:
    """One run's Prefect API server process (``tasks.prefect_server``), started at once, waited for by `wait`."""

    def __init__(self, home: Path):
        from importlib.metadata import version

        sweep_dead_runs(home)
        self.folder = home / "runs" / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.folder.mkdir(parents=True)
        self.log = self.folder / "server.log"
        self.failed = False
        template = home / f"template-prefect-{version('prefect')}.db"
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))  # the kernel picks a free port; the server inherits the bound socket
            sock.listen(128)
            self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/api"
            path = [str(_REPO), os.environ.get("PYTHONPATH")]  # tasks.prefect_server from this checkout
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
            with open(self.log, "wb") as log:
                # Own session: a Ctrl-C at the terminal reaches the run, which stops the server after its last
                # log lines are sent, not before.
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "tasks.prefect_server", "--fd", str(sock.fileno()),
                     "--db", str(self.folder / "prefect.db"), "--template", str(template),
                     "--parent", str(os.getpid())],
                    pass_fds=[sock.fileno()], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env=env, cwd=_REPO, start_new_session=True)

    def wait(self, allowance_s: float) -> None:
        """Return once the server answers; ServerError when it exits first or does not answer in time (its folder
        and log are then kept for the error message's reader)."""
        deadline = time.monotonic() + allowance_s
        while not answers(self.url, timeout=min(5.0, max(allowance_s, 0.1))):
            code = self.process.poll()
            if code is not None or time.monotonic() > deadline:
                self.failed = True
                what = (f"exited with status {code} before it answered" if code is not None else
                        f"did not answer within {allowance_s:.0f} s")
                last = last_line(self.log)
                raise ServerError(f"prefect: the temporary Prefect API server {what}{': ' + last if last else ''} "
                                  f"(its log: {self.log}); {_ADVICE}")
            time.sleep(0.05)

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop the server and remove its folder (kept, with the log, when the server had failed)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if not self.failed:
            shutil.rmtree(self.folder, ignore_errors=True)


@dataclasses.dataclass
class Api:
    """The API a run uses: ``kind`` is configured, serve or temporary (then ``server`` is its process)."""

    url: str | None
    kind: str
    server: TemporaryServer | None = None
    saved_env: dict = dataclasses.field(default_factory=dict)  # what `open_api` changed, restored by `close`

    def wait(self) -> None:
        if self.server is not None:
            self.server.wait(startup_allowance_s())

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
        for name, value in self.saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def open_api(data_root: str | os.PathLike) -> Api:
    """Pick the run's API (see the module docstring) and point this process's Prefect at it through the
    environment (read when Prefect is imported; `api_settings` covers a Prefect imported before). A temporary
    server is started, not waited for: call ``wait()`` before the first flow run."""
    url = configured_url()
    if url:  # its profile (API key, ...) stays where the user keeps it
        return Api(url, "configured")
    home = prefect_home(data_root)
    home.mkdir(parents=True, exist_ok=True)
    saved = {name: os.environ.get(name) for name in ("PREFECT_HOME", "PREFECT_API_URL")}
    os.environ.setdefault("PREFECT_HOME", str(home))
    url = serve_url(home)
    server = None if url else TemporaryServer(home)
    api = Api(url, "serve", saved_env=saved) if url else Api(server.url, "temporary", server, saved)
    os.environ["PREFECT_API_URL"] = api.url
    return api


@contextlib.contextmanager
def api_settings(api: Api):
    """Prefect's settings pointing at ``api`` for the calls inside, in every thread: Prefect reads the environment
    once, at import, so a process that imported it before `open_api` (``flows/catalog.py``, a test) needs this.
    Threads (the catalog's subflows, Prefect's log workers) do not inherit the context, so the process-global
    settings context is replaced too, as Prefect's own ``prefect_test_harness`` does (a private helper of
    ``prefect.context``; without it such a thread would start Prefect's own temporary server)."""
    if api.kind == "configured":
        yield
        return
    import prefect.context
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with contextlib.ExitStack() as stack:
        stack.enter_context(temporary_settings({PREFECT_API_URL: api.url}))
        global_context = getattr(prefect.context, "_temporary_global_settings_context", None)
        if global_context is not None:
            stack.enter_context(global_context(prefect.context.get_settings_context()))
        yield
