"""PNG charts drawn with matplotlib (optional: ``unavailable()`` says why not): one pipeline run for the flow's
``--plot``, and the helpers benchmarks/plots.py draws the benchmark charts with."""
from __future__ import annotations

from pathlib import Path

PNG_META = {"Software": None}  # no version string in the file: a rerun on the same data gives the same bytes


def unavailable() -> str | None:
    """None when charts can be drawn, else the reason (one line)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib, or the project's dev extra)"
    return None


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=PNG_META)
    _plt().close(fig)
    return path


def run_chart(outcome: dict, path: Path) -> Path:
    """One pipeline run: each stage's wall ms as bars, titled with the kernel, its median ms and GFLOP/s.
    ``outcome``: ``tasks.cli.run_outcome`` of a flow result (``wall_ms``, ``kernel``, ``kernel_ms``, ``gflops``)."""
    plt = _plt()
    stages = list(outcome.get("wall_ms") or {})
    if not stages:
        raise ValueError("run_chart: the outcome has no wall_ms per stage")
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    ax.bar(stages, [outcome["wall_ms"][s] for s in stages])
    ax.set_ylabel("wall ms")
    title = str(outcome.get("matrix") or outcome.get("matrix_id") or "run")
    if outcome.get("kernel"):
        title += f"\n{outcome['kernel']}: {outcome.get('kernel_ms', float('nan')):.3g} ms median, " \
                 f"{outcome.get('gflops', float('nan')):.3g} GFLOP/s"
    ax.set_title(title, fontsize=9)
    return _save(fig, Path(path))
