"""The spmm CLI as a script sees it: options checked before anything starts, the result on stdout (text or JSON),
quiet logs, one last error line, and no temporary Prefect server left behind after SIGTERM or Ctrl-C."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flow_cases import REPO, SPMM_CLI, cli_env, kill_leftovers, run_cli
from flows.spmm import build_parser
from tasks.reorder import METHODS
from tests.kernels.hybrid import hybrid_cases

GEN = "gen:sbm?n=1500&blocks=15&p_in=0.05&p_out=0.0005&seed=4"


@pytest.mark.parametrize("args,message", [
    (["-N", "0"], "error: -N/--n-cols: must be a positive integer, got 0 (see --help)"),
    (["-N", "-5"], "error: -N/--n-cols: must be a positive integer, got -5 (see --help)"),
    (["--reorder", "foo"], "error: --reorder: invalid choice: 'foo' (choose from "
                           + ", ".join(f"'{m}'" for m in (*METHODS, "auto")) + ") (see --help)"),
    (["--repeats", "0"], "error: --repeats: must be a positive integer, got 0 (see --help)"),
    (["--devices", "two"], "error: --devices: expected auto, cpu, all or a count (see --help)"),
    (["--seed", "-1"], "error: --seed: must be >= 0, got -1 (see --help)"),
    (["--matrix", "gen:rmat?scale=x"], "error: --matrix: gen:rmat: scale='x' is not a valid int (see --help)"),
    (["--format", "hybrid", "--devices", "2"], "error: --format/--devices: the hybrid runs on one device: its split "
     "is chosen from the whole matrix's windows and it has no row-window shards; run it with --devices auto, cpu or "
     "1, or shard a registered format (see --help)"),
    (["--format", "hybrid", "--devices", "all"], "error: --format/--devices: the hybrid runs on one device: its "
     "split is chosen from the whole matrix's windows and it has no row-window shards; run it with --devices auto, "
     "cpu or 1, or shard a registered format (see --help)"),
    (["--matrix", "gen:rmat?scale=5&bogus=1"], "error: --matrix: gen:rmat: unknown parameter(s) bogus; valid: "
                                               "scale, edge_factor, a, b, c, seed, shuffle, values (see --help)"),
    (["--memory-limit", "lots"], "error: --memory-limit: 'lots' is not a size; use bytes or a number with K, M, G "
                                 "or T (see --help)"),
    (["--dtype", "float64"], "error: --dtype: invalid choice: 'float64' (choose from 'float32', 'float16', "
                             "'bfloat16') (see --help)"),
])
def test_bad_options_are_refused_by_the_parser(capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["--matrix", "gen:rmat?scale=5", *args])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines() == [message]


def test_a_directory_or_missing_file_says_so(capsys, tmp_path):
    for matrix, said in ((tmp_path, f"{tmp_path} is a directory; give a .mtx, .mtx.gz or .tar.gz file in it"),
                         (tmp_path / "nope.mtx", f"{tmp_path / 'nope.mtx'}: no such file")):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--matrix", str(matrix)])
        assert capsys.readouterr().err.splitlines() == [f"error: --matrix: {said} (see --help)"]


def test_bad_option_fails_before_anything_starts(tmp_path):
    """How fast is benchmarks/startup.py's (0.06 s for --help, 0.3 s for a bad --matrix); here: nothing starts."""
    proc = run_cli(["--matrix", "gen:rmat?scale=5", "-N", "0", "--data-root", str(tmp_path / "data")])
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == ["error: -N/--n-cols: must be a positive integer, got 0 (see --help)"]
    assert not (tmp_path / "data").exists()


def test_the_parsers_names_are_the_pipelines():
    from kernels.formats import REGISTRY
    from tasks.cli import BASE_FORMAT, DEFAULT_FORMAT, REORDER_METHODS

    assert REORDER_METHODS == METHODS and BASE_FORMAT in REGISTRY and DEFAULT_FORMAT == "auto"
    assert build_parser().parse_args(["--matrix", "gen:rmat?scale=5"]).fmt == "auto"
    for name in (*REGISTRY, "auto", "hybrid"):  # every registered format is accepted, by the registry itself
        assert build_parser().parse_args(["--matrix", "gen:rmat?scale=5", "--format", name]).fmt == name


