"""Release format 2 (issue 50 items 2 and 6): the gate holds the natural set above the rules (or
not below where its reach says above is unattainable), gates live acceptance (the student passes
at least as many scenarios as the rules), never gates natural-dev; the card gains the intended
use, the hand-written and live figures in its limitations, and the grading section. A format-1
receipt (releases v1-v3) is gated and rendered as before.

Release folders are written by the receipt's own signing path around a placeholder GGUF
(tests/test_export_gate.py's `make_release`), verified with `load=False`."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from memworker.eval.live.cli import main as live_main
from memworker.export import ExportError, card, gate, record_evaluation, record_waiver
from memworker.export import cli as ecli
from memworker.export import modelfile as mfile
from memworker.export.receipt import record_live, record_live_file, sign
from memworker.export.verify import verify_release
from tests.test_export_gate import COMMITTED, FORMAT1, GGUF, GOOD_SUPPORT, make_release, summary

ZERO = {"extract_support": ([0] * 16, [0] * 16), "extract_coverage": ([0] * 16, [0] * 16)}


def format2(tmp_path: Path, worker: dict | None = None) -> Path:
    out = make_release(tmp_path)
    doc = json.loads((out / "release-receipt.json").read_text())
    doc["format"] = 2
    if worker is not None:
        doc["worker"] = worker
        mfile.write(out / "Modelfile", f"./{GGUF}", end_of_turn="<|im_end|>",
                    license_text="SPDX-License-Identifier: apache-2.0", worker=worker)
    sign(out, doc, None, None)
    return out


def receipt(out: Path) -> dict:
    return json.loads((out / "release-receipt.json").read_text())


def live_summary(out: Path, student: int, rules: int, total: int = 8,
                 sha: str | None = None, sampler: dict | None = None) -> dict:
    """A live-acceptance summary as eval/live.py writes it (the fields the receipt reads)."""
    sha = sha or receipt(out)["artifacts"][GGUF]["sha256"]
    return {"arms": {"student": {"passed": student, "total": total,
                                 "isolated": {"passed": 0, "total": 27}, "scenarios": {}},
                     "rules": {"passed": rules, "total": total,
                               "isolated": {"passed": 0, "total": 27}, "scenarios": {}}},
            "config": {"arms": {"student": GGUF, "rules": "rules"},
                       "sampler": sampler or {"extract_form": "window"}},
            "worker": {"student": {"gguf_sha256": sha}, "rules": {"gguf_sha256": None}}}


def test_format2_needs_live_acceptance_and_says_how_to_record_it(tmp_path):
    out = format2(tmp_path)
    record_evaluation(out, {"heldout": summary([1] * 16, GOOD_SUPPORT)}, receipts_dir=None)
    problems = verify_release(out, None, load=False)
    assert len(problems) == 1 and "no live acceptance" in problems[0]
    assert "eval/live.py" in problems[0] and "--into-receipt" in problems[0]
    assert "--waive live live_passed" in problems[0]
    record_live(out, live_summary(out, student=3, rules=2), receipts_dir=None)
    assert verify_release(out, None, load=False) == []
    g = receipt(out)["gate"]
    live = next(c for c in g["checks"] if c["set"] == "live")
    assert (live["student"], live["reference"], live["status"]) == (3, 2, "ok")
    assert "live acceptance" in g["rule"] and "live" not in g["tasks"]


def test_format2_fails_a_student_passing_fewer_scenarios_than_the_rules(tmp_path):
    out = format2(tmp_path)
    record_evaluation(out, {"heldout": summary([1] * 16, GOOD_SUPPORT)}, receipts_dir=None)
    record_live(out, live_summary(out, student=1, rules=2), receipts_dir=None)
    problems = verify_release(out, None, load=False)
    assert problems == [p for p in problems if "passes 1 of 8 live-acceptance scenarios and "
                        "the rules 2" in p] and len(problems) == 1
    record_waiver(out, "live", "live_passed", "a reason", receipts_dir=None)
    assert verify_release(out, None, load=False) == []
    # equal passes
    record_live(out, live_summary(out, student=2, rules=2), receipts_dir=None)
    assert next(c for c in receipt(out)["gate"]["checks"] if c["set"] == "live")["status"] \
        == "ok"


def test_format2_holds_the_natural_set_above_the_rules(tmp_path):
    """Format 1 judged natural "not below rules"; format 2 "above", so a student equal to the
    rules there fails (its intervals are [0, 0], above was attainable: no reach given)."""
    out = format2(tmp_path)
    record_live(out, live_summary(out, student=2, rules=2), receipts_dir=None)
    record_evaluation(out, {"natural": summary([1] * 16, GOOD_SUPPORT, **ZERO),
                            "heldout": summary([1] * 16, GOOD_SUPPORT)}, receipts_dir=None)
    problems = verify_release(out, None, load=False)
    assert len(problems) == 2 and all("not above rules on extract" in p and "set natural" in p
                                      for p in problems)
    # the same evaluations under format 1: natural passes "not below"
    doc = receipt(out)
    doc["format"] = 1
    assert gate.evaluate(doc)["verdict"] == "pass"


def test_natural_dev_is_reported_never_gated(tmp_path):
    out = format2(tmp_path)
    record_live(out, live_summary(out, student=2, rules=2), receipts_dir=None)
    worse = summary([0] * 16, [0] * 16, **ZERO)  # below base and rules everywhere
    record_evaluation(out, {"heldout": summary([1] * 16, GOOD_SUPPORT), "natural-dev": worse},
                      receipts_dir=None)
    assert verify_release(out, None, load=False) == []
    g = receipt(out)["gate"]
    assert not any(c["set"] == "natural-dev" for c in g["checks"])
    assert "natural-dev" not in g["tasks"]


def test_record_live_refuses_another_gguf_a_missing_arm_and_another_worker(tmp_path):
    out = format2(tmp_path)
    with pytest.raises(ExportError, match="its student GGUF has sha256 " + "0" * 64):
        record_live(out, live_summary(out, 2, 2, sha="0" * 64), receipts_dir=None)
    lacking = live_summary(out, 2, 2)
    del lacking["arms"]["rules"]
    with pytest.raises(ExportError, match="no result of the rules arm"):
        record_live(out, lacking, receipts_dir=None)
    with pytest.raises(ExportError, match="ran the student with extract form turns"):
        record_live(out, live_summary(out, 2, 2, sampler={"extract_form": "turns"}),
                    receipts_dir=None)
    assert "live" not in receipt(out)  # nothing recorded by a refusal
    # the copy path: the receipt given must be the folder's (or its byte-identical copy)
    other = tmp_path / "other-receipt.json"
    other.write_text("{}")
    with pytest.raises(ExportError, match="is not the same file"):
        record_live_file(other, live_summary(out, 2, 2), out)
    record_live_file(out / "release-receipt.json", live_summary(out, 2, 2), out)
    assert receipt(out)["live"]["arms"]["student"]["passed"] == 2
    assert receipt(out)["resigned"]["after"] == "live"


def test_export_cli_records_a_live_summary_file(tmp_path, capsys):
    out = format2(tmp_path)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(live_summary(out, 4, 2)))
    assert ecli.main(["--out", str(out), "--record-live", str(path), "--receipts-dir", "",
                      "--no-publish"]) == 0
    assert "live acceptance" in capsys.readouterr().out
    assert receipt(out)["live"]["arms"]["student"]["passed"] == 4
    path.write_text("[1]")
    assert ecli.main(["--out", str(out), "--record-live", str(path), "--receipts-dir", "",
                      "--no-publish"]) == 2
    assert "is not a JSON object" in capsys.readouterr().err


def test_live_cli_refuses_into_receipt_that_is_not_a_release_before_running(tmp_path, capsys):
    other = tmp_path / "r.json"
    other.write_text(json.dumps({"kind": "memworker-stage"}))
    assert live_main(["--arm", "rules", "--out", str(tmp_path / "live"), "--into-receipt",
                      str(other)]) == 2
    assert "is not a release receipt" in capsys.readouterr().err
    assert not (tmp_path / "live").exists()
    out = format2(tmp_path)
    assert live_main(["--arm", "rules", "--out", str(tmp_path / "live"), "--into-receipt",
                      str(out / "release-receipt.json")]) == 2
    assert "re-signs it" in capsys.readouterr().err  # no writer given (only eval/live.py has it)


def test_the_card_of_a_format2_release(tmp_path):
    g = "first(predicate)+first(value)>=-0.055"
    out = format2(tmp_path, worker={"extract_form": "turns", "claim_gate": g,
                                    "propose": True, "turn_history": "none"})
    live = live_summary(out, 3, 2)
    live["config"].update(proposing=["student"], claim_gates={"student": g},
                          sampler={"extract_form": "turns", "turn_history": "none"})
    record_live(out, live, receipts_dir=None)
    text = (out / card.CARD).read_text()
    assert "## Intended use" in text and "temperature 0" in text
    assert f"extract form turns and claim gate {g} and proposing and turns read once" in text
    assert "predicates (`memworker.ontology.PREDICATES`)" in text
    assert "on the hand-written natural set (a test: never trained or chosen on): not " \
           "evaluated in this release" in text
    assert "student passes 3 of 8 scenarios" in text and "rules passes 2 of 8" in text
    assert "## Grade your own extractor" in text and "python eval/answers.py --set" in text
    # the natural set's figures, once evaluated
    natural = summary([1] * 16, GOOD_SUPPORT)
    natural["comparisons"][1]["tasks"]["extract"]["extract_coverage"]["ci"] = [0.5, 0.9]
    doc = receipt(out)
    doc["evaluation"] = {"natural": natural}
    text = card.render(doc)
    assert "on the hand-written natural set (a test: never trained or chosen on), 16 extract " \
           "rows: support 1.000 against the rules' 0.250" in text
    assert "coverage 1.000 against the rules' 0.250, difference +0.750 [+0.500, +0.900]" in text


def test_a_format1_receipt_renders_and_gates_as_released():
    """A format-1 release (v3, archived): no new card section, the old rule, natural "not
    below", no live check, even when a live summary is present."""
    doc = json.loads(FORMAT1.read_text())
    assert gate.release_format(doc) == 1
    text = card.render(doc)
    assert "## Intended use" not in text and "## Grade your own extractor" not in text
    with_live = copy.deepcopy(doc)
    with_live["live"] = {"arms": {"student": {"passed": 0, "total": 8},
                                  "rules": {"passed": 2, "total": 8}}}
    record = gate.evaluate(with_live)
    assert record["rule"] == gate.RULE
    assert not any(c["set"] == "live" for c in record["checks"])
    assert record["verdict"] == gate.evaluate(doc)["verdict"]


def test_the_committed_release_is_format2_and_its_gate_reads_live_acceptance():
    """Release v4 is the first format-2 release: its card has the new sections, and its gate
    checks live acceptance and the natural set as format 2 does."""
    doc = json.loads(COMMITTED.read_text())
    assert gate.release_format(doc) == 2
    record = gate.evaluate(doc)
    assert record["rule"] != gate.RULE
    assert [c["status"] for c in record["checks"] if c["set"] == "live"] == ["ok"]
    text = card.render(doc)
    assert "## Intended use" in text and "## Grade your own extractor" in text


def test_new_exports_are_format2():
    from memworker.export import release
    assert release.FORMAT == gate.LIVE_FORMAT == card.CARD_FORMAT == 2
