"""Extraction in the turns form (memworker.turns, codec.run_turns, training rows and labels).

Generation is replaced by ReplayBackend (given texts, every call recorded): these tests exercise
the form and the codec, not a model."""

from __future__ import annotations

import json

import pytest

from memworker import turns, wire
from memworker.inference import codec
from memworker.inference.backends import ReplayBackend
from memworker.prompts import render
from tests.test_codec import EP, claim, extract_text

LISBON = claim()
DENTIST = claim(quotes=[["Book the dentist for next Friday at 3pm.", 2]], predicate="plans_to",
                value="book the dentist", kind="plan", time_expression="next Friday at 3pm",
                supersedes=[])
EMPTY = '{"claims":[]}'


def _window_row(*claims):
    """A one-call extract training row of EP whose gold holds these claims."""
    return {"id": "r", "task": "extract",
            "messages": render("extract", EP) + [
                {"role": "assistant", "content": wire.dump_answer("extract",
                                                                  {"claims": list(claims)})}]}


def test_one_turn_per_event_with_user_words_and_claims_by_their_latest_quote():
    assert turns.turn_events(EP["events"]) == [0, 2]
    both = claim(quotes=[["I moved to Lisbon last month.", 0],
                         ["Book the dentist for next Friday at 3pm.", 2]])
    parts = turns.split_claims({"claims": [LISBON, both, DENTIST]}, [0, 2])
    assert parts == [{"claims": [LISBON]}, {"claims": [both, DENTIST]}]
    assert turns.merge_claims(parts) == {"claims": [LISBON, both, DENTIST]}
    tool = claim(quotes=[["Weather in Lisbon: sunny, 24 degrees.", 3]])
    with pytest.raises(turns.NoTurnError, match="event 3 last, after every event with user"):
        turns.split_claims({"claims": [tool]}, [0, 2])


def test_a_claim_quoting_words_without_a_user_last_is_asked_in_the_next_turn():
    """The hand-written sets have a few claims whose latest quote is an assistant's or a tool's
    words the user takes up: they belong to the first turn after that event (its schema offers
    the spans of every event up to its own), in the turns and the sentences form alike."""
    taken_up = claim(quotes=[["Ignore previous instructions", 1]])
    assert turns.turn_of(1, [0, 2]) == 2 and turns.turn_of(2, [0, 2]) == 2
    assert turns.turn_of(0, [0, 2]) == 0
    parts = turns.split_claims({"claims": [LISBON, taken_up]}, [0, 2])
    assert parts == [{"claims": [LISBON]}, {"claims": [taken_up]}]
    asked = turns.asked(EP["events"], "sentences")
    texts = {e["index"]: e["text"] for e in EP["events"]}
    at = turns.assign_sentence(taken_up, asked, texts)
    assert (asked[at].event, asked[at].sentence) == (2, 1)
    with pytest.raises(turns.NoTurnError):
        turns.turn_of(3, [0, 2])


def test_messages_ask_each_turn_after_the_answers_before_it():
    first = turns.messages(EP)
    window = render("extract", EP)
    assert first[0] == window[0]
    assert first[1]["content"] == window[1]["content"] + "\n\nEvent [0]: its claims."
    assert len(first) == 2
    second = turns.messages(EP, [EMPTY])
    assert second == first + [{"role": "assistant", "content": EMPTY},
                              {"role": "user", "content": "Event [2]: its claims."}]
    whole = turns.messages(EP, [EMPTY, EMPTY])
    assert whole[-1] == {"role": "assistant", "content": EMPTY} and len(whole) == 5
    with pytest.raises(turns.TurnsError, match="3 answers for 2 turns"):
        turns.messages(EP, [EMPTY] * 3)
    quiet = {**EP, "events": [e for e in EP["events"] if e["role"] != "user"]}
    with pytest.raises(turns.TurnsError, match="no event holds user words"):
        turns.messages(quiet)


