"""Every adapter a committed receipt names is committed: tracked by git, with the sha256 its
receipt records (issue 45). Checked through git (`git ls-files`, the index's blob), never the
disk: release v3's adapter lay on one machine's disk, ignored, and its release could not be
rebuilt from a clone.

A run folder a receipt names is one of: a stage run committed under `receipts/` (its
`receipt.json` beside `adapter/`), a release receipt's `student.run_dir`, and `receipts/adapter/`
(scripts/release.sh's copy of the trained student, named by a stage receipt copy). A run folder
whose adapter is not committed carries an `ADAPTER-NOT-COMMITTED.md` saying why (a compared arm
kept only as a record, a release archived as not rebuildable); the shipped release may never name
one.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from memworker.receipts import (
    ADAPTER_NOT_COMMITTED,
    adapter_problems,
    git_blob_sha256,
    git_bytes,
    tracked,
)

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the git checkout")


def _receipts() -> list[str]:
    return sorted(p for p in tracked(ROOT, "receipts") if p.endswith(".json"))


def _receipt(rel: str) -> dict:
    doc = json.loads(git_bytes(ROOT, rel))
    return doc if isinstance(doc, dict) else {}


def _adapters() -> dict[tuple[str, str], str]:
    """{(adapter's folder, the receipt holding its files' sha256): what names it}: every committed
    run folder (`receipt.json` with an adapter record) and every release receipt's student (its
    run folder under receipts/, or the release's `adapter/` beside its stage receipt copy)."""
    out: dict[tuple[str, str], str] = {}
    for rel in _receipts():
        doc = _receipt(rel)
        if rel.endswith("/receipt.json") and (doc.get("adapter") or {}).get("files"):
            out.setdefault((str(Path(rel).parent), rel), rel)
        if rel.endswith("release-receipt.json") and isinstance(doc.get("student"), dict):
            student, here = doc["student"], str(Path(rel).parent)
            run_dir = student.get("run_dir") or ""
            if run_dir.startswith("receipts/"):
                out.setdefault((run_dir, f"{run_dir}/receipt.json"), rel)
            else:  # scripts/release.sh's copy: <dir>/adapter/ beside <dir>/<stage>-receipt.json
                out.setdefault((here, f"{here}/{student['stage']}-receipt.json"), rel)
    return out


def test_every_named_adapter_is_tracked_with_its_receipts_sha256():
    adapters = _adapters()
    assert ("receipts/proof/e20", "receipts/proof/e20/receipt.json") in adapters  # release v2
    assert ("receipts/v1", "receipts/v1/general-receipt.json") in adapters  # release v1
    problems = {}
    for (folder, receipt), named_by in adapters.items():
        if f"{folder}/{ADAPTER_NOT_COMMITTED}" in tracked(ROOT, folder):
            continue
        found = adapter_problems(ROOT, folder, receipt)
        if found:
            problems[folder] = f"(named by {named_by}) " + "; ".join(found)
    assert not problems, problems


def test_every_release_names_its_adapters_receipt():
    """A release receipt's student adapter sha256 is its stage receipt's."""
    for rel in _receipts():
        if not rel.endswith("release-receipt.json"):
            continue
        student = _receipt(rel)["student"]
        run_dir, here = student.get("run_dir") or "", str(Path(rel).parent)
        stage_receipt = (f"{run_dir}/receipt.json" if run_dir.startswith("receipts/")
                         else f"{here}/{student['stage']}-receipt.json")
        assert _receipt(stage_receipt)["adapter"]["sha256"] == student["adapter_sha256"], rel


def test_the_shipped_release_names_a_committed_adapter():
    student = _receipt("receipts/release-receipt.json")["student"]
    run_dir = student["run_dir"]
    folder = run_dir if run_dir.startswith("receipts/") else "receipts"
    receipt = (f"{run_dir}/receipt.json" if run_dir.startswith("receipts/")
               else f"receipts/{student['stage']}-receipt.json")
    assert f"{folder}/{ADAPTER_NOT_COMMITTED}" not in tracked(ROOT, folder)
    assert adapter_problems(ROOT, folder, receipt) == []


def test_gitignore_admits_adapters_by_folder_pattern():
    """A new proof run's adapter is not ignored: no file-by-file whitelist to forget."""
    for rel in ("receipts/proof/e99/adapter/adapter_model.safetensors",
                "receipts/adapter/adapter_model.safetensors",
                "receipts/v9/adapter/adapter_model.safetensors"):
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", rel], cwd=ROOT)
        assert ignored.returncode == 1, f"{rel} is ignored by .gitignore"
    still = subprocess.run(["git", "check-ignore", "-q", "--no-index",
                            "runs/x/adapter/adapter_model.safetensors"], cwd=ROOT)
    assert still.returncode == 0  # adapters outside receipts/ stay ignored


def test_the_check_fails_on_an_untracked_or_changed_adapter(tmp_path):
    """adapter_problems names the file, both hashes and the command: on a throwaway repo."""
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    run = tmp_path / "receipts" / "proof" / "x"
    (run / "adapter").mkdir(parents=True)
    weights = b"weights"
    (run / "adapter" / "adapter_config.json").write_text("{}")
    (run / "adapter" / "adapter_model.safetensors").write_bytes(weights)
    files = {"adapter_config.json": hashlib.sha256(b"{}").hexdigest(),
             "adapter_model.safetensors": hashlib.sha256(weights).hexdigest()}
    (run / "receipt.json").write_text(json.dumps({"adapter": {"files": files}}))
    git("add", "receipts/proof/x/receipt.json", "receipts/proof/x/adapter/adapter_config.json")
    problems = adapter_problems(tmp_path, "receipts/proof/x")
    assert len(problems) == 1 and "adapter_model.safetensors" in problems[0]
    assert "not tracked by git" in problems[0] and "git add -f" in problems[0]
    git("add", "-f", "receipts/proof/x/adapter/adapter_model.safetensors")
    assert adapter_problems(tmp_path, "receipts/proof/x") == []
    assert git_blob_sha256(tmp_path, "receipts/proof/x/adapter/adapter_model.safetensors") \
        == files["adapter_model.safetensors"]
    (run / "adapter" / "adapter_model.safetensors").write_bytes(b"other")
    git("add", "-f", "receipts/proof/x/adapter/adapter_model.safetensors")
    problems = adapter_problems(tmp_path, "receipts/proof/x")
    assert len(problems) == 1 and files["adapter_model.safetensors"] in problems[0]
    assert hashlib.sha256(b"other").hexdigest() in problems[0]
    (run / "receipt.json").write_text(json.dumps({"stage": "x"}))
    git("add", "receipts/proof/x/receipt.json")
    assert "records no adapter files" in adapter_problems(tmp_path, "receipts/proof/x")[0]
