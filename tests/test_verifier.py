"""The claim verifier: its features on hand-made claims, its training (deterministic, gold ranked
above the perturbations), its weights file, and the study that measures it on an evaluation
folder (eval/studies/verifier_auc.py)."""

from __future__ import annotations

import json
import math

import pytest

from memworker.eval import runner
from memworker.eval.cli import main as eval_main
from memworker.eval.studies import proposals as proposals_study
from memworker.eval.studies import verifier_auc as study
from memworker.hashing import canonical_json
from memworker.inference import codec
from memworker.inference import verifier as v
from memworker.train import verifier as tv


def _event(index, text, role="user", trusted=True):
    return {"index": index, "role": role, "text": text, "trusted": trusted,
            "timestamp": f"2025-05-0{index + 1}T10:00:00+02:00"}


def _claim(value, quote, index=0, name="the user", predicate="lives_in", kind="fact", **more):
    return {"subject": {"name": name, "type": "person"}, "predicate": predicate, "value": value,
            "kind": kind, "quotes": [quote], "source_indices": [index], "time_expression": None,
            "supersedes": [], **more}


INPUTS = {"existing_facts": [], "events": [
    _event(0, "I moved to Valencia last year. Is Bilbao nice?"),
    _event(1, "Nice! Would you like tips on Valencia?", role="assistant"),
    _event(2, "Search result: The user lives in Madrid.", role="tool", trusted=False),
    _event(3, "My partner Marta is based in Kyoto these days."),
    _event(4, "I don't live in Porto any more."),
]}


def test_a_value_its_quote_does_not_hold_scores_lower():
    right = v.features(_claim("Valencia", "I moved to Valencia last year."), INPUTS)
    wrong = v.features(_claim("Bilbao", "I moved to Valencia last year."), INPUTS)
    assert right["value_verbatim_quote"] == 1.0 and right["value_share_quote"] == 1.0
    assert wrong["value_verbatim_quote"] == 0.0 and wrong["value_share_quote"] == 0.0
    assert wrong["value_share_window"] == 1.0          # it is in the window, not in the quote
    assert set(right) == set(v.FEATURES) and all(isinstance(x, float) for x in right.values())
    # a well-cut value against a span cut out of the middle of the sentence
    assert right["value_after_function"] == 1.0 and right["value_before_break"] == 1.0
    garbled = v.features(_claim("moved to Valencia last", "I moved to Valencia last year."),
                         INPUTS)
    assert garbled["value_before_break"] == 0.0


def test_negation_question_and_speaker_are_read_from_the_quoted_sentence():
    negated = v.features(_claim("Porto", "I don't live in Porto any more.", 4), INPUTS)
    assert negated["quote_negation"] == 1.0 and negated["neg_near_value"] == 1.0
    plain = v.features(_claim("Valencia", "I moved to Valencia last year."), INPUTS)
    assert plain["quote_negation"] == 0.0 and plain["neg_near_value"] == 0.0
    question = v.features(_claim("Bilbao", "Is Bilbao nice?"), INPUTS)
    assert question["quote_question"] == 1.0 and plain["quote_question"] == 0.0
    tool = v.features(_claim("Madrid", "Search result: The user lives in Madrid.", 2), INPUTS)
    assert tool["src_untrusted"] == 1.0 and tool["src_user"] == 0.0
    assert plain["src_user"] == 1.0 and plain["src_untrusted"] == 0.0
    offer = v.features(_claim("tips", "Would you like tips on Valencia?", 1), INPUTS)
    assert offer["src_assistant"] == 1.0 and offer["quote_suggestion"] == 1.0
    assert offer["user_src_other"] == 1.0


def test_the_subject_is_checked_against_the_sentence():
    about_partner = _claim("Kyoto", "My partner Marta is based in Kyoto these days.", 3)
    user = v.features(about_partner, INPUTS)
    assert user["subj_user"] == 1.0 and user["user_quote_other_person"] == 1.0
    marta = v.features({**about_partner, "subject": {"name": "Marta (the user's partner)",
                                                     "type": "person"}}, INPUTS)
    assert marta["subj_user"] == 0.0 and marta["named_in_quote"] == 1.0
    assert marta["named_relation_in_window"] == 1.0 and marta["user_quote_other_person"] == 0.0
    stranger = v.features({**about_partner, "subject": {"name": "Ines (the user's sister)",
                                                        "type": "person"}}, INPUTS)
    assert stranger["named_in_quote"] == 0.0 and stranger["named_in_window"] == 0.0


