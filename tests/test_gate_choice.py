"""eval/studies/gate_choice.py: the release gate's extraction checks asked of each candidate
worker gate on design-set folders (a fabricated proposing arm beside the real rules arm, on the
tiny corpus: tests/test_verifier.py's folder)."""

from __future__ import annotations

import json
import math

from memworker.eval.studies import gate_choice as gc
from tests.test_verifier import _proposing_folder


def test_every_gate_is_judged_and_the_choice_qualifies_with_the_most_facts(tiny_corpus,
                                                                           tmp_path, capsys):
    out = _proposing_folder(tiny_corpus, tmp_path)
    target = tmp_path / "choice.json"
    # every token at log p -1: A=-100 keeps every claim, A=0 none (then the verifier decides)
    assert gc.main(["--folder", f"val={out}:student", "--logprob=-inf,-100,0",
                    "--verifier", "0.5,2", "--resamples", "200", "--json", str(target)]) == 0
    printed = capsys.readouterr().out
    figures = json.loads(target.read_text())
    gates = [g["gate"] for g in figures["grid"]]
    # (-inf, 2) keeps nothing and is left out; (0, 2) keeps nothing either
    assert gates == ["verifier>=0.5", "first(predicate)+first(value)>=-100|verifier>=0.5",
                     "first(predicate)+first(value)>=-100",
                     "first(predicate)+first(value)>=0|verifier>=0.5",
                     "first(predicate)+first(value)>=0"]
    by = {g["gate"]: g["sets"]["val"] for g in figures["grid"]}
    every = by["first(predicate)+first(value)>=-100"]
    assert by["first(predicate)+first(value)>=-100|verifier>=0.5"] == every
    assert by["first(predicate)+first(value)>=0"]["kept"] == 0
    assert by["verifier>=0.5"] == by["first(predicate)+first(value)>=0|verifier>=0.5"]
    assert 0 < by["verifier>=0.5"]["kept"] < every["kept"]
    for f in by.values():
        assert set(f) >= {"kept", "supported", "covered", "extract_support",
                          "extract_coverage", "qualifies"}
        assert f["qualifies"] == (f["extract_support"]["pass"] and f["extract_coverage"]["pass"])
    qualifying = [g for g in figures["grid"] if g["qualifies"]]
    if qualifying:
        best = max(g["covered"] for g in qualifying)
        chosen = next(g for g in figures["grid"] if g["gate"] == figures["choice"])
        assert chosen["qualifies"] and chosen["covered"] == best
    else:
        assert figures["choice"] is None
    assert "choice (qualifies in every set, most facts covered)" in printed


def test_the_gate_keeps_nothing_on_a_closed_side():
    assert not gc.keeps(5.0, 0.99, -math.inf, 2.0)
    assert gc.keeps(5.0, 0.0, 4.0, 2.0) and gc.keeps(-9.0, 0.95, -math.inf, 0.9)


def test_a_bad_folder_spec_is_refused(capsys):
    assert gc.main(["--folder", "nonsense"]) == 2
    assert "expected SET=FOLDER:ARM" in capsys.readouterr().err


def test_union_judges_the_rules_claims_plus_the_gated_models(tiny_corpus, tmp_path):
    out = _proposing_folder(tiny_corpus, tmp_path)
    from memworker.inference.verifier import Verifier
    verifier = Verifier.load()
    alone = gc.SetFigures("val", out, "student", verifier)
    union = gc.SetFigures("val", out, "student", verifier, union=True)
    rules_claims = sum(g["counts"]["claims"] for g in alone.rules_by_id.values())
    assert rules_claims > 0
    # a gate keeping nothing of the model's: the union is the rules' answer, claim for claim
    nothing = union.judge(0, 2.0, resamples=100, seed=0)
    assert nothing["kept"] == rules_claims
    assert alone.judge(0, 2.0, resamples=100, seed=0)["kept"] == 0
    # keeping every model claim: at least the rules' facts and the model's, each counted once
    every_u = union.judge(-100, 2.0, resamples=100, seed=0)
    every_a = alone.judge(-100, 2.0, resamples=100, seed=0)
    assert every_u["covered"] >= max(every_a["covered"], nothing["covered"])
    assert every_u["kept"] <= every_a["kept"] + rules_claims
