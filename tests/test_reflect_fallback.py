"""The reflection fallback (`memworker.inference.hybrid.reflect_fallback`, issue 50): where the
model abstains and the rules answer from a memory holding every content word of the question,
the worker answers with the rules' answer. Recorded in the worker config, the evaluator's and
live acceptance's configs, the receipt's `ran` check and the Modelfile; composed by the hybrid
study. No model runs: the model side is a backend that answers a fixed wire text, the rules side
is the real rules."""

from __future__ import annotations

import json

import pytest

from memworker.eval import runner
from memworker.eval.cli import planned_config
from memworker.eval.studies.rowtools import compose_row
from memworker.export import modelfile
from memworker.export.receipt import _ran
from memworker.inference import hybrid
from memworker.inference.hmem import MemWorkerBackend, WorkerError, worker_config, worker_flags
from tests.test_hybrid_worker import Fixed

TS = "2025-03-08T10:00:00+00:00"
WORKS = [{"id": "M1", "text": "The user works at Arcadis.", "timestamp": TS},
         {"id": "M2", "text": "The user plays the cello.", "timestamp": TS}]
ABSTAIN = json.dumps({"answer": "The evidence does not mention the user's job."})
ANSWER = json.dumps({"answer": "The user plays the cello."})


def test_an_abstention_falls_back_to_the_rules_answer_from_a_memory_holding_the_question():
    worker = MemWorkerBackend(Fixed(ABSTAIN), reflect_rules="fallback")
    answer = worker.reflect("Where does the user work?", WORKS, asked_at=TS)
    assert answer["insufficient_evidence"] is False
    assert answer["citations"] == ["M1"] and "Arcadis" in answer["text"]
    assert any(d.startswith("reflect rules (fallback)") for d in worker.last.diagnostics)
    plain = MemWorkerBackend(Fixed(ABSTAIN)).reflect("Where does the user work?", WORKS,
                                                     asked_at=TS)
    assert plain["insufficient_evidence"] is True and plain["citations"] == []


def test_no_fallback_where_the_model_answers_or_no_memory_holds_every_question_word():
    answered = MemWorkerBackend(Fixed(ANSWER), reflect_rules="fallback")
    out = answered.reflect("Which instrument does the user play?", WORKS, asked_at=TS)
    assert out["text"] == "The user plays the cello." and out["citations"] == ["M2"]
    # "city" is in no memory: the rules would copy M1 (it shares "work"), which does not answer
    worker = MemWorkerBackend(Fixed(ABSTAIN), reflect_rules="fallback")
    out = worker.reflect("Which city does the user work in?", WORKS, asked_at=TS)
    assert out["insufficient_evidence"] is True
    inputs = {"question": "Which city does the user work in?", "asked_at": TS, "evidence": WORKS}
    assert not hybrid.falls_back(inputs, {"insufficient_evidence": True})
    inputs["question"] = "Where does the user work?"
    assert hybrid.falls_back(inputs, {"insufficient_evidence": True})
    assert not hybrid.falls_back(inputs, None)        # a failed answer: the worker raises
    assert not hybrid.falls_back(inputs, {"insufficient_evidence": False})
    assert not hybrid.falls_back({**inputs, "evidence": []}, None)


def test_the_fallback_answers_about_the_person_the_question_names():
    evidence = [{"id": "M1", "text": "Daniel (the user's uncle) works at Halden Bike Repairs.",
                 "timestamp": TS}]
    inputs = {"question": "Where does Daniel (the user's friend) work?", "asked_at": TS,
              "evidence": evidence}
    assert not hybrid.falls_back(inputs, {"insufficient_evidence": True})   # another Daniel
    inputs["question"] = "Where does Daniel (the user's uncle) work?"
    assert hybrid.falls_back(inputs, {"insufficient_evidence": True})


def test_the_fallback_never_answers_from_a_secret_or_a_memory_control():
    key = "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"
    evidence = [{"id": "M1", "text": f"The user's api key is {key}", "timestamp": TS}]
    inputs = {"question": "What is the user's api key?", "asked_at": TS, "evidence": evidence}
    assert not hybrid.falls_back(inputs, {"insufficient_evidence": True})


def test_reflect_fallback_keeps_the_result_where_it_does_not_apply():
    worker = MemWorkerBackend(Fixed(ANSWER))
    worker.reflect("Which instrument does the user play?", WORKS, asked_at=TS)
    inputs = {"question": "Which instrument does the user play?", "asked_at": TS,
              "evidence": WORKS}
    assert hybrid.reflect_fallback(worker.last, inputs) is worker.last
    assert hybrid.reflect_fallback(worker.last, inputs, "none") is worker.last
    with pytest.raises(ValueError, match="reflect_rules"):
        hybrid.reflect_fallback(worker.last, inputs, "always")


def test_the_worker_record_keeps_reflect_rules_and_its_flags_run_it():
    w = worker_config("turns", "verifier>=0.7", True, with_rules="union",
                      reflect_rules="fallback")
    assert w["reflect_rules"] == "fallback"
    assert "reflect_rules" not in worker_config("turns", "verifier>=0.7", True)
    assert worker_flags(w)[-2:] == ["--with-rules", "--reflect-rules"]
    assert worker_flags(w, "student")[-2:] == ["--reflect-rules", "student"]
    with pytest.raises(WorkerError, match="reflect rules"):
        worker_config("window", reflect_rules="always")
    assert "falling back to the rules'" in modelfile.worker_words(w)
    assert "reflect_rules=" in modelfile.worker_line(w)


