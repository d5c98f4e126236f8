import json

import pytest

from memworker import wire
from memworker.contracts import validate
from tests.helpers import episode

CANONICAL_CLAIM = {
    "source_indices": [0], "quotes": ["My sister Ana visits next Friday."],
    "subject": {"name": "Ana (the user's sister)", "type": "person"}, "predicate": "visits_user",
    "value": "next Friday", "statement": "Ana, the user's sister, plans to visit next Friday.",
    "kind": "plan", "time_expression": "next Friday", "date": "2025-10-10", "date_precision": "day",
    "is_correction": False, "supersedes": [], "confidence": 0.9,
}


def test_extract_round_trip_recomputes_the_date_from_the_event_timestamp():
    canonical = {"claims": [CANONICAL_CLAIM]}
    w = wire.to_wire("extract", canonical)
    validate("extract_wire", w)
    claim = w["claims"][0]
    assert claim["quotes"] == [{"event": 0, "quote": "My sister Ana visits next Friday."}]
    assert claim["confidence"] == "high" and claim["correction"] is False
    assert "date" not in claim
    back = wire.from_wire("extract", w, episode())
    validate("extract_output", back)
    # 2025-10-08 is a Wednesday: "next Friday" is the first Friday after it, 2025-10-10
    assert back == canonical


def test_dump_answer_uses_schema_key_order_and_default_separators():
    w = wire.to_wire("extract", {"claims": [CANONICAL_CLAIM]})
    shuffled = {"claims": [dict(reversed(list(w["claims"][0].items())))]}
    text = wire.dump_answer("extract", shuffled)
    assert text.startswith('{"claims": [{"quotes": [{"quote": "My sister Ana visits next Friday.", "event": 0}]')
    keys = list(json.loads(text)["claims"][0])
    assert keys == wire.key_order("extract")["claim"]
    assert wire.dump_answer("reflect", {"insufficient_evidence": True, "citations": [],
                                        "answer": "Not known."}) == (
        '{"answer": "Not known.", "citations": [], "insufficient_evidence": true}')


def test_unknown_keys_are_refused():
    with pytest.raises(ValueError, match="unexpected keys"):
        wire.order_answer("consolidate", {"observations": [], "notes": "x"})


def test_no_time_expression_means_no_date():
    w = wire.to_wire("extract", {"claims": [{**CANONICAL_CLAIM, "time_expression": None,
                                             "date": None, "date_precision": None}]})
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


@pytest.mark.parametrize("value,label", [(0.0, "low"), (0.35, "low"), (0.5, "low"), (0.51, "medium"),
                                         (0.8, "high"), (1.0, "high")])
def test_confidence_labels(value, label):
    assert wire.confidence_label(value) == label
