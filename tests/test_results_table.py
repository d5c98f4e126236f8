"""The README's results block (`eval/results.py`): the committed README must match the committed
receipts (so CI fails when they drift), and the rendering is checked on a real evaluator summary
(rules arms named base, student and rules on a tiny corpus, merged into a receipt with
`--into-receipt`)."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memworker.eval import results as R
from memworker.eval.cli import main as eval_main

REPO = Path(__file__).resolve().parents[1]


def test_committed_readme_matches_committed_receipts():
    problem = R.check(REPO / "README.md", REPO / "receipts")
    assert problem is None, problem


def test_entry_script_checks_the_committed_readme():
    out = subprocess.run([sys.executable, "eval/results.py", "--check", "README.md"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def receipts(tmp_path_factory):
    """A receipts folder whose receipt holds a real summary of the tiny corpus's test split."""
    from tests.fixtures.tiny import build_tiny_corpus

    root = tmp_path_factory.mktemp("results")
    corpus = build_tiny_corpus(root / "corpus")
    folder = root / "receipts"
    folder.mkdir()
    receipt = folder / R.RELEASE
    receipt.write_text(json.dumps({"name": "tiny-release", "version": "9.9.9",
                                   "created_utc": "2026-01-02T03:04:05+00:00",
                                   "tools": {"git": {"commit": "abcdef1234567"}},
                                   "lineage": [{"stage": "general", "git_commit": "1234567aaa"}],
                                   "student": {"stage": "general"}}), "utf-8")
    argv = ["--arm", "base=rules", "--arm", "student=rules", "--arm", "rules", "--set", "test",
            "--corpus", str(corpus), "--out", str(root / "run"), "--resamples", "200",
            "--max-tokens", "300", "--no-plots", "--no-progress", "--into-receipt", str(receipt)]
    saved = sys.argv
    sys.argv = ["eval/run.py", *argv]     # the summary records the process's command line
    try:
        assert eval_main(argv) == 0
    finally:
        sys.argv = saved
    return folder


def _summary(folder: Path) -> dict:
    return json.loads((folder / R.RELEASE).read_text())["evaluation"]["test"]


def _with_sets(folder: Path, tmp_path: Path, sets: dict) -> Path:
    out = tmp_path / "receipts"
    out.mkdir()
    doc = json.loads((folder / R.RELEASE).read_text())
    doc["evaluation"] = sets
    (out / R.RELEASE).write_text(json.dumps(doc), "utf-8")
    return out


def test_block_from_a_real_summary(receipts):
    s = _summary(receipts)
    block = R.render(receipts)
    lines = block.splitlines()
    assert lines[0].startswith("Release `tiny-release` 9.9.9, exported 2026-01-02 at commit "
                               "abcdef1; student = stage `general`")
    assert "trained at commit 1234567" in lines[0]
    header = next(x for x in lines if x.startswith("**Set `test`**"))
    manifest = s["config"]["corpus"]["manifest_sha256"]
    assert f"manifest `{manifest[:12]}`" in header and "max tokens 300" in header
    assert f"{s['rows']} " in header and "limit none" in header
    assert "arms graded: base, student, rules" in header
    assert any(x.startswith("Command (at commit ") and "`python eval/run.py --arm base=rules "
               "--arm student=rules --arm rules --set test" in x for x in lines)
    table_head = "| task: metric | n rows | base | student | rules | student − base | " \
                 "student − rules |"
    assert table_head in lines
    e = s["metrics"]["rules"]["reflect"]["metrics"]["reflect_correct"]
    row = next(x for x in lines if x.startswith("| reflect: reflect_correct |"))
    want = (f"{e['value']:.2f} [{e['ci'][0]:.2f}, {e['ci'][1]:.2f}] "
            f"({e['num']:g}/{e['den']:g})")
    assert row.count(want) == 3 and row.endswith("| +0.00 [+0.00, +0.00] | +0.00 [+0.00, "
                                                 "+0.00] |")
    assert f"| {e['n_rows']} |" in row
    f1 = next(x for x in lines if x.startswith("| extract: extract_f1 |"))
    assert "mean of" in f1
    for label in ("secrets retained", "injections obeyed", "invented clock times"):
        assert any(x.startswith(f"| safety: {label}") for x in lines), label
    assert "Live acceptance" not in block          # no live-summary.json in this folder
    assert "**Issue-15 targets for the student**" in block
    # the tiny corpus has no held-out or natural set: every target says so
    targets = lines[lines.index("| target | measured | |") + 2:]
    assert targets and all(x.endswith("| not measured |") for x in targets), targets


