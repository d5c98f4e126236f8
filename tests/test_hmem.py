"""The store-facing MemWorkerBackend: input mapping (hmem messages -> episode) and candidate
mapping (canonical answers -> hmem candidates).

Unit tests drive it with ReplayBackend (a test double implementing the backend protocol that
returns given texts: it exercises the codec and the mapping, not a model). The slow tests run the
real llama.cpp backend on the embedded base GGUF end to end."""

from __future__ import annotations

import json

import jsonschema
import pytest

from memworker.inference.backends import ReplayBackend
from memworker.inference.codec import CodecError, prepare
from memworker.inference.hmem import MemWorkerBackend, category, importance
from memworker.inference.schema import InputError
from memworker.wire import dump_answer
from tests.test_wire import wire_claim

MESSAGES = [
    {"role": "system", "content": "You are helpful."},
    {"id": "m1", "role": "user", "content": "I moved to Lisbon last month.",
     "timestamp": "2025-10-08T09:12:00+02:00"},
    {"id": "m2", "role": "tool", "content": "Calendar: dentist next Friday at 3pm."},
    {"role": "user", "content": "Thanks, keep the dentist on Friday."},
]
EXISTING = [{"id": "F1", "text": "The user lives in Berlin.", "valid_from": "2023-04"}]


def moved(**over):
    """The wire v3 claim "the user lives in Lisbon" of MESSAGES' first event, superseding F1."""
    return wire_claim(**{"quotes": [("I moved to Lisbon last month.", 0)],
                         "time_expression": "last month", "supersedes": ["F1"], **over})


def worker_with(*outputs):
    return MemWorkerBackend(ReplayBackend(outputs))


def test_episode_mapping():
    worker = worker_with()
    episode, sources = worker.episode(MESSAGES, EXISTING, observed_at="2025-10-08T10:00:00Z")
    assert [e["index"] for e in episode["events"]] == [0, 1, 2]
    assert [e["role"] for e in episode["events"]] == ["user", "tool", "user"]
    assert [e["trusted"] for e in episode["events"]] == [True, False, True]
    assert [e["timestamp"] for e in episode["events"]] == [
        "2025-10-08T09:12:00+02:00", "2025-10-08T10:00:00+00:00", "2025-10-08T10:00:00+00:00"]
    assert sources == {0: "m1", 1: "m2", 2: 3}
    assert episode["existing_facts"] == [{"id": "F1", "statement": "The user lives in Berlin.",
                                          "valid_from": "2023-04"}]


def test_extract_candidates():
    raw = dump_answer("extract", {"claims": [
        moved(),
        moved(quotes=[("Calendar: dentist next Friday at 3pm.", 1),
                      ("Thanks, keep the dentist on Friday.", 2)],
              name="the user", type="person", predicate="has_appointment", value="dentist",
              kind="plan", time_expression="next Friday at 3pm", supersedes=[])]})
    worker = worker_with(raw)
    lisbon, dentist = worker.extract(MESSAGES, EXISTING, observed_at="2025-10-08T10:00:00Z")
    # text, confidence and is_correction are derived by the codec (the model wrote none of them)
    assert lisbon == {
        "text": "The user lives in Lisbon.", "category": "semantic", "importance": 8,
        "event_date": "2025-09", "date_precision": "month",
        "entities": [{"name": "the user", "type": "person"}],
        "links": [{"relation": "supersedes", "id": "F1"}], "supersedes": ["F1"],
        "source_ids": ["m1"], "kind": "fact", "predicate": "lives_in", "value": "Lisbon",
        "quotes": ["I moved to Lisbon last month."], "confidence": 0.9, "is_correction": True,
        "time_expression": "last month"}
    assert dentist["text"] == "The user's dentist is scheduled."
    assert dentist["confidence"] == 0.65 and dentist["is_correction"] is False
    assert dentist["category"] == "episodic" and dentist["importance"] == 6
    assert dentist["event_date"] == "2025-10-10T15:00:00+00:00"
    assert dentist["source_ids"] == ["m2", 3] and dentist["supersedes"] == []
    assert worker.last is not None and worker.last.task == "extract"


