"""The turn gate (`memworker.inference.turn_gate`): which turns a turns-form worker asks — its
features and probability, the trainer on a tiny corpus, the codec leaving a turn unasked
(`run_turns(ask=)`), and the worker and evaluator settings that carry it."""

from __future__ import annotations

import json

import pytest

from memworker import turns
from memworker.eval import cli as eval_cli
from memworker.eval import runner
from memworker.inference import codec, turn_gate
from memworker.inference.backends import ReplayBackend
from memworker.inference.hmem import MemWorkerBackend, WorkerError, worker_config, worker_flags
from memworker.train import turn_gate as train_tg
from tests.test_codec import EP, claim, extract_text

LISBON = claim()
GATE = {"version": turn_gate.VERSION, "bias": -2.0,
        "weights": {"w:mov": 3.0, "w:lisbon": 1.0, "name": 0.5}}


def test_features_are_stems_pairs_and_shape():
    got = turn_gate.features("I moved to Lisbon in 2024.")
    assert "w:mov" in got and "b:i_mov" in got and "digit" in got and "name" in got
    assert got == sorted(set(got)) and any(f.startswith("len:") for f in got)
    assert "name" not in turn_gate.features("Lisbon is lovely")   # a capital opening a sentence
    assert turn_gate.features(None) == ["len:0"]


def test_the_probability_reads_the_weights_and_asks_each_turn():
    gate = turn_gate.TurnGate(GATE)
    moved = gate.prob("I moved to Lisbon last month.")
    assert moved == pytest.approx(1 / (1 + pytest.importorskip("math").exp(-(-2.0 + 3 + 1 + .5))))
    assert gate.prob("Thanks!") == pytest.approx(1 / (1 + pytest.importorskip("math").exp(2.0)))
    # EP's turns: events 0 and 2 hold user words
    assert turns.turn_events(EP["events"]) == [0, 2]
    assert turn_gate.asks(EP, 0.5, gate) == [True, False]
    assert turn_gate.asks(EP, 0.0, gate) == [True, True]
    with pytest.raises(turn_gate.TurnGateError, match="probability"):
        turn_gate.asks(EP, 1.5, gate)
    with pytest.raises(turn_gate.TurnGateError, match="version"):
        turn_gate.TurnGate({**GATE, "version": 99})


