"""The per-request dynamic schema (memworker.inference.schema): choices come from the inputs,
it stays inside the static wire contract, and it is bounded to a token budget."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memworker.contracts import errors as contract_errors
from memworker.contracts import load_schema
from memworker.inference.grammar import schema_to_gbnf
from memworker.inference.schema import (
    CHARS_PER_TOKEN,
    CONTRACT_LIMITS,
    DEFAULT_BUDGET,
    LIMIT_STAGES,
    TOKEN_MARGIN,
    InputError,
    Limits,
    build_schema,
    check_inputs,
    citable_spans,
    estimate_tokens,
    max_tokens_for,
    time_expressions,
    typical_tokens,
    worst_case_chars,
)
from memworker.ontology import PREDICATES
from memworker.spans import candidate_spans
from memworker.wire import CLAIM_FIELDS, SEPARATORS, dump_answer, key_order, wire_schema_name
from tests.gbnf import Matcher
from tests.test_codec_strategies import INPUTS, answers, episodes

#: request inputs per task, extract ones with the optional predicate vocabulary fields
VOCAB_INPUTS = {**INPUTS, "extract": lambda: episodes(vocabulary=True)}
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def ev(index, text, trusted=True, role="user", ts="2025-10-08T09:12:00+02:00"):
    return {"index": index, "role": role, "timestamp": ts, "text": text, "trusted": trusted}


def episode(events, facts=()):
    return {"episode_id": "e", "events": list(events),
            "existing_facts": [{"id": f, "statement": f"fact {f}", "valid_from": None}
                               for f in facts]}


# --- extract --------------------------------------------------------------------------------------

def claim_items(schema) -> dict[str, dict]:
    """{wire field: its schema} of an extract schema's claim array (`wire.CLAIM_FIELDS`)."""
    claim = schema["properties"]["claims"]["items"]
    assert claim["type"] == "array" and claim["items"] is False
    assert claim["minItems"] == claim["maxItems"] == len(claim["prefixItems"]) == 8
    return dict(zip(CLAIM_FIELDS, claim["prefixItems"], strict=True))


def test_extract_quotes_are_whole_pair_branches_per_citable_event():
    inputs = episode([ev(3, "I moved to Lisbon. It rains, sadly."), ev(7, "ok"), ev(9, ""),
                      ev(12, "Ana — my sister — lives in Porto.", trusted=False, role="tool")],
                     facts=["F1", "F2"])
    schema = build_schema("extract", inputs, budget_tokens=None)
    assert key_order("extract")["claim"] == list(CLAIM_FIELDS)
    items = claim_items(schema)
    branches = items["quotes"]["items"]["anyOf"]
    assert [b["prefixItems"][1] for b in branches] == [{"const": 3}, {"const": 12}]
    for branch, text in zip(branches, [inputs["events"][0]["text"], inputs["events"][3]["text"]],
                            strict=True):
        # a whole [span, event] pair: the words first, then the event, so the grammar leaves
        # only the events holding them
        assert branch["type"] == "array" and branch["items"] is False
        assert branch["minItems"] == branch["maxItems"] == 2
        assert branch["prefixItems"][0]["enum"] == candidate_spans(text)
    assert items["supersedes"]["items"] == {"enum": ["F1", "F2"]}
    assert items["supersedes"]["maxItems"] == 2
    assert schema["properties"]["claims"]["maxItems"] == 12


def test_extract_without_citable_events_allows_only_no_claims():
    schema = build_schema("extract", episode([ev(0, "ok"), ev(1, "")]))
    assert schema["properties"]["claims"]["maxItems"] == 0
    m = Matcher(schema_to_gbnf(schema))
    assert m.accepts('{"claims":[]}')
    assert not m.accepts('{"claims":[[]]}')
    assert not m.accepts('{"claims":[{}]}')


def test_extract_without_existing_facts_cannot_supersede():
    schema = build_schema("extract", episode([ev(0, "I moved to Lisbon.")]))
    assert claim_items(schema)["supersedes"]["maxItems"] == 0


def test_time_expressions_are_detected_resolvable_choices_or_null():
    inputs = episode([ev(0, "We meet next Friday at 3pm, or soon."),
                      ev(1, "I moved in 2021. We meet next Friday at 3pm.")])
    assert time_expressions(inputs["events"]) == ["next Friday at 3pm", "in 2021"]
    items = claim_items(build_schema("extract", inputs))
    assert items["time_expression"] == {"enum": ["next Friday at 3pm", "in 2021", None]}
    none = build_schema("extract", episode([ev(0, "I like tea.")]))
    assert claim_items(none)["time_expression"] == {"enum": [None]}