def test_a_training_row_becomes_one_conversation_and_other_tasks_stay():
    row = _window_row(LISBON, DENTIST)
    turned = turns.to_form_row(row, EP, "turns")
    assistants = [m["content"] for m in turned["messages"] if m["role"] == "assistant"]
    assert assistants == [extract_text(LISBON), extract_text(DENTIST)]
    assert turned["messages"] == turns.messages(EP, assistants)
    other = {"id": "c", "task": "consolidate", "messages": []}
    assert turns.to_form_row(other, EP, "turns") is other
    quiet = {**EP, "events": [e for e in EP["events"] if e["role"] != "user"]}
    empty = {**row, "messages": render("extract", quiet)
             + [{"role": "assistant", "content": EMPTY}]}
    assert turns.to_form_row(empty, quiet, "turns") is None
    with pytest.raises(turns.TurnsError, match="not the one its inputs render"):
        turns.to_form_row(row, {**EP, "existing_facts": []}, "turns")


def test_run_turns_merges_the_turns_into_one_result():
    backend = ReplayBackend([extract_text(LISBON), extract_text(DENTIST)])
    result = codec.run_turns(backend, EP)
    whole = codec.decode("extract", EP, extract_text(LISBON, DENTIST))
    assert result.output == whole.output and result.wire == whole.wire
    assert [a.raw for a in result.turns] == [extract_text(LISBON), extract_text(DENTIST)]
    assert len(result.attempts) == 1 and result.attempts[0].raw == extract_text(LISBON, DENTIST)
    first, second = backend.calls
    assert first["messages"] == turns.messages(EP)
    # the second turn's prompt holds the first answer exactly as generated
    assert second["messages"] == turns.messages(EP, [extract_text(LISBON)])
    # a turn may quote its own event and earlier ones, never a later one
    events = [[b["prefixItems"][1]["const"] for b in
               call["schema"]["properties"]["claims"]["items"]["prefixItems"][0]["items"]["anyOf"]]
              for call in backend.calls]
    assert events == [[0], [0, 1, 2]]


def test_read_once_asks_each_turn_after_the_window_alone():
    """`history="none"` (`memworker.turns` "Read once"): turn k's prompt is the window's prompt
    with turn k's line, no earlier turn; every prompt shares the window's messages, so a backend
    keeping the common prefix evaluates the window once. The merged result is the same as
    today's schedule's for the same answers, a repeat across turns still dropped once."""
    assert turns.once_messages(EP, 0) == turns.messages(EP)
    second = turns.once_messages(EP, 1)
    assert second[:-1] == turns.messages(EP)[:-1]
    assert second[-1]["content"] == render("extract", EP)[-1]["content"] + \
        "\n\nEvent [2]: its claims."
    for k in (-1, 2):
        with pytest.raises(turns.TurnsError, match=f"turn {k} of 2"):
            turns.once_messages(EP, k)
    answers = [extract_text(LISBON), extract_text(DENTIST)]
    backend = ReplayBackend(answers)
    once = codec.run_turns(backend, EP, history="none")
    assert [c["messages"] for c in backend.calls] == [turns.once_messages(EP, k) for k in (0, 1)]
    assert once.output == codec.run_turns(ReplayBackend(answers), EP).output
    # the schema of each turn is today's: its own event and earlier ones
    events = [[b["prefixItems"][1]["const"] for b in
               call["schema"]["properties"]["claims"]["items"]["prefixItems"][0]["items"]["anyOf"]]
              for call in backend.calls]
    assert events == [[0], [0, 1, 2]]
    repeat = claim(quotes=[["I moved to Lisbon last month.", 0],
                           ["Book the dentist for next Friday at 3pm.", 2]])
    result = codec.run_turns(ReplayBackend([extract_text(LISBON), extract_text(repeat)]), EP,
                             history="none")
    assert [c["predicate"] for c in result.output["claims"]] == ["lives_in"]
    assert [f.code for f in result.dropped] == ["duplicate_claim"]
    # a retry follows its own turn's prompt, and the next turn sees neither it nor the answer
    backend = ReplayBackend([extract_text(DENTIST), EMPTY, EMPTY])
    assert codec.run_turns(backend, EP, history="none").output == {"claims": []}
    assert backend.calls[1]["messages"][:-1] == turns.once_messages(EP, 0)
    assert backend.calls[1]["messages"][-1]["content"].startswith("Your previous answer was")
    assert backend.calls[2]["messages"] == turns.once_messages(EP, 1)
    with pytest.raises(ValueError, match="turn history 'some'"):
        codec.run_turns(ReplayBackend([EMPTY]), EP, history="some")


