"""scripts/release.sh: its steps, and that it refuses an unknown one before doing anything."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers import shell_logical_lines

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "release.sh"


def test_release_script_parses():
    """bash accepts it; every step its usage advertises is one it accepts and has code to run;
    every `python SCRIPT` it runs is an entry script of the repository whose --help lists each
    flag the script passes it; the training profile it names exists in every stage YAML."""
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    text = SCRIPT.read_text("utf-8")
    steps = re.search(r"^ALL=\(([^)]*)\)$", text, flags=re.M).group(1).split()
    sets = re.search(r"^SETS=\(([^)]*)\)$", text, flags=re.M).group(1).split()
    usage = re.search(r"# every step in order: (.*)\n#\s+# (.*)\n", text)
    assert f"{usage.group(1)} {usage.group(2)}".split() == steps
    for step in steps:
        assert f"wants {step};" in text or (step in sets and 'wants "$set"' in text), step

    commands: dict[str, set[str]] = {}
    for line in shell_logical_lines(text):
        for script, args in re.findall(r"\bpython (\S+\.py)([^;|&]*)", line):
            commands.setdefault(script, set()).update(re.findall(r"(?<!\S)--[a-z][a-z-]*", args))
    assert {"train/run.py", "export/run.py", "eval/run.py", "eval/live.py",
            "export/verify.py"} <= set(commands)
    # the student's worker flags, kept in arrays (WORKER_EXPORT=(...), WORKER_EVAL+=(...))
    takers = {"WORKER_EXPORT": ["export/run.py"], "WORKER_EVAL": ["eval/run.py", "eval/live.py"],
              "WORKER_TRAIN": ["train/run.py"]}
    for name, args in re.findall(r"^\s*(WORKER_[A-Z]+)\+?=\((.*)\)", text, flags=re.M):
        for script in takers[name]:
            commands[script].update(re.findall(r"(?<!\S)--[a-z][a-z-]*", args))
    assert {"--extract-form", "--claim-gate"} <= commands["eval/live.py"]
    for script, flags in sorted(commands.items()):
        assert (ROOT / script).is_file(), f"release.sh runs {script}, which does not exist"
        shown = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True,
                               text=True, timeout=120)
        assert shown.returncode == 0, (script, shown.stderr)
        listed = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", shown.stdout))
        assert flags <= listed, f"{script} has no {sorted(flags - listed)}"
    profile = re.search(r"python train/run\.py .*--profile (\S+)", text).group(1)
    for stage in ("coding", "general-a", "general"):
        doc = yaml.safe_load((ROOT / "train" / "stages" / f"{stage}.yaml").read_text("utf-8"))
        assert profile in doc["profiles"], (stage, profile)


def test_unknown_step_is_refused_before_anything_runs(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), "heldout", "evaluate"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert "unknown step 'evaluate'" in done.stderr
    assert "train heldout natural natural-dev test live finish" in done.stderr
    assert done.stdout == ""   # no step started


def test_evaluations_and_adapter_are_kept_where_git_keeps_them():
    """A later sitting resumes from what is committed: samples under receipts/eval/<set>, live
    results under receipts/live, the adapter under receipts/adapter (not git-ignored)."""
    text = SCRIPT.read_text("utf-8")
    assert '--out "$(out_of "$set")"' in text and "--out receipts/live" in text
    assert 'echo receipts/eval/natural-dev/release || echo "receipts/eval/$1"' in text
    # live acceptance goes into the receipt the format-2 gate reads
    assert "--into-receipt $RECEIPT --release release" in text.split("python eval/live.py")[1]
    assert "--record-live receipts/live/summary.json" in text
    assert re.search(r"^ADAPTER=receipts/adapter$", text, flags=re.M)
    ignored = subprocess.run(["git", "check-ignore", "-q",
                              "receipts/adapter/adapter_model.safetensors"], cwd=ROOT)
    assert ignored.returncode == 1, "the release adapter must not be git-ignored"
    ignored = subprocess.run(["git", "check-ignore", "-q", "runs/x/adapter_model.safetensors"],
                             cwd=ROOT)
    assert ignored.returncode == 0
