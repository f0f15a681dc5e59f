"""Plots as PNG files, drawn with matplotlib (an optional dependency: ``pip install 'kernelpilot[plot]'``):
labelled axes, a title and a legend on every one. Where matplotlib is missing, ``available()`` says so and the
run report uses the SVG chart of ``runs/html.py`` instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelpilot.errors import KernelpilotError, ToolNotFoundError

__all__ = ["available", "speedup_png", "series_png", "occupancy_png", "roofline_png"]


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


def _finish(plt, fig, ax, path: Path, *, xlabel: str, ylabel: str, title: str, legend: str = "best",
            size: int = 8) -> Path:
    """Labels, title, grid and legend on ``ax``; ``fig`` written to ``path`` and closed."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(loc=legend, fontsize=size)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


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
    ax.set_ylim(bottom=0)
    return _finish(plt, fig, ax, path, xlabel="step", ylabel="speedup over the start (x)", title=title)


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
    return _finish(plt, fig, ax, path, xlabel=xlabel, ylabel=ylabel, title=title)



def occupancy_png(report: Any, path: Path) -> Path:
    """How a kernel's occupancy moves with its registers (per thread; AMD: VGPRs) and its shared memory (AMD:
    LDS) per block, at its block size, the other resource held where the kernel has it; the kernel's own point
    marked on both. ``report`` is an analyzed kernel (``isa.model.KernelReport``) with an occupancy."""
    from kernelpilot.arch.occupancy import amd_occupancy, nvidia_occupancy
    from kernelpilot.arch.registry import get_arch
    from kernelpilot.isa.model import AmdResources

    occ, r = report.occupancy, report.resources
    if occ is None:
        raise KernelpilotError(f"{report.name}: no occupancy to draw (no register count or block size).")
    spec = get_arch(report.arch)
    dyn = report.dynamic_shared_bytes()
    if isinstance(r, AmdResources):
        regs_now, smem_now, reg_name, smem_name = r.vgpr or 0, (r.lds_bytes or 0) + dyn, "VGPRs per lane", "LDS"

        def at(regs: int, smem: int) -> float:
            return amd_occupancy(spec, vgpr=regs, agpr=r.agpr or 0, sgpr=r.sgpr or 0, lds_bytes=smem,
                                 block_size=occ.block_size).percent
        regs_range, smem_max = range(8, 513, 8), 64 * 1024
    else:
        regs_now, smem_now, reg_name, smem_name = r.registers or 0, r.shared_bytes or 0, "registers per thread", \
            "shared memory"

        def at(regs: int, smem: int) -> float:
            return nvidia_occupancy(spec, registers=regs, shared_bytes=smem, block_size=occ.block_size,
                                    dynamic_shared_bytes=dyn).percent
        regs_range, smem_max = range(8, 256, 8), 227 * 1024
    smem_range = range(0, smem_max + 1, smem_max // 64)

    def curve(xs: range, f) -> tuple[list[float], list[float]]:
        """``f`` over ``xs`` up to the first value the arch does not have (more registers than it holds)."""
        got_x, got_y = [], []
        for x in xs:
            try:
                got_y.append(f(x))
            except (ValueError, KernelpilotError):
                break
            got_x.append(x)
        return got_x, got_y

    plt = _pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=110)
    a.step(*curve(regs_range, lambda x: at(x, smem_now)), where="post", color="#1f6feb",
           label=f"occupancy at {smem_now:,} B of {smem_name}")
    a.plot([regs_now], [occ.percent], "o", color="#c0392b", label=f"this kernel: {regs_now} ({occ.percent:.0f}%)")
    a.set_xlabel(reg_name)
    a.set_ylabel("occupancy (%)")
    a.set_title(f"{reg_name} ({report.arch}, {occ.block_size} threads per block)")
    sx, sy = curve(smem_range, lambda x: at(regs_now, x))
    b.step([x / 1024 for x in sx], sy, where="post", color="#2a9d3a", label=f"occupancy at {regs_now} {reg_name}")
    b.plot([smem_now / 1024], [occ.percent], "o", color="#c0392b", label="this kernel")
    b.set_xlabel(f"{smem_name} per block (KiB)")
    b.set_ylabel("occupancy (%)")
    b.set_title(f"{smem_name} per block")
    for ax in (a, b):
        ax.set_ylim(0, 105)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    fig.suptitle(f"Occupancy of {report.display_name or report.name}"[:90], fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def roofline_png(cases: list[dict[str, Any]], path: Path, *, title: str = "Roofline") -> Path:
    """Each benchmarked case (``case``, ``median_us``, ``roofline`` as bench gives it) as a point: arithmetic
    intensity (FLOPs per byte) against the FLOP/s it reached, under the roofs of its GPU (the memory bandwidth's
    slope, the peak FLOP/s of its data type)."""
    rows = [c for c in cases if (c.get("roofline") or {}).get("bytes") and (c["roofline"].get("flops"))
            and c.get("median_us")]
    if not rows:
        raise KernelpilotError("no roofline to draw: it needs cases whose problem declares its cost (bytes and "
                               "FLOPs) timed on a GPU kernelpilot knows.")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 4.2), dpi=110)
    intensities = [r["roofline"]["flops"] / r["roofline"]["bytes"] for r in rows]
    lo, hi = min(intensities) / 10, max(intensities) * 100
    roofs = {}
    for r in rows:
        peak = r["roofline"].get("peak") or {}
        if peak.get("bandwidth_tbps") and peak.get("tflops"):
            roofs[peak.get("dtype", "?")] = (peak["bandwidth_tbps"] * 1e12, peak["tflops"] * 1e12)
    for dtype, (bw, flops) in roofs.items():
        xs = [lo * (hi / lo) ** (i / 100) for i in range(101)]
        ax.plot(xs, [min(flops, x * bw) for x in xs], linestyle="--", linewidth=1,
                label=f"roof, {dtype} ({bw / 1e12:g} TB/s, {flops / 1e12:g} TFLOP/s)")
    for r, x in zip(rows, intensities):
        achieved = r["roofline"]["flops"] / (r["median_us"] * 1e-6)
        frac = r["roofline"].get("fraction")
        ax.plot([x], [achieved], "o", label=f"{r['case']}: {r['median_us']:g} us"
                + (f" ({frac:.1%} of its floor)" if frac else ""))
    ax.set_xscale("log")
    ax.set_yscale("log")
    return _finish(plt, fig, ax, path, xlabel="arithmetic intensity (FLOPs per byte)", ylabel="FLOP/s reached",
                   title=title, legend="lower right", size=7)
