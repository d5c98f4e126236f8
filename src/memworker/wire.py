"""Wire form: what the model generates, and its conversion to and from the canonical contract.

The model never writes what it can choose (ARCHITECTURE decision 8). For `extract`, the wire
claim differs from the canonical claim (schemas/extract_output.schema.json):

| wire (generated)                              | canonical (what the store sees)                  |
|-----------------------------------------------|--------------------------------------------------|
| quotes: [{"quote": "…", "event": 2}]           | source_indices: [2], quotes: ["…"] (parallel)    |
| time_expression: one detected in the events   | time_expression + date + date_precision, filled  |
|   or null (never a date)                      |   by memworker.temporal from the event timestamp |
| correction: bool                              | is_correction: bool                              |
| confidence: "low" | "medium" | "high"         | confidence: 0.35 | 0.65 | 0.9                    |

`consolidate` and `reflect` have the same wire and canonical form. Key order in the wire form is
the schema's property order: the grammar enforces it, so training targets (`dump_answer`) use it.

This module only converts shapes and resolves dates; verification against the inputs (exact
spans, known ids, secrets, untrusted sources) is the codec's job (memworker.inference).
"""

from __future__ import annotations

import json
from typing import Any

from memworker import temporal
from memworker.contracts import load_schema

CONFIDENCE = {"low": 0.35, "medium": 0.65, "high": 0.9}

_WIRE_SCHEMA = {"extract": "extract_wire", "consolidate": "consolidate_output",
                "reflect": "reflect_output"}


def confidence_label(value: float) -> str:
    """Nearest wire label for a canonical confidence number."""
    return min(CONFIDENCE, key=lambda label: (abs(CONFIDENCE[label] - value), label))


def wire_schema_name(task: str) -> str:
    return _WIRE_SCHEMA[task]


def key_order(task: str) -> dict[str, list[str]]:
    """Property order of the wire answer: {"": top level, "claim": ..., "quote": ..., ...}."""
    schema = load_schema(_WIRE_SCHEMA[task])
    if task == "extract":
        claim = schema["properties"]["claims"]["items"]
        return {"": ["claims"], "claim": list(claim["properties"]),
                "quote": list(claim["properties"]["quotes"]["items"]["properties"]),
                "subject": list(claim["properties"]["subject"]["properties"])}
    if task == "consolidate":
        obs = schema["properties"]["observations"]["items"]
        return {"": ["observations"], "observation": list(obs["properties"])}
    return {"": list(schema["anyOf"][0]["properties"])}


def _ordered(obj: dict[str, Any], order: list[str]) -> dict[str, Any]:
    extra = sorted(set(obj) - set(order))
    if extra:
        raise ValueError(f"unexpected keys in wire answer: {extra}")
    return {k: obj[k] for k in order if k in obj}


def order_answer(task: str, wire: dict[str, Any]) -> dict[str, Any]:
    """The wire answer with keys in grammar order (raises on unknown keys)."""
    order = key_order(task)
    top = _ordered(wire, order[""])
    if task == "extract":
        top["claims"] = [
            _ordered({**c, "quotes": [_ordered(q, order["quote"]) for q in c["quotes"]],
                      "subject": _ordered(c["subject"], order["subject"])}, order["claim"])
            for c in wire["claims"]
        ]
    elif task == "consolidate":
        top["observations"] = [_ordered(o, order["observation"]) for o in wire["observations"]]
    return top


def dump_answer(task: str, wire: dict[str, Any]) -> str:
    """The exact assistant text of a training target: JSON in grammar key order, UTF-8 kept."""
    return json.dumps(order_answer(task, wire), ensure_ascii=False)


# --- extract: canonical <-> wire ------------------------------------------------------------------

def claim_to_wire(claim: dict[str, Any]) -> dict[str, Any]:
    return {
        "quotes": [{"quote": q, "event": i} for i, q in zip(claim["source_indices"], claim["quotes"], strict=True)],
        "subject": dict(claim["subject"]),
        "predicate": claim["predicate"],
        "value": claim["value"],
        "statement": claim["statement"],
        "kind": claim["kind"],
        "time_expression": claim["time_expression"],
        "correction": claim["is_correction"],
        "supersedes": list(claim["supersedes"]),
        "confidence": confidence_label(claim["confidence"]),
    }


def anchor_event(expression: str, source_indices: list[int], events: list[dict[str, Any]]) -> dict:
    """The event whose timestamp anchors `expression`: the first cited event whose text contains it,
    else the first event of the episode that contains it, else the first cited event."""
    by_index = {e["index"]: e for e in events}
    cited = [by_index[i] for i in source_indices if i in by_index]
    for event in cited + list(events):
        if expression in event["text"]:
            return event
    if cited:
        return cited[0]
    raise ValueError(f"no event to anchor time expression {expression!r}")


def resolve_claim_time(
    expression: str | None, source_indices: list[int], events: list[dict[str, Any]]
) -> tuple[str | None, str | None]:
    """(date, precision) of a claim's verbatim time expression; (None, None) when there is none.
    Raises temporal.UnresolvableExpression when the expression cannot be resolved."""
    if expression is None:
        return None, None
    anchor = anchor_event(expression, source_indices, events)["timestamp"]
    resolved = temporal.resolve(expression, anchor)
    return resolved.date, resolved.precision


def claim_from_wire(claim: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    indices = [q["event"] for q in claim["quotes"]]
    date, precision = resolve_claim_time(claim["time_expression"], indices, events)
    return {
        "source_indices": indices,
        "quotes": [q["quote"] for q in claim["quotes"]],
        "subject": dict(claim["subject"]),
        "predicate": claim["predicate"],
        "value": claim["value"],
        "statement": claim["statement"],
        "kind": claim["kind"],
        "time_expression": claim["time_expression"],
        "date": date,
        "date_precision": precision,
        "is_correction": claim["correction"],
        "supersedes": list(claim["supersedes"]),
        "confidence": CONFIDENCE[claim["confidence"]],
    }


def to_wire(task: str, canonical: dict[str, Any]) -> dict[str, Any]:
    """Canonical answer -> wire answer (training targets are stored in this form)."""
    if task == "extract":
        return order_answer(task, {"claims": [claim_to_wire(c) for c in canonical["claims"]]})
    return order_answer(task, canonical)


def from_wire(task: str, wire: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """Wire answer -> canonical answer (shape and dates only; the codec verifies the rest)."""
    if task == "extract":
        return {"claims": [claim_from_wire(c, inputs["events"]) for c in wire["claims"]]}
    return json.loads(json.dumps(wire))
