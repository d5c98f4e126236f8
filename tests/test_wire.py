import json

import pytest

from memworker import wire
from memworker.contracts import validate
from tests.helpers import episode

#: the wire v3 claim record of the default `wire_claim` (a claim of helpers.episode()'s event 0)
DEFAULT_FIELDS = {"quotes": [("I moved to Lisbon last week.", 0)], "name": "the user",
                  "type": "person", "predicate": "lives_in", "value": "Lisbon", "kind": "fact",
                  "time_expression": "last week", "supersedes": []}


def wire_claim(*, array: bool = True, **fields):
    """A wire v3 extract claim from keyword arguments named after `wire.CLAIM_FIELDS` (quotes as
    (span, event index) pairs; the rest from DEFAULT_FIELDS): the fixed-order array the model
    writes, or with array=False the record the codec handles. A v2 field (statement, correction,
    confidence) is refused, so a test cannot build an old claim by mistake."""
    unknown = sorted(set(fields) - set(wire.CLAIM_FIELDS))
    if unknown:
        raise TypeError(f"not wire v3 claim fields: {unknown}")
    f = {**DEFAULT_FIELDS, **fields}
    record = {"quotes": [{"quote": q, "event": i} for q, i in f["quotes"]],
              "subject": {"name": f["name"], "type": f["type"]}, "predicate": f["predicate"],
              "value": f["value"], "kind": f["kind"], "time_expression": f["time_expression"],
              "supersedes": list(f["supersedes"])}
    if not array:
        return record
    return [[[q["quote"], q["event"]] for q in record["quotes"]], f["name"], f["type"],
            f["predicate"], f["value"], f["kind"], f["time_expression"], list(f["supersedes"])]


CANONICAL_CLAIM = {
    "source_indices": [0], "quotes": ["My sister Ana visits next Friday."],
    "subject": {"name": "Ana (the user's sister)", "type": "person"}, "predicate": "visits_user",
    "value": "next Friday", "statement": "Ana, the user's sister, plans to visit next Friday.",
    "kind": "plan", "time_expression": "next Friday", "date": "2025-10-10", "date_precision": "day",
    "is_correction": False, "supersedes": [], "confidence": 0.9,
}
#: CANONICAL_CLAIM as the model writes it (wire v3: an array, nothing derived)
WIRE_ARRAY = [[["My sister Ana visits next Friday.", 0]], "Ana (the user's sister)", "person",
              "visits_user", "next Friday", "plan", "next Friday", []]


def test_wire_claim_helper_builds_both_forms():
    assert wire_claim(quotes=[("My sister Ana visits next Friday.", 0)],
                      name="Ana (the user's sister)", predicate="visits_user",
                      value="next Friday", kind="plan",
                      time_expression="next Friday") == WIRE_ARRAY
    assert wire.pack_claim(wire_claim(array=False)) == wire_claim()
    with pytest.raises(TypeError, match="statement"):
        wire_claim(statement="The user lives in Lisbon.")


def test_extract_round_trip_recomputes_the_date_from_the_event_timestamp():
    canonical = {"claims": [CANONICAL_CLAIM]}
    w = wire.to_wire("extract", canonical)
    validate("extract_wire", w)
    assert w == {"claims": [WIRE_ARRAY]}  # no date, statement, correction flag or confidence
    back = wire.from_wire("extract", w, episode())
    validate("extract_output", back)
    # 2025-10-08 is a Wednesday: "next Friday" is the first Friday after it, 2025-10-10
    (claim,) = back["claims"]
    assert (claim["date"], claim["date_precision"]) == ("2025-10-10", "day")
    # what the wire carries survives; the statement and confidence are derived
    assert [wire.comparable(c) for c in back["claims"]] == [wire.comparable(CANONICAL_CLAIM)]
    assert claim["statement"] == "Ana (the user's sister) visits user next Friday, as planned."
    assert claim["confidence"] == 0.65 and claim["is_correction"] is False


def test_correction_flag_is_derived_from_supersedes():
    w = {"claims": [wire_claim(supersedes=["F1"]), wire_claim(supersedes=[])]}
    validate("extract_wire", w)
    fixed, plain = wire.from_wire("extract", w, episode())["claims"]
    assert fixed["is_correction"] is True and fixed["supersedes"] == ["F1"]
    assert plain["is_correction"] is False
    assert fixed["date"] == "2025-09-29" and fixed["date_precision"] == "day"


