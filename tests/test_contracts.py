import copy
import json

import pytest

from memworker import contracts, wire
from memworker.contracts import ContractError, errors, load_schema, validate
from tests.helpers import episode, replaced
from tests.test_wire import wire_claim

CLAIM = {
    "source_indices": [0], "quotes": ["I moved to Lisbon last week."],
    "subject": {"name": "the user", "type": "person"}, "predicate": "lives_in",
    "value": "Lisbon", "statement": "The user lives in Lisbon.", "kind": "fact",
    "time_expression": "last week", "date": "2025-09-29", "date_precision": "day",
    "is_correction": True, "supersedes": ["F1"], "confidence": 0.9,
}


def test_every_schema_is_valid_draft_2020_12():
    for name in contracts.SCHEMA_NAMES:
        schema = load_schema(name)
        contracts._validator(name)  # check_schema raises on an invalid schema
        assert schema.get("type") == "object" or "anyOf" in schema


REFLECT_INPUT = {"question": "q?", "asked_at": "2025-10-08T09:00:00Z",
                 "evidence": [{"id": "E1", "timestamp": "2025-10-01T10:00:00+00:00",
                               "text": "t"}]}
#: an episode with the optional fields of wire v3: its own predicate vocabulary and a predicate
#: on an existing fact
WITH_PREDICATES = replaced(episode(predicates=["lives_in", "visits"]),
                           ("existing_facts", 0, "predicate"), "lives_in")
#: (schema, a document it accepts, the same document with one thing wrong, where)
GOOD_AND_BAD = [
    ("episode", episode(), replaced(episode(), ("events", 0, "role"), "system"),
     "events/0/role"),
    ("episode", WITH_PREDICATES, replaced(WITH_PREDICATES, ("predicates",), []), "predicates"),
    ("episode", WITH_PREDICATES,
     replaced(WITH_PREDICATES, ("predicates",), ["lives_in", "visits", "lives_in"]),
     "predicates"),
    ("episode", WITH_PREDICATES, replaced(WITH_PREDICATES, ("predicates", 1), "Visits"),
     "predicates/1"),
    ("episode", WITH_PREDICATES,
     replaced(WITH_PREDICATES, ("existing_facts", 0, "predicate"), "lives in"),
     "existing_facts/0/predicate"),
    ("episode", WITH_PREDICATES,
     replaced(WITH_PREDICATES, ("existing_facts", 0, "predicate"), ""),
     "existing_facts/0/predicate"),
    ("extract_wire", {"claims": [wire_claim()]}, {"claims": [wire_claim() + ["high"]]},
     "claims/0"),   # a ninth item (v2's confidence label)
    ("extract_wire", {"claims": [wire_claim()]}, {"claims": [wire_claim()[:7]]}, "claims/0"),
    ("extract_wire", {"claims": [wire_claim()]}, {"claims": [wire_claim(array=False)]},
     "claims/0"),   # a claim record (or a v2 object) is not what the model writes
    ("extract_wire", {"claims": [wire_claim()]},
     {"claims": [wire_claim(quotes=[("I moved to Lisbon last week.", 200)])]}, "claims/0/0/0/1"),
    ("extract_output", {"claims": [CLAIM]}, {"claims": [{**CLAIM, "confidence": 1.5}]},
     "claims/0/confidence"),
    ("extract_output", {"claims": []}, {"claims": [], "extra": 1}, "<root>"),
    ("consolidate_input", {"facts": [{"id": "F1", "statement": "x"}]},
     {"facts": [{"id": "F1"}]}, "facts/0"),
    ("consolidate_output", {"observations": [{"statement": "s", "supports": ["F1", "F2"]}]},
     {"observations": [{"statement": "s", "supports": ["F1", "F1"]}]},
     "observations/0/supports"),
    # wire v4: the text alone, no ids
    ("consolidate_wire", {"observations": ["Ana probably trains."]},
     {"observations": [{"statement": "s", "supports": ["F1", "F2"]}]}, "observations/0"),
    ("consolidate_wire", {"observations": []}, {"observations": [""]}, "observations/0"),
    ("reflect_wire", {"answer": "a"}, {"answer": "a", "citations": ["E1"]}, "<root>"),
    ("reflect_wire", {"answer": "a"}, {"answer": "x" * 301}, "answer"),
    ("reflect_input", REFLECT_INPUT,
     replaced(REFLECT_INPUT, ("asked_at",), "2025-10-08T09:00:00"), "asked_at"),
    ("reflect_output", {"answer": "a", "citations": ["E1"], "insufficient_evidence": False},
     {"answer": "a", "citations": ["E1"], "insufficient_evidence": True}, "<root>"),
    ("reflect_output", {"answer": "unknown", "citations": [], "insufficient_evidence": True},
     {"answer": "unknown", "citations": [], "insufficient_evidence": False}, "<root>"),
]


@pytest.mark.parametrize("name,good,bad,where", GOOD_AND_BAD,
                         ids=[f"{n}-{w}" for n, _, _, w in GOOD_AND_BAD])
def test_good_documents_validate(name, good, bad, where):
    """Each good document validates, and the same document with one thing wrong does not."""
    validate(name, good)
    with pytest.raises(ContractError) as info:
        validate(name, bad)
    assert any(e.startswith(where) for e in info.value.errors), info.value.errors


