"""Plots as PNG files, drawn with matplotlib (an optional dependency: ``pip install 'kernelpilot[plot]'``):
labelled axes, a title and a legend on every one. Where matplotlib is missing, ``available()`` says so and the
run report uses the SVG chart of ``runs/html.py`` instead."""

from __future__ import annotations

from pathlib import Path

from kernelpilot.errors import ToolNotFoundError

__all__ = ["available", "speedup_png", "series_png"]


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ToolNotFoundError("matplotlib", "matplotlib (pip install 'kernelpilot[plot]')") from None
    matplotlib.use("Agg")                       # files only: no display
    import matplotlib.pyplot as plt

    return plt


def speedup_png(points: list[tuple[int, float | None]], path: Path, *, target: float | None = None,
                title: str = "Speedup over the start, by step") -> Path:
    """Each evaluated step's speedup over the start (dots; failed steps as crosses at zero), the best so far,
    1x and the goal."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 3.6), dpi=110)
    ok = [(n, s) for n, s in points if s]
    bad = [n for n, s in points if not s]
    best, line = 0.0, []
    for n, s in points:
        best = max(best, s or 0.0)
        line.append((n, best if best else None))
    if ok:
        ax.plot([n for n, _ in ok], [s for _, s in ok], "o", color="#2a9d3a", label="a step that passed")
    if bad:
        ax.plot(bad, [0] * len(bad), "x", color="#c0392b", label="a step that failed")
    if any(b for _, b in line):
        ax.step([n for n, b in line if b], [b for _, b in line if b], where="post", color="#1f6feb",
                label="best so far")
    ax.axhline(1.0, color="#999999", linestyle=":", label="1x (the start)")
    if target:
        ax.axhline(target, color="#e67e22", linestyle="--", label=f"the goal ({target:g}x)")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))      # steps are whole numbers
    ax.set_xlabel("step")
    ax.set_ylabel("speedup over the start (x)")
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def series_png(series: dict[str, list[float | None]], path: Path, *, title: str = "Speedup over PyTorch eager, per case",
               xlabel: str = "case", ylabel: str = "speedup over eager (x, log scale)", log: bool = True) -> Path:
    """One line per series over the same cases (None: no value), on a log scale by default, with 1x marked."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4), dpi=110)
    for name, values in series.items():
        xs = [i for i, v in enumerate(values) if v]
        ax.plot(xs, [values[i] for i in xs], marker=".", linewidth=1, label=name)
    ax.axhline(1.0, color="#999999", linestyle=":", label="1x")
    if log:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