def test_an_unregistered_format_is_refused_naming_the_registered_ones(capsys):
    from kernels.formats import REGISTRY

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["--matrix", "gen:rmat?scale=5", "--format", "nope"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"error: --format: 'nope' is not a registered format; choose "
                                                    f"auto, hybrid or one of {', '.join(REGISTRY)} (see --help)"]


def test_help_lists_the_options_grouped():
    text = build_parser().format_help()
    groups = ["input:", "reordering:", "format and precision:", "devices:", "output:"]
    positions = [text.index(f"\n{g}\n") for g in groups]
    assert positions == sorted(positions)
    for group, option in zip(groups, ["--matrix", "--reorder", "--dtype", "--devices", "--json"]):
        section = text[text.index(f"\n{group}\n"):]
        assert option in section.split("\n\n")[0], (group, option)


def test_console_script_is_declared_and_runs():
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "tcspmm"]
    assert script.load() is __import__("flows.spmm", fromlist=["main"]).main
    exe = Path(sys.executable).parent / "tcspmm"
    if exe.exists():  # installed into this environment (pip install -e .)
        proc = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and "format and precision:" in proc.stdout


def test_result_on_stdout_logs_quiet_and_json(data_root):
    args = ["--matrix", GEN, "-N", "8", "--reorder", "degree", "--devices", "cpu", "--data-root", str(data_root)]
    text = run_cli([*args, "--repeats", "3"])
    assert text.returncode == 0, text.stderr[-3000:]
    assert text.stderr == ""  # Prefect's INFO lines stay out of a successful run's output
    lines = text.stdout.splitlines()
    assert lines[0].startswith("tcspmm run ") and " N=8" in lines[0]
    assert lines[1].split()[:3] == ["stage", "wall", "ms"] and lines[6].startswith("spmm")
    assert any(line.startswith("GFLOP/s: 2 x nnz x N / kernel_ms") for line in lines)
    assert any(line.startswith("wall ms: the stage's wall-clock time") for line in lines)
    as_json = run_cli([*args, "--repeats", "4", "--json"])
    assert as_json.returncode == 0, as_json.stderr[-3000:]
    result = json.loads(as_json.stdout)
    assert result["spmm"]["repeats"] == 4 and result["spmm"]["gflops"] > 0
    assert result["ingest"]["reused"] and result["matrix_id"].startswith("gen.sbm.")
    verbose = run_cli([*args, "--repeats", "1", "-v"])
    assert "Beginning flow run" in verbose.stderr and verbose.stdout.startswith("tcspmm run ")


def test_failed_run_prints_only_the_error_line(tmp_path, data_root):
    bad = tmp_path / "bad.mtx"
    bad.write_text("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n4 2 2.0\n")
    proc = run_cli(["--matrix", str(bad), "--data-root", str(data_root)])
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == ["error: bad.mtx line 4: row index 4 exceeds the declared 3 rows"]
    verbose = run_cli(["--matrix", str(bad), "--data-root", str(data_root), "--verbose"])
    assert verbose.returncode == 1 and "Traceback" not in verbose.stderr
    assert verbose.stderr.splitlines()[-1] == "error: bad.mtx line 4: row index 4 exceeds the declared 3 rows"


@pytest.mark.parametrize("signum,when", [(signal.SIGTERM, "startup"), (signal.SIGTERM, "download"),
                                         (signal.SIGINT, "download")])
