"""The release gate (issue 15 item 4, issue 26 item 2): verification fails when the student is
worse than the base on a task's main metric beyond its interval, not above the rules arm on
extraction support and coverage (the paired interval must lie above 0), or worse than the rules
arm on consolidation or reflection beyond the interval, unless the release receipt records a
reasoned waiver; an unevaluated release fails unless allowed.

The release folders here are written by the receipt's own signing path
(`memworker.export.receipt.sign`: receipt, card, SHA256SUMS) around a placeholder GGUF file, and verified with `load=False`: the
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
from memworker.export.receipt import sign
from memworker.export.verify import verify_release

GGUF = "memworker-test-general-q8_0.gguf"
COMMITTED = Path(__file__).resolve().parents[1] / "receipts" / "release-receipt.json"
#: a format-1 release receipt (release v3, archived whole when v4 replaced it): the template of
#: the releases these tests build, whose gate has no live check unless a test adds one
FORMAT1 = Path(__file__).resolve().parents[1] / "receipts" / "v3" / "release-receipt.json"


def make_release(tmp_path: Path) -> Path:
    out = tmp_path / "release"
    out.mkdir()
    (out / GGUF).write_bytes(b"GGUF placeholder (verified with load=False)")
    mfile.write(out / "Modelfile", f"./{GGUF}", end_of_turn="<|im_end|>",
                license_text="SPDX-License-Identifier: apache-2.0")
    # an archived release's receipt as the template (base, student, export settings), with
    # this folder's student GGUF and no evaluation yet
    receipt = json.loads(FORMAT1.read_text())
    receipt.update(lineage=[], evaluation=None, gate=None, artifacts={})
    receipt.pop("worker", None)   # this folder's Modelfile names none: the window form, ungated
    receipt["student"] = {**receipt["student"], "gguf": GGUF}
    sign(out, receipt, None, None)
    return out


def item(student: list[int], reference: list[int]) -> dict:
    """One paired comparison entry as `eval.summary.summarise` writes it (binary rows, one
    episode per row)."""
    pa, pb = [(x, 1) for x in student], [(x, 1) for x in reference]
    clusters = [f"e{i}" for i in range(len(student))]
    a, b = stats.ratio(pa), stats.ratio(pb)
    return {"a": a, "b": b, "diff": a - b, "n_rows": len(student), "n_episodes": len(student),
            "ci": stats.paired_bootstrap(pa, pb, clusters, resamples=400, seed=0)}


#: the rules arm's outcomes in these summaries: 4/16 at extraction, 8/16 at the other tasks
RULES_EXTRACT = [1] * 4 + [0] * 12
RULES_OTHER = [1] * 8 + [0] * 8
GOOD_SUPPORT = [1] * 16   # 16/16 against the rules' 4/16: the interval lies above 0
WORSE_REFLECT = [0] * 12 + [1] * 4   # 4/16 against the base's 16/16
#: student - rules (student, rules) per gated metric where every check passes
RULES_OK = {"extract_support": (GOOD_SUPPORT, RULES_EXTRACT),
            "extract_coverage": ([1] * 16, RULES_EXTRACT),
            "consolidate_correct": (RULES_OTHER, RULES_OTHER),
            "reflect_correct": ([1] * 9 + [0] * 7, RULES_OTHER)}
TASK_OF = {"extract_support": "extract", "extract_coverage": "extract",
           "consolidate_correct": "consolidate", "reflect_correct": "reflect"}


def summary(reflect_student: list[int], support_student: list[int],
            **rules: tuple[list[int], list[int]] | None) -> dict:
    """Student - base and student - rules comparisons; `rules` replaces the (student, rules)
    outcomes of a gated student - rules metric of RULES_OK (None: the metric is absent)."""
    same = [1, 0] * 8
    base = {"extract": {"extract_f1": item(same, same)},
            "consolidate": {"consolidate_correct": item(same, same)},
            "reflect": {"reflect_correct": item(reflect_student, [1] * 16)}}
    pairs = {**RULES_OK, "extract_support": (support_student, RULES_EXTRACT), **rules}
    versus_rules: dict = {}
    for metric, pair in pairs.items():
        block = versus_rules.setdefault(TASK_OF[metric], {})
        if pair is not None:
            block[metric] = item(*pair)
    return {"comparisons": [{"a": "student", "b": "base", "label": "student - base",
                             "tasks": base},
                            {"a": "student", "b": "rules", "label": "student - rules",
                             "tasks": versus_rules}]}


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


def test_a_student_above_the_rules_on_every_task_passes_and_the_receipt_says_so(tmp_path):
    out = make_release(tmp_path)
    record_evaluation(out, {"heldout": summary([1] * 16, GOOD_SUPPORT)}, receipts_dir=None)
    assert verify_release(out, None, load=False) == []
    g = receipt(out)["gate"]
    assert g["verdict"] == "pass"
    assert g["tasks"] == {"heldout": {"extract": "pass", "consolidate": "pass",
                                      "reflect": "pass"}}
    rules = {c["metric"]: c for c in g["checks"] if c["versus"] == "rules"}
    assert {m: c["check"] for m, c in rules.items()} == {
        "extract_support": "above rules", "extract_coverage": "above rules",
        "consolidate_correct": "not below rules", "reflect_correct": "not below rules"}
    assert all(c["status"] == "ok" for c in g["checks"])
    assert rules["extract_coverage"]["ci"][0] > 0
    card = (out / "README.md").read_text()
    assert "Tasks: heldout: extract pass, consolidate pass, reflect pass." in card
    assert "| heldout | rules | extract | extract_coverage | above rules |" in card


# one row more than the rules (5/16 against 4/16, the same rows plus one): the point difference
# is above 0 but the paired interval reaches 0
TOUCHING = ([1] * 5 + [0] * 11, RULES_EXTRACT)


@pytest.mark.parametrize("metric", ["extract_support", "extract_coverage"])
def test_extraction_whose_interval_touches_0_against_the_rules_fails(tmp_path, metric):
    out = make_release(tmp_path)
    record_evaluation(out, {"heldout": summary([1] * 16, GOOD_SUPPORT, **{metric: TOUCHING})},
                      receipts_dir=None)
    problems = verify_release(out, None, load=False)
    assert len(problems) == 1
    assert f"release gate [above rules]: the student is not above rules on extract {metric} " \
        "in set heldout (the paired 95 % interval must lie entirely above 0): student 0.312 " \
        "vs rules 0.250, difference +0.062 [+0.000, " in problems[0]
    assert f"--waive heldout {metric}" in problems[0]
    g = receipt(out)["gate"]
    failing = [c for c in g["checks"] if c["status"] == "fail"]
    assert [(c["versus"], c["metric"]) for c in failing] == [("rules", metric)]
    assert failing[0]["diff"] > 0 and failing[0]["ci"][0] <= 0
    assert g["tasks"]["heldout"] == {"extract": "fail", "consolidate": "pass",
                                     "reflect": "pass"}


@pytest.mark.parametrize("metric", ["consolidate_correct", "reflect_correct"])
def test_consolidation_and_reflection_below_the_rules_beyond_the_interval_fail(tmp_path,
                                                                                metric):
    out = make_release(tmp_path)
    below = ([0] * 16, RULES_OTHER)  # 0/16 against the rules' 8/16
    record_evaluation(out, {"heldout": summary([1] * 16, GOOD_SUPPORT, **{metric: below})},
                      receipts_dir=None)
    problems = verify_release(out, None, load=False)
    task = TASK_OF[metric]
    assert len(problems) == 1
    assert f"release gate [not below rules]: the student is worse than rules on {task} " \
        f"{metric} in set heldout beyond its 95 % interval: student 0.000 vs rules 0.500" \
        in problems[0]
    assert receipt(out)["gate"]["tasks"]["heldout"][task] == "fail"
    # within the interval: 7/16 against 8/16 (the same rows but one) passes
    within = ([1] * 7 + [0] * 9, RULES_OTHER)
    record_evaluation(out, {"heldout": summary([1] * 16, GOOD_SUPPORT, **{metric: within})},
                      receipts_dir=None)
    check = next(c for c in receipt(out)["gate"]["checks"]
                 if c["versus"] == "rules" and c["metric"] == metric)
    assert check["diff"] < 0 <= check["ci"][1] and check["status"] == "ok"
    assert verify_release(out, None, load=False) == []


def test_the_natural_set_needs_extraction_not_below_the_rules_only(tmp_path):
    """Where no arm has a supported claim (the natural set), equal extraction passes there and
    fails in held-out, where it must be above the rules."""
    out = make_release(tmp_path)
    zero = {"extract_support": ([0] * 16, [0] * 16), "extract_coverage": ([0] * 16, [0] * 16)}
    record_evaluation(out, {"natural": summary([1] * 16, GOOD_SUPPORT, **zero),
                            "heldout": summary([1] * 16, GOOD_SUPPORT)}, receipts_dir=None)
    g = receipt(out)["gate"]
    assert g["verdict"] == "pass" and g["tasks"]["natural"]["extract"] == "pass"
    assert {c["check"] for c in g["checks"] if c["set"] == "natural"
            and c["task"] == "extract" and c["versus"] == "rules"} == {"not below rules"}
    record_evaluation(out, {"heldout": summary([1] * 16, GOOD_SUPPORT, **zero)},
                      receipts_dir=None)
    problems = verify_release(out, None, load=False)
    assert len(problems) == 2
    assert all("release gate [above rules]: the student is not above rules on extract" in p
               for p in problems)


def _graded(support: list[tuple[int, int]], required: list[int]) -> dict:
    """Per-row graded extract results as `eval.summary` holds them (one episode per row)."""
    return {f"r{i}": {"metrics": {"extract_support": list(s), "extract_coverage": [s[0], q]},
                      "counts": {"required": q}}
            for i, (s, q) in enumerate(zip(support, required, strict=True))}


def test_above_the_rules_unattainable_on_the_rows_is_judged_not_below(tmp_path):
    """Like the held-out set: 32 episodes with 4 facts each; the rules write 10 claims in 9 of
    them, 8 supported. Even an arm writing exactly the gold (support 1.0) gets a support interval
    from 0, so the check is "not below rules" there, and says why; coverage stays "above"."""
    from memworker.eval.summary import paired_metric

    required = [4] * 32
    rules = _graded([(1, 1)] * 7 + [(1, 2)] + [(0, 1)] + [(0, 0)] * 23, required)
    student = _graded([(1, 1)] * 12 + [(0, 1)] * 3 + [(0, 0)] * 17, required)
    by_id = {i: {"episode": f"e{i}"} for i in rules}
    ids = sorted(rules)
    items = {m: paired_metric(student, rules, ids, m, by_id, binary=False, resamples=400,
                              seed=0) for m in ("extract_support", "extract_coverage")}
    support, cover = items["extract_support"], items["extract_coverage"]
    assert support["reach"][0] == 0 < support["reach"][1]  # the gold itself cannot show it
    assert support["ci"][0] < 0 < support["ci"][1]
    assert cover["reach"][0] > 0.5 and cover["ci"][0] > 0  # 12 vs 8 of 128 facts
    doc = summary([1] * 16, GOOD_SUPPORT)
    doc["comparisons"][1]["tasks"]["extract"] = items
    out = make_release(tmp_path)
    record_evaluation(out, {"heldout": doc}, receipts_dir=None)
    assert verify_release(out, None, load=False) == []
    g = receipt(out)["gate"]
    check = next(c for c in g["checks"] if c["metric"] == "extract_support"
                 and c["versus"] == "rules")
    assert check["status"] == "ok"
    assert check["check"] == "not below rules (above rules unattainable)"
    assert check["reach"] == support["reach"]
    assert check["unattainable"].startswith(
        "no arm can be shown above rules on these rows: one that writes exactly the gold gets "
        "[+0.000, ")
    assert next(c for c in g["checks"] if c["metric"] == "extract_coverage"
                and c["versus"] == "rules")["check"] == "above rules"
    assert "not below rules (above rules unattainable)" in (out / "README.md").read_text()
    # worse than the rules beyond the interval still fails there
    worse = _graded([(0, 1)] * 9 + [(0, 0)] * 23, required)
    doc["comparisons"][1]["tasks"]["extract"]["extract_support"] = paired_metric(
        worse, rules, ids, "extract_support", by_id, binary=False, resamples=400, seed=0)
    record_evaluation(out, {"heldout": doc}, receipts_dir=None)
    problems = verify_release(out, None, load=False)
    assert len(problems) == 1 and problems[0].startswith(
        f"{out / 'release-receipt.json'}: release gate [not below rules (above rules "
        "unattainable)]: the student is worse than rules on extract extract_support")
    # where the gold could be shown above the rules, the check stays "above" and fails
    reach = dict(support, reach=[0.1, 0.4])
    doc["comparisons"][1]["tasks"]["extract"]["extract_support"] = reach
    record_evaluation(out, {"heldout": doc}, receipts_dir=None)
    problems = verify_release(out, None, load=False)
    assert len(problems) == 1 and "release gate [above rules]" in problems[0]


def test_a_missing_rules_comparison_fails_naming_it(tmp_path):
    out = make_release(tmp_path)
    record_evaluation(out, {"heldout": summary([1] * 16, GOOD_SUPPORT, extract_coverage=None)},
                      receipts_dir=None)
    problems = verify_release(out, None, load=False)
    assert len(problems) == 1
    assert "release gate [above rules]: set heldout has extract rows but the student - rules " \
        "comparison holds no extract_coverage, so the check cannot be made" in problems[0]
    assert "--waive heldout extract_coverage" in problems[0]
    assert receipt(out)["gate"]["tasks"]["heldout"]["extract"] == "fail"
    # a task with no rows in a set is not measured there, but some set must measure it
    doc = summary([1] * 16, GOOD_SUPPORT)
    for comp in doc["comparisons"]:
        del comp["tasks"]["consolidate"]
    record_evaluation(out, {"heldout": doc}, receipts_dir=None)
    g = receipt(out)["gate"]
    assert g["tasks"]["heldout"]["consolidate"] == "not measured"
    assert g["problems"] == [
        "release gate: no evaluated set measures student - rules on consolidate "
        "consolidate_correct (no consolidate rows in any set that compares them): evaluate a "
        "set with every task (`python eval/run.py …`)"]
    record_evaluation(out, {"heldout": doc, "test": summary([1] * 16, GOOD_SUPPORT)},
                      receipts_dir=None)
    assert verify_release(out, None, load=False) == []


def test_a_reasoned_waiver_covers_a_rules_check(tmp_path):
    out = make_release(tmp_path)
    record_evaluation(out, {"heldout": summary([1] * 16, GOOD_SUPPORT,
                                               extract_coverage=TOUCHING)}, receipts_dir=None)
    assert len(verify_release(out, None, load=False)) == 1
    with pytest.raises(ExportError, match="the reason is empty"):
        record_waiver(out, "heldout", "extract_coverage", " ", receipts_dir=None)
    record_waiver(out, "heldout", "extract_coverage", "coverage is reported, not shipped",
                  receipts_dir=None)
    g = receipt(out)["gate"]
    assert g["verdict"] == "pass" and g["tasks"]["heldout"]["extract"] == "waived"
    check = next(c for c in g["checks"] if c["metric"] == "extract_coverage")
    assert check["status"] == "waived" and check["waiver"] == "coverage is reported, not shipped"
    assert verify_release(out, None, load=False) == []


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
    assert [(c["versus"], c["status"]) for c in g["checks"] if c["task"] == "reflect"] == \
        [("base", "waived"), ("rules", "ok")]
    assert g["tasks"]["heldout"]["reflect"] == "waived"
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
    sign(out, doc, None, None, resigned="evaluation")  # what record_evaluation calls
    record_evaluation(out, {"heldout": summary(WORSE_REFLECT, GOOD_SUPPORT)}, receipts_dir=None)
    after = receipt(out)
    assert after["created_utc"] == "2026-01-02T03:04:05+00:00"
    assert after["tools"]["git"] == {"commit": "e" * 40, "dirty": False}
    assert after["resigned"]["after"] == "evaluation" and after["resigned"]["utc"] > "2026-01-03"
    assert set(after["resigned"]["git"]) >= {"commit", "dirty"}
    record_waiver(out, "heldout", "reflect_correct", "a reason", receipts_dir=None)
    assert receipt(out)["resigned"]["after"] == "waiver"
    assert receipt(out)["tools"]["git"]["commit"] == "e" * 40
    sign(out, receipt(out), None, None)  # an export again: its own record, no re-signing
    assert receipt(out)["created_utc"] > "2026-01-03" and "resigned" not in receipt(out)
