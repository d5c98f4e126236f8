"""Parent-run checks for a warm start: the receipt exists, names the expected stage, was trained
on the same base (key + weights sha256), and its adapter files still hash to what it recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memworker.hashing import sha256_file, sha256_json
from memworker.receipts import ADAPTER_DIR, RECEIPT, adapter_differences, adapter_files
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