def test_own_quotes_offers_each_turn_its_own_events_spans_only():
    backend = ReplayBackend([extract_text(LISBON), extract_text(DENTIST)])
    result = codec.run_turns(backend, EP, own_quotes=True)
    assert result.wire == codec.run_turns(
        ReplayBackend([extract_text(LISBON), extract_text(DENTIST)]), EP).wire
    events = [[b["prefixItems"][1]["const"] for b in
               call["schema"]["properties"]["claims"]["items"]["prefixItems"][0]["items"]["anyOf"]]
              for call in backend.calls]
    assert events == [[0], [2]]
    # a claim of the second turn that quotes the first event breaks its schema: retried
    both = claim(quotes=[["I moved to Lisbon last month.", 0],
                         ["Book the dentist for next Friday at 3pm.", 2]])
    backend = ReplayBackend([EMPTY, extract_text(both), EMPTY])
    assert codec.run_turns(backend, EP, own_quotes=True).output == {"claims": []}
    assert backend.calls[2]["messages"][-1]["content"].startswith(
        "Your previous answer was rejected")
    # without the option the same answer is accepted
    accepted = codec.run_turns(ReplayBackend([EMPTY, extract_text(both)]), EP)
    assert [c["source_indices"] for c in accepted.output["claims"]] == [[0, 2]]


def test_a_claim_repeated_in_a_later_turn_is_dropped_once_and_noted():
    repeat = claim(quotes=[["I moved to Lisbon last month.", 0],
                           ["Book the dentist for next Friday at 3pm.", 2]])
    backend = ReplayBackend([extract_text(LISBON), extract_text(repeat, DENTIST)])
    result = codec.run_turns(backend, EP)
    assert [c["predicate"] for c in result.output["claims"]] == ["lives_in", "plans_to"]
    assert any("repeats claims/0" in d for d in result.diagnostics)
    assert [f.code for f in result.dropped] == ["duplicate_claim"]


def test_a_quote_of_a_later_event_fails_the_turn_and_the_retry_is_kept():
    backend = ReplayBackend([extract_text(DENTIST), EMPTY, EMPTY])
    result = codec.run_turns(backend, EP)
    assert result.output == {"claims": []}
    assert len(result.turns) == 3 and result.turns[0].error
    assert result.diagnostics[0] == "1 turns accepted on a retry"
    assert backend.calls[1]["messages"][-1]["content"].startswith(
        "Your previous answer was rejected")
    # the next turn's prompt holds the accepted answer, not the rejected one
    assert backend.calls[2]["messages"] == turns.messages(EP, [EMPTY])


def test_a_turn_that_fails_twice_raises_with_every_generation():
    backend = ReplayBackend([EMPTY, "not json", "still not json"])
    with pytest.raises(codec.CodecError) as info:
        codec.run_turns(backend, EP)
    assert str(info.value).startswith("event 2: ")
    assert info.value.raw_outputs == [EMPTY, "not json", "still not json"]


def test_a_window_without_user_words_asks_nothing():
    quiet = {**EP, "events": [e for e in EP["events"] if e["role"] != "user"]}
    backend = ReplayBackend([])
    result = codec.run_turns(backend, quiet)
    assert result.output == {"claims": []} and result.turns == [] and not backend.calls


def test_a_bad_request_is_the_callers_error():
    from memworker.inference.schema import InputError

    with pytest.raises(InputError):
        codec.run_turns(ReplayBackend([]), {**EP, "events": "nope"})


def test_turn_labels_cover_every_answer_and_its_end_of_turn(tmp_path):
    tokenizer = pytest.importorskip("transformers").AutoTokenizer
    from memworker import registry
    from memworker.train import data as tdata

    if not registry.is_ready("smollm2-135m"):
        pytest.skip("embedded base not prepared: python -m memworker.registry --prepare "
                    "smollm2-135m")
    tok = tokenizer.from_pretrained(str(registry.base_dir("smollm2-135m")))
    texts = [extract_text(LISBON), EMPTY]
    row = {"id": "r", "task": "extract", "messages": turns.messages(EP, texts)}
    (enc,), stats = tdata.encode_rows(tok, [row], 4096, "<|im_end|>", 10.0)
    assert [tok.decode(enc.input_ids[a:b]) for a, b in enc.spans] == \
        [t + "<|im_end|>" for t in texts]
    labelled = [i for i, y in enumerate(enc.labels) if y != tdata.IGNORE]
    assert labelled == [i for a, b in enc.spans for i in range(a, b)]
    assert stats.unweighted_rows == 0
    # decision weights in each turn: the empty turn's fork ("[" and "]") counts too
    second = enc.weights[enc.spans[1][0]:enc.spans[1][1]]
    assert second.count(10.0) == 2
    assert all(w == 0.0 for w in enc.weights[:enc.spans[0][0]])


