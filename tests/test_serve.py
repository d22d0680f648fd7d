"""`make serve` stopped with SIGTERM stops everything it started: the Prefect server, the worker, and a flow run the
worker launched (with its Dask processes), not only the shell script (issue 16: the worker was left running)."""
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.flows.flow_cases import BIN, api_call as _api, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[1]


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, command line) of every process now."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        out[int(stat.parent.name)] = (int(text.rsplit(")", 1)[1].split()[1]), cmd)
    return out


def _tree(root: int) -> dict[int, str]:
    procs = _processes()
    found, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, cmd) in procs.items():
            if ppid == parent and pid not in found:
                found[pid] = cmd
                frontier.append(pid)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended, its parent not reaped it
    except OSError:
        return False


def _wait(what, seconds, probe, log: Path):
    return wait_until(what, seconds, probe, lambda: f"make serve output:\n{log.read_text()[-4000:]}")


def test_make_serve_sigterm_stops_server_worker_and_flow_runs(tmp_path):
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    catalog = tmp_path / "catalog.yaml"
    # Large enough that its flow run is still going when the signal comes (several seconds of reordering).
    catalog.write_text("matrices:\n  - 'gen:sbm?n=60000&blocks=300&p_in=0.02&p_out=0.0001&seed=4'\n")
    env = {**os.environ, "PORT": str(port), "PREFECT_HOME": str(tmp_path / "prefect-home"),
           "PREFECT_UI_ENABLED": "false", "TCSPMM_DATA": str(tmp_path / "data"), "STOP_GRACE_S": "20",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    log = tmp_path / "serve.log"
    # STAMP= : the install step's stamp is not a prerequisite here (the test runs inside the installed venv).
    with open(log, "w") as out:
        make = subprocess.Popen(["make", "--no-print-directory", "serve", "STAMP="], cwd=REPO, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    started: dict[int, str] = {}
    try:
        def worker_up():
            return any("worker start" in cmd for cmd in _tree(make.pid).values()) and "Prefect UI" in log.read_text()

        _wait("make serve did not start the server and worker", 180, worker_up, log)
        deployment = _api(api, "/deployments/name/tcspmm-catalog/nightly")
        run = _api(api, f"/deployments/{deployment['id']}/create_flow_run",
                   {"parameters": {"catalog": str(catalog), "devices": "cpu", "reorder": "degree", "repeats": 2,
                                   "concurrency": 1}})

        def running():
            state = _api(api, f"/flow_runs/{run['id']}")["state_type"]
            assert state not in ("COMPLETED", "FAILED", "CRASHED"), f"the flow run ended {state} before the signal"
            return state == "RUNNING"

        _wait("the worker did not start the flow run", 120, running, log)
        time.sleep(3)
        started = _tree(make.pid)
        assert any("prefect server start" in c for c in started.values()), started
        assert len(started) >= 4, started  # serve.sh, server, worker, flow run at least
        make.send_signal(signal.SIGTERM)
        make.wait(timeout=90)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in started) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = {p: c for p, c in started.items() if _alive(p)}
        assert not left, f"still running after SIGTERM to make serve: {left}"
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers"
        assert "stopping server, worker" in log.read_text()
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
        for pid in {**started, **_tree(make.pid)}:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
