"""A PNG of live bytes over the schedule, with the budget line and the binding point."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from ..errors import UsageError
from .memory import MemoryReport

__all__ = ["plot_report", "require_matplotlib", "INSTALL_HINT"]

INSTALL_HINT = "pip install 'sequant-eval[plot]'"

_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))


def require_matplotlib() -> None:
    """Refuse (before any work) when matplotlib is not installed, naming the install command."""
    try:
        found = importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise UsageError(f"a PNG plot needs matplotlib, which is not installed; install it "
                         f"with {INSTALL_HINT} (or drop --plot)")


def plot_report(report: MemoryReport, path: str | Path) -> Path:
    """A PNG of live bytes over the schedule's static points, the peak marked."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    top = max([report.peak_bytes, report.budget_bytes or 0, 1])
    unit, scale = next((u, s) for u, s in _UNITS if top >= s)
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=120)
    xs = range(len(report.live_bytes))
    ax.step(xs, [b / scale for b in report.live_bytes], where="mid", color="tab:blue",
            label="live bytes (predicted)")
    if report.budget_bytes:
        ax.axhline(report.budget_bytes / scale, color="tab:red", linestyle="--",
                   label=f"budget {report.budget_bytes / scale:.3g} {unit}")
    ax.plot([report.binding_point], [report.peak_bytes / scale], "o", color="black",
            label=f"peak {report.peak_bytes / scale:.3g} {unit} at point {report.binding_point}")
    ax.set_xlabel("schedule point (one iteration per block)")
    ax.set_ylabel(f"live memory [{unit}]")
    ax.set_title(report.title or "memory over the schedule")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
