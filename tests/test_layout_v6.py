"""Claim layout v6 (issue 48 item 1, "the quote chosen, not copied"): an extract claim written
without quotes, predicate and value first, the trailing defaults left out; the codec quotes the
sentence of the turn's event that the claim points at (`spans.choose_sentence`) and checks the
result as a v3 answer. Wire, grammar, codec, gate, training rows and the evaluator's and
worker's options; generation is replayed (ReplayBackend), not a model."""

from __future__ import annotations

import json

import pytest

from memworker import prompts, turns, wire
from memworker.inference import codec
from memworker.inference.backends import ReplayBackend
from memworker.inference.gate import claim_spans
from memworker.inference.grammar import schema_to_gbnf
from memworker.inference.hmem import MemWorkerBackend
from memworker.inference.schema import build_schema, v6_schema
from tests.gbnf import Matcher
from tests.test_codec import EP, claim, extract_text

LISBON = claim(supersedes=[])   # quotes event 0's first sentence, time "last month"
MARIA = claim(quotes=[["My sister Maria lives in Porto.", 0]], name="Maria (the user's sister)",
              value="Porto", time_expression=None, supersedes=[])
DENTIST = claim(quotes=[["Book the dentist for next Friday at 3pm.", 2]], predicate="plans_to",
                value="book the dentist", kind="plan", time_expression="next Friday at 3pm",
                supersedes=[])


def v6_text(*claims: list) -> str:
    return wire.dump_layout("extract", {"claims": list(claims)}, "v6")


def test_a_v6_claim_leaves_out_its_quotes_and_its_trailing_defaults():
    record = wire.unpack_claim(LISBON)
    assert wire.pack_v6(record) == ["lives_in", "Lisbon", "the user", "person", "fact",
                                    "last month"]
    plain = {**record, "time_expression": None}
    assert wire.pack_v6(plain) == ["lives_in", "Lisbon"]
    assert wire.pack_v6(wire.unpack_claim(MARIA)) == ["lives_in", "Porto",
                                                      "Maria (the user's sister)"]
    assert wire.pack_v6({**plain, "supersedes": ["F1"]})[-1] == ["F1"]   # all written up to it
    # unpacked: the defaults back, the codec's quotes given
    back = wire.unpack_v6(["lives_in", "Lisbon"], [{"quote": "q", "event": 0}])
    assert back == {**plain, "quotes": [{"quote": "q", "event": 0}]}
    for bad in (["lives_in"], [], "lives_in", ["a", "b", "c", "d", "e", "f", "g", "h"]):
        with pytest.raises(ValueError, match="a v6 claim must be an array of 2 to 7"):
            wire.unpack_v6(bad, [])
    assert wire.is_v6_claim(["lives_in", "x"]) and not wire.is_v6_claim(LISBON)
    with pytest.raises(ValueError, match="claim layout 'v5'"):
        wire.check_layout("v5")


def test_a_v6_answer_names_its_fields_for_the_decision_weights():
    text = v6_text(LISBON, MARIA)
    assert text == ('{"claims":[["lives_in","Lisbon","the user","person","fact","last month"],'
                    '["lives_in","Porto","Maria (the user\'s sister)"]]}')
    names = [name for _, name, _ in wire.field_starts(text)]
    assert names == ["claims", "claim", "predicate", "value", "name", "type", "kind",
                     "time_expression", "claim", "predicate", "value", "name"]
    assert wire.dump_layout("extract", {"claims": [LISBON]}, "v3") == extract_text(LISBON)
    # a v6 claim that writes a trailing default is not the text the trainer writes
    with pytest.raises(ValueError, match="not the exact text"):
        wire.field_starts('{"claims":[["lives_in","Lisbon","the user"]]}')


def test_the_v6_grammar_writes_exactly_the_v6_claims_the_v3_schema_allows():
    schema = build_schema("extract", EP)
    grammar = Matcher(schema_to_gbnf(v6_schema(schema)))
    assert grammar.accepts(v6_text(LISBON, MARIA, DENTIST))
    assert grammar.accepts('{"claims":[["lives_in",null]]}')      # a value may be null
    for bad in ('{"claims":[["lives_in"]]}',                       # no value
                '{"claims":[["moved_to","Lisbon"]]}',               # not in the vocabulary
                '{"claims":[["lives_in","Lisbon","the user","human"]]}',
                '{"claims":[["lives_in","Lisbon","the user","person","fact","in May"]]}',
                '{"claims":[["lives_in","Lisbon","the user","person","fact",null,["F9"]]]}',
                extract_text(LISBON)):                             # v3 is not v6
        assert not grammar.accepts(bad), bad
    # the v3 schema is unchanged: the codec checks the quoted answer against it
    assert schema["properties"]["claims"]["items"]["prefixItems"][0]["type"] == "array"


