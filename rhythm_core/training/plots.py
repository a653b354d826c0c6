"""Training curves as PNG files (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path


def plot_curves(series: dict[str, list[tuple[float, float]]], path, *, title: str, ylabel: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    for label, points in series.items():
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, label=label, marker="." if len(points) < 40 else None)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