def test_pack_and_unpack_are_inverse():
    record = wire_claim(array=False, quotes=[("I moved to Lisbon last week.", 0), ("Nice!", 1)],
                        supersedes=["F1"])
    array = wire.pack_claim(record)
    assert array == [[["I moved to Lisbon last week.", 0], ["Nice!", 1]], "the user", "person",
                     "lives_in", "Lisbon", "fact", "last week", ["F1"]]
    assert wire.unpack_claim(array) == record
    assert wire.claim_records({"claims": [array]}) == [record]
    assert len(wire.CLAIM_FIELDS) == len(array) == 8


def test_dump_answer_uses_schema_key_order_and_compact_separators():
    record = wire.unpack_claim(WIRE_ARRAY)
    shuffled = {"claims": [dict(reversed(list(record.items())))]}
    text = wire.dump_answer("extract", shuffled)
    assert text == ('{"claims":[[[["My sister Ana visits next Friday.",0]],'
                    '"Ana (the user\'s sister)","person","visits_user","next Friday","plan",'
                    '"next Friday",[]]]}')
    assert json.loads(text) == {"claims": [WIRE_ARRAY]}
    assert wire.dump_answer("extract", {"claims": [WIRE_ARRAY]}) == text  # arrays as written
    assert wire.key_order("extract") == {"": ["claims"], "claim": list(wire.CLAIM_FIELDS)}
    # wire v4: a consolidate or reflect answer is text only
    assert wire.key_order("reflect") == {"": ["answer"]}
    assert wire.key_order("consolidate") == {"": ["observations"]}
    assert wire.dump_answer("reflect", {"answer": "Not known."}) == '{"answer":"Not known."}'
    assert wire.dump_answer("consolidate", {"observations": ["Ana is training."]}) == (
        '{"observations":["Ana is training."]}')
    assert wire.SEPARATORS == (",", ":")
    assert ", " not in text and '": ' not in text
    assert "é" in wire.dump_answer("extract", {"claims": [wire_claim(value="Zoë's café")]})


FACTS = [{"id": "F1", "statement": "Ana (the user's sister) runs every morning."},
         {"id": "F2", "statement": "Ana (the user's sister) signed up for a marathon."},
         {"id": "F3", "statement": "The user likes tea."}]
EVIDENCE = {"question": "Where does Ana live?", "asked_at": "2025-10-08T09:00:00Z",
            "evidence": [{"id": "E1", "timestamp": "2025-10-01T10:00:00Z",
                          "text": "Ana (the user's sister) lives in Lisbon."},
                         {"id": "E2", "timestamp": "2025-10-02T10:00:00Z",
                          "text": "The user likes tea."}]}
OBSERVATION = ("Ana (the user's sister) runs every morning and Ana (the user's sister) signed up "
               "for a marathon, so she is probably training.")


@pytest.mark.parametrize("reverse", [False, True])
def test_consolidate_and_reflect_wire_is_the_text_alone(reverse):
    """Wire v4: to_wire keeps a canonical answer's text (any key order), from_wire reads its
    supports / citations and abstention back from it (memworker.derive)."""
    def given(d):
        return dict(reversed(list(d.items()))) if reverse else d

    for answer in ({"insufficient_evidence": False, "citations": ["E1"],
                    "answer": "Ana (the user's sister) lives in Lisbon."},
                   {"insufficient_evidence": True, "citations": [],
                    "answer": "Nothing says where Ana lives."}):
        w = wire.to_wire("reflect", given(answer))
        assert w == {"answer": answer["answer"]}
        validate("reflect_wire", w)
        assert wire.from_wire("reflect", w, EVIDENCE) == answer
    consolidate = {"observations": [given({"supports": ["F1", "F2"], "statement": OBSERVATION})]}
    w = wire.to_wire("consolidate", consolidate)
    assert w == {"observations": [OBSERVATION]}
    validate("consolidate_wire", w)
    assert wire.dump_answer("consolidate", w) == json.dumps(w, separators=(",", ":"))
    back = wire.from_wire("consolidate", w, {"facts": FACTS})
    assert back == {"observations": [{"supports": ["F1", "F2"], "statement": OBSERVATION}]}
    assert list(back["observations"][0]) == ["supports", "statement"]  # the contract's order
    # a statement that states fewer than two facts, or the same facts again, is no observation
    assert wire.from_wire("consolidate", {"observations": [
        "The user likes tea, probably.", OBSERVATION, OBSERVATION]}, {"facts": FACTS}) == back


def test_the_wire_refuses_ids_in_a_consolidate_or_reflect_answer():
    """The canonical form is not the wire: order_answer / dump_answer refuse it (a corpus row
    written before v4 is not a current training target); to_wire converts it."""
    with pytest.raises(ValueError, match="unexpected keys.*citations"):
        wire.dump_answer("reflect", {"insufficient_evidence": False, "citations": ["E1"],
                                     "answer": "In Lisbon."})
    with pytest.raises(ValueError, match="statement alone"):
        wire.dump_answer("consolidate", {"observations": [
            {"supports": ["F1", "F2"], "statement": OBSERVATION}]})
    with pytest.raises(ValueError, match="lacks"):
        wire.order_answer("reflect", {})