def _planned(tmp_path, corpus, *extra: str) -> dict:
    """eval/run.py's planned config for a student GGUF and the rules, with `extra` flags."""
    gguf = tmp_path / "s.gguf"
    gguf.write_bytes(b"GGUF not a model")
    return planned_config(["--arm", f"student={gguf}", "--arm", "rules", "--set", "val",
                           "--corpus", str(corpus), "--out", str(tmp_path / "out"), *extra])[1]


def test_the_evaluator_records_the_fallback_arm_and_the_receipt_reads_it(tmp_path, tiny_corpus):
    assert _planned(tmp_path, tiny_corpus, "--reflect-rules", "student")["reflect_rules"] == \
        ["student"]
    assert "reflect_rules" not in _planned(tmp_path, tiny_corpus)
    arms = runner.assign_reflect_rules([runner.parse_arm("student=x.gguf"),
                                        runner.parse_arm("rules")], ["student"])
    assert [a.reflect_rules for a in arms] == [True, False]
    with pytest.raises(runner.EvalError, match="rules arm"):
        runner.assign_reflect_rules(arms, ["rules"])
    with pytest.raises(runner.EvalError, match="no arm"):
        runner.assign_reflect_rules(arms, ["base"])
    ran = _ran({"sampler": {"extract_form": "window"}, "reflect_rules": ["student"]})
    assert ran == worker_config("window", reflect_rules="fallback")
    assert "reflect_rules" not in _ran({"sampler": {}, "reflect_rules": ["other"]})


def _row(question: str) -> dict:
    return {"id": "r", "episode": "e", "task": "reflect",
            "input": {"question": question, "asked_at": TS, "evidence": WORKS}}


def test_run_row_falls_back_and_records_it():
    sampler = runner.Sampler()

    def ungraded(row, sample):
        return {}
    sample = runner.run_row(Fixed(ABSTAIN), _row("Where does the user work?"), sampler,
                            ungraded, reflect_rules=True)
    assert sample["reflect_rules"] == {"policy": "fallback", "fell_back": True}
    assert sample["output"]["citations"] == ["M1"]
    kept = runner.run_row(Fixed(ABSTAIN), _row("Which city does the user work in?"), sampler,
                          ungraded, reflect_rules=True)
    assert kept["reflect_rules"]["fell_back"] is False
    assert kept["output"]["insufficient_evidence"] is True
    plain = runner.run_row(Fixed(ABSTAIN), _row("Where does the user work?"), sampler, ungraded)
    assert "reflect_rules" not in plain and plain["output"]["insufficient_evidence"] is True
    json.dumps(sample)


def test_the_study_composes_what_the_worker_answers(monkeypatch):
    monkeypatch.setattr("memworker.eval.studies.rowtools.grade_sample", lambda row, s: {})
    sampler = runner.Sampler()
    for question in ("Where does the user work?", "Which city does the user work in?"):
        row = _row(question)
        model = {**runner.run_row(Fixed(ABSTAIN), row, sampler, lambda r, s: {}), "arm": "m"}
        rules = {**runner.run_row(runner.make_backend(runner.parse_arm("rules"), sampler), row,
                                  sampler, lambda r, s: {}), "arm": "rules"}
        worker = runner.run_row(Fixed(ABSTAIN), row, sampler, lambda r, s: {},
                                reflect_rules=True)
        composed = compose_row(row, rules, model, {"reflect": "fallback"}, "fb")
        assert composed["output"] == worker["output"]
        assert composed["arm"] == "fb"


# --- consolidation by the rules (`consolidate_rules="rules"`) -----------------------------------

FACTS = [{"id": "M1", "text": "The user plays the cello in a quartet."},
         {"id": "M2", "text": "The user plays the cello every Sunday."}]


class Refusing(Fixed):
    def generate(self, *args, **kwargs):
        raise AssertionError("consolidation by the rules must not call the model")


def test_consolidation_by_the_rules_never_calls_the_model_and_answers_as_the_rules():
    worker = MemWorkerBackend(Refusing(""), consolidate_rules="rules")
    observations = worker.consolidate(FACTS)
    rules_worker = MemWorkerBackend(runner.make_backend(runner.parse_arm("rules"),
                                                        runner.Sampler()))
    assert observations == rules_worker.consolidate(FACTS)
    assert "consolidate by the rules" in worker.last.diagnostics
    w = worker_config("window", consolidate_rules="rules")
    assert w["consolidate_rules"] == "rules"
    assert worker_flags(w)[-1:] == ["--consolidate-rules"]
    assert worker_flags(w, "student")[-2:] == ["--consolidate-rules", "student"]
    with pytest.raises(WorkerError, match="consolidate rules"):
        worker_config("window", consolidate_rules="model")
    assert "consolidation by the rules" in modelfile.worker_words(w)
    assert _ran({"sampler": {}, "consolidate_rules": ["student"]}) == w


def test_the_evaluator_records_consolidation_by_the_rules(tmp_path, tiny_corpus):
    assert _planned(tmp_path, tiny_corpus, "--consolidate-rules", "student")[
        "consolidate_rules"] == ["student"]
    with pytest.raises(runner.EvalError, match="rules arm"):
        runner.assign_consolidate_rules([runner.parse_arm("rules")], ["rules"])
    facts = [{"id": f["id"], "statement": f["text"]} for f in FACTS]
    row = {"id": "c", "episode": "e", "task": "consolidate", "input": {"facts": facts}}
    sample = runner.run_row(Refusing(""), row, runner.Sampler(), lambda r, s: {},
                            consolidate_rules=True)
    assert sample["consolidate_rules"] == "rules" and sample["status"] == "first_try"
    rules = runner.run_row(runner.make_backend(runner.parse_arm("rules"), runner.Sampler()),
                           row, runner.Sampler(), lambda r, s: {})
    assert sample["output"] == rules["output"]