def test_sets_in_order_and_targets_computed(receipts, tmp_path):
    s = _summary(receipts)
    held, nat = copy.deepcopy(s), copy.deepcopy(s)
    held["config"]["set"], nat["config"]["set"] = "heldout", "natural"
    m = held["metrics"]["student"]
    m["all"]["metrics"]["schema_first_try"].update(value=0.98, num=49, den=50)
    m["consolidate"]["metrics"]["consolidate_correct"].update(value=11 / 16, num=11, den=16)
    m["reflect"]["metrics"]["reflect_correct"].update(value=14 / 16, num=14, den=16)
    held["safety"]["student"]["injections_obeyed"] = 1
    nat["arms"] = ["student", "rules"]               # like the first release: no base arm
    folder = _with_sets(receipts, tmp_path, {"natural": nat, "zz": s, "heldout": held})
    block = R.render(folder)
    order = [x.split("`")[1] for x in block.splitlines() if x.startswith("**Set `")]
    assert order == ["heldout", "natural", "zz"]
    verdict = {t: ok for t, _, ok in R.targets({"heldout": held, "natural": nat})}
    assert verdict["held-out schema accepted first try ≥ 98 %"] is True
    assert verdict["held-out consolidate_correct ≥ 12/16"] is False
    assert verdict["held-out reflect_correct ≥ 14/16"] is True
    assert verdict["held-out zero retained secrets and obeyed injections"] is False
    assert verdict["natural extract_support: student above base and rules"] is None
    assert "base not evaluated" in block
    nat["arms"] = ["base", "student", "rules"]
    for arm, v in (("base", 0.1), ("rules", 0.2), ("student", 0.3)):
        nat["metrics"][arm]["extract"]["metrics"]["extract_support"]["value"] = v
    verdict = {t: ok for t, _, ok in R.targets({"heldout": held, "natural": nat})}
    assert verdict["natural extract_support: student above base and rules"] is True
    nat["metrics"]["rules"]["extract"]["metrics"]["extract_support"]["value"] = 0.3
    verdict = {t: ok for t, _, ok in R.targets({"heldout": held, "natural": nat})}
    assert verdict["natural extract_support: student above base and rules"] is False
    m["all"]["metrics"]["schema_first_try"]["value"] = 0.979
    assert R.targets({"heldout": held})[0][2] is False


def test_live_table(receipts, tmp_path):
    folder = tmp_path / "with-live"
    shutil.copytree(receipts, folder)
    # the first release's live run (its receipts/live-summary.json, kept as a fixture when that
    # release's receipts were replaced)
    live = json.loads((REPO / "tests" / "fixtures" / "live-summary-release1.json").read_text())
    (folder / R.LIVE).write_text(json.dumps(live), "utf-8")
    lines = R.render(folder).splitlines()
    for arm, a in live["arms"].items():
        row = (f"| {arm} | {a['passed']}/{a['total']} | {a['isolated']['passed']}/"
               f"{a['isolated']['total']} |")
        assert row in lines
    head = next(x for x in lines if x.startswith("**Live acceptance**"))
    assert f"{len(live['scenarios'])} scripted scenarios" in head
    assert "student NO" in head    # the tiny receipt evaluated no GGUF: not the live run's


def test_write_and_check(receipts, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# t\n\nbefore\n\n{R.BEGIN}\n| old | table |\n{R.END}\n\nafter\n")
    assert R.main(["--receipts", str(receipts), "--check", str(readme)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--write" in err and "differs" in err
    assert R.main(["--receipts", str(receipts), "--write", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("# t\n\nbefore\n\n") and text.endswith(f"{R.END}\n\nafter\n")
    assert "| old | table |" not in text and R.render(receipts) in text
    assert R.main(["--receipts", str(receipts), "--check", str(readme)]) == 0
    readme.write_text(text.replace("| rules |", "| rules  |", 1))   # one typed character
    assert R.main(["--receipts", str(receipts), "--check", str(readme)]) == 1
    readme.write_text(text)
    drifted = tmp_path / "drifted"
    shutil.copytree(receipts, drifted)                # a receipt changes, the README does not
    doc = json.loads((drifted / R.RELEASE).read_text())
    doc["evaluation"]["test"]["safety"]["student"]["secrets_retained"] = 1
    (drifted / R.RELEASE).write_text(json.dumps(doc), "utf-8")
    assert R.main(["--receipts", str(drifted), "--check", str(readme)]) == 1
    assert R.main(["--receipts", str(receipts), "--check", str(readme)]) == 0
    capsys.readouterr()


def test_errors_say_what_to_do(receipts, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    assert R.main(["--receipts", str(receipts), "--check", str(readme)]) == 2
    assert "results markers" in capsys.readouterr().err
    assert R.main(["--receipts", str(tmp_path / "nope")]) == 2
    assert "export a release first" in capsys.readouterr().err
    broken = _with_sets(receipts, tmp_path, ["heldout"])
    assert R.main(["--receipts", str(broken)]) == 2
    assert "not a mapping" in capsys.readouterr().err


def test_an_unevaluated_release_says_so_and_shows_no_figures(receipts, tmp_path, capsys):
    """A release exported and not yet evaluated (scripts/release.sh spans sittings) gets a block
    that names it and says there are no figures yet, never a stale table."""
    empty = _with_sets(receipts, tmp_path, {})
    assert R.main(["--receipts", str(empty)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Release `") and "**Not evaluated yet.**" in out
    assert "|" not in out and "targets" not in out
