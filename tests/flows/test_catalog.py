"""The catalog job's summary: each matrix's stage times, kernel and GFLOP/s, on stdout (text or JSON)."""
from __future__ import annotations

import json

import pytest

from flows.catalog import main
from tasks.cli import catalog_summary


def test_catalog_summary_shows_times_and_gflops(prefect_harness, data_root, tmp_path, capsys):
    catalog = tmp_path / "catalog.yaml"
    specs = ["gen:banded?n=600&bandwidth=4&seed=1", "gen:mesh?nx=30&seed=2"]
    catalog.write_text("matrices:\n" + "".join(f"  - '{s}'\n" for s in specs))
    code = main(["--catalog", str(catalog), "-N", "4", "--devices", "cpu", "--reorder", "degree", "--repeats", "2",
                 "--concurrency", "2", "--data-root", str(data_root), "--json"])
    assert code == 0
    outcome = json.loads(capsys.readouterr().out)
    assert list(outcome) == specs
    for out in outcome.values():
        assert set(out["wall_ms"]) == {"fetch", "parse", "reorder", "convert", "spmm"}
        assert out["gflops"] > 0 and out["kernel_ms"] > 0 and out["kernel"]
    lines = catalog_summary(outcome).splitlines()
    assert lines[0].split()[:3] == ["matrix", "fetch", "ms"] and "GFLOP/s" in lines[0]
    gflops = float(lines[1].split()[-2])  # printed with 2 decimals
    assert lines[1].startswith(specs[0]) and gflops == pytest.approx(outcome[specs[0]]["gflops"], abs=0.006)
    assert catalog_summary({"HB/x": {"error": "HB/x: not found"}}).splitlines()[1].endswith("error: HB/x: not found")


def test_catalog_options_are_checked_first(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--concurrency", "0"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines() == ["error: --concurrency: must be a positive integer, got 0 "
                                                    "(see --help)"]


def test_catalog_trains_the_gnn_job_on_matrices_with_node_features(prefect_harness, data_root, tmp_path, capsys):
    pytest.importorskip("torch", reason="the GNN job needs torch (pip install -e '.[gnn]')")
    catalog = tmp_path / "catalog.yaml"
    specs = ["igb:tiny", "gen:banded?n=600&bandwidth=4&seed=1"]  # IGB carries features and labels; banded none
    catalog.write_text("matrices:\n" + "".join(f"  - '{s}'\n" for s in specs))
    code = main(["--catalog", str(catalog), "-N", "4", "--devices", "cpu", "--reorder", "degree", "--repeats", "1",
                 "--concurrency", "1", "--data-root", str(data_root), "--train-gnn", "--gnn-epochs", "3", "--json"])
    assert code == 0
    outcome = json.loads(capsys.readouterr().out)
    rows = outcome["igb:tiny"]["gnn"]["rows"]
    assert [r["model"] for r in rows] == ["gcn", "gat"] and all(r["epochs"] == 3 and r["epoch_ms"] > 0 for r in rows)
    assert "no stored node features" in outcome[specs[1]]["gnn"]["skipped"]
    text = catalog_summary(outcome)
    assert "  gnn gcn: " in text and "  gnn: skipped, " in text


def test_catalog_runs_on_the_cluster_named_by_the_environment(prefect_harness, data_root, tmp_path, capsys,
                                                              monkeypatch):
    """The scheduled deployment passes no --scheduler: TCSPMM_SCHEDULER names the cluster, and the sharded SpMM's
    tasks run there (the scheduler saw them) instead of on a cluster the flow starts."""
    from distributed import Client, LocalCluster
    catalog = tmp_path / "catalog.yaml"
    spec = "gen:sbm?n=1200&blocks=12&p_in=0.05&p_out=0.002&seed=5"
    catalog.write_text(f"matrices:\n  - '{spec}'\n")
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                      memory_limit=0) as cluster:
        monkeypatch.setenv("TCSPMM_SCHEDULER", cluster.scheduler_address)
        code = main(["--catalog", str(catalog), "-N", "4", "--devices", "2", "--reorder", "degree", "--repeats", "1",
                     "--data-root", str(data_root), "--json"])
        assert code == 0, capsys.readouterr().err[-2000:]
        assert "error" not in json.loads(capsys.readouterr().out)[spec]
        with Client(cluster.scheduler_address, timeout="10s") as c:
            prefixes = c.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    assert "spmm-stored" in prefixes, prefixes