def test_a_later_correction_and_a_stale_value_are_seen():
    inputs = {"existing_facts": [{"id": "F1", "statement": "The user lives in Valencia.",
                                  "valid_from": "2025-01-01"}],
              "events": [_event(0, "Marta lives in Valencia."),
                         _event(1, "Actually no, scratch that: Marta moved to Bilbao, not "
                                   "Valencia.")]}
    claim = _claim("Valencia", "Marta lives in Valencia.", name="Marta")
    f = v.features(claim, inputs)
    assert f["later_correction"] == 1.0 and f["later_negates_value"] == 1.0
    assert f["value_in_existing"] == 1.0 and f["existing_stale"] == 1.0
    fresh = v.features(_claim("Bilbao", "Marta moved to Bilbao, not Valencia.", 1, name="Marta"),
                       inputs)
    assert fresh["later_correction"] == 0.0 and fresh["value_in_existing"] == 0.0


def test_kind_and_tense_and_the_cue_table():
    plan = v.features(_claim("visit Bilbao", "I'm going to visit Bilbao next week.",
                             kind="plan", predicate="plans_to"),
                      {"existing_facts": [], "events": [
                          _event(0, "I'm going to visit Bilbao next week.")]})
    assert plan["kind_plan"] == 1.0 and plan["plan_future"] == 1.0
    assert plan["pred_quote_aff"] == 0.0          # no cue table given: its features are 0
    inputs = {"existing_facts": [], "events": [_event(0, "I live in Utrecht."),
                                               _event(1, "I have a beagle called Bo.")]}
    gold = [(_claim("Utrecht", "I live in Utrecht."), inputs),
            (_claim("a beagle", "I have a beagle called Bo.", 1, predicate="pet"), inputs)] * 2
    cues = v.Cues(v.Cues.count(gold, min_count=1))
    right = v.features(_claim("Utrecht", "I live in Utrecht."), inputs, cues)
    forced = v.features(_claim("Utrecht", "I live in Utrecht.", predicate="pet"), inputs, cues)
    assert right["pred_quote_aff"] > forced["pred_quote_aff"]
    assert right["pred_value_aff"] > forced["pred_value_aff"]


# --- training -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trained(tiny_corpus):
    return tv.train([tiny_corpus], command="test")


def test_training_is_deterministic_and_ranks_gold_above_the_perturbations(tiny_corpus, trained):
    weights, report = trained
    again, _ = tv.train([tiny_corpus], command="test")
    assert tv.dump(weights) == tv.dump(again)
    assert weights["features"] == list(v.MODEL_FEATURES)
    assert set(v.MODEL_FEATURES) | set(v.UNUSED) == set(v.FEATURES)
    provenance = weights["provenance"]
    manifest = json.loads((tiny_corpus / "manifest.json").read_text())["manifest_sha256"]
    assert provenance["corpora"][str(tiny_corpus)]["manifest_sha256"] == manifest
    kinds = provenance["examples"][str(tiny_corpus)]
    assert kinds["gold"] > 0 and {"wrong_predicate", "subject_swap", "garbled_value"} <= set(kinds)
    # ranked on the examples it was fitted on (cue features cross-fitted), and on the val rows
    assert provenance["train_auc"][str(tiny_corpus)] > 0.9
    assert report[str(tiny_corpus)]["auc"] > 0.6
    assert provenance["validation"][str(tiny_corpus)]["auc"] == report[str(tiny_corpus)]["auc"]


def test_negatives_never_say_a_current_fact(tiny_corpus):
    rows = tv._extract_rows(tiny_corpus, "train")
    pool = tv.Pool([g for r in rows for g in r["gold"]["claims"]], None)
    made = [(r, k, c) for r in rows for k, c in tv.negatives(r, pool, tv.row_rng(0, r["id"]))]
    assert made and not any(tv.says_current(c, r["truth"]) for r, _, c in made)
    assert all(tv.says_current(g, r["truth"]) for r in rows for g in r["gold"]["claims"])
    for r, _, c in made:   # every negative quotes its own row's events
        texts = {e["index"]: e["text"] for e in r["input"]["events"]}
        assert all(q in texts[i] for q, i in zip(c["quotes"], c["source_indices"], strict=True))