def test_the_codec_quotes_each_v6_claim_from_the_turns_sentence():
    result = codec.decode("extract", EP, v6_text(LISBON, MARIA), layout="v6", event=0)
    assert [c["quotes"] for c in result.output["claims"]] == [
        ["I moved to Lisbon last month."], ["My sister Maria lives in Porto."]]
    assert [c["source_indices"] for c in result.output["claims"]] == [[0], [0]]
    as_v3 = codec.decode("extract", EP, extract_text(LISBON, MARIA))
    assert result.output == as_v3.output and result.wire == as_v3.wire
    assert result.raw == v6_text(LISBON, MARIA)
    # an answer of another shape, or a v6 claim of the wrong length, is the model's error
    for raw, says in (('{"claims":[["lives_in"]]}', "claims/0: a v6 claim"),
                      ('{"claims":[],"x":1}', "nothing else"),
                      ('{"claims":[["lives_in","Lisbon","the user","human"]]}', "human")):
        with pytest.raises(codec.OutputValidationError, match=says):
            codec.decode("extract", EP, raw, layout="v6", event=0)
    with pytest.raises(codec.InputError, match="event 7 is not one of the request's"):
        codec.decode("extract", EP, v6_text(LISBON), layout="v6", event=7)
    # an answer cut by the token limit is refused loudly, before any quote is chosen
    with pytest.raises(codec.OutputTruncatedError, match="truncated"):
        codec.decode("extract", EP, v6_text(LISBON)[:-3], layout="v6", event=0,
                     finish_reason="length")


def test_run_turns_in_v6_quotes_each_turns_own_event_and_merges_as_v3():
    answers = [v6_text(LISBON), v6_text(DENTIST)]
    backend = ReplayBackend(answers)
    result = codec.run_turns(backend, EP, layout="v6", history="none", propose=True)
    whole = codec.decode("extract", EP, extract_text(LISBON, DENTIST))
    assert result.output == whole.output
    assert [t.raw for t in result.turns] == answers
    # each turn: its own event's spans in the v3 schema, the v6 claim lines in the prompt,
    # a v6 grammar that proposes at least one claim
    for call, event in zip(backend.calls, (0, 2), strict=True):
        branches = call["schema"]["properties"]["claims"]["items"]["prefixItems"][0]["items"]
        assert [b["prefixItems"][1]["const"] for b in branches["anyOf"]] == [event]
        user = call["messages"][1]["content"]
        assert prompts.LAYOUT_LINES["v6"] in user and prompts.LAYOUT_LINES["v3"] not in user
        grammar = Matcher(call["grammar"])
        assert grammar.accepts(answers[0] if event == 0 else answers[1])
        assert not grammar.accepts('{"claims":[]}')
    # a v6 answer the codec cannot take is retried, as any turn's
    backend = ReplayBackend(['{"claims":[["lives_in"]]}', v6_text(LISBON), '{"claims":[]}'])
    retried = codec.run_turns(backend, EP, layout="v6", history="none")
    assert [c["predicate"] for c in retried.output["claims"]] == ["lives_in"]
    with pytest.raises(ValueError, match="claim layout 'v9'"):
        codec.run_turns(ReplayBackend([]), EP, layout="v9")


def test_the_gate_finds_a_v6_claims_fields_in_its_raw_answer():
    raw = v6_text(MARIA, LISBON)
    first, second = claim_spans(raw)
    assert raw[slice(*first["predicate"])] == "lives_in"
    assert raw[slice(*first["value"])] == "Porto"
    assert raw[slice(*first["name"])] == "Maria (the user's sister)"
    assert first["kind"] == first["claim"] == first["quote"]        # not written: the claim
    assert raw[slice(*second["time_expression"])] == "last month"
    v3 = extract_text(LISBON)
    assert v3[slice(*claim_spans(v3)[0]["quote"])] == "I moved to Lisbon last month."  # as before


