"""The hybrid worker (`memworker.inference.hybrid`, issue 50): the rules' extract claims kept
beside the model's, through the same codec; recorded in the worker config, the evaluator's and
live acceptance's configs, the receipt's `ran` check and the Modelfile. No model runs: the model
side is a backend that answers a fixed wire text, the rules side is the real rules."""

from __future__ import annotations

import json

import pytest

from memworker import wire
from memworker.eval import runner
from memworker.eval.cli import planned_config
from memworker.export import modelfile
from memworker.export.receipt import _ran
from memworker.inference import codec, hybrid
from memworker.inference.backends import Generation
from memworker.inference.hmem import MemWorkerBackend, WorkerError, worker_config, worker_flags

TS = "2025-03-08T10:00:00+00:00"
MESSAGES = [{"role": "user", "content": "I use Neovim for all my Go work.", "timestamp": TS},
            {"role": "assistant", "content": "Nice setup!", "timestamp": TS},
            {"role": "user", "content": "My sister Ines just moved to Leeds for her PhD.",
             "timestamp": TS}]


def _claim(subject: str, predicate: str, value: str, event: int, quote: str) -> list:
    return wire.pack_claim({"quotes": [{"quote": quote, "event": event}],
                            "subject": {"name": subject, "type": "person"},
                            "predicate": predicate, "value": value, "kind": "fact",
                            "time_expression": None, "supersedes": []})


class Fixed:
    """A generation backend that answers one fixed text to every request."""

    name = "fixed"

    def __init__(self, text: str):
        self.text, self.calls = text, 0

    def generate(self, messages, *, schema=None, grammar=None, max_tokens, temperature=0.0,
                 seed=0):
        self.calls += 1
        return Generation(text=self.text, finish_reason="stop", backend=self.name)


def _model_text(*claims: list) -> str:
    return wire.dump_answer("extract", {"claims": list(claims)})


NEOVIM = _claim("the user", "uses_tool", "Neovim", 0, "I use Neovim for all my Go work.")
INES = _claim("Ines (the user's sister)", "lives_in", "Leeds", 2,
              "My sister Ines just moved to Leeds for her PhD.")


def test_the_rules_claims_come_first_and_a_fact_both_sides_say_is_kept_once():
    worker = MemWorkerBackend(Fixed(_model_text(NEOVIM, INES)), with_rules="union")
    claims = worker.extract(MESSAGES)
    said = [(c["predicate"], c["value"]) for c in claims]
    inputs = worker.episode(MESSAGES)[0]
    rules_said = [(wire.unpack_claim(c)["predicate"], wire.unpack_claim(c)["value"])
                  for c in hybrid.rules_wire(inputs)["claims"]]
    assert rules_said, "the rules store the plain first-person sentence"
    assert said[:len(rules_said)] == rules_said
    assert said.count(("uses_tool", "Neovim")) == 1          # both said it: once
    assert ("lives_in", "Leeds") in said                       # the model's own, added
    assert any(d.startswith("with rules (union)") for d in worker.last.diagnostics)


def test_without_the_rules_the_worker_answers_the_models_claims_alone():
    worker = MemWorkerBackend(Fixed(_model_text(INES)))
    assert [(c["predicate"], c["value"]) for c in worker.extract(MESSAGES)] == \
        [("lives_in", "Leeds")]


def test_the_merge_respects_the_schemas_claim_limit_and_returns_a_codec_result():
    inputs = MemWorkerBackend(Fixed("")).episode(MESSAGES)[0]
    model = codec.decode("extract", inputs, _model_text(INES), finish_reason="stop")
    merged = hybrid.with_rules(model, inputs)
    assert isinstance(merged, codec.CodecResult)
    assert len(merged.output["claims"]) <= hybrid.claim_limit(
        codec.build_schema("extract", inputs))
    assert merged.raw == model.raw and merged.attempts == model.attempts
    assert hybrid.with_rules(model, inputs, "none") is model
    with pytest.raises(ValueError, match="with_rules"):
        hybrid.with_rules(model, inputs, "fill")


def test_same_fact_reads_the_user_and_a_relation_alike():
    assert hybrid.same_fact(("The user", "lives_in", "porto"), ("I", "lives_in", "porto"))
    assert hybrid.same_fact(("Ines (the user's sister)", "lives_in", "leeds"),
                            ("Ines", "lives_in", "leeds"))
    assert not hybrid.same_fact(("Ines", "lives_in", "leeds"), ("Ines", "works_in", "leeds"))
    assert not hybrid.same_fact(("the user", "lives_in", "leeds"), ("Ines", "lives_in", "leeds"))


def test_the_worker_record_keeps_with_rules_and_its_flags_run_it():
    w = worker_config("turns", "verifier>=0.7", True, with_rules="union")
    assert w["with_rules"] == "union"
    assert "with_rules" not in worker_config("turns", "verifier>=0.7", True)
    assert worker_flags(w)[-1:] == ["--with-rules"]
    assert worker_flags(w, "student")[-2:] == ["--with-rules", "student"]
    with pytest.raises(WorkerError, match="with rules"):
        worker_config("window", with_rules="fill")
    with pytest.raises(WorkerError, match="window, turns and sentences"):
        worker_config("walk", with_rules="union")
    assert "rules' claims" in modelfile.worker_words(w)
    assert "with_rules=" in modelfile.worker_line(w)


def test_the_evaluator_records_the_hybrid_arm_and_the_receipt_reads_it(tmp_path, tiny_corpus):
    gguf = tmp_path / "s.gguf"
    gguf.write_bytes(b"GGUF not a model")
    argv = ["--arm", f"student={gguf}", "--arm", "rules", "--set", "val",
            "--corpus", str(tiny_corpus), "--out", str(tmp_path / "out"), "--extract-form", "turns",
            "--claim-gate", "student=verifier>=0.7", "--with-rules", "student"]
    out, config = planned_config(argv)
    assert config["with_rules"] == ["student"]
    assert "with_rules" not in planned_config(argv[:-2])[1]
    arms = runner.assign_with_rules([runner.parse_arm("student=x.gguf"),
                                     runner.parse_arm("rules")], ["student"], "turns")
    assert [a.with_rules for a in arms] == [True, False]
    with pytest.raises(runner.EvalError, match="rules arm"):
        runner.assign_with_rules(arms, ["rules"])
    with pytest.raises(runner.EvalError, match="no arm"):
        runner.assign_with_rules(arms, ["base"])
    config = {"sampler": {"extract_form": "turns"}, "claim_gates": {"student": "verifier>=0.7"},
              "proposing": ["student"], "with_rules": ["student"]}
    assert _ran(config) == worker_config("turns", "verifier>=0.7", True, with_rules="union")
    assert "with_rules" not in _ran({**config, "with_rules": []})


def test_run_row_merges_after_the_gate_and_records_both_counts():
    inputs = MemWorkerBackend(Fixed("")).episode(MESSAGES)[0]
    row = {"id": "r", "episode": "e", "task": "extract", "input": inputs}
    sampler = runner.Sampler()
    def ungraded(row, sample):
        return {}
    sample = runner.run_row(Fixed(_model_text(INES)), row, sampler, ungraded, with_rules=True)
    assert sample["with_rules"]["model_claims"] == 1
    assert sample["with_rules"]["claims"] == len(sample["output"]["claims"]) >= 2
    plain = runner.run_row(Fixed(_model_text(INES)), row, sampler, ungraded)
    assert "with_rules" not in plain and len(plain["output"]["claims"]) == 1
    json.dumps(sample)