def test_unknown_keys_are_refused():
    with pytest.raises(ValueError, match="unexpected keys"):
        wire.order_answer("consolidate", {"observations": [], "notes": "x"})
    with pytest.raises(ValueError, match="unexpected keys"):
        wire.order_answer("extract", {"claims": [], "notes": "x"})


@pytest.mark.parametrize("change,needle", [
    ({"statement": "The user lives in Lisbon."}, "unexpected keys.*statement"),  # a v2 field
    ({"confidence": "high"}, "unexpected keys.*confidence"),
    ({"name": "the user"}, "unexpected keys.*name"),  # the array's name, not a record key
    ({"kind": None}, "lacks.*kind"),
    ({"supersedes": None, "time_expression": None}, r"lacks \['supersedes', 'time_expression'\]"),
])
def test_order_answer_refuses_a_claim_record_with_an_unknown_or_missing_key(change, needle):
    record = wire_claim(array=False)
    for key, value in change.items():
        if value is None and key in record:
            del record[key]
        else:
            record[key] = value
    with pytest.raises(ValueError, match=needle):
        wire.order_answer("extract", {"claims": [record]})
    with pytest.raises(ValueError, match=needle):
        wire.dump_answer("extract", {"claims": [wire_claim(), record]})
    # the same claim, unchanged, is accepted (the refusal is about the key)
    assert wire.order_answer("extract", {"claims": [wire_claim(array=False)]}) == {
        "claims": [wire_claim()]}


@pytest.mark.parametrize("claim", [
    wire_claim()[:7],                       # one item short
    wire_claim() + [0.9],                   # a ninth item (a v2 confidence)
    [],
    "the user lives in Lisbon",
    [[{"quote": "I moved to Lisbon last week.", "event": 0}], *wire_claim()[1:]],  # v2 quote
    [[["I moved to Lisbon last week."]], *wire_claim()[1:]],  # a pair without its event
])
def test_order_answer_refuses_a_claim_array_of_the_wrong_shape(claim):
    with pytest.raises(ValueError, match="claim must be an array of 8|quotes must be"):
        wire.order_answer("extract", {"claims": [claim]})
    with pytest.raises(ValueError):
        wire.unpack_claim(claim)


def test_no_time_expression_means_no_date():
    w = wire.to_wire("extract", {"claims": [{**CANONICAL_CLAIM, "time_expression": None,
                                             "date": None, "date_precision": None}]})
    assert w["claims"][0][6] is None
    back = wire.from_wire("extract", w, episode())
    assert back["claims"][0]["date"] is None and back["claims"][0]["date_precision"] is None


def test_anchor_prefers_the_cited_event_that_contains_the_expression():
    events = [
        {"index": 0, "role": "user", "timestamp": "2025-01-01T10:00:00+00:00", "text": "tomorrow!",
         "trusted": True},
        {"index": 1, "role": "user", "timestamp": "2025-03-01T10:00:00+00:00", "text": "see you tomorrow",
         "trusted": True},
    ]
    assert wire.resolve_claim_time("tomorrow", [1], events) == ("2025-03-02", "day")
    assert wire.resolve_claim_time("tomorrow", [0, 1], events) == ("2025-01-02", "day")


@pytest.mark.parametrize("kind,confidence", [
    ("belief", 0.35), ("plan", 0.65), ("fact", 0.9), ("preference", 0.9), ("event", 0.9),
    ("relationship", 0.9), ("retraction", 0.9)])
def test_confidence_is_derived_from_the_kind(kind, confidence):
    """v3: the model writes no confidence (v2 wrote a low/medium/high label); the codec sets it
    by kind, and the canonical claim carries that number."""
    assert wire.confidence_of(kind) == confidence
    (claim,) = wire.from_wire("extract", {"claims": [wire_claim(kind=kind)]}, episode())["claims"]
    assert claim["confidence"] == confidence
    assert not hasattr(wire, "confidence_label") and not hasattr(wire, "CONFIDENCE")