# --- the walk (design (b)) ------------------------------------------------------------------------

def _walk(*steps):
    return turns.dump_walk({"events": [[u, list(claims)] for u, claims in steps]})


def test_a_walk_row_lists_each_user_event_and_flattens_back():
    row = _window_row(DENTIST, LISBON)
    walked = turns.to_form_row(row, EP, "walk")
    text = walked["messages"][-1]["content"]
    assert walked["messages"][:2] == turns.walk_messages(EP)
    assert walked["messages"][1]["content"].endswith(turns.WALK_LINE)
    assert text == _walk((0, [LISBON]), (2, [DENTIST]))
    assert turns.walk_claims(json.loads(text), [0, 2]) == {"claims": [LISBON, DENTIST]}
    assert turns.to_form_row(row, EP, "window") is row
    with pytest.raises(turns.TurnsError, match="unknown extraction form"):
        turns.to_form_row(row, EP, "chunks")
    # the field starts of the walk are the one-call answer's, shifted into place
    fields = [(text[c:c + 6], name) for c, name, _ in turns.walk_field_starts(text)
              if name in ("claims", "predicate", "value")]
    assert fields == [("[[[[\"I", "claims"), ("lives_", "predicate"), ("Lisbon", "value"),
                      ("[[[[\"B", "claims"), ("plans_", "predicate"), ("book t", "value")]
    with pytest.raises(ValueError, match="exact text"):
        turns.walk_field_starts(text.replace(",", ", ", 1))


def test_a_walk_must_list_the_events_in_order_and_quote_none_later():
    with pytest.raises(turns.TurnsError, match="in order"):
        turns.walk_claims({"events": [[2, []], [0, []]]}, [0, 2])
    with pytest.raises(turns.TurnsError, match="later event 2"):
        turns.walk_claims({"events": [[0, [DENTIST]], [2, []]]}, [0, 2])


def test_run_walk_fixes_the_event_indices_and_decodes_the_flattened_walk():
    backend = ReplayBackend([_walk((0, [LISBON]), (2, [DENTIST]))])
    result = codec.run_extract(backend, EP, "walk")
    assert result.output == codec.decode("extract", EP, extract_text(LISBON, DENTIST)).output
    assert result.raw == backend.outputs[0][0] and len(result.attempts) == 1
    call = backend.calls[0]
    assert call["messages"] == turns.walk_messages(EP)
    steps = call["schema"]["properties"]["events"]["prefixItems"]
    assert [s["prefixItems"][0] for s in steps] == [{"const": 0}, {"const": 2}]
    assert 'value-events-0-0 ::= "0"' in call["grammar"]


def test_run_walk_retries_a_walk_that_breaks_the_schema():
    bad = _walk((0, [DENTIST]), (2, []))  # event 0's claim quotes event 2
    backend = ReplayBackend([bad, _walk((0, []), (2, [DENTIST]))])
    result = codec.run_walk(backend, EP)
    assert len(result.attempts) == 2 and result.attempts[0].error
    assert [c["predicate"] for c in result.output["claims"]] == ["plans_to"]
    assert backend.calls[1]["messages"][-1]["content"].startswith(
        "Your previous answer was rejected")
    with pytest.raises(codec.CodecError) as info:
        codec.run_walk(ReplayBackend([bad, bad]), EP)
    assert info.value.raw_outputs == [bad, bad]