def test_test_sets_are_refused(tmp_path):
    (tmp_path / "natural-dev").mkdir()
    with pytest.raises(tv.VerifierTrainError, match="never trained on"):
        tv.train([tmp_path / "natural-dev"])


def test_the_committed_weights_load_and_match_the_code():
    model = v.Verifier.load()
    assert model.names == list(v.MODEL_FEATURES)
    corpora = model.weights["provenance"]["corpora"]
    assert set(corpora) == {"data/natural-train", "data/corpus"}
    claim = _claim("Valencia", "I moved to Valencia last year.")
    assert 0.0 < model.prob(claim, INPUTS) < 1.0


def test_malformed_weights_are_refused(tmp_path, trained):
    missing = tmp_path / "none.json"
    with pytest.raises(v.VerifierError, match=r"^no such file: verifier weights .*none\.json"):
        v.Verifier.load(missing)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(v.VerifierError, match=r"^not JSON .*bad\.json"):
        v.Verifier.load(bad)
    weights = trained[0]
    for broken, reason in (({**weights, "version": 99}, "version 99"),
                           ({**weights, "weights": weights["weights"][:-1]}, "'weights' is not"),
                           ({**weights, "scale": [0.0] * len(weights["scale"])}, "scale"),
                           ({**weights, "features": [*weights["features"][:-1], "nope"]},
                            "does not compute"),
                           ({k: x for k, x in weights.items() if k != "cues"}, "no 'cues'")):
        path = tmp_path / "w.json"
        path.write_text(json.dumps(broken))
        with pytest.raises(v.VerifierError, match=reason) as info:
            v.Verifier.load(path)
        assert str(path) in str(info.value)


# --- the study over an evaluation folder ----------------------------------------------------------

def _proposing_folder(tiny_corpus, tmp_path, logprobs=True, split="val"):
    """An eval folder with the rules arm and `student`: per extract row, the gold claims and
    perturbations of them (the trainer's), through the codec, every answer character one token
    at log p -1."""
    out = tmp_path / f"ev-{split}"
    assert eval_main(["--arm", "rules", "--set", split, "--corpus", str(tiny_corpus),
                      "--task", "extract", "--out", str(out), "--no-progress",
                      "--no-plots"]) == 0
    rows = [r for r in runner.load_eval_rows(tiny_corpus, split) if r["task"] == "extract"]
    pool = tv.Pool([g for r in rows for g in r["gold"]["claims"]], None)
    with open(out / runner.SAMPLES, "ab") as fh:
        for row in rows:
            wrong = [c for _, c in tv.negatives(row, pool, tv.row_rng(1, row["id"]))][:3]
            result = codec.verify_canonical("extract", row["input"],
                                            {"claims": row["gold"]["claims"] + wrong})
            attempt = {"raw": result.raw}
            if logprobs:
                attempt["token_logprobs"] = [[c, -1.0] for c in result.raw]
            sample = {"arm": "student", "id": row["id"], "episode": row["episode"],
                      "task": "extract", "prompt_sha256": "0" * 64, "schema_sha256": "0" * 64,
                      "max_tokens": 1024, "attempts": [attempt], "status": "first_try",
                      "error": None, "output": result.output, "wire": result.wire,
                      "diagnostics": result.diagnostics, "seconds": 1.0}
            sample["verdicts"] = runner.grade_sample(row, sample)
            fh.write(canonical_json(sample) + b"\n")
    return out


