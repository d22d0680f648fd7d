"""Fixtures shared by every test: a local HTTP mirror of the download sites, and an isolated data root.

``mirror`` (session): a threaded HTTP server on 127.0.0.1 serving the fixtures folder (env ``TCSPMM_FIXTURES``,
else ``<repo>/.fixtures``, else ``<repo>/../shared/fixtures``: configs.fixture_roots) with Range support (206), a
request log and switchable faults. ``data_root`` (function): ``tmp_path / "data"``, with ``TCSPMM_DATA``, the mirror
URLs, the fixture IGB archive's md5 and fast retries set in the environment. No test touches the internet.
"""
from __future__ import annotations

import dataclasses
import http.server
import importlib.util
import json
import os
import re
import threading
from pathlib import Path

import pytest

from configs import fixture_roots

REPO = Path(__file__).resolve().parents[1]


def _pin_xdist_worker_gpu(env=os.environ) -> None:
    """``TCSPMM_XDIST_GPUS=0,1`` with ``pytest -n 2``: xdist worker gwN sees only GPU N (mod the list), so one GPU
    suite spreads over a machine's GPUs, a test module per worker at a time (``--dist loadfile``; with
    ``-p no:benchmark``: pytest-benchmark warns under xdist, an error under the suite's filter). Set before any
    test imports CuPy or torch (CUDA reads the variable at its first call)."""
    gpus, worker = env.get("TCSPMM_XDIST_GPUS", "").split(","), env.get("PYTEST_XDIST_WORKER", "")
    if gpus != [""] and re.fullmatch(r"gw\d+", worker):
        env["CUDA_VISIBLE_DEVICES"] = gpus[int(worker[2:]) % len(gpus)].strip()


_pin_xdist_worker_gpu()


def fixtures_dir() -> Path:
    """The first of configs.fixture_roots holding a ``MANIFEST.json``."""
    for candidate in fixture_roots(REPO):
        if (candidate / "MANIFEST.json").is_file():
            return candidate
    pytest.skip("needs the test fixtures: set TCSPMM_FIXTURES or provide .fixtures or ../shared/fixtures")


@dataclasses.dataclass
class Fault:
    """One fault for one path. mode: 'status' (answer ``status``), 'truncate' (send ``after_bytes`` of the body,
    then close), 'stall' (send ``after_bytes``, then hang until reset), 'body' (serve ``body`` instead).
    ``times``: how many requests it hits before switching itself off (None: until reset)."""

    mode: str
    status: int = 404
    after_bytes: int = 0
    body: bytes = b""
    times: int | None = None


@dataclasses.dataclass(frozen=True)
class Request:
    method: str
    path: str
    range: str | None
    status: int


