"""benchmarks/epoch_profile.py (the GNN per-epoch fixed-cost breakdown of benchmarks/gnn.py): kernel categories,
events attributed to phases, the phase timers on a CPU model, the table; benchmarks/gnn.py's new options parse and
its GPU-only path refuses a machine without CUDA."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ep = load("epoch_profile")


@pytest.mark.parametrize("name, cat", [
    ("metcf_spmm_window", "sparse product"),
    ("csr_rows_f32", "sparse product"),
    ("csr_fixup_f32", "sparse product"),
    ("gather_rows_w16", "gather-scatter"),
    ("attention_bwd_rows", "gather-scatter"),
    ("sddmm_edges_v4", "sparse product"),
    ("void cusparse::csrmm_alg2_kernel<float>", "sparse product"),
    ("void spmm_kernel<float, (ReductionType)0, true>", "sparse product"),
    ("void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<...>", "transpose / format"),
    ("void at::native::(anonymous)::convert_indices_from_csr_to_coo_cuda_kernel<int>", "transpose / format"),
    ("void at::native::index_elementwise_kernel<128, 4>", "gather-scatter"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "cast-copy"),
    ("ampere_sgemm_128x64_tn", "other dense"),
    ("void at::native::(anonymous)::fused_dropout_kernel_vec<float>", "other dense"),
])
def test_kernel_categories(name, cat):
    assert ep.category(name) == cat


def test_events_go_to_the_phase_that_holds_their_start():
    ranges = {"forward": (0, 10), "loss": (10, 20), "backward": (20, 30), "optimizer": (30, 40)}
    events = [("cudaLaunchKernel", "cpu", 1, 0), ("cuLaunchKernel", "cpu", 2, 0), ("metcf_spmm_window", "cuda", 3, 0),
              ("[memory]", "memory", 4, 512), ("[memory]", "memory", 5, -512),  # a free is not an allocation
              ("cudaStreamSynchronize", "cpu", 12, 0), ("Memcpy DtoH (Device -> Pageable)", "cuda", 13, 0),
              ("cudaGraphLaunch", "cpu", 25, 0), ("cudaMalloc", "cpu", 26, 0),
              ("cudaLaunchKernel", "cpu", 35, 0), ("cudaEventSynchronize", "cpu", 36, 0),  # the separator
              ("cudaLaunchKernel", "cpu", 99, 0)]  # outside every phase: dropped
    got = ep.attribute(ranges, events)
    assert got["forward"]["launches"] == 2 and got["forward"]["allocations"] == 1
    assert got["forward"]["kernels"] == {"sparse product": 1}
    assert got["forward"]["kernel_names"] == {"sparse product": ["metcf_spmm_window"]}
    assert got["loss"]["syncs"] == 1 and got["loss"]["dtoh"] == 1 and got["loss"]["launches"] == 0
    assert got["backward"]["launches"] == 1 and got["backward"]["cuda_malloc"] == 1
    assert got["optimizer"]["launches"] == 1 and got["optimizer"]["syncs"] == 0
    total = ep.summary({"epoch_ms": 1.0, "host_ms": {}, "gpu_ms": None, "host_total_ms": 0.0}, got)
    assert total["launches"] == 4 and total["syncs"] == 1 and total["allocations"] == 1
    assert total["kernels"] == {"sparse product": 1, "cast-copy": 1}


def test_phase_times_on_a_cpu_model_and_the_table():
    torch = pytest.importorskip("torch", reason="needs torch: pip install -e '.[gnn]'")
    import gnn
    from gnn.models import GCN

    rng = np.random.default_rng(0)
    A = sp.random_array((50, 50), density=0.1, rng=rng, format="csr")
    g = gnn.Graph("g", sp.csr_array(A + A.T))
    torch.manual_seed(0)
    model, x = GCN(8, 16, 3), torch.randn(50, 8)
    idx = torch.arange(0, 50, 2)
    y = torch.randint(0, 3, (50,))[idx]
    before = [p.detach().clone() for p in model.parameters()]
    t = ep.phase_times(model, x, y, idx, g, epochs=3, warmup=1)
    assert set(t["host_ms"]) == set(ep.PHASES) and t["gpu_ms"] is None
    assert all(v > 0 for v in t["host_ms"].values()) and t["epoch_ms"] >= max(t["host_ms"].values())
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # it trained
    row = {"graph": "g", "model": "gcn", "library": "tcspmm", **ep.summary(t, None)}
    lines = ep.table([row]).splitlines()
    assert len(lines) == 3 and lines[2].split()[:3] == ["g", "gcn", "tcspmm"] and "/-" in lines[2]


def test_gnn_benchmark_takes_the_fixed_cost_options_and_needs_cuda(capsys):
    torch = pytest.importorskip("torch", reason="needs torch: pip install -e '.[gnn]'")
    if torch.cuda.is_available():
        pytest.skip("checks the refusal without a GPU")
    bench = load("gnn")
    assert bench.main(["--suite", "smoke", "--fixed-cost-epochs", "5", "--no-fixed-cost"]) == 1
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_the_doc_section_carries_the_budget_and_a_measured_breakdown(tmp_path):
    import json
    summarize = load("summarize")
    import summarize_gnn  # beside summarize.py, which put its folder on the path

    h = summarize.common  # what summarize.py hands every section
    row = {"graph": "sbm-20k", "model": "gcn", "library": "pyg", "epoch_ms": 2.4, "host_total_ms": 1.9,
           "host_ms": {"forward": 0.5, "loss": 0.1, "backward": 0.9, "optimizer": 0.4},
           "gpu_ms": {"forward": 0.3, "loss": 0.1, "backward": 0.4, "optimizer": 0.2}, "launches": 60, "syncs": 2,
           "allocations": 40, "kernels": {"sparse product": 4, "cast-copy": 3}}
    path = tmp_path / "gnn-x-2026-01-01-000000.json"
    path.write_text(json.dumps({"benchmark": "gnn", "date": "2026-01-01T00:00:00+00:00", "rows": [],
                                "device": "GPU Y", "fixed_cost": [row]}))
    # the newest file with a breakdown in the run's folder, whichever GPU: here another file without one beside it
    (tmp_path / "gnn-x-2026-01-02-000000.json").write_text(json.dumps(
        {"benchmark": "gnn", "date": "2026-01-02T00:00:00+00:00", "rows": []}))
    lines = summarize_gnn.fixed_cost_lines([h.load(tmp_path / "gnn-x-2026-01-02-000000.json")], h)
    assert lines[0].startswith("### GNN per-epoch fixed cost")
    assert any("(`gnn-x-2026-01-01-000000.json`, GPU Y)" in ln for ln in lines)
    assert any("| `sbm-20k` | gcn | pyg | 2.400 | 1.900 | 0.50 / 0.30 | 0.90 / 0.40 | 0.40 / 0.20 | 60 | 2 | 40 | "
               "cast-copy 3, sparse product 4 |" == ln for ln in lines), lines[-4:]
    path.write_text(json.dumps({"benchmark": "gnn", "date": "2026-01-01T00:00:00+00:00", "rows": []}))
    assert "not run yet" in summarize_gnn.fixed_cost_lines([h.load(path)], h)[-2]


def test_dense_conv_builds_both_models_without_their_sparse_steps():
    """The dense floor's layer: GCN and GAT build on it with the same output widths, it ignores the graph, trains."""
    torch = pytest.importorskip("torch", reason="needs torch: pip install -e '.[gnn]'")
    from gnn.models import GAT, GCN

    conv = ep.dense_conv()
    torch.manual_seed(0)
    x = torch.randn(30, 8)
    idx = torch.arange(0, 30, 2)
    y = torch.randint(0, 3, (30,))[idx]
    for model in (GCN(8, 16, 3, conv=conv), GAT(8, 16, 3, heads=4, conv=conv)):
        assert model(x, None).shape == (30, 3) and not any("att" in n for n, _ in model.named_parameters())
        before = [p.detach().clone() for p in model.parameters()]
        t = ep.phase_times(model, x, y, idx, None, epochs=2, warmup=1)
        assert t["epoch_ms"] > 0 and any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_the_eager_bound_from_the_dense_floor(tmp_path):
    """With a "dense" row the section says how far any eager epoch could beat PyG: PyG's epoch / the floor's."""
    summarize = load("summarize")
    import summarize_gnn

    h = summarize.common  # what summarize.py hands every section
    rows = [{"graph": "rmat-s13", "model": "gcn", "library": lib, "epoch_ms": ms}
            for lib, ms in (("pyg", 1.9), ("tcspmm", 2.1), ("dense", 1.75))]
    lines = summarize_gnn.eager_bound_lines(rows + [{"graph": "rmat-s13", "model": "gat", "library": "pyg",
                                                     "epoch_ms": 4.0}], h)
    assert lines == ["- gcn on `rmat-s13`: the dense floor (the same model without its sparse steps) 1.750 ms an "
                     "epoch, PyG 1.900 ms: no eager epoch can beat PyG by more than **1.09x** there (ours 2.100 ms, "
                     "0.90x).", ""]  # gat has no dense row: no line
    assert summarize_gnn.eager_bound_lines(rows[:2], h) == []