def test_the_predicate_is_an_enum_of_the_request_vocabulary():
    events = [ev(0, "I moved to Lisbon.")]
    default = claim_items(build_schema("extract", episode(events, facts=["F1"])))
    assert default["predicate"] == {"enum": list(PREDICATES)}
    # the existing facts' predicates join the default vocabulary (once, in first-seen order)
    inputs = episode(events, facts=["F1", "F2", "F3"])
    inputs["existing_facts"][0]["predicate"] = "owns_boat"
    inputs["existing_facts"][1]["predicate"] = "lives_in"  # already in PREDICATES
    inputs["existing_facts"][2]["predicate"] = "owns_boat"
    joined = claim_items(build_schema("extract", inputs))
    assert joined["predicate"] == {"enum": [*PREDICATES, "owns_boat"]}
    # the episode's own vocabulary replaces both (a fact's predicate does not join it)
    own = claim_items(build_schema("extract", {**inputs, "predicates": ["works_at", "lives_in"]}))
    assert own["predicate"] == {"enum": ["works_at", "lives_in"]}
    # the grammar offers exactly those
    m = Matcher(schema_to_gbnf(build_schema("extract", {**episode(events), "predicates": [
        "works_at", "lives_in"]})))
    assert m.accepts('{"claims":[[[["I moved to Lisbon.",0]],"the user","person","lives_in",'
                     '"Lisbon","fact",null,[]]]}')
    assert not m.accepts('{"claims":[[[["I moved to Lisbon.",0]],"the user","person",'
                         '"resides_in","Lisbon","fact",null,[]]]}')


@pytest.mark.parametrize("predicates,needle", [
    ([], "predicates is empty (leave it out to use the default vocabulary)"),
    (["lives_in", "works_at", "lives_in"], "predicates lists lives_in twice"),
    (["b_x", "a_y", "b_x", "a_y"], "predicates lists a_y, b_x twice"),
])
def test_an_empty_or_repeated_predicate_vocabulary_is_refused(predicates, needle):
    inputs = {**episode([ev(0, "I moved to Lisbon.")]), "predicates": predicates}
    for check in (lambda: check_inputs("extract", inputs),
                  lambda: build_schema("extract", inputs)):
        with pytest.raises(InputError) as info:
            check()
        assert str(info.value) == f"extract inputs: {needle}"


def test_duplicate_or_invalid_inputs_are_refused():
    with pytest.raises(InputError, match="duplicate event index"):
        build_schema("extract", episode([ev(1, "a b c"), ev(1, "d e f")]))
    with pytest.raises(InputError, match="duplicate fact id"):
        build_schema("consolidate", {"facts": [{"id": "A", "statement": "x"},
                                               {"id": "A", "statement": "y"}]})
    with pytest.raises(InputError, match="extract inputs"):
        build_schema("extract", {"events": []})
    with pytest.raises(InputError, match="unknown task"):
        build_schema("summarise", {})


# --- consolidate and reflect (wire v4: text only) ------------------------------------------------

THREE_FACTS = {"facts": [{"id": "A", "statement": "Ana runs every morning."},
                         {"id": "B", "statement": "Ana entered a marathon."},
                         {"id": "C", "statement": "Ana bought running shoes."}]}
TWO_EVIDENCE = {"question": "Where does the user live?", "asked_at": "2025-01-02T00:00:00Z",
                "evidence": [{"id": "E1", "timestamp": "2025-01-01T00:00:00Z",
                              "text": "I moved to Lisbon."},
                             {"id": "E2", "timestamp": "2025-01-01T00:00:00Z", "text": "Nice."}]}


def test_consolidate_observations_are_bounded_statements():
    obs = build_schema("consolidate", THREE_FACTS, budget_tokens=None)["properties"]["observations"]
    assert obs == {"type": "array", "maxItems": 4,
                   "items": {"type": "string", "minLength": 1, "maxLength": 300}}
    one = build_schema("consolidate", {"facts": [{"id": "A", "statement": "x"}]})
    assert one["properties"]["observations"]["maxItems"] == 0


def test_reflect_is_the_answer_text_alone():
    schema = build_schema("reflect", TWO_EVIDENCE, budget_tokens=None)
    assert schema["properties"] == {"answer": {"type": "string", "minLength": 1,
                                               "maxLength": 300}}
    assert schema["required"] == ["answer"] and schema["additionalProperties"] is False
    # without evidence the same shape: the codec reads the abstention from the text
    assert build_schema("reflect", {**TWO_EVIDENCE, "evidence": []}, budget_tokens=None) == schema


