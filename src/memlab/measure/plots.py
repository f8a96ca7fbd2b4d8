"""Plots of measured memory. matplotlib is imported only when a plot is drawn.

Used by: 01 (step timeline), 02 (peak vs segments), 05 (results chart).
"""
from __future__ import annotations

from typing import Any, Sequence

from .tracker import TimelinePoint
from .units import MiB

__all__ = ["plot_timeline"]

_PHASE_COLORS = {"forward": "tab:blue", "backward": "tab:orange", "optimizer": "tab:green",
                 "zero_grad": "tab:gray", "start": "tab:gray", "track": "tab:gray"}


def plot_timeline(timeline: Sequence[TimelinePoint], ax: Any = None, title: str | None = None,
                  unit: int = MiB, unit_name: str = "MiB") -> Any:
    """Live memory after every op, coloured by phase, with the peak marked. Returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.5))
    if not timeline:
        raise ValueError("empty timeline: was the tracker created with timeline=True?")
    xs = [p.index for p in timeline]
    ys = [p.bytes / unit for p in timeline]
    ax.plot(xs, ys, color="black", linewidth=0.8)
    start = 0
    for i in range(1, len(timeline) + 1):
        if i == len(timeline) or timeline[i].phase != timeline[start].phase:
            phase = timeline[start].phase
            ax.fill_between(xs[start:i], ys[start:i], step=None, alpha=0.35,
                            color=_PHASE_COLORS.get(phase, "tab:purple"), label=phase)
            start = i
    peak = max(timeline, key=lambda p: p.bytes)
    ax.scatter([peak.index], [peak.bytes / unit], color="red", zorder=3)
    ax.annotate(f"peak {peak.bytes / unit:.2f} {unit_name}\n({peak.phase}, {peak.op})",
                (peak.index, peak.bytes / unit), textcoords="offset points", xytext=(5, -25),
                fontsize=8)
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), loc="upper left", fontsize=8)
    ax.set_xlabel("op number in the step")
    ax.set_ylabel(f"live memory ({unit_name})")
    if title:
        ax.set_title(title)
    return ax
