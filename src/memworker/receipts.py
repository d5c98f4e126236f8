"""What every stage records, below the stages: the run environment (library versions, git commit
and dirty files, hardware, command line), the names of the receipt and adapter files, and writing
a stage receipt.

The training stage writes `runs/<stage>/receipt.json` beside its `adapter/`; the export reads them
and writes the release receipt (`release-receipt.json`, `kind: memworker-release`); the evaluators
record the same environment in their configuration. None of them imports another stage for this.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from memworker.hashing import sha256_file, write_json

RECEIPT = "receipt.json"
ADAPTER_DIR = "adapter"
RELEASE_RECEIPT = "release-receipt.json"
RELEASE_KIND = "memworker-release"

LIBRARIES = ("memworker", "torch", "transformers", "trl", "peft", "accelerate", "bitsandbytes",
             "datasets", "tokenizers", "safetensors", "mlx", "mlx-lm")


# --- the run environment --------------------------------------------------------------------

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


def environment() -> dict[str, Any]:
    return {"libraries": library_versions(), "git": git_commit(Path(__file__).parent),
            "hardware": hardware(), "argv": sys.argv}


# --- receipts and adapters ------------------------------------------------------------------

def adapter_files(run_dir: Path) -> dict[str, str]:
    """sha256 of every file in a run's adapter folder, by name."""
    folder = run_dir / ADAPTER_DIR
    return {p.name: sha256_file(p) for p in sorted(folder.iterdir()) if p.is_file()}


def write_receipt(receipt: dict[str, Any], run_dir: Path, receipts_dir: Path | None,
                  stage: str) -> Path:
    """`run_dir/receipt.json`, copied to `receipts_dir/<stage>-receipt.json` when given."""
    path = run_dir / RECEIPT
    write_json(path, receipt)
    if receipts_dir is not None:
        receipts_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, receipts_dir / f"{stage}-receipt.json")
    return path
