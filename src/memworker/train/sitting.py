"""Training across sittings: a stage longer than one sitting resumes from what the last sitting
committed.

A sitting ends every process and `runs/` is not in git, so a stage run that must span sittings
works in three parts (train/README.md "Training across sittings"):

1. `python train/run.py ... --sitting-minutes M` stops at the end of the first optimizer step at
   or after M minutes (counted from the command's start) with a checkpoint, and exits with
   `SITTING_EXIT` (3): the stage is not finished (no receipt, no final adapter; no child stage,
   export or evaluation starts). Every run of a stage, budgeted or not, records its sitting in
   `<run>/sittings.json` (steps from–to, runtime, tokens, git commit, val loss if validated);
   the final receipt lists them all (`sittings`).
2. `python train/sitting.py save --run runs/STAGE --to receipts/sitting/STAGE` copies the latest
   checkpoint (adapter, optimizer, scheduler, RNG state, trainer state) with the run's
   `config.json` and `sittings.json` (and, for a warm-started stage, the parent's finished run:
   its receipt and adapter, which the resume checks) into a folder of the tree, with a manifest
   of every file's sha256; it replaces what the folder held and refuses a checkpoint above
   `--max-mb` (a warm start's parent run comes on top).
   `--adapter-only` stores only the adapter (see `save`).
3. In the next sitting `python train/sitting.py restore --from receipts/sitting/STAGE` verifies
   every sha256 (nothing is written on a mismatch or a missing file) and puts the checkpoint back
   where it was, so the same `train/run.py` command resumes exactly.

This module is light (no torch or transformers): the callback that stops a sitting lives in
`memworker.train.loop`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from memworker import receipts
from memworker.hashing import sha256_file, sha256_json, write_json

SITTINGS = "sittings.json"
CONFIG = "config.json"
MANIFEST = "manifest.json"
KIND = "memworker-sitting"
SITTING_EXIT = 3  # train/run.py's exit status when a sitting's budget stopped an unfinished stage
DEFAULT_MAX_MB = 20.0
MB = 1_000_000

#: what a checkpoint needs for an exact resume (Trainer._load_from_checkpoint,
#: _load_optimizer_and_scheduler, _load_rng_state); one rng_state file per process
EXACT_FILES = ("adapter_model.safetensors", "adapter_config.json", "optimizer.pt", "scheduler.pt",
               "trainer_state.json")
OPTIONAL_FILES = ("scaler.pt",)  # fp16 runs only
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json", "trainer_state.json")
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_RNG = re.compile(r"^rng_state(_\d+)?\.pth$")


class SittingError(ValueError):
    """A save or restore cannot be done as asked; the message says why and what to do."""


class SittingEnded(Exception):  # noqa: N818 - not an error: the sitting's budget is spent
    """The sitting's budget stopped a stage before its last step; its checkpoint is on disk.
    `train/run.py` exits with SITTING_EXIT, starting no child stage, export or evaluation."""

    def __init__(self, stage: str, run_dir: Path, record: dict[str, Any]):
        super().__init__(f"stage {stage} stopped at step {record.get('to_step')} of "
                         f"{record.get('max_steps')} (sitting budget)")
        self.stage, self.run_dir, self.record = stage, run_dir, record


# --- the record of each sitting ------------------------------------------------------------

def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_sittings(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / SITTINGS
    return json.loads(path.read_text("utf-8")) if path.is_file() else []


def begin_sitting(run_dir: Path, from_step: int, resumed_from: str | None,
                  budget_minutes: float | None) -> list[dict[str, Any]]:
    """Append this sitting (status `running`) to `<run>/sittings.json`; an earlier entry still
    `running` belongs to a process that died (killed, crashed) and becomes `interrupted`."""
    sittings = read_sittings(run_dir)
    for entry in sittings:
        if entry.get("status") == "running":
            entry["status"] = "interrupted"
    git = receipts.git_commit(Path(receipts.__file__).parent)
    sittings.append({
        "sitting": len(sittings) + 1, "status": "running", "started_at": _now(),
        "from_step": from_step, "resumed_from": resumed_from and Path(resumed_from).name,
        "budget_minutes": budget_minutes,
        "git": {"commit": git.get("commit"), "dirty": git.get("dirty")},
    })
    write_json(Path(run_dir) / SITTINGS, sittings)
    return sittings


def note_checkpoint(run_dir: Path, step: int) -> None:
    """A checkpoint of this sitting is on disk: the running entry records how far it got (what a
    save taken now, and so a killed sitting's record, shows)."""
    sittings = read_sittings(run_dir)
    if sittings and sittings[-1].get("status") == "running":
        sittings[-1].update({"to_step": step, "checkpoint": f"checkpoint-{step}"})
        write_json(Path(run_dir) / SITTINGS, sittings)


def end_sitting(run_dir: Path, status: str, **fields: Any) -> list[dict[str, Any]]:
    """Close this sitting (the last entry): `budget` (stopped unfinished) or `finished`."""
    sittings = read_sittings(run_dir)
    if not sittings:
        raise SittingError(f"{run_dir / SITTINGS} has no sitting to close")
    sittings[-1].update({"status": status, "ended_at": _now(), **fields})
    write_json(Path(run_dir) / SITTINGS, sittings)
    return sittings


def next_steps(run_dir: Path, argv: list[str], to: Path | None = None) -> list[str]:
    """What to do after a sitting stopped a stage: save, commit, restore, the same command."""
    run_dir = Path(run_dir)
    to = to or Path("receipts") / "sitting" / run_dir.name
    command = shlex.join(["python", "train/run.py", *argv])
    return [
        f"save it to the tree: python train/sitting.py save --run {shlex.quote(str(run_dir))} "
        f"--to {shlex.quote(str(to))} && git add {shlex.quote(str(to))} && "
        f"git commit -m 'sitting: {run_dir.name}'",
        f"next sitting: python train/sitting.py restore --from {shlex.quote(str(to))} && "
        f"{command}",
    ]


# --- checkpoints -----------------------------------------------------------------------------

def checkpoints(run_dir: Path) -> list[Path]:
    """The run's checkpoint folders, oldest step first."""
    folder = Path(run_dir) / "checkpoints"
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir()
             if p.is_dir() and (m := _CHECKPOINT.match(p.name))]
    return [p for _, p in sorted(found)]


