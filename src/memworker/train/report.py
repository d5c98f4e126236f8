"""Everything a run reports, in one place: environment facts (library versions, git commit,
hardware), peak memory, the run receipt, and the loss-curve plot."""

from __future__ import annotations

import gc
import importlib.metadata
import os
import platform
import resource
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from memworker.hashing import sha256_file, write_json

LIBRARIES = ("memworker", "torch", "transformers", "trl", "peft", "accelerate", "bitsandbytes",
             "datasets", "tokenizers", "safetensors", "mlx", "mlx-lm")


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def git_commit(cwd: str | Path | None = None) -> dict[str, Any]:
    """HEAD and whether the tree differs from it (uncommitted or untracked files; read-only).
    `receipts/` is left out: the run itself writes there, so a chain of stages would otherwise
    call its own later stages dirty. `changed` lists up to 20 of the differing paths."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                                 timeout=20, check=True)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.rstrip()

    head = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--", ":(top)", ":(top,exclude)receipts") if head else None
    if status is None:
        return {"commit": head, "dirty": None}
    changed = [line[3:] for line in status.splitlines() if line.strip()]
    return {"commit": head, "dirty": bool(changed), "changed": changed[:20]}


def hardware() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "machine": platform.machine(),
                            "cpus": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0))}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        mem = Path("/proc/meminfo").read_text().split()
        info["ram_gib"] = round(int(mem[mem.index("MemTotal:") + 1]) / 2**20, 1)
    except (OSError, ValueError):
        pass
    try:
        import torch

        info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        if torch.cuda.is_available():
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        pass
    return info


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


def environment() -> dict[str, Any]:
    return {"libraries": library_versions(), "git": git_commit(Path(__file__).parent),
            "hardware": hardware(), "argv": sys.argv}


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


def write_receipt(receipt: dict[str, Any], run_dir: Path, receipts_dir: Path | None,
                  stage: str) -> Path:
    """`run_dir/receipt.json`, copied to `receipts_dir/<stage>-receipt.json` when given."""
    path = run_dir / "receipt.json"
    write_json(path, receipt)
    if receipts_dir is not None:
        receipts_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, receipts_dir / f"{stage}-receipt.json")
    return path


def file_sha(path: Path) -> str | None:
    return sha256_file(path) if path.is_file() else None
