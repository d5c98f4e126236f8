"""The release gate (issue 15 item 4): verification fails when the student is worse than the base
on a task's main metric beyond its interval, or below the rules arm on extraction support, unless
the release receipt records a reasoned waiver; an unevaluated release fails unless allowed.

The release folders here are written by the export's own signing path (`release._finish`:
receipt, card, SHA256SUMS) around a placeholder GGUF file, and verified with `load=False`: the
gate needs no model (the real conversion and loading are tests/test_export.py's, slow). The
interval figures come from `memworker.eval.stats.paired_bootstrap` over per-row outcomes, as the
evaluator computes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memworker.eval import stats
from memworker.export import ExportError, gate, record_evaluation, record_waiver
from memworker.export import cli as ecli
from memworker.export import modelfile as mfile
from memworker.export import release as rel
from memworker.export.verify import verify_release

GGUF = "memworker-test-general-q8_0.gguf"
COMMITTED = Path(__file__).resolve().parents[1] / "receipts" / "release-receipt.json"


def make_release(tmp_path: Path) -> Path:
    out = tmp_path / "release"
    out.mkdir()
    (out / GGUF).write_bytes(b"GGUF placeholder (verified with load=False)")
    mfile.write(out / "Modelfile", f"./{GGUF}", end_of_turn="<|im_end|>",
                license_text="SPDX-License-Identifier: apache-2.0")
    # the committed release's receipt as the template (base, student, export settings), with
    # this folder's student GGUF and no evaluation yet
    receipt = json.loads(COMMITTED.read_text())
    receipt.update(lineage=[], evaluation=None, gate=None, artifacts={})
    receipt["student"] = {**receipt["student"], "gguf": GGUF}
    rel._finish(out, receipt, None, None)
    return out


def item(student: list[int], reference: list[int]) -> dict:
    """One paired comparison entry as `eval.summary.summarise` writes it (binary rows, one
    episode per row)."""
    pa, pb = [(x, 1) for x in student], [(x, 1) for x in reference]
    clusters = [f"e{i}" for i in range(len(student))]
    a, b = stats.ratio(pa), stats.ratio(pb)
    return {"a": a, "b": b, "diff": a - b, "n_rows": len(student), "n_episodes": len(student),
            "ci": stats.paired_bootstrap(pa, pb, clusters, resamples=400, seed=0)}


def summary(reflect_student: list[int], support_student: list[int]) -> dict:
    same = [1, 0] * 8
    base = {"extract": {"extract_f1": item(same, same)},
            "consolidate": {"consolidate_correct": item(same, same)},
            "reflect": {"reflect_correct": item(reflect_student, [1] * 16)}}
    rules = {"extract": {"extract_support": item(support_student, [1] * 12 + [0] * 4)}}
    return {"comparisons": [{"a": "student", "b": "base", "label": "student - base",
                             "tasks": base},
                            {"a": "student", "b": "rules", "label": "student - rules",
                             "tasks": rules}]}


GOOD_SUPPORT = [1] * 13 + [0] * 3
WORSE_REFLECT = [0] * 12 + [1] * 4   # 4/16 against the base's 16/16


def receipt(out: Path) -> dict:
    return json.loads((out / "release-receipt.json").read_text())


def test_student_worse_than_base_beyond_the_interval_fails_naming_task_and_set(tmp_path,
                                                                               capsys):
    out = make_release(tmp_path)
    record_evaluation(out, {"heldout": summary(WORSE_REFLECT, GOOD_SUPPORT)}, receipts_dir=None)
    problems = verify_release(out, None, load=False)
    assert len(problems) == 1
    assert "worse than base on reflect reflect_correct in set heldout beyond its 95 % " \
           "interval: student 0.250 vs base 1.000" in problems[0]
    assert "--waive heldout reflect_correct" in problems[0]
    g = receipt(out)["gate"]
    assert g["verdict"] == "fail"
    failing = [c for c in g["checks"] if c["status"] == "fail"]
    assert [(c["set"], c["task"], c["metric"]) for c in failing] == \
        [("heldout", "reflect", "reflect_correct")]
    assert failing[0]["ci"][1] < 0
    assert "| heldout | base | reflect | reflect_correct |" in (out / "README.md").read_text()
    assert ecli.verify_main([str(out), "--no-load", "--receipts-dir", ""]) == 1
    assert "verify: FAILED:" in capsys.readouterr().err


def test_worse_within_the_interval_passes(tmp_path):
    out = make_release(tmp_path)
    close = [1] * 15 + [0]  # 15/16 against 16/16: the interval reaches 0
    record_evaluation(out, {"heldout": summary(close, GOOD_SUPPORT)}, receipts_dir=None)
    reflect = next(c for c in receipt(out)["gate"]["checks"] if c["task"] == "reflect")
    assert reflect["diff"] < 0 <= reflect["ci"][1] and reflect["status"] == "ok"
    assert verify_release(out, None, load=False) == []


def test_below_the_rules_arm_on_extraction_support_fails(tmp_path):
    out = make_release(tmp_path)
    below = [1] * 11 + [0] * 5  # 11/16 against the rules arm's 12/16
    record_evaluation(out, {"heldout": summary([1] * 16, below)}, receipts_dir=None)
    problems = verify_release(out, None, load=False)
    assert len(problems) == 1 and "worse than rules on extract extract_support in set " \
        "heldout (below the rules floor)" in problems[0]


def test_a_reasoned_waiver_passes_and_is_recorded(tmp_path, capsys):
    out = make_release(tmp_path)
    record_evaluation(out, {"heldout": summary(WORSE_REFLECT, GOOD_SUPPORT)}, receipts_dir=None)
    assert ecli.main(["--out", str(out), "--receipts-dir", "", "--no-publish", "--waive",
                      "heldout", "reflect_correct", "reflection is not shipped in this release"]
                     ) == 0
    assert "release gate: pass" in capsys.readouterr().out
    g = receipt(out)["gate"]
    assert g["waivers"] == [{"metric": "reflect_correct", "set": "heldout",
                             "reason": "reflection is not shipped in this release"}]
    assert [c["status"] for c in g["checks"] if c["task"] == "reflect"] == ["waived"]
    assert verify_release(out, None, load=False) == []
    # a waiver for another set does not cover this one
    record_evaluation(out, {"heldout": summary(WORSE_REFLECT, GOOD_SUPPORT),
                            "test": summary(WORSE_REFLECT, GOOD_SUPPORT)}, receipts_dir=None)
    problems = verify_release(out, None, load=False)
    assert len(problems) == 1 and "in set test" in problems[0]


def test_an_empty_reason_is_refused(tmp_path):
    out = make_release(tmp_path)
    record_evaluation(out, {"heldout": summary(WORSE_REFLECT, GOOD_SUPPORT)}, receipts_dir=None)
    before = (out / "SHA256SUMS").read_bytes()
    with pytest.raises(ExportError, match="the reason is empty"):
        record_waiver(out, "heldout", "reflect_correct", "   ", receipts_dir=None)
    with pytest.raises(ExportError, match="not a gated metric"):
        record_waiver(out, "heldout", "reflect_answer", "because", receipts_dir=None)
    with pytest.raises(ExportError, match="set 'natural' is not evaluated"):
        record_waiver(out, "natural", "reflect_correct", "because", receipts_dir=None)
    assert (out / "SHA256SUMS").read_bytes() == before
    # a hand-written empty reason in a receipt does not waive anything either
    doc = receipt(out)
    doc["gate"]["waivers"] = [{"metric": "reflect_correct", "set": "heldout", "reason": ""}]
    found = gate.problems(doc)
    assert any("the reason is empty" in p for p in found)
    assert any("worse than base on reflect" in p for p in found)


def test_an_unevaluated_release_fails_unless_allowed(tmp_path, capsys):
    out = make_release(tmp_path)
    problems = verify_release(out, None, load=False)
    assert len(problems) == 1 and "not evaluated" in problems[0]
    assert "python eval/run.py" in problems[0] and "--allow-unevaluated" in problems[0]
    assert receipt(out)["gate"]["verdict"] == "unevaluated"
    assert verify_release(out, None, load=False, allow_unevaluated=True) == []
    assert ecli.verify_main([str(out), "--no-load", "--receipts-dir", "",
                             "--allow-unevaluated"]) == 0
    capsys.readouterr()


def test_verify_shows_the_rows_a_limited_evaluation_ran(tmp_path, capsys):
    """The gate reads a limited evaluation (the main job's first 16 held-out rows) like a full
    one, and verify says so beside the verdict; a full one is named as such."""
    out = make_release(tmp_path)
    limited = {**summary([1] * 16, GOOD_SUPPORT), "rows": 16,
               "config": {"set": "heldout", "limit": 16, "rows_in_set": 64}}
    full = {**summary([1] * 16, GOOD_SUPPORT), "rows": 40,
            "config": {"set": "natural", "limit": None, "rows_in_set": 40}}
    record_evaluation(out, {"heldout": limited, "natural": full}, receipts_dir=None)
    assert gate.coverage(receipt(out)) == [
        "heldout: evaluated on the first 16 of the 64 held-out rows (not the full evaluation), "
        "gated like a full one", "natural: evaluated on all 40 natural rows"]
    assert ecli.verify_main([str(out), "--no-load", "--receipts-dir", ""]) == 0
    assert "verify: release gate pass; heldout: evaluated on the first 16 of the 64 held-out rows " \
        "(not the full evaluation), gated like a full one; natural: evaluated on " \
        "all 40 natural rows" in capsys.readouterr().out
    record_evaluation(out, {"heldout": {**summary(WORSE_REFLECT, GOOD_SUPPORT), "rows": 16,
                                        "config": limited["config"]}}, receipts_dir=None)
    assert ecli.verify_main([str(out), "--no-load", "--receipts-dir", ""]) == 1
    err = capsys.readouterr().err
    assert "verify: release gate fail; heldout: evaluated on the first 16 of the 64" in err
    assert "verify: FAILED:" in err


def test_an_evaluation_without_the_base_arm_says_which_arm_to_add(tmp_path):
    out = make_release(tmp_path)
    only_rules = summary([1] * 16, GOOD_SUPPORT)
    only_rules["comparisons"] = only_rules["comparisons"][1:]
    record_evaluation(out, {"natural": only_rules}, receipts_dir=None)
    problems = verify_release(out, None, load=False)
    assert len(problems) == 1 and "with the base arm: add `--arm base=" in problems[0]


def test_a_base_only_release_has_nothing_to_gate():
    assert gate.evaluate({"student": None, "evaluation": None})["verdict"] == "not applicable"


def test_the_committed_release_receipt_verdict():
    """What the gate says about the committed release (reported to the lead): every failing
    check is a problem naming its set and metric; a recorded verdict must match."""
    doc = json.loads(COMMITTED.read_text())
    record = gate.evaluate(doc)
    if doc.get("student") and not doc.get("evaluation"):  # exported, not yet evaluated
        assert record["verdict"] == "unevaluated" and record["problems"]
        assert "eval/run.py" in " ".join(record["problems"])
        assert gate.problems(doc) and gate.problems(doc, allow_unevaluated=True) == []
    else:
        failing = [c for c in record["checks"] if c["status"] == "fail"]
        assert record["verdict"] == ("fail" if failing or record["problems"] else "pass")
        for c in failing:
            assert any(f"{c['metric']} in set {c['set']}" in p for p in record["problems"])
    if isinstance(doc.get("gate"), dict):
        assert doc["gate"]["verdict"] == record["verdict"]


def test_re_signing_keeps_the_exports_record_and_adds_its_own(tmp_path):
    """An evaluation or a waiver re-signs the release but the artifacts are still the export's:
    `created_utc` and `tools` (git state, libraries, hardware) stay those of the export, and the
    re-signing is recorded beside them in `resigned`."""
    out = make_release(tmp_path)
    doc = receipt(out)
    doc.update(created_utc="2026-01-02T03:04:05+00:00",
               tools={**doc["tools"], "git": {"commit": "e" * 40, "dirty": False}})
    (out / "release-receipt.json").write_text(json.dumps(doc))
    rel._finish(out, doc, None, None, resigned="evaluation")  # what record_evaluation calls
    record_evaluation(out, {"heldout": summary(WORSE_REFLECT, GOOD_SUPPORT)}, receipts_dir=None)
    after = receipt(out)
    assert after["created_utc"] == "2026-01-02T03:04:05+00:00"
    assert after["tools"]["git"] == {"commit": "e" * 40, "dirty": False}
    assert after["resigned"]["after"] == "evaluation" and after["resigned"]["utc"] > "2026-01-03"
    assert set(after["resigned"]["git"]) >= {"commit", "dirty"}
    record_waiver(out, "heldout", "reflect_correct", "a reason", receipts_dir=None)
    assert receipt(out)["resigned"]["after"] == "waiver"
    assert receipt(out)["tools"]["git"]["commit"] == "e" * 40
    rel._finish(out, receipt(out), None, None)  # an export again: its own record, no re-signing
    assert receipt(out)["created_utc"] > "2026-01-03" and "resigned" not in receipt(out)