def step_of(checkpoint: str | Path) -> int:
    match = _CHECKPOINT.match(Path(checkpoint).name)
    return int(match.group(1)) if match else 0


def checkpoint_files(ckpt: Path, adapter_only: bool = False) -> list[str]:
    """The file names to keep of a checkpoint; raises SittingError naming what is missing."""
    names = {p.name for p in ckpt.iterdir() if p.is_file()}
    wanted = ADAPTER_FILES if adapter_only else EXACT_FILES
    missing = [n for n in wanted if n not in names]
    rng = sorted(n for n in names if _RNG.match(n))
    if not adapter_only and not rng:
        missing.append("rng_state.pth")
    if missing:
        raise SittingError(f"{ckpt} lacks {', '.join(missing)}")
    if adapter_only:
        return list(wanted)
    return [*wanted, *rng, *(n for n in OPTIONAL_FILES if n in names)]


def latest_complete(run_dir: Path, adapter_only: bool = False) -> tuple[Path, list[str]]:
    """(latest checkpoint that holds every file a resume needs, those file names)."""
    found = checkpoints(run_dir)
    if not found:
        raise SittingError(f"{run_dir} has no checkpoint ({run_dir / 'checkpoints'}/checkpoint-N)")
    problems = []
    for ckpt in reversed(found):
        try:
            names = checkpoint_files(ckpt, adapter_only)
        except SittingError as exc:  # e.g. a process killed while it was saving
            problems.append(str(exc))
            continue
        for problem in problems:
            print(f"sitting: skipped an incomplete checkpoint: {problem}", file=sys.stderr)
        return ckpt, names
    raise SittingError("no complete checkpoint: " + "; ".join(problems))


# --- save ------------------------------------------------------------------------------------

def _parent_run(run_dir: Path, config: dict[str, Any]) -> tuple[Path, str] | None:
    """(the parent's run folder, its receipt sha256) of a warm-started run, else None."""
    want = config.get("parent_receipt_sha256")
    if not want:
        return None
    parent_stage = (config.get("config") or {}).get("parent")
    recorded = config.get("parent_run_dir")
    folder = Path(recorded) if recorded else run_dir.parent / str(parent_stage)
    receipt = folder / receipts.RECEIPT
    if not receipt.is_file() or sha256_file(receipt) != want:
        raise SittingError(
            f"{run_dir} warm-starts from {parent_stage}, whose receipt (sha256 {want[:12]}…) is "
            f"not in {folder}: the checkpoint cannot resume without it; put that run back first")
    return folder, want


def _sizes(files: dict[str, Path]) -> dict[str, int]:
    return {name: path.stat().st_size for name, path in files.items()}


def _mb(n: float) -> str:
    return f"{n / MB:.2f} MB"