def test_a_turns_training_row_is_written_in_v6():
    window = {"id": "r", "task": "extract", "messages": prompts.render("extract", EP) + [
        {"role": "assistant", "content": extract_text(LISBON, DENTIST)}]}
    row = turns.to_form_row(window, EP, "turns")
    v6 = turns.layout_row(row, "v6")
    answers = [m["content"] for m in v6["messages"] if m["role"] == "assistant"]
    assert answers == [v6_text(LISBON), v6_text(DENTIST)]
    assert prompts.LAYOUT_LINES["v6"] in v6["messages"][1]["content"]
    # what the codec asks a v6 turn read once is exactly the training row's prompt, per turn
    once = turns.read_once_rows(v6)
    backend = ReplayBackend(answers)
    codec.run_turns(backend, EP, layout="v6", history="none")
    assert [c["messages"] for c in backend.calls] == [r["messages"][:-1] for r in once]
    assert turns.layout_row(row, "v3") is row
    other = {"id": "c", "task": "consolidate", "messages": []}
    assert turns.layout_row(other, "v6") is other
    with pytest.raises(prompts.PromptError, match="claim lines"):
        prompts.relayout([{"role": "user", "content": "no template here"}], "v6")


def test_v6_is_a_turns_option_of_training_the_evaluator_and_the_worker():
    from memworker.train import config as tconfig

    cfg = tconfig.load_stage("general", overrides={"extract_form": "turns",
                                                   "claim_layout": "v6"})
    assert cfg.to_dict()["claim_layout"] == "v6"
    assert "claim_layout" not in tconfig.load_stage("general").to_dict()   # old sha256s kept
    with pytest.raises(tconfig.ConfigError, match="claim_layout v6 needs a turns form"):
        tconfig.load_stage("general", overrides={"claim_layout": "v6"})
    with pytest.raises(tconfig.ConfigError, match="claim_layout must be one of v3, v6"):
        tconfig.load_stage("general", overrides={"extract_form": "turns", "claim_layout": "x"})
    worker = MemWorkerBackend(ReplayBackend([v6_text(LISBON), v6_text(DENTIST)]),
                              extract_form="turns", turn_history="none", claim_layout="v6")
    result = worker._run("extract", EP)
    assert [c["quotes"] for c in result.output["claims"]] == [
        ["I moved to Lisbon last month."], ["Book the dentist for next Friday at 3pm."]]


def test_the_evaluator_runs_a_v6_arm_and_records_it(tiny_corpus, tmp_path, capsys):
    from memworker.eval.cli import main as eval_main

    out = tmp_path / "e"
    assert eval_main(["--arm", "rules", "--set", "val", "--corpus", str(tiny_corpus), "--task",
                      "extract", "--limit", "1", "--out", str(out), "--no-progress",
                      "--no-plots", "--claim-layout", "v6"]) == 2
    assert "--claim-layout applies to --extract-form turns" in capsys.readouterr().err
    assert eval_main(["--arm", "rules", "--set", "val", "--corpus", str(tiny_corpus), "--task",
                      "extract", "--limit", "1", "--out", str(out), "--no-progress",
                      "--no-plots", "--extract-form", "turns", "--claim-layout", "v6"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["sampler"]["claim_layout"] == "v6"


def test_every_gold_turn_in_v6_is_written_by_its_turns_grammar(tiny_corpus):
    """A training target the grammar cannot write is a target the student is taught but can
    never produce: every v6 turn answer of the corpus's train windows is accepted by the v6
    grammar the codec gives that turn (its own event, contract bounds), and decodes back to the
    gold's claims with the codec's quotes."""
    from memworker.corpus import load_rows

    inputs = {r["id"]: r["input"] for r in load_rows(tiny_corpus, "train", form="canonical")}
    rows = [r for r in load_rows(tiny_corpus, "train") if r["task"] == "extract"][:12]
    checked = 0
    for row in rows:
        formed = turns.to_form_row(row, inputs[row["id"]], "turns")
        if formed is None:
            continue
        answers = [m["content"] for m in turns.layout_row(formed, "v6")["messages"]
                   if m["role"] == "assistant"]
        for turn, answer in zip(turns.asked(inputs[row["id"]]["events"]), answers, strict=True):
            schema = codec._schema_upto(inputs[row["id"]], turn.event, None, True)
            assert Matcher(schema_to_gbnf(v6_schema(schema))).accepts(answer), answer
            decoded = codec.decode("extract", inputs[row["id"]], answer, layout="v6",
                                   event=turn.event, schema=schema)
            assert len(decoded.output["claims"]) == len(json.loads(answer)["claims"])
            checked += 1
    assert checked > 0