@pytest.mark.parametrize("limits", [None, *LIMIT_STAGES])
def test_the_request_grammar_writes_text_only(limits):
    """consolidate and reflect (wire v4): at every limit stage the grammar writes the text and
    refuses ids, in the order of either older wire (ids first, or text first)."""
    def build(task, inputs):
        return build_schema(task, inputs, budget_tokens=None, limits=limits)

    m = Matcher(schema_to_gbnf(build("consolidate", THREE_FACTS)))
    text = dump_answer("consolidate", {"observations": ["Ana is probably training."]})
    assert text == '{"observations":["Ana is probably training."]}'
    assert m.accepts(text) and m.accepts('{"observations":[]}')
    for old in ('{"observations":[{"supports":["B","A"],"statement":"Ana is probably training."}]}',
                '{"observations":[{"statement":"Ana is probably training.","supports":["B","A"]}]}'):
        assert not m.accepts(old)
    for inputs in (TWO_EVIDENCE, {**TWO_EVIDENCE, "evidence": []}):
        m = Matcher(schema_to_gbnf(build("reflect", inputs)))
        assert m.accepts(dump_answer("reflect", {"answer": "In Lisbon."}))
        for old in ('{"insufficient_evidence":false,"citations":["E1"],"answer":"In Lisbon."}',
                    '{"answer":"In Lisbon.","citations":["E1"],"insufficient_evidence":false}'):
            assert not m.accepts(old)


# --- subset of the static contract ----------------------------------------------------------------

@pytest.mark.parametrize("task", ["extract", "consolidate", "reflect"])
def test_dynamic_answers_are_valid_under_the_static_wire_schema(task):
    """Valid under the dynamic schema => valid under the static wire contract (no wire schema
    has a uniqueItems that a grammar could not express)."""

    @SETTINGS
    @given(data=st.data(), inputs=VOCAB_INPUTS[task](),
           budget=st.sampled_from([None, -1, 200]))
    def check(data, inputs, budget):
        schema = build_schema(task, inputs, budget_tokens=budget)
        assert contract_errors(wire_schema_name(task), data.draw(answers(schema))) == []

    check()


def test_static_schemas_unchanged_by_building():
    before = load_schema("extract_wire")
    build_schema("extract", episode([ev(0, "I moved to Lisbon.")]))
    assert load_schema("extract_wire") == before


# --- token budget ---------------------------------------------------------------------------------

@pytest.mark.parametrize("task", ["extract", "consolidate", "reflect"])
def test_worst_case_chars_bounds_every_answer(task):
    @SETTINGS
    @given(data=st.data(), inputs=VOCAB_INPUTS[task]())
    def check(data, inputs):
        schema = build_schema(task, inputs, budget_tokens=200)
        answer = data.draw(answers(schema))
        text = dump_answer(task, answer)
        extra = sum(len(json.dumps(c, ensure_ascii=False)) - 3 for c in text)  # escapes
        assert len(text) <= worst_case_chars(schema) + extra

    check()


def test_budget_fitting_picks_the_first_stage_that_fits():
    inputs = episode([ev(0, "I moved to Lisbon last month. My sister Maria lives in Porto."),
                      ev(1, "And I start at Acme Corp next Monday.")], facts=["F1"])
    wide = build_schema("extract", inputs, budget_tokens=None)
    assert estimate_tokens(worst_case_chars(wide)) > 3000
    for budget in (3072, 2048, 800, 300):
        schema = build_schema("extract", inputs, budget_tokens=budget)
        assert typical_tokens(schema) <= budget
        # the first stage that fits: the one before it does not
        stage = next(i for i, lim in enumerate(LIMIT_STAGES)
                     if build_schema("extract", inputs, limits=lim) == schema)
        if stage:
            looser = build_schema("extract", inputs, limits=LIMIT_STAGES[stage - 1])
            assert typical_tokens(looser) > budget
        assert max_tokens_for(schema) >= estimate_tokens(worst_case_chars(schema))
        assert max_tokens_for(schema) >= typical_tokens(schema)
    tight = build_schema("extract", inputs, budget_tokens=1)  # nothing fits: the tightest stage
    assert tight == build_schema("extract", inputs, limits=LIMIT_STAGES[-1])
    assert build_schema("extract", inputs) == build_schema(
        "extract", inputs, budget_tokens=DEFAULT_BUDGET["extract"])


def test_max_tokens_counts_free_text_one_token_per_character():
    schema = build_schema("reflect", {"question": "q", "asked_at": "2025-01-01T00:00:00Z",
                                      "evidence": []}, budget_tokens=None)
    # {"answer": "<300 free>"}
    text = json.dumps({"answer": ""}, separators=SEPARATORS)
    assert worst_case_chars(schema) == len(text) + 300
    assert max_tokens_for(schema) == 300 + math.ceil(len(text) / CHARS_PER_TOKEN) + TOKEN_MARGIN
    assert max_tokens_for(schema, context_left=10) == 10
    with pytest.raises(InputError, match="no room"):
        max_tokens_for(schema, context_left=0)


def test_limits_may_only_tighten_the_contract():
    assert Limits() == CONTRACT_LIMITS
    with pytest.raises(ValueError, match="tighten"):
        Limits(statement=301)
    with pytest.raises(ValueError, match="positive"):
        Limits(claims=0)


def test_citable_spans_skip_events_without_spans():
    assert citable_spans([ev(0, "ok"), ev(1, "Fine by me.")]) == {1: ["Fine by me."]}
