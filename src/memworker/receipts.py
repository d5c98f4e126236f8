"""What every stage records, below the stages: the run environment (library versions, git commit
and dirty files, hardware, command line), the names of the receipt and adapter files, and writing
a stage receipt.

The training stage writes `runs/<stage>/receipt.json` beside its `adapter/`; the export reads them
and writes the release receipt (`release-receipt.json`, `kind: memworker-release`; its one writer
is `memworker.export.receipt`); the evaluators record the same environment in their
configuration. None of them imports another stage for this.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from memworker.hashing import sha256_file, write_json

RECEIPT = "receipt.json"
ADAPTER_DIR = "adapter"
RELEASE_RECEIPT = "release-receipt.json"
#: a release folder's checksums of every file (`sha256sum -c` accepts it)
SUMS = "SHA256SUMS"
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


#: a file in a committed run folder that says why its adapter is not committed (a compared arm
#: kept only as a record, a release archived as not rebuildable); tests/test_adapters_tracked.py
#: exempts such a folder, and no shipped release may name one
ADAPTER_NOT_COMMITTED = "ADAPTER-NOT-COMMITTED.md"


def rebuild_command(receipt: dict[str, Any]) -> str:
    """The command that trains a receipt's adapter again (its recorded argv), for messages."""
    argv = (receipt.get("args") or {}).get("argv")
    if argv:
        return "python train/run.py " + shlex.join(argv)
    return f"python train/run.py --stage {receipt.get('stage', 'STAGE')} --fresh"


def adapter_differences(recorded: dict[str, str], actual: dict[str, str | None],
                        folder: str | Path) -> list[str]:
    """One line per adapter file whose sha256 differs from its receipt's: the file, both hashes
    ("missing" where there is none)."""
    out = []
    for name in sorted(set(recorded) | set(actual)):
        want, have = recorded.get(name), actual.get(name)
        if want != have:
            out.append(f"{Path(folder) / ADAPTER_DIR / name}: receipt sha256 {want or 'none'}, "
                       f"file sha256 {have or 'missing'}")
    return out


def tracked(root: Path, under: str) -> set[str]:
    """Paths git tracks (in the index) under `under`, relative to the checkout `root`."""
    out = subprocess.run(["git", "ls-files", "-z", "--", under], cwd=root, capture_output=True,
                         check=True).stdout.decode("utf-8")
    return {p for p in out.split("\0") if p}


def git_bytes(root: Path, rel: str) -> bytes:
    """The bytes git holds for `rel` (the index), not the file on disk."""
    return subprocess.run(["git", "show", f":{rel}"], cwd=root, capture_output=True,
                          check=True).stdout


def git_blob_sha256(root: Path, rel: str) -> str:
    """sha256 of the bytes git holds for `rel` (the index), not of the file on disk."""
    return hashlib.sha256(git_bytes(root, rel)).hexdigest()


def adapter_problems(root: Path, folder: str, receipt_rel: str | None = None) -> list[str]:
    """Why the adapter in `folder`/adapter (relative to the checkout `root`) cannot be rebuilt
    from a clone: its receipt (`folder`/receipt.json unless given: a stage receipt copy beside a
    release's `adapter/`) untracked or without adapter files, a file untracked, or a tracked file
    whose sha256 differs from the receipt's. Read through git, never the disk."""
    receipt_rel = receipt_rel or f"{folder}/{RECEIPT}"
    files = tracked(root, folder) | tracked(root, receipt_rel)
    if receipt_rel not in files:
        return [f"{receipt_rel} is not tracked by git"]
    receipt = json.loads(git_bytes(root, receipt_rel))
    recorded = (receipt.get("adapter") or {}).get("files") or {}
    if not recorded:
        return [f"{receipt_rel} records no adapter files"]
    actual: dict[str, str | None] = {}
    problems = []
    for name in recorded:
        rel = f"{folder}/{ADAPTER_DIR}/{name}"
        if rel in files:
            actual[name] = git_blob_sha256(root, rel)
        else:
            actual[name] = recorded[name]  # reported below, not as a hash difference
            problems.append(f"{rel} is not tracked by git (commit it: `git add -f {rel}`), or "
                            f"rebuild it: `{rebuild_command(receipt)}`")
    problems += adapter_differences(recorded, actual, folder)
    return problems


def write_receipt(receipt: dict[str, Any], run_dir: Path, receipts_dir: Path | None,
                  stage: str) -> Path:
    """`run_dir/receipt.json`, copied to `receipts_dir/<stage>-receipt.json` when given."""
    path = run_dir / RECEIPT
    write_json(path, receipt)
    if receipts_dir is not None:
        receipts_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, receipts_dir / f"{stage}-receipt.json")
    return path