def plan_save(run_dir: Path, adapter_only: bool = False) -> dict[str, Any]:
    """What `save` would copy: {relative name in the folder: source path} plus the manifest's
    description of the run. Raises SittingError when there is nothing resumable."""
    run_dir = Path(run_dir)
    cfg_path = run_dir / CONFIG
    if not cfg_path.is_file():
        raise SittingError(f"{run_dir} holds no run ({CONFIG} is missing)")
    if (run_dir / receipts.RECEIPT).is_file():
        raise SittingError(f"{run_dir} is finished ({receipts.RECEIPT} is there): nothing to "
                           "resume; commit its receipt (receipts/<stage>-receipt.json) and, if a "
                           "later sitting needs its adapter, the adapter folder")
    config = json.loads(cfg_path.read_text("utf-8"))
    ckpt, names = latest_complete(run_dir, adapter_only)
    files = {f"{ckpt.name}/{n}": ckpt / n for n in names}
    files[CONFIG] = cfg_path
    if (run_dir / SITTINGS).is_file():
        files[SITTINGS] = run_dir / SITTINGS
    parent = None if adapter_only else _parent_run(run_dir, config)
    if parent is not None:
        folder, _sha = parent
        files[f"parent/{receipts.RECEIPT}"] = folder / receipts.RECEIPT
        for p in sorted((folder / receipts.ADAPTER_DIR).iterdir()):
            if p.is_file():
                files[f"parent/{receipts.ADAPTER_DIR}/{p.name}"] = p
    return {"files": files, "checkpoint": ckpt, "config": config, "parent": parent}


def size_breakdown(sizes: dict[str, int]) -> dict[str, int]:
    """Bytes by part: adapter, optimizer, the other checkpoint files, the parent's run, the run's
    records; `limited` (all but the parent: what --max-mb bounds) and the total."""
    parts = {"adapter": 0, "optimizer": 0, "checkpoint_other": 0, "parent": 0, "records": 0}
    for name, size in sizes.items():
        base = name.rsplit("/", 1)[-1]
        if name.startswith("parent/"):
            parts["parent"] += size
        elif "/" not in name:
            parts["records"] += size
        elif base.startswith("adapter_model"):
            parts["adapter"] += size
        elif base == "optimizer.pt":
            parts["optimizer"] += size
        else:
            parts["checkpoint_other"] += size
    parts["limited"] = sum(sizes.values()) - parts["parent"]
    parts["total"] = sum(sizes.values())
    return parts


def save(run_dir: Path, to: Path, max_mb: float = DEFAULT_MAX_MB,
         adapter_only: bool = False) -> dict[str, Any]:
    """Copy the run's latest checkpoint (and records, and a warm start's parent run) into `to`,
    replacing what it held; returns the manifest. Refuses (writing nothing) when the checkpoint
    and records exceed `max_mb`; a warm start's parent run (a finished stage's receipt and
    adapter, the same bytes every sitting, so git stores them once) comes on top and is
    reported, not limited."""
    run_dir, to = Path(run_dir), Path(to)
    plan = plan_save(run_dir, adapter_only)
    files: dict[str, Path] = plan["files"]
    sizes = _sizes(files)
    parts = size_breakdown(sizes)
    if parts["limited"] > max_mb * MB:
        shown = ", ".join(f"{k} {_mb(v)}" for k, v in parts.items()
                          if v and k not in ("limited", "total", "parent"))
        on_top = (f"; the parent run's {_mb(parts['parent'])} would come on top"
                  if parts["parent"] else "")
        ways = ("fewer LoRA layers (--lora-layers upper:N; a fresh run) or --adapter-only (the "
                "adapter alone: no exact resume, as the optimizer moments and the schedule "
                "position are lost; train/README.md \"Training across sittings\" says what can "
                "start from it)" if not adapter_only else
                "fewer LoRA layers (--lora-layers upper:N; a fresh run)")
        raise SittingError(f"{plan['checkpoint']} would put {_mb(parts['limited'])} in the tree, "
                           f"above --max-mb {max_mb:g} ({shown}{on_top}); ways out: {ways}, or "
                           "a higher --max-mb")
    _check_target(to)
    to.parent.mkdir(parents=True, exist_ok=True)
    config = plan["config"]
    try:
        hashes = {name: sha256_file(path) for name, path in sorted(files.items())}
    except FileNotFoundError as exc:  # a running trainer rotated the checkpoint away
        raise SittingError(f"{exc.filename} disappeared while it was read (a run still "
                           "training rotated its checkpoints): save again") from None
    manifest = {
        "kind": KIND,
        "mode": "adapter-only" if adapter_only else "exact",
        "stage": (config.get("config") or {}).get("name") or config.get("stage"),
        "run": str(run_dir),
        "checkpoint": plan["checkpoint"].name,
        "global_step": step_of(plan["checkpoint"]),
        "config_sha256": config.get("config_sha256"),
        "parent": None if plan["parent"] is None else {
            "run_dir": str(plan["parent"][0]), "receipt_sha256": plan["parent"][1]},
        "saved_at": _now(),
        "git": receipts.git_commit(Path(receipts.__file__).parent).get("commit"),
        "files": hashes,
        "bytes": dict(sorted(sizes.items())),
        "bytes_by_part": parts,
    }
    manifest["files_sha256"] = sha256_json(manifest["files"])
    tmp = Path(tempfile.mkdtemp(dir=to.parent, prefix=f".{to.name}.tmp-"))
    try:
        for name, path in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            try:
                shutil.copyfile(path, tmp / name)
            except FileNotFoundError:
                raise SittingError(f"{path} disappeared while it was copied (a run still "
                                   "training rotated its checkpoints): save again") from None
            if sha256_file(tmp / name) != manifest["files"][name]:  # changed while copied
                raise SittingError(f"{path} changed while it was copied (a run still "
                                   "training rewrote it): save again")
        write_json(tmp / MANIFEST, manifest)
        if to.exists():
            old = to.with_name(f".{to.name}.old-{os.getpid()}")
            to.rename(old)
            tmp.rename(to)
            shutil.rmtree(old)
        else:
            tmp.rename(to)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def _check_target(to: Path) -> None:
    """`to` is replaced: it must be absent, empty, or an earlier sitting folder."""
    if not to.exists():
        return
    if not to.is_dir():
        raise SittingError(f"{to} is a file, not a sitting folder")
    if not any(to.iterdir()):
        return
    doc = _read_manifest(to, quiet=True)
    if doc is None:
        raise SittingError(f"{to} holds files but no sitting {MANIFEST}: save replaces the "
                           "folder's content, so it refuses a folder it did not write; pick "
                           "another --to")


