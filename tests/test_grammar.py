"""The JSON-schema -> GBNF converter (memworker.inference.grammar) and the GBNF matcher.

Acceptance is checked with tests/gbnf.py (a small matcher of the GBNF we write);
tests/test_grammar_llama.py repeats the key checks inside llama.cpp itself (slow tier)."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memworker.contracts import load_schema
from memworker.inference.grammar import (
    UnsupportedSchema,
    gbnf_literal,
    json_literal,
    schema_to_gbnf,
)
from memworker.inference.schema import build_schema
from memworker.wire import SEPARATORS, dump_answer
from tests.gbnf import GbnfSyntaxError, Matcher, accepts, parse_gbnf
from tests.test_codec_strategies import INPUTS, answers
from tests.test_wire import wire_claim

FAST = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.data_too_large])


# --- the static contracts convert -----------------------------------------------------------------

def _without_optional_properties(schema):
    """`schema` with every property that is not required removed (recursively)."""
    if isinstance(schema, list):
        return [_without_optional_properties(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _without_optional_properties(v) for k, v in schema.items()}
    if "properties" in out:
        out["properties"] = {k: v for k, v in out["properties"].items()
                             if k in schema.get("required", [])}
    return out


@pytest.mark.parametrize("name", ["extract_wire", "consolidate_wire", "reflect_wire",
                                  "consolidate_output", "reflect_output", "episode",
                                  "consolidate_input", "reflect_input"])
def test_static_contract_schemas_convert_and_reparse(name):
    schema = load_schema(name)
    if name == "episode":
        # the episode's optional `predicates` and existing facts' optional `predicate` (wire v3)
        # are outside the subset: refused, naming them; the rest of the contract converts
        with pytest.raises(UnsupportedSchema, match=r"schema at /: .*optional.*\['predicates'\]"):
            schema_to_gbnf(schema)
        with pytest.raises(UnsupportedSchema, match=r"existing_facts/items: .*\['predicate'\]"):
            schema_to_gbnf({**schema, "required": [*schema["required"], "predicates"]})
        schema = _without_optional_properties(schema)
        assert "predicates" not in schema["properties"]
    gbnf = schema_to_gbnf(schema)
    rules = parse_gbnf(gbnf)
    assert "root" in rules
    # one rule per line: no literal carries a raw newline
    assert len(gbnf.strip().split("\n")) == len(rules)


def test_char_rule_excludes_raw_controls_and_allows_only_dumps_escapes():
    m = Matcher(schema_to_gbnf({"type": "string", "maxLength": 10}))
    for ch in [chr(c) for c in range(0x20)] + ["\x7f"]:
        assert not m.accepts(f'"a{ch}b"'), repr(ch)
        if ch != "\x7f":
            assert m.accepts(json.dumps(f"a{ch}b", ensure_ascii=False)), repr(ch)
    for bad in ['"\\x41"', '"\\/"', '"\\u0041"', '"\\ud83d"', '"\\"', '"a"b"', '"\\a"']:
        assert not m.accepts(bad), bad
    for good in ['"é😀東"', '""', '"\\u001b"', '"\\t\\n\\r\\b\\f\\"\\\\"']:
        assert m.accepts(good), good


def test_string_length_bounds_count_characters_not_bytes():
    m = Matcher(schema_to_gbnf({"type": "string", "minLength": 2, "maxLength": 3}))
    assert m.accepts('"é😀"') and m.accepts('"\\n\\t\\""')
    assert not m.accepts('"a"') and not m.accepts('"abcd"')


TRICKY = ['say "hi"', "back\\slash", "new\nline", "tab\tcr\r", "ünï cödé 東京 😀", "\x01\x1f",
          "\x7f del", "[brackets] and ] ^ -", "", " ", "'single'", "a\u2028b"]


def test_enum_literals_are_escaped_for_gbnf():
    gbnf = schema_to_gbnf({"enum": TRICKY + [None, 3, True, {"k": [1, "x"]}]})
    m = Matcher(gbnf)
    for value in TRICKY + [None, 3, True, {"k": [1, "x"]}]:
        assert m.accepts(json.dumps(value, ensure_ascii=False, separators=SEPARATORS)), value
    assert not m.accepts(json.dumps({"k": [1, "x"]}))  # the default separators are not a literal
    assert not m.accepts(json.dumps("say 'hi'"))
    assert not m.accepts(json.dumps("new\nline", ensure_ascii=True) + " ")
    assert not m.accepts('"ünï cödé 東京 😀 "')
    assert len(gbnf.strip().split("\n")) == len(parse_gbnf(gbnf))


@given(st.text(st.characters(exclude_categories=("Cs",))))
def test_gbnf_literal_round_trips_any_text(text):
    assert accepts(f"root ::= {gbnf_literal(text)}", text)
    assert not accepts(f"root ::= {gbnf_literal(text)}", text + "x")


def test_whitespace_is_exactly_the_compact_separators():
    assert SEPARATORS == (",", ":")
    schema = {"type": "object", "additionalProperties": False, "required": ["a", "b", "c"],
              "properties": {"a": {"type": "array", "maxItems": 3, "items": {"type": "integer"}},
                             "b": {"type": ["string", "null"], "maxLength": 5},
                             "c": {"type": "array", "prefixItems": [{"type": "boolean"},
                                                                    {"enum": ["x", "y"]}],
                                   "items": False, "minItems": 2, "maxItems": 2}}}
    m = Matcher(schema_to_gbnf(schema))
    value = {"a": [1, -2, 30], "b": None, "c": [True, "y"]}
    compact = json.dumps(value, separators=SEPARATORS)
    assert compact == '{"a":[1,-2,30],"b":null,"c":[true,"y"]}'
    assert m.accepts(compact)
    assert not m.accepts(json.dumps(value))  # json.dumps defaults (", " and ": "): v2
    assert not m.accepts(compact.replace(",", ", ", 1))  # one space anywhere
    assert not m.accepts(compact.replace(":", ": ", 1))
    assert not m.accepts(compact.replace('[true,"y"]', '[true, "y"]'))  # inside a fixed array
    assert not m.accepts(compact.replace("[1", "[ 1"))
    assert not m.accepts(json.dumps(value, indent=1))
    assert not m.accepts(" " + compact)
    assert not m.accepts(compact + "\n")
    assert not m.accepts(json.dumps({"b": None, "a": [1], "c": [True, "y"]},
                                    separators=SEPARATORS))  # key order is the schema's
    assert not m.accepts(json.dumps({**value, "a": [1, 2, 3, 4]},
                                    separators=SEPARATORS))  # maxItems
    assert not m.accepts('{"a":[01],"b":null,"c":[true,"y"]}')


def test_ensure_ascii_escapes_are_not_training_format():
    m = Matcher(schema_to_gbnf({"type": "string", "maxLength": 5}))
    assert m.accepts(json.dumps("é", ensure_ascii=False))
    assert not m.accepts(json.dumps("é"))  # "\u00e9": the grammar follows dump_answer


def test_integer_ranges_and_numbers():
    m = Matcher(schema_to_gbnf({"type": "integer", "minimum": 3, "maximum": 12}))
    assert [v for v in range(-2, 20) if m.accepts(str(v))] == list(range(3, 13))
    n = Matcher(schema_to_gbnf({"type": "number"}))
    for text in ["0", "-1.5", "3e10", "2.25E-3"]:
        assert n.accepts(text)
    for text in ["01", "1.", ".5", "NaN", "Infinity", "+1"]:
        assert not n.accepts(text)


def test_anyof_of_whole_objects():
    schema = load_schema("reflect_output")
    m = Matcher(schema_to_gbnf(schema))
    assert m.accepts('{"insufficient_evidence":false,"citations":["E1"],"answer":"x"}')
    assert m.accepts('{"insufficient_evidence":true,"citations":[],"answer":"x"}')
    assert not m.accepts('{"insufficient_evidence":false,"citations":[],"answer":"x"}')
    assert not m.accepts('{"insufficient_evidence":true,"citations":["E1"],"answer":"x"}')
    # properties in schema order only: the decision first (the old, text-first order is refused)
    assert not m.accepts('{"answer":"x","citations":["E1"],"insufficient_evidence":false}')
    assert not m.accepts('{"answer":"x","citations":[],"insufficient_evidence":true}')


# --- fixed-order arrays (prefixItems: an extract claim, a quote pair) -----------------------------

TUPLE = {"type": "array", "items": False, "minItems": 3, "maxItems": 3,
         "prefixItems": [{"type": "integer", "minimum": 0, "maximum": 9}, {"enum": ["a", "b"]},
                         {"type": ["string", "null"], "maxLength": 3}]}


@pytest.mark.parametrize("text,ok", [
    ('[3,"a",null]', True), ('[0,"b","xyz"]', True), ('[9,"a",""]', True),
    ('["a",3,null]', False),          # the right items in another order
    ('[3,null,"a"]', False),
    ('[3,"a"]', False), ('[3]', False), ("[]", False),   # fewer items
    ('[3,"a",null,null]', False), ('[3,"a",null,1]', False),   # more items
    ('[3,"c",null]', False), ('[10,"a",null]', False), ('[3,"a","wxyz"]', False),  # an item's own
    ('[3, "a", null]', False), ('[ 3,"a",null]', False),   # compact separators only
    ('{"0":3,"1":"a","2":null}', False),
])
def test_prefix_items_accept_exactly_their_items_in_order(text, ok):
    m = Matcher(schema_to_gbnf(TUPLE))
    assert m.accepts(text) == ok
    # the grammar and the schema agree on every compact text
    value = json.loads(text)
    if text == json.dumps(value, separators=SEPARATORS):
        assert jsonschema.Draft202012Validator(TUPLE).is_valid(value) == ok


@pytest.mark.parametrize("text,ok", [
    ('[3]', True), ('[3,"a"]', True), ('[3,"a",null]', True), ('[3,"b","xy"]', True),
    ("[]", False),                                   # fewer than minItems
    ('[3,null]', False),                             # an optional item is still its own item
    ('[3,"a",null,null]', False), ('[3,]', False), ('["a"]', False),
])
def test_prefix_items_below_min_items_are_optional_in_order(text, ok):
    """minItems below the prefix's length (wire v6: a claim's trailing defaults left out)."""
    short = {**TUPLE, "minItems": 1}
    assert Matcher(schema_to_gbnf(short)).accepts(text) == ok
    if text != "[3,]":  # not JSON
        assert jsonschema.Draft202012Validator(short).is_valid(json.loads(text)) == ok


def test_prefix_items_without_max_items_and_nested():
    # items: false already bounds the length: maxItems may be left out
    no_max = {k: v for k, v in TUPLE.items() if k != "maxItems"}
    assert schema_to_gbnf(no_max) == schema_to_gbnf(TUPLE)
    # a list of pairs, as an extract claim's quotes: each pair in its own order
    pairs = {"type": "array", "maxItems": 2, "minItems": 1, "items": {
        "type": "array", "items": False, "minItems": 2, "maxItems": 2,
        "prefixItems": [{"enum": ["Hi.", "Bye."]}, {"const": 4}]}}
    m = Matcher(schema_to_gbnf(pairs))
    assert m.accepts('[["Hi.",4]]') and m.accepts('[["Hi.",4],["Bye.",4]]')
    for bad in ['[[4,"Hi."]]', '[["Hi."]]', '[["Hi.",4,4]]', '[["Hi.",5]]', "[]",
                '[["Hi.",4],["Bye.",4],["Hi.",4]]', '[{"quote":"Hi.","event":4}]']:
        assert not m.accepts(bad), bad


@pytest.mark.parametrize("change,needle", [
    ({"items": {"type": "null"}}, "items: false"),   # further items of a schema
    ({"items": True}, "items: false"),
    ({"items": None}, "items: false"),               # left out: further items are allowed
    ({"minItems": 0}, "minItems 1 to 3"),
    ({"minItems": None}, "minItems 1 to 3"),         # left out: minItems 0, an empty array
    ({"maxItems": 4}, "maxItems 3"),
    ({"maxItems": 2}, "maxItems 3"),
    ({"minItems": 4, "maxItems": 4}, "minItems 1 to 3"),
    ({"prefixItems": []}, "non-empty"),
    ({"prefixItems": {"type": "null"}}, "non-empty"),
    ({"minLength": 1}, "do not apply"),
])
def test_prefix_items_outside_the_subset_raise(change, needle):
    schema = {k: v for k, v in TUPLE.items() if change.get(k, "") is not None}
    schema.update({k: v for k, v in change.items() if v is not None})
    with pytest.raises(UnsupportedSchema, match=needle):
        schema_to_gbnf(schema)


def test_prefix_items_errors_name_the_location():
    bad = {**TUPLE, "prefixItems": [*TUPLE["prefixItems"][:2], {"type": "string"}]}
    with pytest.raises(UnsupportedSchema, match=r"schema at /prefixItems/2: .*maxLength"):
        schema_to_gbnf(bad)
    nested = {"type": "object", "additionalProperties": False, "required": ["x"],
              "properties": {"x": {"type": "array", "maxItems": 2,
                                   "items": {**TUPLE, "items": True}}}}
    with pytest.raises(UnsupportedSchema, match=r"schema at /properties/x/items: .*items: false"):
        schema_to_gbnf(nested)


# --- patterns -------------------------------------------------------------------------------------

PATTERNS = [
    ("^[a-z][a-z0-9_]{0,47}$", 48),
    ("^[A-Za-z][A-Za-z0-9_-]{0,31}$", 32),
    ("^[0-9]{4}(-[0-9]{2}(-[0-9]{2}(T[0-9]{2}:[0-9]{2}:[0-9]{2}[+-][0-9]{2}:[0-9]{2})?)?)?$", 25),
    ("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(:[0-9]{2})?(Z|[+-][0-9]{2}:[0-9]{2})$", 32),
    (r"^(?:ab|c\.d)+x?\d{2}$", None),  # unbounded: only with require_bounds=False
]


@pytest.mark.parametrize("pattern,max_len", PATTERNS)
def test_patterns_match_python_re(pattern, max_len):
    schema = {"type": "string", "pattern": pattern}
    if max_len is None:
        with pytest.raises(UnsupportedSchema, match="unbounded"):
            schema_to_gbnf(schema)
    else:
        schema["maxLength"] = max_len
    m = Matcher(schema_to_gbnf(schema, require_bounds=max_len is not None))
    rx = re.compile(pattern, re.ASCII)  # JSON Schema (ECMA-262): \\d is [0-9] only
    alphabet = st.sampled_from(list("azAZ09_-+:T.bcdx\"\\ ") + ["é"])

    @settings(max_examples=150, deadline=None)
    @given(st.one_of(st.from_regex(pattern, fullmatch=True), st.text(alphabet, max_size=30)))
    def check(s):
        if "\n" in s or (max_len is not None and len(s) > max_len):
            return
        expected = rx.fullmatch(s) is not None
        assert m.accepts(json.dumps(s, ensure_ascii=False)) == expected, s

    check()


# --- unsupported schemas fail loudly --------------------------------------------------------------

BAD = [
    ({"oneOf": [{"type": "null"}]}, "oneOf"),
    ({"allOf": [{"type": "null"}]}, "allOf"),
    ({"$ref": "#/x"}, "$ref"),
    ({"type": "string", "maxLength": 5, "format": "date"}, "format"),
    ({"type": "object", "properties": {"a": {"type": "null"}}}, "required"),
    ({"type": "object", "properties": {"a": {"type": "null"}}, "required": ["a"],
      "additionalProperties": True}, "additionalProperties"),
    ({"type": "object", "patternProperties": {}}, "patternProperties"),
    ({"type": "string"}, "maxLength"),
    ({"type": "array", "items": {"type": "null"}}, "maxItems"),
    ({"type": "array", "maxItems": 2}, "items"),
    ({"type": "string", "maxLength": 9, "pattern": "[a-z]+"}, "anchored"),
    ({"type": "string", "maxLength": 9, "pattern": "^[^a]$"}, "negated"),
    ({"type": "string", "maxLength": 9, "pattern": "^a.b$"}, "'.'"),
    ({"type": "string", "maxLength": 9, "pattern": "^\\s$"}, "escape"),
    ({"type": "string", "maxLength": 3, "pattern": "^[a-z]{5}$"}, "outside"),
    ({"type": "string", "maxLength": 9, "pattern": "^a+?$"}, "lazy"),
    ({"type": "number", "minimum": 0}, "minimum"),
    ({"type": "integer", "minimum": -5}, "integer bounds"),
    ({"type": "integer", "minimum": 0, "maximum": 10**6}, "too large"),
    ({"enum": []}, "non-empty"),
    ({"type": "string", "enum": [1]}, "not of type"),
    ({"type": "uuid"}, "unsupported type"),
    ({"type": "string", "maxLength": 3, "minItems": 1}, "do not apply"),
    ({}, "needs a 'type'"),
    ({"anyOf": [{"type": "null"}], "type": "null"}, "anyOf cannot be combined"),
    ({"type": "string", "maxLength": 2, "minLength": 3}, "maxLength 2 < minLength 3"),
    ("not a schema", "must be an object"),
]


@pytest.mark.parametrize("schema,needle", BAD)
def test_unsupported_schema_raises_clear_error(schema, needle):
    with pytest.raises(UnsupportedSchema) as info:
        schema_to_gbnf(schema)
    assert needle in str(info.value)


def test_error_names_the_location():
    schema = {"type": "object", "additionalProperties": False, "required": ["x"],
              "properties": {"x": {"type": "array", "maxItems": 2,
                                   "items": {"type": "string", "maxLength": 3,
                                             "format": "email"}}}}
    with pytest.raises(UnsupportedSchema, match=r"/properties/x/items"):
        schema_to_gbnf(schema)


def test_unique_items_are_left_to_the_codec_which_enforces_them():
    # a grammar cannot express uniqueItems: it lets a repeated item through ...
    m = Matcher(schema_to_gbnf({"type": "array", "maxItems": 3, "uniqueItems": True,
                                "items": {"enum": ["a", "b"]}}))
    assert m.accepts('["a","a"]')
    # ... and the codec takes it out: repeated citations and supports are removed, an
    # observation left with one fact is rejected, a repeated claim is dropped
    from memworker.inference.codec import OutputValidationError, decode

    reflect_in = {"question": "Where?", "asked_at": "2025-10-09T10:00:00+02:00",
                  "evidence": [{"id": "E1", "timestamp": "2025-10-08T09:12:00+02:00",
                                "text": "The user lives in Lisbon."}]}
    out = decode("reflect", reflect_in, json.dumps({"answer": "Lisbon.", "citations": ["E1", "E1"],
                                                    "insufficient_evidence": False}))
    assert out.output["citations"] == ["E1"]
    facts = {"facts": [{"id": "F1", "statement": "a"}, {"id": "F2", "statement": "b"}]}
    with pytest.raises(OutputValidationError, match="two different facts"):
        decode("consolidate", facts, json.dumps({"observations": [
            {"statement": "Probably x.", "supports": ["F1", "F1"]}]}))
    episode = {"episode_id": "e", "existing_facts": [], "events": [
        {"index": 0, "role": "user", "timestamp": "2025-01-01T10:00:00Z", "trusted": True,
         "text": "I moved to Lisbon."}]}
    claim = wire_claim(quotes=[("I moved to Lisbon.", 0)], time_expression=None)
    out = decode("extract", episode, dump_answer("extract", {"claims": [claim, claim, claim]}))
    assert len(out.output["claims"]) == 1
    assert [f.code for f in out.dropped] == ["duplicate_claim", "duplicate_claim"]


# --- gold-like answers under dynamic schemas are accepted byte for byte ---------------------------

@pytest.mark.parametrize("task", ["extract", "consolidate", "reflect"])
def test_dump_answer_of_every_dynamic_answer_is_accepted(task):
    @settings(FAST, max_examples=60)
    @given(data=st.data(), inputs=INPUTS[task]())
    def check(data, inputs):
        schema = build_schema(task, inputs)
        matcher = Matcher(schema_to_gbnf(schema))
        for _ in range(3):
            answer = data.draw(answers(schema))
            text = dump_answer(task, answer)
            assert matcher.accepts(text), text
            # and only that text: another serialisation of the same value is refused
            assert not matcher.accepts(json.dumps(answer, ensure_ascii=False, indent=1)) \
                or text == json.dumps(answer, ensure_ascii=False, indent=1)
            assert not matcher.accepts(json.dumps(answer, ensure_ascii=False))  # v2's spacing

    check()


def test_gold_with_unlisted_quote_or_id_is_rejected():
    inputs = {"episode_id": "e", "existing_facts": [{"id": "F1", "statement": "x",
                                                     "valid_from": None}],
              "events": [{"index": 4, "role": "user", "timestamp": "2025-01-01T10:00:00Z",
                          "trusted": True, "text": "I moved to Lisbon next Friday. Nice."}]}
    matcher = Matcher(schema_to_gbnf(build_schema("extract", inputs)))
    fields = {"quotes": [("I moved to Lisbon next Friday.", 4)], "kind": "plan",
              "time_expression": "next Friday", "supersedes": ["F1"]}

    def text(*claims):
        return json.dumps({"claims": list(claims)}, ensure_ascii=False, separators=SEPARATORS)

    claim = wire_claim(**fields)
    assert matcher.accepts(text(claim)) and text(claim) == dump_answer("extract",
                                                                         {"claims": [claim]})
    for key, bad in [("quotes", [("moved to Lisbon", 4)]),
                     ("quotes", [("I moved to Lisbon next Friday.", 5)]),
                     ("quotes", []),
                     ("supersedes", ["F2"]), ("time_expression", "tomorrow"),
                     ("predicate", "Lives_in"),
                     ("predicate", "moved_to"),   # well formed, but not in the vocabulary
                     ("type", "city"), ("kind", "rumour"), ("name", "")]:
        assert not matcher.accepts(text(wire_claim(**{**fields, key: bad}))), (key, bad)
    # the claim's shape: no v2 keyed object, no ninth item (v2's confidence), no item missing
    assert not matcher.accepts(text(claim + ["high"]))
    assert not matcher.accepts(text(claim[:7]))
    assert not matcher.accepts(text(claim[1:2] + claim[:1] + claim[2:]))
    assert not matcher.accepts(text({**wire_claim(array=False, **fields),
                                     "statement": "The user moves to Lisbon.",
                                     "correction": True, "confidence": "high"}))
    # the predicate comes from the request's vocabulary: the episode's own when it has one
    assert "moved_to" not in schema_to_gbnf(build_schema("extract", inputs))
    own = Matcher(schema_to_gbnf(build_schema("extract", {**inputs,
                                                          "predicates": ["moved_to"]})))
    assert own.accepts(text(wire_claim(**{**fields, "predicate": "moved_to"})))
    assert not own.accepts(text(claim))


def test_quote_comes_first_and_the_grammar_leaves_only_its_event():
    """The model copies the words, then the grammar allows only the event(s) that hold them: a
    student that named the event first wrote wrong indices and was then forced into that event's
    spans (train/README "Decisions, not tokens")."""
    inputs = {"episode_id": "e", "existing_facts": [],
              "events": [{"index": 4, "role": "user", "timestamp": "2025-01-01T10:00:00Z",
                          "trusted": True, "text": "I moved to Lisbon. Thanks!"},
                         {"index": 6, "role": "user", "timestamp": "2025-01-01T10:05:00Z",
                          "trusted": True, "text": "My sister Ana lives in Porto. Thanks!"}]}
    matcher = Matcher(schema_to_gbnf(build_schema("extract", inputs)))
    claim = wire_claim(quotes=[("I moved to Lisbon.", 4)], time_expression=None)
    text = dump_answer("extract", {"claims": [claim]})
    assert text.startswith('{"claims":[[[["I moved to Lisbon.",4]],"the user"')
    assert matcher.accepts(text)
    assert not matcher.accepts(text.replace('.",4]', '.",6]'))
    assert not matcher.accepts(text.replace('["I moved to Lisbon.",4]', '[4,"I moved to Lisbon."]'))
    # a span both events hold leaves both open
    for index in (4, 6):
        both = dump_answer("extract", {"claims": [wire_claim(quotes=[("Thanks!", index)],
                                                             time_expression=None)]})
        assert matcher.accepts(both)


# --- the matcher itself ---------------------------------------------------------------------------

def test_matcher_features_and_errors():
    g = 'root ::= ( x | "b"+ ) [^a-c]? # comment\nx ::= "a"{2,3} | "z"*'
    for text, ok in [("aa", True), ("aaa", True), ("aaaa", False), ("bbbd", True), ("", True),
                     ("zzzq", True), ("bc", False)]:
        assert accepts(g, text) == ok, text
    for bad in ['root ::= "a', "root ::= [a", "root ::= y", 'x ::= "a"', 'root ::= "\\q"']:
        with pytest.raises(GbnfSyntaxError):
            parse_gbnf(bad)


def test_json_literal_matches_json_dumps():
    for value in TRICKY:
        assert accepts(f"root ::= {json_literal(value)}", json.dumps(value, ensure_ascii=False))
