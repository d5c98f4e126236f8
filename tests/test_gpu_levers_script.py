"""scripts/gpu_levers.sh (train/README "E20") and scripts/resume_vs_warmstart.sh (train/README
"Resume or warm start?"): each parses, refuses to start without OUT, and every flag it passes
`train/run.py` is one the trainer's parser accepts."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from memworker.pipeline import build_parser
from tests.helpers import shell_logical_lines

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {  # each script, and flags the parse must find in it
    "gpu_levers.sh": {"--stage", "--extract-form", "--decision-weight", "--qlora",
                      "--sitting-minutes", "--max-batch-tokens", "--gradient-checkpointing",
                      "--merged-days"},
    "resume_vs_warmstart.sh": {"--stage", "--extract-form", "--sitting-minutes", "--parent-run",
                               "--max-steps", "--lora-layers"},
}


def _flags(text: str) -> set[str]:
    """The `--flag`s of the arrays and `run` lines the script hands to train/run.py."""
    body = "\n".join(shell_logical_lines(text))
    handed = re.findall(r"^(?:COMMON|LEVER)=\((.*?)\)$", body, flags=re.M | re.S)
    handed += [line for line in body.splitlines()
               if re.match(r"\s*run \S+ ", line) or "train/run.py" in line]
    return {f for part in handed for f in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", part)}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_it_parses_and_passes_only_flags_the_trainer_accepts(name):
    script = ROOT / "scripts" / name
    subprocess.run(["bash", "-n", str(script)], check=True)
    flags = _flags(script.read_text("utf-8"))
    assert SCRIPTS[name] <= flags  # the parse found them
    known = {s for a in build_parser()._actions for s in a.option_strings}
    assert flags - known == set()


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_it_refuses_to_start_without_an_output_folder(name, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    done = subprocess.run(["bash", str(ROOT / "scripts" / name)], capture_output=True, text=True, env=env,
                          cwd=tmp_path)
    assert done.returncode != 0 and "OUT" in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written