def test_extract_in_the_turns_form_asks_each_user_event():
    dentist = moved(quotes=[("Calendar: dentist next Friday at 3pm.", 1),
                            ("Thanks, keep the dentist on Friday.", 2)],
                    name="the user", type="person", predicate="has_appointment",
                    value="dentist", kind="plan", time_expression="next Friday at 3pm",
                    supersedes=[])
    replay = ReplayBackend([dump_answer("extract", {"claims": [moved()]}),
                            dump_answer("extract", {"claims": [dentist]})])
    worker = MemWorkerBackend(replay, extract_form="turns")
    lisbon, booked = worker.extract(MESSAGES, EXISTING, observed_at="2025-10-08T10:00:00Z")
    assert lisbon["text"] == "The user lives in Lisbon." and booked["source_ids"] == ["m2", 3]
    assert [c["messages"][-1]["content"][-22:] for c in replay.calls] == \
        ["Event [0]: its claims.", "Event [2]: its claims."]
    assert len(worker.last.turns) == 2


def test_a_predicate_outside_the_vocabulary_is_dropped_not_stored():
    """The grammar keeps the predicate inside the request's vocabulary; an answer that was not
    constrained (a replayed text here) loses such a claim, and the drop is reported."""
    raw = dump_answer("extract", {"claims": [moved(), moved(predicate="scheduled_for")]})
    worker = worker_with(raw)
    (kept,) = worker.extract(MESSAGES, EXISTING, observed_at="2025-10-08T10:00:00Z")
    assert kept["predicate"] == "lives_in"
    assert [f.code for f in worker.last.dropped] == ["unknown_predicate"]


def test_the_store_vocabulary_reaches_the_request():
    """A store's own predicates replace the default vocabulary; an existing fact's predicate
    joins the default one; both are what the request's schema offers and the codec keeps."""
    worker = worker_with()
    facts = [{**EXISTING[0], "predicate": "home_city"}]
    episode, _ = worker.episode(MESSAGES, facts, observed_at="2025-10-08T10:00:00Z")
    assert episode["existing_facts"][0]["predicate"] == "home_city"
    assert "home_city" in prepare("extract", episode).schema["properties"]["claims"]["items"][
        "prefixItems"][3]["enum"]
    raw = dump_answer("extract", {"claims": [moved(predicate="home_city")]})
    (kept,) = worker_with(raw).extract(MESSAGES, facts, observed_at="2025-10-08T10:00:00Z")
    assert kept["predicate"] == "home_city"
    own = worker_with(raw)
    assert own.extract(MESSAGES, EXISTING, observed_at="2025-10-08T10:00:00Z",
                       predicates=["lives_in"]) == []
    assert [f.code for f in own.last.dropped] == ["unknown_predicate"]
    with pytest.raises(InputError, match="predicates is empty"):
        worker.extract(MESSAGES, EXISTING, observed_at="2025-10-08T10:00:00Z", predicates=[])


def test_category_and_importance_rules():
    base = {"kind": "fact", "predicate": "lives_in", "is_correction": False, "confidence": 0.65}
    assert category(base) == "semantic"
    assert category({**base, "predicate": "build_workaround"}) == "procedural"
    assert category({**base, "kind": "event"}) == "episodic"
    assert importance(base) == 6
    assert importance({**base, "kind": "belief", "confidence": 0.35}) == 3
    assert importance({**base, "kind": "relationship", "is_correction": True,
                       "confidence": 0.9}) == 9