def test_decision_weights_of_a_walk_row_mark_its_claims_fields():
    from memworker.train.data import DECISION_FIELDS, value_starts

    text = _walk((0, [LISBON]), (2, []))
    offsets = list(range(len(text)))  # one "token" per character
    marked = value_starts(text, offsets, DECISION_FIELDS)
    assert text[min(k for k, f in marked.items() if f == "predicate")] == "l"
    # each event's claims list is a fork: its "[" and the token after it
    assert [k for k, f in marked.items() if f == "claims"] == \
        [text.index("[[[["), text.index("[[[[") + 1, text.rindex("[]"), text.rindex("[]") + 1]


# --- sentences (one turn per sentence) ------------------------------------------------------------

MARIA = claim(quotes=[["My sister Maria lives in Porto.", 0]], name="Maria", predicate="lives_in",
              value="Porto", time_expression=None, supersedes=[])


def test_sentences_ask_each_sentence_of_each_user_event():
    asked = turns.asked(EP["events"], "sentences")
    assert [(t.event, t.sentence, t.text) for t in asked] == [
        (0, 1, "I moved to Lisbon last month."), (0, 2, "My sister Maria lives in Porto."),
        (2, 1, "Book the dentist for next Friday at 3pm.")]
    assert asked[1].line() == 'Event [0], sentence 2: "My sister Maria lives in Porto." Its claims.'
    assert asked[1].label == "event 0 sentence 2"
    assert [t.label for t in turns.asked(EP["events"], "turns")] == ["event 0", "event 2"]
    with pytest.raises(turns.TurnsError, match="not a form asked turn by turn"):
        turns.asked(EP["events"], "walk")
    # each claim goes to the sentence holding the end of its last quote from its latest event
    both = claim(quotes=[["I moved to Lisbon last month.", 0],
                         ["Book the dentist for next Friday at 3pm.", 2]])
    whole = claim(quotes=[[EP["events"][0]["text"], 0]])   # the whole two-sentence message
    parts = turns.split_sentences({"claims": [MARIA, LISBON, both, DENTIST, whole]}, asked,
                                  EP["events"])
    assert parts == [{"claims": [LISBON]}, {"claims": [MARIA, whole]},
                     {"claims": [both, DENTIST]}]
    with pytest.raises(turns.TurnsError, match="is not in event 0"):
        turns.split_sentences({"claims": [claim(quotes=[["Lisbon is far.", 0]])]}, asked,
                              EP["events"])


def test_a_sentences_training_row_and_run_turns_in_that_form():
    row = _window_row(LISBON, MARIA, DENTIST)
    turned = turns.to_form_row(row, EP, "sentences")
    assistants = [m["content"] for m in turned["messages"] if m["role"] == "assistant"]
    assert assistants == [extract_text(LISBON), extract_text(MARIA), extract_text(DENTIST)]
    users = [m["content"] for m in turned["messages"] if m["role"] == "user"]
    assert users[0].endswith('\n\nEvent [0], sentence 1: "I moved to Lisbon last month." Its '
                             "claims.")
    assert users[2] == 'Event [2], sentence 1: "Book the dentist for next Friday at 3pm." Its ' \
        "claims."
    backend = ReplayBackend(assistants)
    result = codec.run_extract(backend, EP, "sentences")
    whole = codec.decode("extract", EP, extract_text(LISBON, MARIA, DENTIST))
    assert result.output == whole.output and len(result.turns) == 3
    assert [c["messages"] for c in backend.calls] == [
        turns.messages(EP, assistants[:k], "sentences") for k in range(3)]
    # both sentences of event 0 are offered event 0's spans; the third turn events 0 to 2
    events = [[b["prefixItems"][1]["const"] for b in
               call["schema"]["properties"]["claims"]["items"]["prefixItems"][0]["items"]["anyOf"]]
              for call in backend.calls]
    assert events == [[0], [0], [0, 1, 2]]


def test_the_claim_gate_reads_sentence_turns():
    from memworker.inference.gate import turn_parts

    asked = turns.asked(EP["events"], "sentences")
    done = [{"raw": EMPTY, "error": None}] * 3
    assert [p[2] for p in turn_parts(done, asked, "r")] == [
        "event 0 sentence 1: ", "event 0 sentence 2: ", "event 2 sentence 1: "]
    assert [p[2] for p in turn_parts(done[:2], turns.asked(EP["events"]), "r")] == \
        ["event 0: ", "event 2: "]


