"""The evaluator's charts: an evaluation folder's `tasks.png` and `temporal.png` (`plot`, written
by `eval/run.py`), and the one drawing of the primary metric per task with its 95 % intervals
(`task_bars`), which the report notebook (`memworker.report`) draws too. matplotlib is imported
when a chart is drawn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memworker.eval.grade import PRIMARY, TEMPORAL_CLASSES
from memworker.eval.summary import TASKS, primary_entry


def task_bars(ax: Any, summary: dict[str, Any], *, title: str, ylabel: str,
              title_size: float | None = None) -> None:
    """Into `ax`: each task's primary metric, one bar per arm with its 95 % interval (a bar
    without an interval has none drawn), the tasks named with their metric and rows, y from 0 to
    1.05, `ylabel`, `title` (at `title_size`, else the axes' default), legend and grid."""
    arms = summary["arms"]
    width = 0.8 / max(len(arms), 1)
    for k, arm in enumerate(arms):
        xs, ys, lo, hi = [], [], [], []
        for t, task in enumerate(TASKS):
            entry = primary_entry(summary, arm, task)
            if not entry or entry["value"] is None:
                continue
            ci = entry["ci"] or [entry["value"], entry["value"]]
            xs.append(t + (k - (len(arms) - 1) / 2) * width)
            ys.append(entry["value"])
            lo.append(entry["value"] - ci[0])
            hi.append(ci[1] - entry["value"])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=arm)
    ax.set_xticks(range(len(TASKS)),
                  [f"{t}\n({PRIMARY[t]}, n={summary['rows_per_task'].get(t, 0)})" for t in TASKS],
                  fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(ylabel)
    ax.set_title(title, **({} if title_size is None else {"fontsize": title_size}))
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
    return path


def plot(summary: dict[str, Any], out_dir: Path) -> list[Path]:
    """`tasks.png` (primary metric per task, bars per arm with 95 % intervals) and
    `temporal.png` (temporal error classes per arm, before and after the codec)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = summary["arms"]
    fig, ax = plt.subplots(figsize=(7.2, 3.8), dpi=110)
    task_bars(ax, summary, title=f"set {summary['config'].get('set')}: primary metric per task",
              ylabel="score (95 % bootstrap interval)")
    paths = [_save(plt, fig, out_dir / "tasks.png")]

    fig, ax = plt.subplots(figsize=(7.2, 3.8), dpi=110)
    width = 0.8 / max(2 * len(arms), 1)
    top = 1
    for k, arm in enumerate(arms):
        t = summary["temporal"][arm]
        color = f"C{k % 10}"
        for j, stage in enumerate(("before", "after")):
            off = (2 * k + j - (2 * len(arms) - 1) / 2) * width
            counts = [t[stage][c] for c in TEMPORAL_CLASSES]
            top = max(top, *counts)
            ax.bar([i + off for i in range(len(TEMPORAL_CLASSES))], counts, width, color=color,
                   hatch="//" if stage == "before" else None, alpha=0.55 if j == 0 else 1.0,
                   label=f"{arm} {stage} (dated pairs={t['pairs']})")
    ax.set_ylim(0, top * 1.15)
    ax.set_xticks(range(len(TEMPORAL_CLASSES)), [c.replace("_", "\n") for c in TEMPORAL_CLASSES],
                  fontsize=8)
    ax.set_ylabel("matched claims")
    ax.set_title("temporal errors before / after the codec's normalisation")
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    paths.append(_save(plt, fig, out_dir / "temporal.png"))
    return paths
