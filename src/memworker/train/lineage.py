"""Parent-run checks for a warm start: the receipt exists, names the expected stage, was trained
on the same base (key + weights sha256), and its adapter files still hash to what it recorded."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from memworker.hashing import sha256_file, sha256_json
from memworker.receipts import (
    ADAPTER_DIR,
    RECEIPT,
    RELEASE_RECEIPT,
    adapter_differences,
    adapter_files,
)
from memworker.registry import PreparedBase


class LineageError(ValueError):
    """The warm-start parent cannot be used; the message says what to run instead."""


class MissingParent(LineageError):
    """The parent stage has no finished run (no receipt)."""


def adapter_record(run_dir: Path) -> dict[str, Any]:
    """The receipt's `adapter` entry: each file's sha256 and one digest of them all."""
    files = adapter_files(run_dir)
    return {"files": files, "sha256": sha256_json(files)}


def check_parent(parent_dir: Path, parent_stage: str, base: PreparedBase,
                 rerun_hint: str) -> tuple[dict[str, Any], str]:
    """(parent receipt, sha256 of its bytes) after all checks; raises LineageError."""
    receipt_path = parent_dir / RECEIPT
    if not receipt_path.is_file():
        raise MissingParent(f"stage {parent_stage} has no finished run in {parent_dir} "
                            f"(no {RECEIPT}); run `{rerun_hint}` first")
    receipt = json.loads(receipt_path.read_text("utf-8"))
    if receipt.get("stage") != parent_stage:
        raise LineageError(f"{receipt_path} is a receipt of stage {receipt.get('stage')!r}, "
                           f"not {parent_stage!r}")
    theirs = receipt.get("base", {})
    if (theirs.get("key"), theirs.get("weights_sha256")) != (base.model.key, base.sha256):
        raise LineageError(
            f"{parent_dir} was trained on base {theirs.get('key')} (weights sha256 "
            f"{str(theirs.get('weights_sha256'))[:12]}…), this run uses {base.model.key} "
            f"({base.sha256[:12]}…): rerun the parent with `{rerun_hint}` (add --fresh to "
            "replace it) or pick another --runs-dir")
    recorded = receipt.get("adapter", {}).get("files", {})
    actual = adapter_files(parent_dir) if (parent_dir / ADAPTER_DIR).is_dir() else {}
    if not recorded or recorded != actual:
        lines = adapter_differences(recorded, actual, parent_dir) or ["no files recorded"]
        raise LineageError(f"the adapter in {parent_dir / ADAPTER_DIR} is missing or differs "
                           f"from its receipt: {'; '.join(lines)}; restore the committed files "
                           f"or rerun `{rerun_hint} --fresh`")
    return receipt, sha256_file(receipt_path)


def committed_receipts() -> Path:
    """`$MEMWORKER_COMMITTED_RECEIPTS`, else the repository's `receipts/` next to the source
    tree: where the committed release receipt is (`parent_from: release`)."""
    env = os.environ.get("MEMWORKER_COMMITTED_RECEIPTS")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "receipts"


def release_parent(parent_stage: str, receipts_dir: Path | None = None
                   ) -> tuple[Path, dict[str, Any]]:
    """(the committed release's student run folder, the release receipt) for a stage whose
    parent comes from the release (`StageConfig.parent_from` "release"): the receipt's
    `student.run_dir` (relative to the folder above receipts/) must be a run of `parent_stage`
    whose receipt has the sha256 the release records, or a run whose own parent is one (a
    release whose student is a run of the stage being trained: that stage warm-starts from the
    student's parent, the committed chain's run before it; its `run_dir`, relative to the same
    folder, checked against the sha256 the student's receipt records). The adapter itself is
    checked by `check_parent` as any parent's is. LineageError (MissingParent when there is no
    release receipt) with what to do instead."""
    receipts_dir = committed_receipts() if receipts_dir is None else receipts_dir
    path = receipts_dir / RELEASE_RECEIPT
    instead = ("or train the parent stage here with --parent-from stage (the whole chain: "
               "python train/run.py --stage general --profile cpu --parent-from stage)")
    if not path.is_file():
        raise MissingParent(f"no committed release receipt at {path} to warm-start from; run "
                            f"from a clone of the repository {instead}")
    doc = json.loads(path.read_text("utf-8"))
    student = doc.get("student") or {}
    if not student.get("run_dir"):
        raise LineageError(f"{path} names no student run (student.run_dir) {instead}")
    run_dir = _committed_run(receipts_dir, student["run_dir"], student.get("receipt_sha256"),
                             "the committed release's student", instead)
    if student.get("stage") == parent_stage:
        return run_dir, doc
    # a release whose student is a run of the stage being trained (release v4: `general`):
    # the stage warm-starts from the student's own parent, the chain's `parent_stage` run
    parent = json.loads((run_dir / RECEIPT).read_text("utf-8")).get("parent") or {}
    if parent.get("stage") != parent_stage or not parent.get("run_dir"):
        raise LineageError(f"the committed release's student ({student['run_dir']}) is a run "
                           f"of stage {student.get('stage')!r}, not {parent_stage!r}, and its "
                           f"parent is not one either: this stage cannot warm-start from it; "
                           f"{instead}")
    return _committed_run(receipts_dir, parent["run_dir"], parent.get("receipt_sha256"),
                          "the committed release student's parent", instead), doc


def release_parent_words(parent_stage: str, release: dict[str, Any]) -> str:
    """What the run `release_parent` returned is, in the main job's messages: the committed
    release's student itself, or (a release whose student is a run of the stage being trained)
    the chain's `parent_stage` run its student warm-started from."""
    student = release.get("student") or {}
    if student.get("stage") == parent_stage:
        return "the committed release's student"
    return (f"the committed release chain's {parent_stage} run (the parent of its student, "
            f"{student.get('run_dir')})")


def _committed_run(receipts_dir: Path, rel: str, sha: str | None, what: str,
                   instead: str) -> Path:
    """The committed run folder `rel` (relative to the folder above receipts/), its receipt
    present and with the sha256 `sha` when one is recorded."""
    run_dir = receipts_dir.parent / rel
    receipt = run_dir / RECEIPT
    if not receipt.is_file():
        raise MissingParent(f"{what} run {run_dir} has no {RECEIPT} (restore it with "
                            f"`git checkout -- {rel}`) {instead}")
    if sha and sha256_file(receipt) != sha:
        raise LineageError(f"{receipt} differs from the receipt the release records (sha256 "
                           f"{sha[:12]}…); restore it with `git checkout -- {rel}` {instead}")
    return run_dir