def test_the_doc_table_shows_captured_steps_when_the_run_has_them(tmp_path):
    import json
    summarize = load("summarize")
    import summarize_gnn

    h = summarize.common  # what summarize.py hands every section
    base = {"graph": "sbm-20k", "nnz": 200_000, "hidden": 128, "precision": "float32", "ours_ms": 2.0, "pyg_ms": 2.4,
            "speedup": 1.2, "loss_max_rel_gap": 1e-6, "ours_test_acc": 0.9, "pyg_test_acc": 0.9}
    rows = [{**base, "model": "gcn", "ours_graph_ms": 0.5, "pyg_graph_ms": 0.9, "speedup_graph": 1.8},
            {**base, "model": "gat", "ours_graph_error": "RuntimeError: not capturable", "pyg_graph_ms": 1.1}]
    path = tmp_path / "gnn-x-2026-01-01-000000.json"
    path.write_text(json.dumps({"benchmark": "gnn", "date": "2026-01-01T00:00:00+00:00", "rows": rows}))
    text = "\n".join(summarize_gnn.gnn_section([h.load(path)], [], [], h=h))
    assert "| ours ms, captured step | PyG ms, captured step | speedup, both captured |" in text
    assert "| 0.50 | 0.90 | 1.80x |" in text and "| not capturable | 1.10 | – |" in text
    path.write_text(json.dumps({"benchmark": "gnn", "date": "2026-01-01T00:00:00+00:00", "rows": [base | {"model":
                                                                                                     "gcn"}]}))
    assert "captured step" not in "\n".join(summarize_gnn.gnn_section([h.load(path)], [], [], h=h))