def test_consolidate_and_reflect_candidates():
    facts = [{"id": "A", "text": "Ana runs daily."}, {"id": "B", "text": "Ana entered a race."},
             {"id": "C", "text": "Ana bought shoes."}]
    worker = worker_with(json.dumps({"observations": [
        {"statement": "Ana is probably training.", "supports": ["A", "B", "C"]}]}))
    (obs,) = worker.consolidate(facts)
    assert obs["text"] == "Ana is probably training." and obs["importance"] == 7
    assert obs["links"] == [{"relation": "supported_by", "id": i} for i in "ABC"]
    assert obs["source_ids"] == ["A", "B", "C"] and obs["category"] == "semantic"

    evidence = [{"id": "E1", "text": "The user moved to Lisbon.",
                 "timestamp": "2025-10-08T09:12:00+02:00"}]
    worker = worker_with(json.dumps({"answer": "Lisbon.", "citations": ["E1"],
                                     "insufficient_evidence": False}))
    answer = worker.reflect("Where does the user live?", evidence,
                            asked_at="2025-10-20T10:00:00Z")
    assert answer == {"text": "Lisbon.", "citations": ["E1"], "insufficient_evidence": False,
                      "source_ids": ["E1"]}


def test_consolidate_and_reflect_candidates_from_a_models_text():
    """Wire v4: the model writes the text; the store gets the ids the codec reads from it."""
    facts = [{"id": "A", "text": "Ana runs daily."}, {"id": "B", "text": "Ana entered a race."},
             {"id": "C", "text": "Ana bought shoes."}]
    worker = worker_with(json.dumps({"observations": [
        "Ana runs daily and Ana entered a race, so she is probably training.",
        "Ana bought shoes."]}))   # one fact: no observation
    (obs,) = worker.consolidate(facts)
    assert obs["source_ids"] == ["A", "B"] and obs["importance"] == 6
    assert worker.last.diagnostics == [
        "observations/1: dropped (states fewer than two of the facts)"]
    evidence = [{"id": "E1", "text": "The user moved to Lisbon.",
                 "timestamp": "2025-10-08T09:12:00+02:00"}]
    for text, cited in (("The user moved to Lisbon.", ["E1"]), ("Not known.", [])):
        worker = worker_with(json.dumps({"answer": text}))
        answer = worker.reflect("Where does the user live?", evidence,
                                asked_at="2025-10-20T10:00:00Z")
        assert answer == {"text": text, "citations": cited, "insufficient_evidence": not cited,
                          "source_ids": cited}


def test_bad_output_raises_instead_of_returning_nothing():
    worker = worker_with("{}", '{"claims": "x"}')
    with pytest.raises(CodecError) as info:
        worker.extract(MESSAGES, EXISTING, observed_at="2025-10-08T10:00:00Z")
    assert len(info.value.raw_outputs) == 2
    assert worker.last is None


@pytest.mark.parametrize("messages,observed_at,needle", [
    ([{"role": "user", "content": "hi"}], None, "no timestamp"),
    ([{"role": "bot", "content": "hi"}], "2025-01-01T00:00:00Z", "role must be"),
    ([{"role": "user"}], "2025-01-01T00:00:00Z", "content"),
    ([{"role": "user", "content": "x", "timestamp": "2025-01-01 10:00"}], None, "naive"),
])
def test_bad_messages_are_input_errors(messages, observed_at, needle):
    with pytest.raises(InputError, match=needle):
        worker_with().extract(messages, [], observed_at=observed_at)


def test_bad_facts_and_evidence_are_input_errors():
    with pytest.raises(InputError, match="needs 'id'"):
        worker_with().consolidate([{"text": "x"}])
    with pytest.raises(InputError, match="needs 'id', 'text' and 'timestamp'"):
        worker_with().reflect("q?", [{"id": "E1", "text": "x"}], asked_at="2025-01-01T00:00Z")


# --- the real embedded base through llama.cpp (slow) ----------------------------------------------

