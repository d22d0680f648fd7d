"""Shared pieces of the flow tests: the spmm CLI run as a user runs it, a stored format's round trip to CSR, and the
`prefect` command line and API of the real-server tests (a free port, a checked call, a retried request)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from kernels.formats import get

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the environment's scripts: prefect, dask


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what: str, seconds: float, probe, logs, interval: float = 1.0):
    """probe()'s first truthy value, asked every ``interval`` s; after ``seconds`` the test fails with ``what`` and
    ``logs()`` (the output of the processes it waited on)."""
    deadline = time.monotonic() + seconds
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {seconds:.0f} s; {logs()}")
        time.sleep(interval)


RETRY_CODES = (429, 502, 503)  # what Prefect's own client retries: a busy server (SQLite locked) answers 503


def api_call(api: str, path: str, body: dict | None = None, tries: int = 6):
    """JSON of GET ``api + path`` (POST ``body`` when given), retried with backoff on 429 / 502 / 503 as Prefect's
    client does; other HTTP errors raise at once."""
    data = None if body is None else json.dumps(body).encode()
    for attempt in range(tries):
        req = urllib.request.Request(f"{api}{path}", data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as e:
            if e.code not in RETRY_CODES or attempt == tries - 1:
                raise
        time.sleep(2 ** attempt)


def prefect(args, env, timeout=300) -> str:
    """``prefect ARGS`` in the repository with ``env``; its stdout, the test failing with both streams otherwise."""
    proc = subprocess.run([str(BIN / "prefect"), *args], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"prefect {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout
SPMM_CLI = REPO / "flows" / "spmm.py"


def cli_env(extra=None) -> dict:
    """The caller's environment plus ``extra``, this checkout first on the path, no Prefect server given (the CLI
    starts a temporary one) and no Prefect analytics."""
    env = {**os.environ, **(extra or {}), "PYTHONPATH": str(REPO), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    return env


def run_cli(args, env_extra=None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python flows/spmm.py *args`` from the checkout, output captured as text."""
    return subprocess.run([sys.executable, str(SPMM_CLI), *args], capture_output=True, text=True,
                          env=cli_env(env_extra), timeout=timeout, cwd=REPO)


def kill_leftovers(proc: subprocess.Popen, children: list) -> None:
    """After a test that signals a run: kill, by pid, what is left of the run and of the processes it started."""
    for child in children:
        if child.is_running():
            child.kill()
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def assert_stored_format(store, fmt: str, key: str, A, dtype: str):
    """The ``fmt`` arrays stored under ``key`` decode to A (pattern exact; values exact in float32, rounded once
    in 16-bit); returns the decoded format object."""
    X = get(fmt).from_arrays(store.read_format(fmt, key))
    R = get(fmt).to_csr(X)
    assert X.shape == A.shape and R.nnz == A.nnz
    np.testing.assert_array_equal(R.indptr, A.indptr)
    np.testing.assert_array_equal(R.indices, A.indices)
    np.testing.assert_allclose(R.data, A.data, rtol=0 if dtype == "float32" else 2 ** -8)
    return X