class Mirror:
    """The running server. URLs: ``suitesparse_url``, ``igb_url``; ``requests``: the log (a list of Request)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[Request] = []
        self.faults: dict[str, Fault] = {}
        self.manifest = json.loads((root / "MANIFEST.json").read_text())
        self.igb_md5 = {"tiny": next(e["md5"] for e in self.manifest if e["path"].endswith("_tiny.tar.gz"))}
        self._lock = threading.Lock()
        self._release = threading.Event()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.suitesparse_url = f"{self.base_url}/suitesparse"
        self.igb_url = f"{self.base_url}/igb"
        self._thread = threading.Thread(target=self.server.serve_forever, name="mirror", daemon=True)
        self._thread.start()

    def fail(self, path: str, mode: str = "status", **kw) -> None:
        """Install a fault for ``path`` (relative to the fixtures root, e.g. ``suitesparse/MM/HB/west0067.tar.gz``)."""
        with self._lock:
            self.faults[path.lstrip("/")] = Fault(mode, **kw)

    def serve(self, path: str, body: bytes) -> None:
        """Serve ``body`` at ``path`` until reset (e.g. a corrupt archive)."""
        self.fail(path, "body", body=body)

    def reset(self) -> None:
        """Clear faults and the log, and release stalled responses."""
        with self._lock:
            self.faults.clear()
            self.requests.clear()
            self._release.set()
            self._release = threading.Event()

    def gets(self, pattern: str = "") -> list[Request]:
        """GET requests whose path contains ``pattern``."""
        return [r for r in list(self.requests) if r.method == "GET" and pattern in r.path]

    def env(self) -> dict[str, str]:
        """Environment for a subprocess that should download from this mirror."""
        return {"TCSPMM_SUITESPARSE_URL": self.suitesparse_url, "TCSPMM_IGB_URL": self.igb_url,
                "TCSPMM_IGB_MD5_TINY": self.igb_md5["tiny"]}

    def read(self, path: str) -> bytes:
        return (self.root / path).read_bytes()

    def _take(self, path: str) -> tuple[Fault | None, threading.Event]:
        with self._lock:
            fault = self.faults.get(path)
            if fault is not None and fault.times is not None:
                fault.times -= 1
                if fault.times <= 0:
                    del self.faults[path]
            return fault, self._release

    def _log(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def close(self) -> None:
        self.reset()
        self.server.shutdown()
        self.server.server_close()


def _handler(mirror: Mirror) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep pytest output clean
            pass

        def do_HEAD(self) -> None:
            self._answer(send_body=False)

        def do_GET(self) -> None:
            self._answer(send_body=True)

        def _answer(self, send_body: bool) -> None:
            path = self.path.split("?", 1)[0].lstrip("/")
            rng = self.headers.get("Range")
            fault, release = mirror._take(path)
            if fault is not None and fault.mode == "status":
                mirror._log(Request(self.command, path, rng, fault.status))
                self.send_error(fault.status)
                return
            if fault is not None and fault.mode == "body":
                body = fault.body
            else:
                file = (mirror.root / path).resolve()
                if mirror.root.resolve() not in file.parents or not file.is_file():
                    mirror._log(Request(self.command, path, rng, 404))
                    self.send_error(404)
                    return
                body = file.read_bytes()
            start, status, full = 0, 200, len(body)
            match = re.fullmatch(r"bytes=(\d+)-(\d*)", rng or "")
            if match:
                start = int(match.group(1))
                end = int(match.group(2)) + 1 if match.group(2) else len(body)
                if start >= len(body):
                    mirror._log(Request(self.command, path, rng, 416))
                    self.send_error(416)
                    return
                status, body = 206, body[start:min(end, len(body))]
            mirror._log(Request(self.command, path, rng, status))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes")
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{start + len(body) - 1}/{full}")
            self.end_headers()
            if not send_body:
                return
            if fault is not None and fault.mode in ("truncate", "stall"):
                self.wfile.write(body[:fault.after_bytes])
                self.wfile.flush()
                if fault.mode == "stall":
                    release.wait(30)
                self.close_connection = True
                return
            self.wfile.write(body)

    return Handler


@pytest.fixture(scope="session")
def mirror():
    server = Mirror(fixtures_dir())
    yield server
    server.close()


@pytest.fixture
def data_root(tmp_path, monkeypatch, mirror):
    """An empty data root for this test, with the environment pointing every fetcher at the mirror."""
    mirror.reset()
    root = tmp_path / "data"
    root.mkdir()
    monkeypatch.setenv("TCSPMM_DATA", str(root))
    for key, value in mirror.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TCSPMM_HTTP_BACKOFF_S", "0.01")
    monkeypatch.setenv("TCSPMM_HTTP_TIMEOUT_S", "10")
    yield root
    mirror.reset()


def pytest_runtest_logreport(report):
    """With ``TCSPMM_FAILURE_LOG`` set, each failure's report is appended to that file as it happens (device runs:
    a later hang killed by a deadline must not take the earlier failures' reasons with it)."""
    path = os.environ.get("TCSPMM_FAILURE_LOG")
    if path and report.failed:
        sections = "".join(f"---- {name}\n{text[-4000:]}\n" for name, text in report.sections)  # logs, stderr
        with open(path, "a") as log:  # (Dask workers write to the test's stderr; their nanny logs their deaths)
            log.write(f"==== {report.nodeid} ({report.when}, {report.duration:.1f} s)\n{report.longreprtext}\n"
                      f"{sections}\n")


def load_path(path: Path, name: str | None = None):
    """The Python file at ``path`` imported as a module of its own name (default ``script_<stem>``): benchmark and
    example scripts are loaded this way, never by putting their folder on sys.path (benchmarks/gnn.py would shadow
    the gnn package for every test collected after)."""
    spec = importlib.util.spec_from_file_location(name or f"script_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def load_script():
    """`load_path`, for the tests of scripts (a module fixture takes it: ``def bench(load_script)``)."""
    return load_path