# --- restore ---------------------------------------------------------------------------------

def _read_manifest(folder: Path, quiet: bool = False) -> dict[str, Any] | None:
    path = Path(folder) / MANIFEST
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        if quiet:
            return None
        raise SittingError(f"{path} is missing or not JSON: {folder} is not a sitting folder "
                           "(python train/sitting.py save writes one)") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        if quiet:
            return None
        raise SittingError(f"{path} is not a sitting manifest (kind {KIND!r})")
    return doc


def verify(folder: Path) -> dict[str, Any]:
    """The manifest after every listed file is checked; SittingError names every missing file
    and every sha256 mismatch."""
    folder = Path(folder)
    doc = _read_manifest(folder)
    files = doc.get("files") or {}
    problems = []
    if doc.get("files_sha256") != sha256_json(files):
        problems.append(f"{MANIFEST}'s file list does not match its files_sha256")
    for name, want in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif (got := sha256_file(path)) != want:
            problems.append(f"{name} has sha256 {got[:12]}…, the manifest says {want[:12]}…")
    if problems:
        raise SittingError(f"{folder} does not verify, nothing restored: " + "; ".join(problems)
                           + " (check out the committed folder again: git checkout -- "
                           f"{shlex.quote(str(folder))})")
    return doc


def restore(folder: Path, run_dir: Path | None = None, parent_dir: Path | None = None) -> str:
    """Put a saved checkpoint back so that the same train command resumes; returns what was
    done. Verifies first: on any problem nothing is written."""
    folder = Path(folder)
    doc = verify(folder)
    if doc.get("mode") != "exact":
        raise SittingError(
            f"{folder} holds only the adapter of {doc.get('stage')} at step "
            f"{doc.get('global_step')} (saved with --adapter-only): no run resumes from it "
            "exactly, and train/run.py --parent-run needs a finished run (receipt.json naming "
            "the parent stage, adapter files equal to its record), so it cannot warm-start a "
            f"stage either; its adapter is {folder / doc['checkpoint'] / 'adapter_model.safetensors'}"
            " (train/README.md \"Training across sittings\")")
    run_dir = Path(run_dir or doc["run"])
    files: dict[str, str] = doc["files"]
    ckpt_name = doc["checkpoint"]
    saved_cfg = json.loads((folder / CONFIG).read_text("utf-8"))
    identity = ("stage", "config_sha256", "base_weights_sha256", "parent_receipt_sha256")

    # what is there already
    if (run_dir / receipts.RECEIPT).is_file():
        raise SittingError(f"{run_dir} holds a finished run ({receipts.RECEIPT}); nothing to "
                           "resume there: restore into another --run or remove it")
    if (run_dir / CONFIG).is_file():
        local = json.loads((run_dir / CONFIG).read_text("utf-8"))
        differs = [k for k in identity if local.get(k) != saved_cfg.get(k)]
        if differs:
            raise SittingError(f"{run_dir} holds a run with another {', '.join(differs)} than "
                               f"{folder}: remove it or restore into another --run")
        have = checkpoints(run_dir)
        if have and step_of(have[-1]) >= doc["global_step"]:
            return (f"{run_dir} already has {have[-1].name} (the saved one is {ckpt_name}): "
                    "nothing restored")

    parent = doc.get("parent")
    parent_target = None
    if parent:
        parent_target = Path(parent_dir or parent["run_dir"])
        there = parent_target / receipts.RECEIPT
        if there.is_file():
            if sha256_file(there) != parent["receipt_sha256"]:
                raise SittingError(f"{parent_target} holds another run of the parent than the "
                                   f"one {ckpt_name} was trained from (receipt sha256 "
                                   f"{parent['receipt_sha256'][:12]}…): move it aside")
            parent_target = None  # the same parent is there already (lineage checks its adapter)
        elif parent_target.exists() and any(parent_target.iterdir()):
            raise SittingError(f"{parent_target} holds an unfinished run, not the parent "
                               f"{ckpt_name} was trained from: move it aside")

    # write: each folder complete in a temporary sibling first, then renamed into place
    if parent_target is not None:
        _place(folder, {n[len("parent/"):]: n for n in files if n.startswith("parent/")},
               parent_target)
    ckpt_dir = run_dir / "checkpoints" / ckpt_name
    _place(folder, {n[len(ckpt_name) + 1:]: n for n in files if n.startswith(ckpt_name + "/")},
           ckpt_dir)
    for name in (CONFIG, SITTINGS):
        if name in files:
            shutil.copyfile(folder / name, run_dir / name)
    return (f"restored {ckpt_dir} (step {doc['global_step']})"
            + (f" and the parent run {parent_target}" if parent_target else ""))


