"""eval/studies/pair.py: two arms of two evaluation folders summarised together, paired on the rows
both ran; folders of another set, corpus or sampler are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memworker.eval.cli import main as eval_main
from memworker.eval.runner import EvalError
from memworker.eval.studies.pair import load_pair, main
from tests.test_eval_hybrid import _oracle_samples


def _rules(corpus: Path, out: Path, *extra: str) -> Path:
    assert eval_main(["--arm", "rules", "--set", "val", "--corpus", str(corpus), "--out",
                      str(out), "--no-progress", "--no-plots", *extra]) == 0
    return out


def test_two_folders_are_compared_on_the_rows_both_ran(tiny_corpus, tmp_path, capsys):
    a = _rules(tiny_corpus, tmp_path / "a")
    b = _rules(tiny_corpus, tmp_path / "b", "--limit", "6")
    _oracle_samples(tiny_corpus, b)            # every val row, but the rules ran only 6 there
    capsys.readouterr()
    rows, samples, names, config = load_pair([f"rules={a}:rules", f"gold={b}:oracle"])
    assert names == ["rules", "gold"] and config["set"] == "val"
    assert {s["arm"] for s in samples} == {"rules", "gold"}
    assert main(["--arm", f"rules={a}:rules", "--arm", f"gold={b}:oracle", "--to",
                 str(tmp_path / "p"), "--resamples", "200"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    comp = summary["comparisons"][0]
    assert (comp["a"], comp["b"]) == ("gold", "rules")
    assert printed.startswith(f"gold - rules on {comp['rows']} rows both ran (val)")
    assert comp["rows"] == len(rows) > 6       # the oracle's rows, not b's 6 rules rows
    cover = comp["tasks"]["extract"]["extract_coverage"]
    assert cover["a"] == 1.0 and cover["diff"] > 0 and cover["ci"][0] > 0
    assert cover["reach"] == cover["ci"]       # the gold is the best an arm can do
    assert "extract_coverage" in printed and summary["config"]["paired_from"]["gold"]["arm"] \
        == "oracle"


def test_each_arms_values_are_those_of_the_rows_both_ran(tiny_corpus, tmp_path, capsys):
    """A folder of the whole split beside one of its first N rows: both arms' values are over
    the N rows, the ones the paired difference is computed on."""
    whole = _rules(tiny_corpus, tmp_path / "whole")
    first = _rules(tiny_corpus, tmp_path / "first", "--limit", "6")
    rows, samples, _, config = load_pair([f"whole={whole}:rules", f"first={first}:rules"])
    assert len(rows) == config["rows_paired"] == 6
    assert {s["id"] for s in samples} == {r["id"] for r in rows}
    assert config["rows_left_out"]["first"] == 0 < config["rows_left_out"]["whole"]
    assert main(["--arm", f"whole={whole}:rules", "--arm", f"first={first}:rules", "--to",
                 str(tmp_path / "p"), "--resamples", "200"]) == 0
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    limited = json.loads((first / "summary.json").read_text())["metrics"]["rules"]
    for arm in ("whole", "first"):
        assert summary["metrics"][arm]["extract"]["metrics"]["extract_coverage"]["num"] == \
            limited["extract"]["metrics"]["extract_coverage"]["num"]
    capsys.readouterr()


def test_folders_that_are_not_one_comparison_are_refused(tiny_corpus, tmp_path, capsys):
    a = _rules(tiny_corpus, tmp_path / "a")
    turns = _rules(tiny_corpus, tmp_path / "t", "--extract-form", "turns")
    test = tmp_path / "x"
    assert eval_main(["--arm", "rules", "--set", "test", "--corpus", str(tiny_corpus), "--out",
                      str(test), "--no-progress", "--no-plots"]) == 0
    with pytest.raises(EvalError, match="samplers differ in extract_form: 'window' and 'turns'"):
        load_pair([f"a={a}:rules", f"t={turns}:rules"])
    with pytest.raises(EvalError, match="different sets: 'val' and 'test'"):
        load_pair([f"a={a}:rules", f"x={test}:rules"])
    with pytest.raises(EvalError, match="no samples of arm 'student'"):
        load_pair([f"a={a}:rules", f"s={a}:student"])
    with pytest.raises(EvalError, match="different names"):
        load_pair([f"a={a}:rules", f"a={turns}:rules"])
    with pytest.raises(EvalError, match="expected NAME=FOLDER:ARM"):
        load_pair([f"{a}:rules", f"t={turns}:rules"])
    assert main(["--arm", f"a={a}:rules", "--arm", f"x={test}:rules"]) == 2
    err = capsys.readouterr().err
    assert "eval/studies/pair.py: error: the folders evaluate different sets" in err


def test_a_named_sampler_difference_is_the_setting_compared(tiny_corpus, tmp_path, capsys):
    """`--differ FIELD`: folders that differ in that sampler field (here the turns form read
    once against today's schedule) are one comparison of that setting, recorded in the
    config; any other difference is still refused, and an unknown field too."""
    today = _rules(tiny_corpus, tmp_path / "a", "--extract-form", "turns")
    once = _rules(tiny_corpus, tmp_path / "o", "--extract-form", "turns", "--turn-history", "none")
    window = _rules(tiny_corpus, tmp_path / "w")
    pair = [f"today={today}:rules", f"once={once}:rules"]
    with pytest.raises(EvalError, match="samplers differ in turn_history: 'answers' and 'none'"):
        load_pair(pair)
    _, _, _, config = load_pair(pair, ("turn_history",))
    assert config["differ"] == {"turn_history": {"today": "answers", "once": "none"}}
    with pytest.raises(EvalError, match="differ in extract_form"):
        load_pair([f"w={window}:rules", f"once={once}:rules"], ("turn_history",))
    with pytest.raises(EvalError, match="--differ temperature: not a sampler field"):
        load_pair(pair, ("temperature",))
    capsys.readouterr()
    assert main(["--arm", pair[0], "--arm", pair[1], "--differ", "turn_history",
                 "--resamples", "100"]) == 0
    assert "turn_history: today 'answers', once 'none')" in capsys.readouterr().out


def test_a_gate_and_the_rules_applied_here_reproduce_the_release_workers_answers(
        natural_dev_corpus, tiny_corpus):
    """`--gate` and `--with-rules` make a proposing arm's recorded claims into the hybrid
    worker's answers: release v4's student proposing on natural-dev (recorded ungated, with
    log-probabilities), gated by `verifier>=0.9` and composed with the rules, answers every
    extract row exactly as the release's own evaluation of its worker recorded."""
    from pathlib import Path

    from memworker.eval.studies import pair as pair_study

    root = Path(__file__).resolve().parents[1] / "receipts/eval/natural-dev"
    rows, samples, _, config = pair_study.load_pair(
        [f"v4={root / 'e22'}:n1", f"rel={root / 'release'}:student"], (),
        pair_study.parse_gates(["v4=verifier>=0.9"]), ("v4",), natural_dev_corpus)
    extract = {r["id"] for r in rows if r["task"] == "extract"}
    by: dict = {}
    for s in samples:
        by.setdefault(s["id"], {})[s["arm"]] = s
    assert len(extract) == 146
    assert all(by[i]["v4"]["output"] == by[i]["rel"]["output"] for i in extract)
    assert config["gated_here"] == {"v4": "verifier>=0.9"} and config["with_rules_here"] == ["v4"]
    # a gate on an arm not compared, a bad spec, an arm already gated
    with pytest.raises(pair_study.EvalError, match="not an arm compared"):
        pair_study.load_pair([f"a={root / 'e22'}:n1", f"b={root / 'release'}:student"], (),
                             pair_study.parse_gates(["c=verifier>=0.9"]), (), natural_dev_corpus)
    with pytest.raises(pair_study.EvalError, match="expected NAME=SPEC"):
        pair_study.parse_gates(["verifier>=0.9"])
    with pytest.raises(pair_study.EvalError, match="already ran with a claim gate"):
        pair_study.load_pair([f"a={root / 'e22'}:n1", f"b={root / 'release'}:student"], (),
                             pair_study.parse_gates(["b=verifier>=0.9"]), (), natural_dev_corpus)
    # another corpus than the one the folders recorded is refused, by its manifest's sha256
    with pytest.raises(pair_study.EvalError, match="is not the 55f9d2a2aaf6"):
        pair_study.load_pair([f"a={root / 'e22'}:n1", f"b={root / 'release'}:student"], (),
                             corpus=tiny_corpus)
