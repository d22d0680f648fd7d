"""Issue 30: a run never dies of Prefect's plumbing. Its temporary API server and Dask workers die with it (kill -9
included); two first runs on one data root migrate the Prefect database once; a server that cannot start ends the
run with one error line; bad input ends with one error line and no traceback. No timing limits here: those live in
benchmarks/startup.py."""
from __future__ import annotations

import gzip
import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time

import pytest

from flow_cases import REPO, SPMM_CLI, cli_env, kill_leftovers, run_cli

GEN = "gen:banded?n=3000&bandwidth=3&seed=2"
psutil = pytest.importorskip("psutil")


def test_options_are_parsed_before_prefect_or_the_pipeline_is_imported():
    code = ("import sys; from flows.spmm import build_parser; build_parser().parse_args(['--matrix', 'gen:rmat?"
            "scale=5', '-N', '4']); print(sorted(m for m in ('prefect', 'numpy', 'distributed') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), cwd=REPO,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["['numpy']"]  # the generator's parameters are checked; nothing else loads


def test_catalog_options_are_parsed_before_prefect_is_imported():
    """The catalog's command line answers --help and bad options without Prefect; its flow (the deployment's
    entrypoint ``flows/catalog.py:catalog_flow``) is still reached through the module."""
    code = ("import sys; from flows.catalog import build_parser; build_parser().parse_args(['--concurrency', '3', "
            "'--devices', '2']); print(sorted(m for m in ('prefect', 'distributed') if m in sys.modules)); "
            "import flows.catalog as c; print(c.catalog_flow.name, 'prefect' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), cwd=REPO,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["[]", "tcspmm-catalog True"]


def _descendants(pid: int) -> list:
    return psutil.Process(pid).children(recursive=True)


def test_kill_9_leaves_no_server_or_worker(mirror, data_root, tmp_path):
    """The catalog flow starts its Dask cluster before its first download; that download stalls; kill -9 of the
    run must take its temporary Prefect server and its worker processes with it."""
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("matrices:\n  - HB/bcsstk13\n")
    mirror.fail("suitesparse/MM/HB/bcsstk13.tar.gz", "stall", after_bytes=1000)
    env = cli_env({**mirror.env(), "TCSPMM_HTTP_TIMEOUT_S": "120"})
    proc = subprocess.Popen([sys.executable, str(REPO / "flows" / "catalog.py"), "--catalog", str(catalog),
                             "--devices", "cpu", "--data-root", str(data_root)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, cwd=REPO)
    children = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None and not mirror.gets("bcsstk13"):
            time.sleep(0.05)
        assert mirror.gets("bcsstk13"), "the run never reached its download"
        children = _descendants(proc.pid)
        names = " ".join(" ".join(c.cmdline()) for c in children)
        assert "tasks.prefect_server" in names and "multiprocessing" in names, names
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        _, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, [" ".join(p.cmdline()) for p in alive]
    finally:
        kill_leftovers(proc, children)
        mirror.reset()


def test_two_first_runs_of_one_matrix_share_the_work(data_root):
    """Two runs start at once on an empty data root: the Prefect template database is migrated once (under its
    lock), both succeed with a clean stderr, and the reordering and conversion are computed once between them."""
    args = ["--matrix", GEN, "-N", "4", "--reorder", "tca", "--devices", "cpu", "--repeats", "1", "--json",
            "--data-root", str(data_root)]
    procs = [subprocess.Popen([sys.executable, str(SPMM_CLI), *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=REPO) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0 and err == "", err[-3000:]
    results = [json.loads(out) for out, _ in outs]
    assert sorted(r["reorder"]["reused"] for r in results) == [False, True]
    assert sorted(r["convert"]["reused"] for r in results) == [False, True]
    home = data_root / "prefect"
    assert len(list(home.glob("template-prefect-*.db"))) == 1
    assert not any((home / "runs").iterdir()), "each run removes its server's folder"


def test_a_server_that_cannot_start_ends_in_one_error_line(data_root):
    proc = run_cli(["--matrix", GEN, "--data-root", str(data_root)],
                   env_extra={"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "0"})
    assert proc.returncode == 1 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    # the server's last log line, when it wrote one by then, follows the reason
    assert re.match(r"error: prefect: the temporary Prefect API server did not answer within 0 s(: .+)? \(its log: ",
                    line), line
    assert "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" in line and "make serve" in line
    assert not (data_root / "matrices").exists(), "nothing ran"


def test_the_servers_last_log_line_is_carried_into_the_error(tmp_path):
    from tasks.prefect_api import last_line
    log = tmp_path / "server.log"
    assert last_line(log) == ""  # no log yet
    log.write_text("INFO starting\nsqlite3.OperationalError: unable to open database file\n\n  \n")
    assert last_line(log) == "sqlite3.OperationalError: unable to open database file"
    log.write_text("x" * 20000 + "\n")
    assert last_line(log, limit=40) == "x" * 40


def _tarball(name: str, payload: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    return out.getvalue()


def test_bad_input_ends_in_one_error_line_without_traceback(tmp_path, data_root, mirror):
    mtx = b"%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1.0\n"
    cases = {
        "pattern.mtx": (b"%%MatrixMarket matrix coordinate pattern general\n2 2 1\n1 2 3.5\n",
                        "pattern.mtx line 3: the header says 'pattern' (row and column only) but the entry carries a "
                        "value ('1 2 3.5'); declare its field 'real' or 'integer' to keep the values, or remove them"),
        "climb.tar.gz": (_tarball("../climb.mtx", mtx), "refusing member ../climb.mtx: its path climbs out of its "
                                                         "folder with '..'; nothing was kept"),
        "absolute.tar.gz": (_tarball("/abs/absolute.mtx", mtx), "refusing member /abs/absolute.mtx: its path is "
                                                                 "absolute; nothing was kept"),
        "big.mtx.gz": (gzip.compress(b"%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1e9\n"),
                       "values exceed the float16 range"),
        "short.mtx": (b"%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n", "short.mtx"),
    }
    for name, (body, said) in cases.items():
        path = tmp_path / name
        path.write_bytes(body)
        extra = ["--dtype", "float16"] if name == "big.mtx.gz" else []
        proc = run_cli(["--matrix", str(path), "--data-root", str(data_root), *extra], env_extra=mirror.env())
        lines = proc.stderr.splitlines()
        assert proc.returncode == 1 and proc.stdout == "", (name, proc.stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith("error: ") and said in lines[0], (name, proc.stderr[-2000:])
    assert not any(p.name.startswith(".tmp-") for p in data_root.rglob("*")), "nothing half-written"
    proc = run_cli(["--matrix", "HB/nosuchmatrix", "--data-root", str(data_root)], env_extra=mirror.env())
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: matrix 'HB/nosuchmatrix' is not in the SuiteSparse index")
