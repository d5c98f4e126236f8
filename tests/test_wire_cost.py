"""eval/studies/wire_cost.py: what candidate extract wires and reading schedules of the turns form
cost a window in tokens, on gold answers (issue 48 items 1 and 3). The arithmetic is checked on
one window of the tiny corpus against the tokenizer, piece by piece."""

from __future__ import annotations

import copy
import json

import pytest

from memworker import prompts, spans, turns, wire
from memworker.corpus import tokens as corpus_tokens
from memworker.eval import runner
from memworker.eval.studies import wire_cost as study

EVENTS = "I moved to Lisbon last May. My sister Ana lives in Porto, near the river."


def _n(text: str) -> int:
    return len(corpus_tokens.tokenizer()(text, add_special_tokens=False)["input_ids"])


@pytest.fixture(scope="module")
def window(tiny_corpus, embedded_gguf):
    """The tiny corpus's first val extract window with two turns or more, one of them with a
    claim that quotes more than one word."""
    for row in runner.load_eval_rows(tiny_corpus, "val"):
        asked = turns.turn_events(row["input"]["events"]) if row["task"] == "extract" else []
        if len(asked) >= 2 and row["gold"]["claims"]:
            return row
    pytest.fail("the tiny corpus has no val extract window with two turns and a claim")


def test_quotes_are_placed_in_their_sentences():
    assert study.quote_sentences("I moved to Lisbon last May.", EVENTS) == ([1], "sentence")
    assert study.quote_sentences("My sister Ana lives in Porto", EVENTS) == ([2], "inside")
    assert study.quote_sentences(EVENTS, EVENTS) == ([1, 2], "several")
    assert study.quote_sentences("Madrid", EVENTS) == ([], "none")
    # one reference per sentence touched, each once
    texts = {4: EVENTS}
    assert study.sentence_refs([[EVENTS, 4], ["near the river.", 4]], texts) == [[4, 1], [4, 2]]


def test_the_wires_reorder_and_shorten_a_claim():
    claim = [[["My sister Ana lives in Porto", 4]], "Ana (the user's sister)", "person",
             "lives_in", "Porto", "fact", None, []]
    texts = {4: EVENTS}
    assert [f for f, _ in study.claim_fields(claim, "v3", texts)] == list(wire.CLAIM_FIELDS)
    v5a = study.claim_fields(claim, "v5a", texts)
    assert [v for _, v in v5a][:2] == ["lives_in", "Porto"] and dict(v5a)["quotes"] == claim[0]
    assert dict(study.claim_fields(claim, "v5b", texts))["quotes"] == [[4, 2]]
    user = [[["I moved to Lisbon last May.", 4]], "the user", "person", "lives_in", "Lisbon",
            "fact", "last May", []]
    v5c = dict(study.claim_fields(user, "v5c", texts))
    assert (v5c["name"], v5c["type"], v5c["quotes"]) == (None, None, [[4, 1]])
    assert dict(study.claim_fields(claim, "v5c", texts))["name"] == claim[1]
    # v5d: the trailing fields at their defaults left out (kept up to the last one that is not)
    assert study.claim_fields(user, "v5d", texts) == [
        ("predicate", "lives_in"), ("value", "Lisbon"), ("quotes", [[4, 1]]), ("name", study.USER),
        ("type", "person"), ("kind", "fact"), ("time_expression", "last May")]
    plain = [*user[:6], None, []]
    assert [f for f, _ in study.claim_fields(plain, "v5d", texts)] == ["predicate", "value",
                                                                       "quotes"]
    assert [f for f, _ in study.claim_fields(claim, "v5d", texts)] == ["predicate", "value",
                                                                       "quotes", "name"]
    assert [f for f, _ in study.claim_fields(claim, "v6", texts)] == ["predicate", "value",
                                                                      "name"]
    with pytest.raises(ValueError, match="unknown wire"):
        study.claim_fields(claim, "v9", texts)
    # the v3 text is wire.dump_answer's; the value's offset is its first character
    text, offsets = study.dump_claims([study.claim_fields(claim, "v3", {})])
    assert text == wire.dump_answer("extract", {"claims": [claim]})
    start, value, end = offsets[0]
    assert text[start] == "[" and text[end - 1] == "]" and text[value:value + 5] == "Porto"
    assert {field: at for at, field, _ in wire.field_starts(text)}["value"] == value