def _place(folder: Path, names: dict[str, str], target: Path) -> None:
    """Copy `folder/<source>` to `target/<name>` for every (name, source), replacing `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.tmp-"))
    try:
        for name, source in names.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(folder / source, tmp / name)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --- command line ----------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python train/sitting.py",
        description="Save a stage run's latest checkpoint to the tree, or restore it, so that a "
        "training chain spans sittings (train/README.md \"Training across sittings\").")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("save", help="copy the latest checkpoint (+ records, + a warm start's "
                       "parent run) into a folder of the tree, with sha256s; replaces the folder")
    s.add_argument("--run", required=True, help="the stage's run folder, e.g. runs/general-a")
    s.add_argument("--to", required=True, help="folder in the tree, e.g. receipts/sitting/general-a")
    s.add_argument("--max-mb", type=float, default=DEFAULT_MAX_MB,
                   help=f"refuse when the checkpoint and records would take more (MB = 10^6 "
                   f"bytes; default {DEFAULT_MAX_MB:g}); a warm start's parent run comes on top")
    s.add_argument("--adapter-only", action="store_true",
                   help="store only the adapter (and the trainer state): small, but no exact "
                   "resume (the optimizer moments and the schedule position are lost)")
    r = sub.add_parser("restore", help="verify a saved folder's sha256s and put its checkpoint "
                       "back, so the same train/run.py command resumes")
    r.add_argument("--from", dest="source", required=True, help="the saved folder")
    r.add_argument("--run", help="run folder to restore into (default: the one it was saved from)")
    r.add_argument("--parent-run", help="where the parent's run goes (default: where it was)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "save":
            doc = save(Path(args.run), Path(args.to), args.max_mb, args.adapter_only)
            parts = doc["bytes_by_part"]
            print(f"sitting: saved {doc['checkpoint']} of {doc['stage']} ({doc['mode']}) to "
                  f"{args.to}: {_mb(parts['total'])} (" + ", ".join(
                      f"{k} {_mb(v)}" for k, v in parts.items()
                      if v and k not in ("limited", "total")) + ")")
            print(f"sitting: commit it: git add {shlex.quote(args.to)} && git commit -m "
                  f"'sitting: {doc['stage']} step {doc['global_step']}'")
        else:
            print("sitting: " + restore(Path(args.source), args.run and Path(args.run),
                                        args.parent_run and Path(args.parent_run)))
            print("sitting: now give the same python train/run.py command: it resumes there")
    except SittingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