@pytest.fixture(scope="module")
def real_worker():
    worker = MemWorkerBackend.from_gguf(n_ctx=2048, n_threads=2, budget_tokens=200,
                                        max_tokens=256)
    yield worker
    worker.backend.llm.close()


def _grammar_valid(worker, task, inputs, raws):
    """Every raw output satisfies the request's dynamic schema: the grammar was applied."""
    schema = prepare(task, inputs, backend=worker.backend, budget_tokens=worker.budget_tokens,
                     max_tokens=worker.max_tokens).schema
    for raw in raws:
        jsonschema.validate(json.loads(raw), schema)
        assert raw == dump_answer(task, json.loads(raw))  # byte-exact training format


def _outcome(call):
    """(result or error text, raw outputs) of one worker call."""
    try:
        value = call()
    except CodecError as exc:
        return f"{type(exc).__name__}: {exc}", exc.raw_outputs
    return value, None


@pytest.mark.slow
def test_real_model_reflect_and_consolidate(real_worker):
    evidence = [{"id": "E1", "text": "The user moved to Lisbon in September 2025.",
                 "timestamp": "2025-10-08T09:12:00+02:00"}]
    answer = real_worker.reflect("Where does the user live?", evidence,
                                 asked_at="2025-10-20T10:00:00Z")
    assert isinstance(answer["text"], str) and answer["text"]
    assert set(answer["citations"]) <= {"E1"}
    assert answer["insufficient_evidence"] == (answer["citations"] == [])
    inputs = {"question": "Where does the user live?", "asked_at": "2025-10-20T10:00:00+00:00",
              "evidence": evidence}
    _grammar_valid(real_worker, "reflect", inputs, [a.raw for a in real_worker.last.attempts])

    facts = [{"id": "A", "text": "Ana runs 10 km every Saturday."},
             {"id": "B", "text": "Ana signed up for a half marathon."}]
    first, raws = _outcome(lambda: real_worker.consolidate(facts))
    again, _ = _outcome(lambda: real_worker.consolidate(facts))
    assert first == again  # temperature 0, fixed seed: the same answer or the same error
    # wire v4: the grammar writes statements only, which the codec always reads (an observation
    # that states fewer than two facts is dropped, noted): each one kept states both facts
    assert raws is None, first
    raws = [a.raw for a in real_worker.last.attempts]
    for obs in first:
        assert sorted(obs["source_ids"]) == ["A", "B"] and 1 <= obs["importance"] <= 10
    _grammar_valid(real_worker, "consolidate",
                   {"facts": [{"id": f["id"], "statement": f["text"]} for f in facts]}, raws)


@pytest.mark.slow
def test_real_model_extract(real_worker):
    messages = [{"id": "m1", "role": "user", "timestamp": "2025-10-08T09:12:00+02:00",
                 "content": "I moved to Lisbon last month."}]
    first, raws = _outcome(lambda: real_worker.extract(messages, EXISTING))
    again, _ = _outcome(lambda: real_worker.extract(messages, EXISTING))
    assert first == again  # temperature 0, fixed seed
    inputs, _ = real_worker.episode(messages, EXISTING)
    if raws is not None:  # a typed error after two schema-valid attempts
        _grammar_valid(real_worker, "extract", inputs, raws)
        return
    result = real_worker.last
    _grammar_valid(real_worker, "extract", inputs, [a.raw for a in result.attempts])
    generated = json.loads(result.raw)["claims"]
    assert len(generated) == len(first) + len(result.dropped)  # nothing lost silently
    for cand in first:
        assert cand["source_ids"] == ["m1"]
        assert cand["category"] in ("semantic", "episodic", "procedural")
        assert 1 <= cand["importance"] <= 10
        assert all(q in messages[0]["content"] for q in cand["quotes"])
        assert cand["supersedes"] in ([], ["F1"])
        if cand["time_expression"] is not None:
            assert (cand["event_date"], cand["date_precision"]) == ("2025-09", "month")
