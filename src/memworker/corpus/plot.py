"""Coverage heatmap: rows per domain x behaviour, one panel per split (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memworker.corpus.behaviours import BEHAVIOURS


def coverage_png(path: str | Path, counts: dict[str, dict[str, dict[str, int]]],
                 domains: list[str], splits: tuple[str, ...]) -> None:
    """counts[split][domain][behaviour] -> rows. Written without volatile metadata, so the same
    counts give the same bytes with the same matplotlib build."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    behaviours = list(BEHAVIOURS)
    fig, axes = plt.subplots(1, len(splits), figsize=(6.2 * len(splits), 0.42 * len(domains) + 3.2),
                             squeeze=False)
    for ax, split in zip(axes[0], splits, strict=True):
        grid = [[counts.get(split, {}).get(d, {}).get(b, 0) for b in behaviours] for d in domains]
        im = ax.imshow(grid, cmap="viridis", aspect="auto")
        ax.set_title(f"{split}: rows per domain x behaviour")
        ax.set_xticks(range(len(behaviours)), behaviours, rotation=70, ha="right", fontsize=7)
        ax.set_yticks(range(len(domains)), domains, fontsize=7)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                ax.text(j, i, str(v), ha="center", va="center", fontsize=5,
                        color="white" if v == 0 else "black" if v > max(map(max, grid)) / 2
                        else "white")
        fig.colorbar(im, ax=ax, fraction=0.03)
    fig.tight_layout()
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)


def coverage_counts(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    out: dict[str, dict[str, dict[str, int]]] = {}
    for r in rows:
        cell = out.setdefault(r["split"], {}).setdefault(r["domain"], {})
        for b in r["behaviours"]:
            cell[b] = cell.get(b, 0) + 1
    return out