def test_trace_events_take_every_threads_calls_and_the_phase_annotations():
    """The exported trace's events, whatever their thread: autograd's device thread runs the backward on CUDA."""
    trace = {"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "phase:forward", "ts": 0, "dur": 10, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "phase:backward", "ts": 10, "dur": 10, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#Adam.step", "ts": 11, "dur": 1, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 2, "dur": 1, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 12, "dur": 1, "tid": 2},
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "ts": 13, "dur": 1, "tid": 2},
        {"ph": "X", "cat": "kernel", "name": "csr_rows_f32", "ts": 14, "dur": 3, "tid": 7},
        {"ph": "X", "cat": "cpu_op", "name": "_SpmmBackward", "ts": 11.5, "dur": 5, "tid": 2},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 15, "args": {"Device Type": 1, "Bytes": 64}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 16, "args": {"Device Type": 0, "Bytes": 8}},
        {"ph": "M", "name": "process_name"}]}
    ranges, events = ep.trace_events(trace)
    assert ranges == {"forward": (0.0, 10.0), "backward": (10.0, 20.0)}
    got = ep.attribute(ranges, events)
    assert got["forward"]["launches"] == 1 and got["backward"]["launches"] == 2  # thread 2's launches counted
    assert got["backward"]["kernels"] == {"sparse product": 1} and got["backward"]["allocations"] == 1