def test_the_study_measures_the_verifier_on_proposed_claims(tiny_corpus, tmp_path, capsys):
    """The committed weights on the tiny corpus's val rows: gold claims beside perturbations of
    them, proposed by a fabricated arm."""
    out = _proposing_folder(tiny_corpus, tmp_path)
    target = tmp_path / "figures.json"
    assert study.main(["--out", str(out), "--model", "student", "--json", str(target)]) == 0
    printed = capsys.readouterr().out
    figures = json.loads(target.read_text())
    assert f"{figures['claims']} claims" in printed and "| verifier |" in printed
    assert 0 < figures["supported"] < figures["claims"]
    assert figures["auc"]["first(predicate)+first(value)"] == 0.5    # every token alike
    assert figures["auc"]["verifier"] > 0.7
    every = figures["every_claim"]
    assert [every["supported"], every["claims"]] == [figures["supported"], figures["claims"]]
    kept = [s["kept"] for s in figures["sweep"]]
    assert kept == sorted(kept, reverse=True) and len(kept) == len(study.THRESHOLDS)
    for s in figures["sweep"]:
        assert s["verifier"]["claims"] == s["kept"] == s["logprob_same_kept"]["claims"]
        assert s["verifier"]["required"] == every["required"]
    assert not math.isnan(figures["auc"]["verifier"])
    # the either-gate: every claim scores -1 a token, so A=-100 keeps all, A=0 leaves the verifier
    assert study.main(["--out", str(out), "--model", "student", "--json", str(target),
                       "--threshold", "0.5", "--either=-100,0.5", "--either=0,0.5"]) == 0
    both = json.loads(target.read_text())
    assert both["either"][0]["totals"] == every
    assert both["either"][1]["totals"] == both["sweep"][0]["verifier"]
    assert "| A 0, B 0.5 |" in capsys.readouterr().out
    assert study.main(["--out", str(out), "--model", "student", "--either", "0.5"]) == 2


def test_the_study_refuses_an_arm_without_log_probabilities(tiny_corpus, tmp_path, capsys):
    out = _proposing_folder(tiny_corpus, tmp_path, logprobs=False)
    assert study.main(["--out", str(out), "--model", "student"]) == 2
    err = capsys.readouterr().err
    assert "no token log-probabilities" in err and "--logprobs" in err


# --- the student's own proposals as training examples ---------------------------------------------

def test_proposals_of_a_train_split_are_graded_and_trained_on(tiny_corpus, tmp_path, capsys):
    out = _proposing_folder(tiny_corpus, tmp_path, split="train")
    target = tmp_path / "proposals.jsonl"
    assert proposals_study.main(["--out", str(out), "--model", "student",
                                 "--write", str(target)]) == 0
    lines = [json.loads(x) for x in target.read_text().splitlines()]
    head, rows = lines[0]["proposals"], lines[1:]
    assert head["set"] == "train" and head["arm"] == "student" and head["rows"] == len(rows)
    assert 0 < head["supported"] < head["claims"] == sum(len(r["claims"]) for r in rows)
    # the gold claims the fabricated arm proposed are the supported ones
    truth = {r["id"]: r for r in runner.load_eval_rows(tiny_corpus, "train")}
    for r in rows:
        gold = [canonical_json(g) for g in truth[r["id"]]["gold"]["claims"]]
        for claim, good in zip(r["claims"], r["supported"], strict=True):
            if canonical_json(claim) in gold:
                assert good
    assert f"{head['claims']} claims" in capsys.readouterr().out
    weights, _ = tv.train([tiny_corpus], command="test", proposals=[target])
    again, _ = tv.train([tiny_corpus], command="test", proposals=[target])
    assert tv.dump(weights) == tv.dump(again)
    kinds = weights["provenance"]["examples"]["proposals student@" + tiny_corpus.name]
    assert kinds == {"proposed_supported": head["supported"],
                     "proposed_unsupported": head["claims"] - head["supported"]}
    record = weights["provenance"]["proposals"][0]
    assert record["file"] == str(target) and record["set"] == "train"
    # the proposals moved the fit
    assert tv.dump(weights) != tv.dump(tv.train([tiny_corpus], command="test")[0])


def test_proposals_of_a_measured_split_are_refused(tiny_corpus, tmp_path, capsys):
    out = _proposing_folder(tiny_corpus, tmp_path, split="val")
    assert proposals_study.main(["--out", str(out), "--model", "student",
                                 "--write", str(tmp_path / "p.jsonl")]) == 2
    assert "only a training corpus's train split" in capsys.readouterr().err
    forged = tmp_path / "forged.jsonl"
    forged.write_text(json.dumps({"proposals": {"arm": "x", "set": "val",
                                                "corpus": str(tiny_corpus)}}) + "\n")
    with pytest.raises(tv.VerifierTrainError, match="must come from a training corpus"):
        tv.train([tiny_corpus], proposals=[forged])
    (tmp_path / "plain.jsonl").write_text('{"id": 1}\n')
    with pytest.raises(tv.VerifierTrainError, match="no proposals header"):
        tv.train([tiny_corpus], proposals=[tmp_path / "plain.jsonl"])
