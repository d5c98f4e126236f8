"""Training in the prompts of the worker that asks some turns only (issue 48): a stage's
`turn_gate` (`memworker.train.loop.prepare_data`) builds each extract window as the store's
worker with the committed turn gate and `turn_gate_tail="omit"` sends it, and
`turns.training_messages(ask=)` is the codec's prompt with the gold answers."""

from __future__ import annotations

import json

import pytest

from memworker import turns
from memworker.inference import codec, turn_gate
from memworker.inference.backends import ReplayBackend
from memworker.train import loop
from memworker.train.config import ConfigError, StageConfig
from tests.fixtures.tiny import build_tiny_corpus
from tests.test_codec import EP, claim, extract_text


def test_training_messages_are_the_omitting_workers_prompts_with_the_gold():
    dentist = claim(predicate="plans_to", value="book the dentist",
                    quotes=[["Book the dentist for next Friday at 3pm.", 2]])
    gold = {"claims": [dentist]}
    # the worker asks turn 1 only (event 2): its one prompt, then the gold answer of that turn
    backend = ReplayBackend([extract_text(dentist)])
    codec.run_turns(backend, EP, ask=[False, True], tail="omit")
    got = turns.training_messages(EP, gold, ask=[False, True])
    assert got[:-1] == backend.calls[0]["messages"]
    assert got[-1]["role"] == "assistant" and json.loads(got[-1]["content"])["claims"]
    # every turn asked: the window up to the last turn's event, each turn with its gold
    both = turns.training_messages(EP, gold, ask=[True, True])
    assert both == turns.messages(turns.shown_upto(EP, 2),
                                  [m["content"] for m in turns.training_messages(EP, gold)[2::2]])
    for bad in ([False, False], [True]):
        with pytest.raises(turns.TurnsError, match="flags"):
            turns.training_messages(EP, gold, ask=bad)
    with pytest.raises(turns.TurnsError, match="turns form"):
        turns.to_form_row({"task": "extract", "messages": []}, EP, "walk", ask=[True, True])


def test_a_stage_with_a_turn_gate_trains_the_asked_turns_only(tmp_path, monkeypatch):
    corpus = build_tiny_corpus(tmp_path / "c", episodes=6)
    plain = loop.prepare_data(StageConfig(name="t", corpus=str(corpus), extract_form="turns"))
    # a gate that asks only turns whose event mentions a digit: some windows ask nothing
    gate = turn_gate.TurnGate({"version": turn_gate.VERSION, "bias": -5.0,
                               "weights": {"digit": 10.0}})
    monkeypatch.setattr(turn_gate, "committed", lambda: gate)
    cfg = StageConfig(name="t", corpus=str(corpus), extract_form="turns", turn_gate=0.5)
    asked = loop.prepare_data(cfg)
    ext = {r["id"]: r for r in plain["train"] if r["task"] == "extract"}
    got = {r["id"]: r for r in asked["train"] if r["task"] == "extract"}
    prov = asked["provenance"]["turn_gate"]
    assert prov["threshold"] == 0.5 and prov["tail"] == "omit" and len(prov["weights_sha256"]) == 64
    assert 0 < len(got) < len(ext) and prov["windows_unasked"] >= len(ext) - len(got)
    fewer = 0
    for rid, row in got.items():
        lines = [m["content"] for m in row["messages"][3::2]]
        assert all(line.startswith("Event [") for line in lines)
        fewer += len(row["messages"]) < len(ext[rid]["messages"])
    assert fewer > 0
    # the other tasks' rows are unchanged
    assert [r for r in asked["train"] if r["task"] != "extract"] == \
        [r for r in plain["train"] if r["task"] != "extract"]


@pytest.mark.parametrize("fields, match", [
    ({"turn_gate": 1.5, "extract_form": "turns"}, "probability"),
    ({"turn_gate": 0.9}, "needs extract_form turns"),
    ({"turn_gate": 0.9, "extract_form": "turns", "turn_history": "none"}, "needs extract_form"),
])
def test_a_wrong_turn_gate_setting_is_refused(fields, match):
    with pytest.raises(ConfigError, match=match):
        StageConfig(name="t", **fields).validate()