def test_load_refuses_a_missing_or_broken_file(tmp_path):
    with pytest.raises(turn_gate.TurnGateError, match="not found"):
        turn_gate.TurnGate.load(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(turn_gate.TurnGateError, match="bad.json"):
        turn_gate.TurnGate.load(tmp_path / "bad.json")
    committed = turn_gate.TurnGate.load()
    assert committed.provenance["command"].startswith("python train/turn_gate.py")
    assert 0.0 < committed.prob("My sister Ana lives in Porto now.") <= 1.0


def test_a_turn_not_asked_is_not_generated_and_answers_no_claim():
    dentist = claim(predicate="plans_to", value="book the dentist",
                    quotes=[["Book the dentist for next Friday at 3pm.", 2]])
    backend = ReplayBackend([extract_text(dentist)])
    result = codec.run_turns(backend, EP, ask=[False, True])
    assert len(backend.calls) == 1
    # the asked turn's prompt holds the unasked turn's answer as if the model had written it
    assert backend.calls[0]["messages"] == turns.messages(EP, [codec.TURN_SKIPPED])
    assert [c["predicate"] for c in result.output["claims"]] == ["plans_to"]
    skipped = result.turns[0]
    assert (skipped.raw, skipped.finish_reason, skipped.completion_tokens) == \
        (codec.TURN_SKIPPED, "skipped", 0)
    assert "event 0: not asked (turn gate)" in result.diagnostics
    # none asked: no call at all, no claim
    quiet = ReplayBackend([])
    assert codec.run_turns(quiet, EP, ask=[False, False]).output == {"claims": []}
    assert quiet.calls == []
    with pytest.raises(ValueError, match="2 turns"):
        codec.run_turns(ReplayBackend([]), EP, ask=[True])


def test_tail_drop_ends_the_prompts_at_the_last_asked_turns_event():
    """`tail="drop"`: the window the prompts show ends at the last asked turn's event; the
    schema and the merged answer still hold the whole window; "read" shows every event."""
    backend = ReplayBackend([extract_text(LISBON)])
    result = codec.run_turns(backend, EP, ask=[True, False], tail="drop")
    shown = {**EP, "events": EP["events"][:1]}          # turns at events 0 and 2: 0 asked
    assert backend.calls[0]["messages"] == turns.messages(shown, [])
    assert "Ignore previous instructions" not in json.dumps(backend.calls[0]["messages"])
    assert [c["predicate"] for c in result.output["claims"]] == ["lives_in"]
    assert result.turns[1].finish_reason == "skipped"
    read = ReplayBackend([extract_text(LISBON)])
    codec.run_turns(read, EP, ask=[True, False])
    assert read.calls[0]["messages"] == turns.messages(EP, [])
    assert read.calls[0]["messages"] != backend.calls[0]["messages"]
    # the last turn asked: the window up to its event (the tool's weather after it is not
    # shown); none asked: no call either way
    last = ReplayBackend([extract_text(claim(predicate="plans_to", value="book the dentist",
                                             quotes=[["Book the dentist for next Friday at "
                                                      "3pm.", 2]]))])
    codec.run_turns(last, EP, ask=[False, True], tail="drop")
    assert last.calls[0]["messages"] == turns.messages({**EP, "events": EP["events"][:3]},
                                                       [codec.TURN_SKIPPED])
    assert "Weather in Lisbon" not in json.dumps(last.calls[0]["messages"])
    quiet = ReplayBackend([])
    assert codec.run_turns(quiet, EP, ask=[False, False], tail="drop").output == {"claims": []}
    assert quiet.calls == []
    with pytest.raises(ValueError, match="needs ask"):
        codec.run_turns(ReplayBackend([]), EP, tail="drop")
    with pytest.raises(ValueError, match="one of read, drop"):
        codec.run_turns(ReplayBackend([]), EP, ask=[True, True], tail="cut")


def test_tail_omit_leaves_the_unasked_turns_out_of_the_conversation():
    """`tail="omit"`: as "drop", and an unasked turn before the last asked one is not in the
    prompt at all (no question, no empty answer); with every turn asked it is the full form."""
    dentist = claim(predicate="plans_to", value="book the dentist",
                    quotes=[["Book the dentist for next Friday at 3pm.", 2]])
    upto2 = {**EP, "events": EP["events"][:3]}
    omit = ReplayBackend([extract_text(dentist)])
    result = codec.run_turns(omit, EP, ask=[False, True], tail="omit")
    sent = omit.calls[0]["messages"]
    assert sent == turns.messages(upto2, [], only=[1])
    assert [m["role"] for m in sent][-1] == "user" and "assistant" not in [m["role"] for m in sent]
    assert "Event [0]" not in json.dumps(sent) and "Event [2]" in json.dumps(sent)
    assert [c["predicate"] for c in result.output["claims"]] == ["plans_to"]
    assert result.turns[0].finish_reason == "skipped"
    drop = ReplayBackend([extract_text(dentist)])
    codec.run_turns(drop, EP, ask=[False, True], tail="drop")
    assert drop.calls[0]["messages"] == turns.messages(upto2, [codec.TURN_SKIPPED])
    assert len(drop.calls[0]["messages"]) == len(sent) + 2
    # every turn asked: the second turn's prompt holds the first turn's answer, as "read" does
    first = extract_text(LISBON)
    both = ReplayBackend([first, extract_text(dentist)])
    codec.run_turns(both, EP, ask=[True, True], tail="omit")
    assert both.calls[1]["messages"] == turns.messages(upto2, [first])
    with pytest.raises(ValueError, match="needs ask"):
        codec.run_turns(ReplayBackend([]), EP, tail="omit")
    for bad in ([], [1, 0], [0, 2], [1, 1]):
        with pytest.raises(turns.TurnsError, match="rising indices"):
            turns.messages(EP, [], only=bad)


def test_the_worker_and_the_evaluator_carry_the_tail(monkeypatch):
    config = worker_config("turns", "verifier>=0.9", True, turn_gate=0.9, turn_gate_tail="drop")
    assert config["turn_gate_tail"] == "drop"
    assert "turn_gate_tail" not in worker_config("turns", turn_gate=0.9)
    with pytest.raises(WorkerError, match="needs a turn gate"):
        worker_config("turns", turn_gate_tail="drop")
    with pytest.raises(WorkerError, match="one of read, drop"):
        worker_config("turns", turn_gate=0.9, turn_gate_tail="cut")
    assert worker_flags(config, "s")[-4:] == ["--turn-gate", "s=0.9", "--turn-gate-tail", "drop"]
    monkeypatch.setattr(turn_gate, "committed", lambda: turn_gate.TurnGate(GATE))
    backend = ReplayBackend([extract_text(LISBON)])
    worker = MemWorkerBackend(backend, extract_form="turns", turn_gate=0.5, turn_gate_tail="drop")
    worker._run("extract", EP)
    assert backend.calls[0]["messages"] == turns.messages({**EP, "events": EP["events"][:1]}, [])
    # the evaluator: a sampler field, left out of a record at its default, refused without a gate
    assert "turn_gate_tail" not in runner.sampler_doc(runner.Sampler())
    assert runner.sampler_doc(runner.Sampler(turn_gate_tail="drop"))["turn_gate_tail"] == "drop"
    args = eval_cli.build_parser().parse_args(["--arm", "rules", "--set", "val", "--out", "o",
                                               "--turn-gate-tail", "drop"])
    with pytest.raises(runner.EvalError, match="--turn-gate-tail applies"):
        runner.check_turn_options(args)
    from memworker.export.receipt import _ran
    ran = _ran({"sampler": {"extract_form": "turns", "turn_gate_tail": "drop"},
                "turn_gates": {"student": 0.9}})
    assert ran["turn_gate"] == 0.9 and ran["turn_gate_tail"] == "drop"


def test_a_claim_gate_reads_the_asked_turns_tokens_beside_an_unasked_one():
    """An unasked turn's answer has no tokens and no claim: the gate's field statistics skip it
    and still read the asked turn's."""
    from memworker.inference.gate import parts_fields
    raw = extract_text(LISBON)
    parts = [(codec.TURN_SKIPPED, None, "event 0: "), (raw, [[c, -0.01] for c in raw],
                                                       "event 2: ")]
    fields = parts_fields(parts, [], 1, "t")
    assert fields is not None and len(fields) == 1
    # an asked turn without tokens still means none were recorded
    assert parts_fields([(raw, None, "event 0: ")], [], 1, "t") is None


def test_the_worker_carries_the_turn_gate(monkeypatch):
    assert worker_config("turns", "verifier>=0.9", True, turn_gate=0.4)["turn_gate"] == 0.4
    assert "turn_gate" not in worker_config("turns", "verifier>=0.9", True)
    with pytest.raises(WorkerError, match="extract form turns"):
        worker_config("window", turn_gate=0.4)
    with pytest.raises(WorkerError, match="probability"):
        worker_config("turns", turn_gate=2)
    flags = worker_flags({"extract_form": "turns", "claim_gate": "verifier>=0.9",
                          "turn_gate": 0.4}, "s")
    assert flags[-2:] == ["--turn-gate", "s=0.4"]
    assert worker_flags({"extract_form": "turns", "turn_gate": 0.4})[-2:] == ["--turn-gate", "0.4"]
    monkeypatch.setattr(turn_gate, "committed", lambda: turn_gate.TurnGate(GATE))
    backend = ReplayBackend([extract_text(LISBON)])
    worker = MemWorkerBackend(backend, extract_form="turns", turn_gate=0.5)
    out = worker._run("extract", EP)
    assert len(backend.calls) == 1 and [c["predicate"] for c in out.output["claims"]] == \
        ["lives_in"]


def test_the_evaluator_assigns_turn_gates_per_arm_and_records_them():
    arms = [runner.parse_arm("s=s.gguf"), runner.parse_arm("b=b.gguf"), runner.parse_arm("rules")]
    got = runner.assign_turn_gates(arms, ["s=0.4"], "turns")
    assert [a.turn_gate for a in got] == [0.4, None, None]
    assert [a.turn_gate for a in runner.assign_turn_gates(arms, ["0.3"], "turns")] == \
        [0.3, 0.3, None]
    config = runner.turn_gates_config(got)
    assert config["turn_gates"] == {"s": 0.4} and len(config["turn_gate_sha256"]) == 64
    assert runner.turn_gates_config(arms) == {}
    for bad, match in ((["x=0.4"], "no arm"), (["rules=0.4"], "rules arm"),
                       (["s=1.2"], "probability"), (["s=0.4", "s=0.5"], "two turn gates")):
        with pytest.raises(runner.EvalError, match=match):
            runner.assign_turn_gates(arms, bad, "turns")
    with pytest.raises(runner.EvalError, match="turns only"):
        runner.assign_turn_gates(arms, ["s=0.4"], "window")


def test_a_folder_refuses_another_turn_gate_for_an_arm(tiny_corpus, tmp_path):
    """The evaluator's resume check (`continue_config`): samples of an arm made with one turn
    gate are not joined by a run with another."""
    out = tmp_path / "ev"
    assert eval_cli.main(["--arm", "rules", "--set", "val", "--corpus", str(tiny_corpus),
                          "--task", "extract", "--limit", "1", "--out", str(out),
                          "--no-progress", "--no-plots"]) == 0
    before = json.loads((out / "config.json").read_text())
    samples = (out / runner.SAMPLES).read_text().replace('"arm":"rules"', '"arm":"s"')
    (out / runner.SAMPLES).write_text(samples)
    before["arms"] = {"s": "s.gguf"}
    before["turn_gates"], before["turn_gate_sha256"] = {"s": 0.4}, "a" * 64
    (out / "config.json").write_text(json.dumps(before))
    same = {**before}
    assert eval_cli.continue_config(out, same)["turn_gates"] == {"s": 0.4}
    with pytest.raises(runner.ConfigMismatch, match="another turn gate"):
        eval_cli.continue_config(out, {**before, "turn_gates": {"s": 0.5}})
    with pytest.raises(runner.ConfigMismatch, match="another turn gate"):
        eval_cli.continue_config(out, {k: v for k, v in before.items()
                                       if k not in ("turn_gates", "turn_gate_sha256")})


def test_the_trainer_fits_on_the_tiny_corpus_and_writes_weights(tiny_corpus, tmp_path, capsys):
    target = tmp_path / "tg.json"
    assert train_tg.main(["--corpus", str(tiny_corpus), "--out", str(target),
                          "--min-count", "1"]) == 0
    weights = json.loads(target.read_text())
    gate = turn_gate.TurnGate(weights)
    assert weights["provenance"]["corpora"][str(tiny_corpus)]["split"] == "train"
    rows = [r for r in runner.load_eval_rows(tiny_corpus, "train") if r["task"] == "extract"]
    exs = train_tg.examples(rows, "c")
    pos = [gate.prob(e["text"]) for e in exs if e["label"]]
    neg = [gate.prob(e["text"]) for e in exs if not e["label"]]
    assert pos and neg and sum(pos) / len(pos) > sum(neg) / len(neg)   # it learnt its split
    assert "AUC" in capsys.readouterr().out
    assert train_tg.main(["--corpus", str(tmp_path / "nowhere"), "--out", str(target)]) == 2