@pytest.mark.parametrize("kind,name,predicate,value,statement", [
    ("fact", "the user", "lives_in", "Lisbon", "The user lives in Lisbon."),
    ("fact", "the user", "lives_in", "Lisbon.", "The user lives in Lisbon."),  # one full stop
    ("plan", "Maya (the user's sister)", "visits", "Porto",
     "Maya (the user's sister) visits Porto, as planned."),  # a store's own predicate
    ("plan", "the user", "plans_to", "visit Porto", "The user plans to visit Porto."),
    ("belief", "Callum", "leads_team", "data",
     "Callum leads the data team, but it is not confirmed."),
    ("retraction", "the user", "plays", "guitar", "The user no longer plays guitar."),
    ("retraction", "the user", "lives_in", None,
     "An earlier fact about the user no longer holds."),
    ("preference", "the user", "likes", None, "The user likes something not stated."),
    ("preference", "the user", "favourite_band", "Low", "The user's favourite band is Low."),
])
def test_render_statement(kind, name, predicate, value, statement):
    record = wire_claim(array=False, kind=kind, name=name, predicate=predicate, value=value)
    assert wire.render_statement(record) == statement
    (claim,) = wire.from_wire("extract", {"claims": [wire.pack_claim(record)]},
                              episode())["claims"]
    assert claim["statement"] == statement
    # a record that brings its own statement keeps it (the corpus's hand-written gold)
    assert wire.claim_from_wire({**record, "statement": "Hand written."},
                                episode()["events"])["statement"] == "Hand written."


# --- where each field's value starts ----------------------------------------------------------------

def _checked_starts(text):
    """field_starts(text), each offset checked against the text: a list starts at "[", a string
    after its opening quote, any other value at its first character."""
    starts = wire.field_starts(text)
    offsets = [at for at, _, _ in starts]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    for at, _, is_list in starts:
        assert text[at] == "[" if is_list else text[at - 1] == '"' or text[at] in "-0123456789tfn"
    return [(field, is_list, text[at:at + 9]) for at, field, is_list in starts]


def test_field_starts_of_an_extract_answer():
    text = wire.dump_answer("extract", {"claims": [wire_claim(
        quotes=[("I moved.", 0), ("Now!", 2)], time_expression=None, supersedes=["F1"])]})
    assert text == ('{"claims":[[[["I moved.",0],["Now!",2]],"the user","person","lives_in",'
                    '"Lisbon","fact",null,["F1"]]]}')
    assert wire.field_starts(text) == [
        (10, "claims", True), (11, "claim", True), (12, "quotes", True), (13, "pair", True),
        (15, "quote", False), (25, "event", False), (28, "pair", True), (30, "quote", False),
        (36, "event", False), (41, "name", False), (52, "type", False), (61, "predicate", False),
        (72, "value", False), (81, "kind", False), (87, "time_expression", False),
        (92, "supersedes", True)]
    assert _checked_starts(text)[4] == ("quote", False, 'I moved."')
    # every field of CLAIM_FIELDS is named, in the array's order, once per claim
    two = wire.dump_answer("extract", {"claims": [wire_claim(), wire_claim(value="Porto")]})
    fields = [f for f, _, _ in _checked_starts(two) if f in wire.CLAIM_FIELDS]
    assert fields == list(wire.CLAIM_FIELDS) * 2
    assert [f for f, _, _ in _checked_starts(two)].count("claim") == 2
    assert wire.field_starts('{"claims":[]}') == [(10, "claims", True)]


def test_field_starts_of_a_consolidate_and_a_reflect_answer():
    text = wire.dump_answer("consolidate", {"observations": ["Ana trains.", "Ana runs."]})
    assert wire.field_starts(text) == [(16, "observations", True)]  # statements: list items
    assert _checked_starts(text)[0] == ("observations", True, '["Ana tra')
    assert wire.field_starts('{"observations":[]}') == [(16, "observations", True)]
    text = wire.dump_answer("reflect", {"answer": "Lisbon."})
    assert wire.field_starts(text) == [(11, "answer", False)]
    assert _checked_starts(text)[0] == ("answer", False, 'Lisbon."}')


@pytest.mark.parametrize("text", [
    '{"claims": []}',                                              # spaced (v2 separators)
    '{"answer": "x"}',
    '{"answer":"Zo\\u00eb"}',                                    # ensure_ascii
    '{"observations":["s"]}\n',                                   # a trailing newline
    '{"observations":["s" ,"t"]}',
    json.dumps({"claims": [wire_claim()]}),                         # json.dumps defaults
    json.dumps({"claims": [wire_claim(array=False)]}, separators=(",", ":")),  # a record
])
def test_field_starts_refuses_a_text_dump_answer_did_not_write(text):
    with pytest.raises(ValueError, match="not the exact text"):
        wire.field_starts(text)
    # the same value as dump_answer writes it is accepted
    value = json.loads(text)
    wire.field_starts(wire.dump_answer(wire.task_of_answer(value), value))


def test_order_answer_refuses_an_answer_without_its_list():
    with pytest.raises(ValueError, match="lacks"):
        wire.order_answer("extract", {})
    with pytest.raises(ValueError, match="lacks"):
        wire.order_answer("consolidate", {})
