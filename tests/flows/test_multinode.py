"""Issue 19 item 4: the flow on an existing Dask cluster, as on separate nodes: `dask scheduler` and two
`dask worker` processes started here on 127.0.0.1 (their own interpreters, nothing shared with this process but
the store's folder), then ``flows/spmm.py --scheduler <address> --devices 2`` on the CPU, both modes. TCP always;
UCX when distributed's UCX backend (``distributed-ucxx``) is installed, else skipped with that reason. Every process
is bounded in time and stopped (by its own pid) at the end."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.spmm import main

REPO = Path(__file__).resolve().parents[2]
GEN = "gen:sbm?n=1200&blocks=12&p_in=0.05&p_out=0.002&seed=5"
START_TIMEOUT_S = 90


def _dask(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "DASK_LOGGING__DISTRIBUTED": "warning"}
    with open(log, "w") as out:  # the child keeps its own descriptor
        return subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_" + args[0], *args[1:]], cwd=REPO,
                                env=env, stdout=out, stderr=subprocess.STDOUT)


@pytest.fixture(params=["tcp", "ucx"])
def remote_cluster(request, tmp_path):
    protocol = request.param
    if protocol == "ucx":
        pytest.importorskip("distributed_ucxx", reason="UCX needs distributed-ucxx (ucxx), not installed here")
    # Port 0: the scheduler takes a port of its own and writes its address to the scheduler file (no port is
    # guessed free here and then taken by someone else before the scheduler binds it).
    sched_file = tmp_path / "scheduler.json"
    procs = [_dask(["scheduler", "--host", "127.0.0.1", "--port", "0", "--protocol", protocol, "--no-dashboard",
                    "--scheduler-file", str(sched_file)], tmp_path / "scheduler.log")]
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not sched_file.exists():
            if time.monotonic() > deadline or procs[0].poll() is not None:
                pytest.fail(f"dask scheduler did not start:\n{(tmp_path / 'scheduler.log').read_text()[-1500:]}")
            time.sleep(0.2)
        address = json.loads(sched_file.read_text())["address"]
        for i in range(2):  # like `dask worker` on two nodes: one process, one thread each
            procs.append(_dask(["worker", address, "--host", "127.0.0.1", "--nthreads", "1", "--nworkers", "1",
                                "--memory-limit", "0", "--no-dashboard", "--name", f"node-{i}"],
                               tmp_path / f"worker-{i}.log"))
        from distributed import Client
        while True:  # the workers may not have registered yet
            try:
                with Client(address, timeout="10s") as c:
                    c.wait_for_workers(2, timeout=max(1.0, deadline - time.monotonic()))
                break
            except (OSError, TimeoutError):
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    logs = "\n".join(f.read_text()[-1500:] for f in sorted(tmp_path.glob("*.log")))
                    pytest.fail(f"dask scheduler/workers at {address} did not come up:\n{logs}")
                time.sleep(1.0)
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


@pytest.mark.parametrize("mode", ["oneshot", "resident"])
def test_flow_on_scheduler_address_with_two_worker_processes(prefect_harness, remote_cluster, data_root, mode,
                                                             capsys):
    code = main(["--matrix", GEN, "-N", "8", "--reorder", "degree", "--devices", "2", "--mode", mode,
                 "--scheduler", remote_cluster, "--repeats", "2", "--data-root", str(data_root), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    result = json.loads(out.out)
    spmm = result["spmm"]
    assert spmm["rel_err"] < 1e-5
    assert spmm["choice"] == {"mode": mode, "n_parts": 2}
    workers = {t["worker"] for t in spmm["per_device"]}
    assert len(workers) == 2 and all(w.startswith(remote_cluster.split(":")[0]) for w in workers)
    from distributed import Client
    with Client(remote_cluster, timeout="10s") as c:  # the tasks ran on this scheduler, not on a local cluster
        prefixes = c.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    assert ("spmm-stored" if mode == "oneshot" else "ShardActor") in prefixes, prefixes
