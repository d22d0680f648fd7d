"""A real Prefect server on a free local port: deploy prefect.yaml, trigger the catalog deployment, let a process
worker run it, and check the run completed and wrote its outputs."""
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from storage import BlockStore

from flow_cases import BIN, api_call, free_port, prefect

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def test_catalog_deployment_runs_on_a_real_server(tmp_path, mirror):
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    data_root = tmp_path / "data"
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("matrices:\n  - Newman/karate\n  - 'gen:banded?n=2000&bandwidth=8&density=0.5&seed=2'\n")
    env = {**os.environ, "PREFECT_API_URL": api, "PREFECT_HOME": str(tmp_path / "prefect-home"),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "false", "TCSPMM_HOME": str(REPO),
           "TCSPMM_SUITESPARSE_URL": mirror.suitesparse_url, "TCSPMM_DATA": str(data_root),
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    server = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                              env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{api}/health", timeout=2).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "prefect server did not come up within 120 s"
                time.sleep(1)
        prefect(["work-pool", "create", "tcspmm-process", "--type", "process"], env)
        prefect(["--no-prompt", "deploy", "--all"], env)
        out = prefect(["deployment", "run", "tcspmm-catalog/nightly", "--param", f"catalog={catalog}",
                        "--param", f"data_root={data_root}", "--param", "concurrency=2",
                        "--param", "reorder=degree"], env)
        flow_run_id = next(line.split()[-1] for line in out.splitlines() if "UUID" in line)
        worker = subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", "tcspmm-process"], env=env,
                                  cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while True:
            state = api_call(api, f"/flow_runs/{flow_run_id}")["state"]["type"]
            if state in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                break
            assert time.monotonic() < deadline, f"flow run still {state} after 300 s"
            time.sleep(2)
        assert state == "COMPLETED"
        store = BlockStore(data_root)
        runs = store.read_runs().to_pylist()
        assert {r["matrix_id"] for r in runs if r["stage"] == "spmm"} >= {"suitesparse.Newman.karate"}
        assert len({r["matrix_id"] for r in runs if r["stage"] == "spmm"}) == 2
    finally:
        for proc in (worker, server):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