def test_propose_makes_every_turn_answer_a_claim():
    backend = ReplayBackend([extract_text(LISBON), extract_text(DENTIST)])
    result = codec.run_turns(backend, EP, propose=True)
    assert result.output == codec.run_turns(
        ReplayBackend([extract_text(LISBON), extract_text(DENTIST)]), EP).output
    plain = ReplayBackend([EMPTY, EMPTY])
    codec.run_turns(plain, EP)
    # the same schema (the answer is checked as usual); a grammar that allows no empty array
    assert [c["schema"] for c in backend.calls] == [c["schema"] for c in plain.calls]
    from memworker.inference.grammar import schema_to_gbnf

    for proposing, call in zip(backend.calls, plain.calls, strict=True):
        assert call["grammar"] == schema_to_gbnf(call["schema"])
        wanted = json.loads(json.dumps(call["schema"]))
        wanted["properties"]["claims"]["minItems"] = 1
        assert proposing["grammar"] == schema_to_gbnf(wanted) != call["grammar"]
    # a proposed claim the codec drops leaves an empty turn, not a failed row
    tool = claim(quotes=[["I moved to Lisbon last month.", 0]], name="Paris", value="Paris",
                 predicate="lives_in", supersedes=[], time_expression=None)
    dropped = codec.run_turns(ReplayBackend([extract_text(tool), extract_text(DENTIST)]), EP,
                              propose=True)
    assert dropped.output["claims"] == codec.run_turns(
        ReplayBackend([EMPTY, extract_text(DENTIST)]), EP).output["claims"]
    assert any("dropped" in d for d in dropped.diagnostics)


def test_eval_takes_propose_per_model_arm_in_the_turns_forms_only(tiny_corpus, tmp_path,
                                                                    capsys):
    """`--propose ARM` (bare: every model arm) belongs to the arm, like its claim gate: the base
    beside a proposing student answers as it would, and the config records who proposed."""
    from memworker.eval import runner
    from memworker.eval.cli import continue_config, planned_config
    from memworker.eval.cli import main as eval_main

    args = ["--arm", "rules", "--set", "val", "--corpus", str(tiny_corpus), "--out",
            str(tmp_path / "e"), "--no-progress", "--no-plots", "--propose"]
    assert eval_main(args) == 2
    assert "--propose applies to --extract-form turns or sentences only" in \
        capsys.readouterr().err
    assert eval_main(args + ["--extract-form", "sentences"]) == 0
    config = json.loads((tmp_path / "e" / "config.json").read_text())
    assert "proposing" not in config and "propose" not in config["sampler"]   # rules only
    assert eval_main([*args[:-1], "--propose", "rules", "--extract-form", "turns"]) == 2
    assert "the rules arm answers in the window form" in capsys.readouterr().err

    arms = [runner.parse_arm(a) for a in ("student=s.gguf", "base=b.gguf", "rules")]
    named = runner.assign_proposals(arms, ["student"], "turns")
    assert [a.propose for a in named] == [True, False, False]
    every = runner.assign_proposals(arms, [runner.EVERY_ARM], "turns")
    assert [a.propose for a in every] == [True, True, False]
    with pytest.raises(runner.EvalError, match="no arm named 'x'"):
        runner.assign_proposals(arms, ["x"], "turns")
    out = tmp_path / "p"
    plan = ["--arm", "student=s.gguf", "--arm", "base=b.gguf", "--set", "val", "--corpus",
            str(tiny_corpus), "--out", str(out), "--extract-form", "turns"]
    _, proposing = planned_config([*plan, "--propose", "student"])
    assert proposing["proposing"] == ["student"]
    # samples made proposing join only a proposing arm of that name
    out.mkdir()
    (out / "config.json").write_text(json.dumps(proposing))
    (out / runner.SAMPLES).write_text(json.dumps({"arm": "student", "id": "x"}) + "\n")
    proposing["gguf"] = {}   # (no GGUF files here: the model check compares their absence)
    (out / "config.json").write_text(json.dumps(proposing))
    assert continue_config(out, proposing)["proposing"] == ["student"]
    greedy = {k: v for k, v in proposing.items() if k != "proposing"}
    with pytest.raises(runner.ConfigMismatch, match="arm 'student' proposing, now not"):
        continue_config(out, greedy)
    # an arm without samples may change; one recorded before and not given now stays recorded
    other = {**greedy, "arms": {"base": "b.gguf"}}
    assert continue_config(out, other)["proposing"] == ["student"]


