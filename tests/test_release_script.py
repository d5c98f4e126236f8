"""scripts/release.sh: its steps, and that it refuses an unknown one before doing anything."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "release.sh"


def test_release_script_parses():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_unknown_step_is_refused_before_anything_runs(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), "heldout", "evaluate"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert "unknown step 'evaluate'" in done.stderr
    assert "train heldout natural test live finish" in done.stderr
    assert done.stdout == ""   # no step started


def test_evaluations_and_adapter_are_kept_where_git_keeps_them():
    """A later sitting resumes from what is committed: samples under receipts/eval/<set>, live
    results under receipts/live, the adapter under receipts/adapter (not git-ignored)."""
    text = SCRIPT.read_text("utf-8")
    assert '--out "receipts/eval/$set"' in text and "--out receipts/live" in text
    assert re.search(r"^ADAPTER=receipts/adapter$", text, flags=re.M)
    ignored = subprocess.run(["git", "check-ignore", "-q",
                              "receipts/adapter/adapter_model.safetensors"], cwd=ROOT)
    assert ignored.returncode == 1, "the release adapter must not be git-ignored"
    ignored = subprocess.run(["git", "check-ignore", "-q", "runs/x/adapter_model.safetensors"],
                             cwd=ROOT)
    assert ignored.returncode == 0
