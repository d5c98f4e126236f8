"""What a training run measures for its receipt: peak memory (per stage of a chain in one
process) and the loss-curve plot. The environment facts and writing the receipt are
`memworker.receipts` (every stage records them)."""

from __future__ import annotations

import gc
import resource
import sys
from pathlib import Path
from typing import Any

from memworker.hashing import sha256_file


def reset_peak_memory() -> str:
    """Start a new peak-memory window for this stage (a chain trains several stages in one
    process): Linux resets the peak RSS (VmHWM, and with it getrusage's ru_maxrss) when "5" is
    written to /proc/self/clear_refs; CUDA resets its peak counters. Returns the scope
    `peak_memory` will report: "stage", or "process" where the RSS peak cannot be reset."""
    gc.collect()
    scope = "process"
    try:
        Path("/proc/self/clear_refs").write_text("5")
        scope = "stage"
    except OSError:
        pass
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
    except ImportError:
        pass
    return scope


def _vm_hwm() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def max_rss_bytes(who: int = resource.RUSAGE_SELF) -> int:
    """getrusage's peak RSS in bytes (Linux reports KiB, macOS bytes)."""
    return resource.getrusage(who).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def peak_memory(children: bool = False, scope: str = "process") -> dict[str, Any]:
    """Peak RSS (bytes) of this process since `reset_peak_memory` (scope "stage") or over its
    life (scope "process", where no reset was possible), or of its largest finished child
    process (the mlx-lm run), and, on CUDA, peak allocated/reserved VRAM."""
    if children:
        rss, scope = max_rss_bytes(resource.RUSAGE_CHILDREN), "child process"
    else:
        hwm = _vm_hwm() if scope == "stage" else None
        scope = scope if hwm is not None else "process"
        rss = hwm if hwm is not None else max_rss_bytes()
    out: dict[str, Any] = {"rss_bytes": rss, "rss_scope": scope}
    try:
        import torch

        if torch.cuda.is_available():
            out["vram_allocated_bytes"] = torch.cuda.max_memory_allocated()
            out["vram_reserved_bytes"] = torch.cuda.max_memory_reserved()
    except ImportError:
        pass
    return out


def loss_curve(log_history: list[dict[str, Any]], path: Path, title: str) -> Path | None:
    """PNG of train loss per logged step, validation loss as points; None if nothing logged."""
    train = [(h["step"], h["loss"]) for h in log_history if "loss" in h and "step" in h]
    val = [(h["step"], h["eval_loss"]) for h in log_history if "eval_loss" in h]
    if not train and not val:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=110)
    if train:
        ax.plot(*zip(*train, strict=True), label="train (answer tokens)", lw=1.4)
    if val:
        ax.plot(*zip(*val, strict=True), "o--", label="validation", ms=4)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
    return path


def file_sha(path: Path) -> str | None:
    return sha256_file(path) if path.is_file() else None