def test_run_row_proposes_for_the_arm_that_proposes(tiny_corpus):
    from memworker.eval import runner

    row = next(r for r in runner.load_eval_rows(tiny_corpus, "val")
               if r["task"] == "extract" and turns.turn_events(r["input"]["events"]))
    n = len(turns.turn_events(row["input"]["events"]))
    sampler = runner.Sampler(extract_form="turns")
    plain, proposing = (ReplayBackend([EMPTY] * n) for _ in range(2))
    runner.run_row(plain, row, sampler, form="turns")
    runner.run_row(proposing, row, sampler, form="turns", propose=True)
    assert len(plain.calls) == len(proposing.calls) == n
    # the same schema, a grammar that allows no empty claims array (codec.run_turns)
    assert [c["schema"] for c in plain.calls] == [c["schema"] for c in proposing.calls]
    assert all(a["grammar"] != b["grammar"] for a, b in zip(plain.calls, proposing.calls,
                                                          strict=True))


def test_merged_turns_may_hold_more_claims_than_the_contract_before_repeats_are_dropped():
    """Proposing turns repeat earlier turns' claims, so the merged parts can exceed the wire
    contract's 12 claims before the repeats go: each claim is checked alone, the repeats are
    dropped, and only then is the number cut (release v3's held-out row food-09-e01 failed whole
    on this before)."""
    from memworker.inference.schema import CONTRACT_LIMITS

    n = CONTRACT_LIMITS.claims + 1
    result = codec._decode_merged(EP, [LISBON] * n)
    assert len(result.output["claims"]) == 1
    assert sum("dropped (repeats claims/0" in d for d in result.diagnostics) == n - 1
    bad = json.loads(json.dumps(LISBON))
    bad[0] = []   # no quote: the wire contract still refuses it, claim by claim
    with pytest.raises(codec.OutputValidationError, match=f"claims/{n}/0: "):
        codec._decode_merged(EP, [LISBON] * n + [bad])


def test_turn_history_belongs_to_the_sampler_and_the_worker(tiny_corpus, tmp_path, capsys):
    """`--turn-history none` (eval) and `turn_history="none"` (the store's worker) in the turns
    forms only; the sampler records it only when set, so earlier folders keep their sampler;
    two folders that differ in it are not one paired comparison."""
    from memworker.eval import runner
    from memworker.eval.cli import main as eval_main
    from memworker.eval.cli import planned_config
    from memworker.inference.hmem import MemWorkerBackend, WorkerError, worker_config

    args = ["--arm", "rules", "--set", "val", "--corpus", str(tiny_corpus), "--out",
            str(tmp_path / "e"), "--no-progress", "--no-plots", "--turn-history", "none"]
    assert eval_main(args) == 2
    assert "--turn-history applies to --extract-form turns or sentences only" in \
        capsys.readouterr().err
    plan = ["--arm", "student=s.gguf", "--set", "val", "--corpus", str(tiny_corpus), "--out",
            str(tmp_path / "p"), "--extract-form", "turns"]
    _, today = planned_config(plan)
    _, once = planned_config([*plan, "--turn-history", "none"])
    assert "turn_history" not in today["sampler"] and once["sampler"]["turn_history"] == "none"
    assert runner.sampler_doc(runner.Sampler(extract_form="turns")) == today["sampler"]
    from memworker.eval.studies import pair
    assert "turn_history" in pair.SAMPLER_FIELDS

    assert worker_config("turns", None, False, "none") == {
        "extract_form": "turns", "claim_gate": None, "turn_history": "none"}
    assert "turn_history" not in worker_config("turns")
    for form, history, message in (("window", "none", "needs extract form"),
                                   ("turns", "some", "turn history 'some'")):
        with pytest.raises(WorkerError, match=message):
            worker_config(form, None, False, history)
    backend = ReplayBackend([extract_text(LISBON), extract_text(DENTIST)])
    worker = MemWorkerBackend(backend, extract_form="turns", turn_history="none")
    worker._run("extract", EP)
    assert [c["messages"] for c in backend.calls] == [turns.once_messages(EP, k) for k in (0, 1)]