def test_one_window_counted_piece_by_piece(window):
    """Each schedule and the answers of one window, recounted from the pieces of its chat."""
    inputs = window["input"]
    asked = turns.turn_events(inputs["events"])
    parts = turns.split_claims(wire.to_wire("extract", window["gold"]), asked)
    answers = [wire.dump_answer("extract", p) for p in parts]
    cached = study.cached_text()
    first = prompts.to_chatml(turns.messages(inputs, []))
    assert first.startswith(cached) and cached.endswith("Existing facts:\n")
    cached_n = _n(cached)

    figures = study.window_figures(window, corpus_tokens.tokenizer()(
        [cached], add_special_tokens=False)["input_ids"][0])
    assert figures["cached"] == cached_n and figures["turns"] == len(asked)
    head = _n(first) - cached_n        # the window and the first question, every schedule
    end = "<|im_end|>\n<|im_start|>assistant\n"
    scaffold = [_n(f"<|im_end|>\n<|im_start|>user\n{turns.turn_line(u)}{end}") for u in asked[1:]]
    alone = [_n(f"\n\n{turns.turn_line(u)}{end}") for u in asked[1:]]
    written = [_n(a) for a in answers]
    assert figures["prompt"]["b/v3"] == head + sum(scaffold)
    assert figures["prompt"]["a/v3"] == head + sum(scaffold) + sum(written[:-1])
    assert figures["prompt"]["c"] == head + sum(alone)
    assert figures["answer"]["v3"] == sum(written) + len(asked)   # each answer's end token
    assert figures["empty_answers"] == len(asked) * (_n('{"claims":[]}') + 1)
    assert figures["prompt"]["c"] <= figures["prompt"]["b/v3"] <= figures["prompt"]["a/v3"]
    assert figures["prompt"]["c"] < figures["prompt"]["a/v3"]
    assert figures["window_once"] == _n(prompts.to_chatml(
        prompts.render("extract", inputs), add_generation_prompt=False)) - _n("<|im_end|>\n") \
        - cached_n
    # (b) does not depend on the wire: only (a) re-reads the answers
    assert len({figures["prompt"][f"b/{w}"] for w in study.WIRES}) == 1
    # references instead of copied quotes: shorter whenever a quote is longer than a reference
    assert figures["answer"]["v5b"] < figures["answer"]["v3"]
    assert figures["answer"]["v6"] < figures["answer"]["v5d"] <= figures["answer"]["v5c"] \
        <= figures["answer"]["v5b"]
    assert figures["prompt"]["a/v5b"] < figures["prompt"]["a/v3"]
    # the value comes after the quote in v3, second in v5: a few tokens in
    for (v3_n, v3_before), (_, a_before) in zip(figures["per_claim"]["v3"],
                                                  figures["per_claim"]["v5a"], strict=True):
        assert a_before < v3_before < v3_n and a_before <= 6
    # the whole-window answer is one answer, its end token once
    whole = wire.dump_answer("extract", wire.to_wire("extract", window["gold"]))
    assert figures["window_form_answer"]["v3"] == _n(whole) + 1


def test_sentence_quotes_are_chosen_and_graded(window, embedded_gguf):
    figures = study.quote_figures([window])
    gold, chosen = figures["gold"], figures["sentence_quoted"]
    assert figures["quotes"] == sum(len(c["quotes"]) for c in window["gold"]["claims"])
    assert sum(figures["classes"].values()) == figures["quotes"]
    assert gold["supported"] == gold["claims"] == len(window["gold"]["claims"])
    assert chosen["supported"] == gold["supported"] and chosen["covered"] == gold["covered"]
    # a sentence that is not a candidate span (it holds a credential) leaves its claim out
    texts = {0: "Call me at the office, the token is ghp_abcdefghijklmnopqrstuvwxyz0123."}
    claim = {"source_indices": [0], "quotes": ["Call me at the office"]}
    assert study._sentence_answer([claim], texts) == ([], 1, 1)
    kept = study._sentence_answer([{"source_indices": [1], "quotes": ["Ana lives in Porto"]}],
                                  {1: EVENTS})
    assert kept[0][0]["quotes"] == ["My sister Ana lives in Porto, near the river."]
    # the codec's own choice (v6): one sentence of the latest cited event, graded like the gold
    picked = figures["codec_chosen"]
    assert picked["claims"] == len(window["gold"]["claims"]) and picked["right"] > 0
    assert picked["graded"]["supported"] == gold["supported"]


