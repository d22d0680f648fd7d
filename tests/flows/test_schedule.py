"""The schedules of prefect.yaml fire on a real Prefect server (issue 16: with SQLAlchemy 2.1 the server's scheduler
failed on every pass with "Can't evaluate bulk DML statement", so no scheduled run ever appeared).

A server on a free 127.0.0.1 port; `prefect deploy --all` of prefect.yaml (the nightly cron deployment) and of a copy
whose one deployment has a 20 s interval schedule (same entrypoint, work pool and pull step, a one-matrix catalog);
a process worker. Asserts that the scheduler creates the nightly runs at 03:00 UTC and that one run the scheduler
created (not a manual one) of the interval deployment runs to Completed.
"""
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from flow_cases import BIN, api_call as _api, free_port, prefect, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def _runs(api: str, deployment_id: str) -> list[dict]:
    return _api(api, "/flow_runs/filter", {"flow_runs": {"deployment_id": {"any_": [deployment_id]}}, "limit": 200})


def _wait(what: str, seconds: float, probe, logs: Path):
    def tail():
        return "server and worker logs:\n" + "\n".join(p.read_text()[-3000:] for p in sorted(logs.glob("*.log")))

    return wait_until(what, seconds, probe, tail, interval=2.0)


def test_schedules_fire_and_a_scheduled_run_completes(tmp_path):
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    data_root = tmp_path / "data"
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("matrices:\n  - 'gen:banded?n=500&bandwidth=4&density=0.5&seed=3'\n")
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    nightly = next(d for d in spec["deployments"] if d["name"] == "nightly")
    interval = {**nightly, "name": "every-20s", "schedules": [{"interval": 20, "active": True}],
                "parameters": {**nightly["parameters"], "catalog": str(catalog), "data_root": str(data_root),
                               "concurrency": 1, "reorder": "degree", "devices": "cpu", "repeats": 2}}
    test_yaml = tmp_path / "prefect-interval.yaml"
    test_yaml.write_text(yaml.safe_dump({**spec, "deployments": [interval]}))
    logs = tmp_path / "logs"
    logs.mkdir()
    env = {**os.environ, "PREFECT_API_URL": api, "PREFECT_HOME": str(tmp_path / "prefect-home"),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "false", "TCSPMM_HOME": str(REPO),
           "TCSPMM_DATA": str(data_root), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    procs = []
    try:
        with open(logs / "server.log", "w") as log:
            procs.append(subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port",
                                           str(port)], env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT))

        def healthy():
            try:
                return _api(api, "/health")
            except OSError:
                return False

        _wait("the Prefect server did not answer /health", 150, healthy, logs)
        prefect(["work-pool", "create", "tcspmm-process", "--type", "process"], env)
        prefect(["--no-prompt", "deploy", "--all"], env)
        prefect(["--no-prompt", "deploy", "--all", "--prefect-file", str(test_yaml)], env)
        nightly_id = _api(api, "/deployments/name/tcspmm-catalog/nightly")["id"]
        every_id = _api(api, "/deployments/name/tcspmm-catalog/every-20s")["id"]

        # The scheduler (its recent-deployments loop runs every 5 s) fills the next runs of each schedule.
        scheduled = _wait("no scheduled run of tcspmm-catalog/nightly appeared", 90,
                          lambda: [r for r in _runs(api, nightly_id) if r["state_type"] == "SCHEDULED"], logs)
        assert len(scheduled) >= 3, f"{len(scheduled)} scheduled nightly runs, expected the scheduler's minimum 3"
        starts = sorted(r["next_scheduled_start_time"] or r["expected_start_time"] for r in scheduled)
        assert all(r["auto_scheduled"] for r in scheduled)
        assert all("T03:00:00" in s for s in starts), starts

        with open(logs / "worker.log", "w") as log:
            procs.append(subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", "tcspmm-process",
                                           "--limit", "1"], env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT))

        def completed():
            runs = _runs(api, every_id)
            failed = [r for r in runs if r["state_type"] in ("FAILED", "CRASHED")]
            assert not failed, f"scheduled run {failed[0]['name']} ended {failed[0]['state_type']}: " \
                               f"{failed[0]['state'].get('message')}"
            return [r for r in runs if r["state_type"] == "COMPLETED" and r["auto_scheduled"]]

        done = _wait("no scheduled run of tcspmm-catalog/every-20s reached Completed", 240, completed, logs)
        assert done[0]["deployment_id"] == every_id
        assert (data_root / "runs").is_dir()
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