def test_signal_stops_the_temporary_server(mirror, data_root, signum, when):
    """Issue 17 item 6: killed while its temporary Prefect API server starts, or while a download stalls, the run
    stops that server (and its Dask cluster): every process it started is gone and the caller's pipes close."""
    psutil = pytest.importorskip("psutil")
    mirror.fail("suitesparse/MM/HB/bcsstk13.tar.gz", "stall", after_bytes=1000)
    env = cli_env({**mirror.env(), "TCSPMM_HTTP_TIMEOUT_S": "120"})
    proc = subprocess.Popen([sys.executable, str(SPMM_CLI), "--matrix", "HB/bcsstk13",
                             "--data-root", str(data_root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=REPO,
                            # Python turns SIGINT into KeyboardInterrupt only if it was not ignored at start, and a
                            # background job of a non-interactive shell (`make test &`) starts with it ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    children = []
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            children = psutil.Process(proc.pid).children(recursive=True)
            if children if when == "startup" else mirror.gets("bcsstk13"):
                break
            time.sleep(0.05)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "expected the temporary Prefect server as a child process"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)  # returns only once no process holds the pipes
        assert proc.returncode == 128 + signum
        assert err.splitlines()[-1] == f"error: interrupted by {signal.Signals(signum).name}"
        _, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, alive
    finally:
        kill_leftovers(proc, children)
        mirror.reset()


def test_plot_draws_the_runs_chart(tmp_path, data_root, capsys):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (the dev extra)")
    from flows.spmm import main

    png = tmp_path / "run.png"
    code = main(["--matrix", "gen:banded?n=500&bandwidth=3&seed=1", "-N", "4", "--devices", "cpu", "--reorder",
                 "degree", "--repeats", "1", "--data-root", str(data_root), "--plot", str(png)])
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["--matrix", "gen:banded?n=5", "--plot", str(tmp_path / "no" / "x.png")]) == 2
    assert "the folder" in capsys.readouterr().err


POWER_LAW = "gen:rmat?scale=13&edge_factor=32&seed=1"
DENSE_CORE = hybrid_cases.DENSE_CORE_SPEC  # R-MAT with a planted dense community: the cost model splits it


def test_hybrid_runs_end_to_end_and_reuses_its_split(data_root):
    """``--format hybrid``: the convert stage stores the split (TC windows, rows and nnz on each side, the TC
    format) and the report shows it; the SpMM's C passed the float64 check (run_spmm raises otherwise); a second
    run reuses the stored split and gives the same one."""
    args = ["--matrix", DENSE_CORE, "-N", "8", "--reorder", "none", "--format", "hybrid", "--dtype", "float16",
            "--devices", "cpu", "--repeats", "2", "--data-root", str(data_root)]
    first = run_cli([*args, "--json"])
    assert first.returncode == 0, first.stderr[-3000:]
    out = json.loads(first.stdout)
    conv, split = out["convert"], out["convert"]["split"]
    assert conv["format"] == "hybrid" and not conv["reused"] and split["composite"] == "hybrid"
    assert split["tc_format"] in ("metcf", "bcsr", "tiledcsr", "cvse") and split["cuda_format"] == "csr"
    assert 0 < split["tc_windows"] <= 64 and split["windows"] == 1024  # the community's windows at most
    assert 0 < split["tc_rows"] <= 1024 and split["tc_rows"] + split["cuda_rows"] == 16384
    assert split["tc_nnz"] + split["cuda_nnz"] == out["spmm"]["nnz"]
    assert out["spmm"]["rel_err"] <= out["spmm"]["tolerance"] and out["spmm"]["choice"]["format"] == "hybrid"
    assert out["spmm"]["split"]["tc_rows"] == split["tc_rows"]
    stored = list((Path(data_root) / "matrices" / out["matrix_id"] / "formats").iterdir())
    assert [p.name for p in stored] == ["hybrid"]
    second = run_cli(args)
    assert second.returncode == 0, second.stderr[-3000:]
    (line,) = [line for line in second.stdout.splitlines() if line.startswith("convert")]
    assert "format=hybrid" in line and "reused=True" in line
    assert (f"split={split['tc_format']} {split['tc_windows']:.0f} windows ({split['tc_rows']} rows, "
            f"{split['tc_nnz']:,} nnz) + csr {split['cuda_rows']} rows ({split['cuda_nnz']:,} nnz)") in line


def test_auto_with_the_hybrid_ranked(data_root):
    """``--format auto`` where the float16 ranking keeps the hybrid: its split and the other format are stored,
    the ranking and the split are in the report, C passes the check."""
    proc = run_cli(["--matrix", DENSE_CORE, "-N", "8", "--reorder", "none", "--format", "auto", "--dtype",
                    "float16", "--devices", "cpu", "--repeats", "1", "--data-root", str(data_root), "--json"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    built = out["convert"]["format_ranking"]["built"]
    assert "hybrid" in built and list(out["convert"]["formats"]) == built
    assert out["convert"]["split"]["tc_rows"] > 0 and out["spmm"]["rel_err"] <= out["spmm"]["tolerance"]


def test_hybrid_on_several_devices_fails_before_anything_starts(data_root):
    proc = run_cli(["--matrix", POWER_LAW, "--format", "hybrid", "--devices", "2", "--data-root", str(data_root)])
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("error: --format/--devices: the hybrid ")
    assert not list(Path(data_root).iterdir())