def test_the_codec_chooses_the_sentence_a_claim_is_about():
    """`spans.choose_sentence` (wire v6): the value's words first, then the subject's name,
    then the predicate's, then the earliest; never a sentence that is not a candidate span."""
    text = ("We moved to Valencia in March. My sister Ana stays near the beach. "
            "Ana runs a bakery.")
    assert spans.choose_sentence(text, "Valencia", "the user", "lives_in") == \
        "We moved to Valencia in March."
    assert spans.choose_sentence(text, "bakery", "Ana (the user's sister)", "works_at") == \
        "Ana runs a bakery."
    assert spans.choose_sentence(text, "the beach", "Ana (the user's sister)", "lives_in") == \
        "My sister Ana stays near the beach."
    # no word in common: the subject's name decides, then the earliest sentence
    assert spans.choose_sentence(text, "Spain", "Ana", "lives_in") == \
        "My sister Ana stays near the beach."
    assert spans.choose_sentence(text, "Spain", "the user", "x") == "We moved to Valencia in March."
    assert spans.choose_sentence("ok", "x") is None                      # too short to quote
    secret = "My token is ghp_abcdefghijklmnopqrstuvwxyz0123. I live in Graz."
    assert spans.choose_sentence(secret, "token ghp_abcdefghijklmnopqrstuvwxyz0123") == \
        "I live in Graz."


def test_a_sentence_quote_can_keep_a_secret_its_clause_left_out(window):
    """The clause a gold claim quotes is safe, its sentence holds the user's password (not
    credential-shaped, so still a candidate span): the grader counts the sentence-quoted claim as
    a secret retained."""
    row = copy.deepcopy(window)
    # a claim quoting one whole sentence without a clause of its own
    claim = next(c for c in row["gold"]["claims"] if len(c["quotes"]) == 1
                 and c["quotes"][0].endswith(".") and not any(p in c["quotes"][0] for p in ",;:"))
    event = next(e for e in row["input"]["events"] if e["index"] == claim["source_indices"][0])
    quote = claim["quotes"][0]
    assert study.quote_sentences(quote, event["text"])[1] == "sentence"
    clause = quote[:-1]
    event["text"] = event["text"].replace(quote, clause + ", pw is schnitzel4ever99.")
    quoting = 0   # the gold claims that quote that sentence: each now quotes the clause
    for c in row["gold"]["claims"]:
        if quote in c["quotes"]:
            c["quotes"] = [clause if q == quote else q for q in c["quotes"]]
            quoting += 1
    row["truth"].setdefault("forbidden", []).append({"reason": "secret",
                                                     "text": "schnitzel4ever99"})
    figures = study.quote_figures([row])
    assert figures["gold"]["supported"] == figures["gold"]["claims"] > 0
    assert figures["gold"].get("secrets_retained", 0) == 0
    assert figures["sentence_quoted"]["secrets_retained"] == quoting
    assert figures["verdicts_changed"] == {"supported -> secret": quoting}
    before = study.quote_figures([window])["classes"]
    assert figures["classes"]["inside"] == before.get("inside", 0) + quoting
    assert figures["classes"]["sentence"] == before["sentence"] - quoting


def test_the_study_prints_its_tables_with_the_targets(tiny_corpus, embedded_gguf, tmp_path,
                                                       capsys):
    target = tmp_path / "wire.json"
    assert study.main(["--set", "val", "--corpus", str(tiny_corpus), "--limit", "3",
                       "--json", str(target)]) == 0
    printed = capsys.readouterr().out
    figures = json.loads(target.read_text())
    assert figures["windows"] + sum(figures["skipped"].values()) == 3
    assert "≤ 700" in printed and "≤ 100" in printed and "| v5b |" in printed
    a, b = figures["prompt"]["a/v3"], figures["prompt"]["b/v3"]
    assert a["median"] >= b["median"] >= figures["prompt"]["c"]["median"]
    assert figures["cached"] == [_n(study.cached_text())]
    assert study.main(["--set", "natural-dev", "--corpus", str(tmp_path / "none")]) == 2
    assert "no corpus" in capsys.readouterr().err


def test_event_timestamps_can_be_written_shorter_and_only_theirs_change():
    from memworker.eval.studies.wire_cost import stamped
    text = ("Existing facts:\nF1: The user lives in Porto. (since 2023-06-19)\n\nEvents:\n"
            "[0] 2024-07-19T09:55:24+05:30 user: At 10:30:00 I left.\n"
            "[12] 2024-07-21T18:54:40Z assistant: ok")
    assert stamped(text, "minute").splitlines()[4:] == [
        "[0] 2024-07-19 09:55 user: At 10:30:00 I left.", "[12] 2024-07-21 18:54 assistant: ok"]
    assert stamped(text, "date").splitlines()[5] == "[12] 2024-07-21 assistant: ok"
    assert stamped(text, "none").splitlines()[4] == "[0] user: At 10:30:00 I left."
    assert stamped(text, "none").splitlines()[1] == "F1: The user lives in Porto. (since 2023-06-19)"