@pytest.mark.parametrize("name,doc,fragment", [
    ("reflect_output", {"answer": "a", "citations": ["E1"], "insufficient_evidence": True},
     "<root>: "),  # neither anyOf branch: the error is at the root
    ("reflect_output", {"answer": "a", "citations": [], "insufficient_evidence": False},
     "<root>: "),
    ("consolidate_output", {"observations": [{"statement": "s", "supports": ["F1"]}]},
     "observations/0/supports"),
    ("consolidate_output", {"observations": [{"statement": "s", "supports": ["F1", "F1"]}]},
     "observations/0/supports"),
    ("extract_output", {"claims": [{**CLAIM, "date": "2025-09-29T00:00"}]}, "claims/0/date"),
    ("extract_output", {"claims": [{**CLAIM, "predicate": "Lives In"}]}, "claims/0/predicate"),
    ("extract_output", {"claims": [{**CLAIM, "confidence": 1.5}]}, "claims/0/confidence"),
    ("extract_output", {"claims": [{**CLAIM, "extra": 1}]}, "claims/0"),
    ("extract_output", {"claims": [{**CLAIM, "quotes": []}]}, "claims/0/quotes"),
    ("extract_output", {"claims": [{**CLAIM, "kind": "rumour"}]}, "claims/0/kind"),
])
def test_bad_outputs_are_rejected_with_their_path(name, doc, fragment):
    with pytest.raises(ContractError) as info:
        validate(name, doc)
    assert info.value.schema == name
    assert fragment and any(e.startswith(fragment) for e in info.value.errors), info.value.errors


def test_naive_timestamp_and_unknown_role_are_rejected():
    bad = episode()
    bad["events"][0]["timestamp"] = "2025-10-08T09:12:00"
    bad["events"][1]["role"] = "system"
    found = errors("episode", bad)
    assert any(e.startswith("events/0/timestamp") for e in found)
    assert any(e.startswith("events/1/role") for e in found)


def test_wire_schema_is_the_contract_with_choices_not_dates():
    """Wire v3: a claim is a fixed-order array of wire.CLAIM_FIELDS, each item the canonical
    field's own schema; nothing the codec derives (statement, correction flag, confidence) or
    resolves (date, precision) is written."""
    claim = load_schema("extract_wire")["properties"]["claims"]["items"]
    canon = load_schema("extract_output")["properties"]["claims"]["items"]["properties"]
    assert claim["type"] == "array" and claim["items"] is False
    assert claim["minItems"] == claim["maxItems"] == len(claim["prefixItems"]) == 8
    items = dict(zip(wire.CLAIM_FIELDS, claim["prefixItems"], strict=True))
    derived = {"statement", "confidence", "correction", "is_correction", "date",
               "date_precision", "source_indices"}
    assert not derived & set(items) and derived - {"correction"} <= set(canon)
    quotes = items["quotes"]
    assert {k: quotes[k] for k in ("minItems", "maxItems")} == {
        k: canon["quotes"][k] for k in ("minItems", "maxItems")}
    pair = quotes["items"]
    assert pair["items"] is False and pair["minItems"] == pair["maxItems"] == 2
    assert pair["prefixItems"] == [canon["quotes"]["items"], canon["source_indices"]["items"]]
    subject = canon["subject"]["properties"]
    assert (items["name"], items["type"]) == (subject["name"], subject["type"])
    for shared in ("predicate", "value", "kind", "time_expression", "supersedes"):
        assert items[shared] == canon[shared], shared
    # so the wire form of a canonical claim is valid, and it comes back whole
    wired = wire.to_wire("extract", {"claims": [CLAIM]})
    validate("extract_wire", wired)
    back = wire.from_wire("extract", wired, episode())
    validate("extract_output", back)
    assert [wire.comparable(c) for c in back["claims"]] == [wire.comparable(CLAIM)]


def test_unknown_names_fail_clearly():
    with pytest.raises(KeyError, match="unknown schema"):
        load_schema("nope")
    with pytest.raises(ValueError, match="unknown task"):
        contracts.validate_input("summarise", {})


def test_load_schema_returns_a_copy():
    a = load_schema("episode")
    a["properties"].clear()
    assert load_schema("episode")["properties"]


@pytest.fixture(scope="module")
def vocab_model(embedded_gguf, llama_cpp):
    model = llama_cpp.Llama(str(embedded_gguf), vocab_only=True, verbose=False)
    yield model
    model.close()


@pytest.mark.parametrize("name", contracts.SCHEMA_NAMES)
def test_each_schema_converts_to_a_llama_cpp_grammar(name, vocab_model):
    """llama.cpp's own converter accepts the schema and llama.cpp's grammar parser accepts the
    result (a NULL sampler means the grammar did not parse)."""
    import llama_cpp
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    gbnf = json_schema_to_gbnf(json.dumps(load_schema(name)))
    assert "root ::=" in gbnf
    vocab = llama_cpp.llama_model_get_vocab(vocab_model._model.model)
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
    assert sampler, f"llama.cpp could not parse the grammar of {name}"
    llama_cpp.llama_sampler_free(sampler)
    broken = llama_cpp.llama_sampler_init_grammar(vocab, b"root ::= (", b"root")
    assert not broken  # the check above can fail


def test_contract_error_message_lists_violations():
    doc = copy.deepcopy({"claims": [{**CLAIM, "kind": "x", "confidence": 2}]})
    with pytest.raises(ContractError, match=r"extract_output: claims/0/confidence"):
        validate("extract_output", doc)


def test_a_long_offending_value_comes_after_the_reason():
    """Issue 46: the field and the reason lead; a long value is shown after them, cut."""
    from memworker import contracts as C

    (problem,) = C.errors("extract_output", {"claims": {"quote": "x" * 400}})
    assert problem.startswith("claims: is not of type 'array' (got dict, ")
    assert len(problem) < 120
    (short,) = C.errors("extract_output", {"claims": 3})
    assert short == "claims: 3 is not of type 'array'"  # a short value reads as before
