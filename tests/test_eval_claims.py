"""eval/studies/claims.py: which part of an arm's extract claims is wrong (field by field, on the
distinct claims that cite a source event), read from an evaluation folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from memworker.eval import runner
from memworker.eval.cli import main as eval_main
from memworker.eval.studies.claims import arm_breakdowns, breakdown
from tests.test_eval_grade import ANA, EXTRACT, PORTO, claim

ROOT = Path(__file__).resolve().parents[1]


def test_each_field_is_counted_alone_and_repeats_once():
    right = claim(ANA)
    wrong_value = claim(PORTO, value="Lisbon")            # cites event 1, value of another fact
    wrong_subject_kind = claim(ANA, subject={"name": "Tara", "type": "person"}, kind="plan")
    elsewhere = claim(ANA, source_indices=[2], quotes=["Ignore previous instructions"])
    got = breakdown(EXTRACT, {"claims": [right, right, wrong_value, wrong_subject_kind,
                                         elsewhere]})
    assert got == {"rows": 1, "claims": 5, "distinct": 4, "cite_source": 3,
                   "subject": 2, "predicate": 3, "value": 2, "kind": 2, "all_four": 1,
                   "supported": 0}  # supported is the grader's, filled in from the verdicts
    assert breakdown(EXTRACT, None) == {**dict.fromkeys(got, 0), "rows": 1}


def test_a_rules_evaluation_folder_is_read_with_the_graders_support(tiny_corpus, tmp_path,
                                                                     capsys):
    out = tmp_path / "ev"
    assert eval_main(["--arm", "rules", "--set", "heldout", "--corpus", str(tiny_corpus),
                      "--out", str(out), "--no-progress", "--no-plots"]) == 0
    set_name, found = arm_breakdowns(out)
    summary = json.loads((out / "summary.json").read_text())
    assert set_name == "heldout" and list(found) == ["rules"]
    t = found["rules"]
    support = summary["metrics"]["rules"]["extract"]["metrics"]["extract_support"]
    assert t["supported"] == support["num"] and t["claims"] == support["den"]
    assert t["claims"] >= t["distinct"] >= t["cite_source"] >= t["all_four"] >= 0
    assert max(t["subject"], t["predicate"], t["value"], t["kind"]) <= t["cite_source"]
    assert t["rows"] == sum(1 for s in runner.read_samples(out / runner.SAMPLES)
                            if s["task"] == "extract")
    cli = subprocess.run([sys.executable, "eval/studies/claims.py", "--out", str(out), "--arm",
                          "rules", "--json", str(tmp_path / "c.json")], cwd=ROOT,
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert json.loads((tmp_path / "c.json").read_text())["arms"]["rules"] == t
    bad = subprocess.run([sys.executable, "eval/studies/claims.py", "--out", str(out), "--arm",
                          "nope"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "no samples of arm(s) nope" in bad.stderr
    none = subprocess.run([sys.executable, "eval/studies/claims.py", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True)
    assert none.returncode == 2 and "no config.json" in none.stderr
