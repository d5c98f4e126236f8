"""Wire form: what the model generates, and its conversion to and from the canonical contract.

The model never writes what it can choose or what the codec can derive (ARCHITECTURE decision 8;
train/README "Anatomy of an extract answer"). Wire v3, for `extract`, writes each claim as a
fixed-order array (`prefixItems` in schemas/extract_wire.schema.json), with no keys at all:

    [quotes, subject name, subject type, predicate, value, kind, time expression, supersedes]
    quotes: [[span, event index], ...]  (the span first: the grammar then leaves only its event)

| wire (generated)                              | canonical (what the store sees)                  |
|-----------------------------------------------|--------------------------------------------------|
| quotes: [["…", 2]]                             | source_indices: [2], quotes: ["…"] (parallel)    |
| subject name, subject type                    | subject: {"name", "type"}                        |
| predicate: one of the request's vocabulary    | predicate                                        |
| time expression: one detected in the events   | time_expression + date + date_precision, filled  |
|   or null (never a date)                      |   by memworker.temporal from the event timestamp |
| (not written)                                 | statement: rendered from subject, predicate,     |
|                                               |   value and kind (`render_statement`)            |
| (not written)                                 | is_correction: supersedes is not empty           |
| (not written)                                 | confidence: by kind (belief 0.35, plan 0.65,     |
|                                               |   else 0.9: `CONFIDENCE_BY_KIND`)                |

The corpus keeps its hand-written gold statements in the canonical rows; only the generated
answer loses them (`comparable` says what survives a round trip). Inside the codec, the verifier
and the corpus audit a wire claim is handled as a *record*, a dict with the fields above
(`unpack_claim` / `pack_claim`).

Wire v4, for `consolidate` and `reflect`, writes only text (schemas/consolidate_wire,
reflect_wire): a 135M student could not learn to write the ids (support sets right in 10 of 192
val rows, citations in 13 of 131) while the text it wrote stated the right facts and evidence far
more often (train/README E13, E14); the codec reads the ids back from the text
(`memworker.derive`), as it reads an extract claim's event from its quote:

| wire (generated)                  | canonical (what the store sees)                        |
|-----------------------------------|--------------------------------------------------------|
| {"observations":["…",…]}          | {"observations":[{"supports":[…],"statement":"…"},…]}: |
|   (each observation's statement)  |   supports: the facts the statement states; one that   |
|                                   |   states fewer than two, or the same facts as an       |
|                                   |   earlier one, is no observation (`derive_consolidate`)|
| {"answer":"…"}                    | {"insufficient_evidence":…,"citations":[…],            |
|                                   |  "answer":"…"}: citations: the evidence items the      |
|                                   |   answer states; none: insufficient_evidence true      |
|                                   |   (`derive_reflect`)                                   |

The corpus's canonical rows keep the gold ids; its wire rows are the text alone, and the corpus
audit requires every generated gold text to read back to its ids (`wire_roundtrip`). A store or
teacher may still send the canonical form: the codec keeps and verifies its ids.

Every answer is written with the compact separators `SEPARATORS` and keys in the schema's
property order: the grammar enforces both, so training targets (`dump_answer`) use them.

**Decisions before free text.** An extract answer commits to its graded choices before it writes
free text, so a derailed sentence cannot delay or bury them: a claim opens with its quotes (the
span before its event index); its short, mostly copied name and value then precede kind, time
expression and supersedes (CLAIM_FIELDS order). A consolidate or reflect answer (v4) writes no
decision at all: its text is what the choices are read from (before v4 they wrote their ids
first, after a v3 student that wrote the text first ran into repetitions with the ids still to
come and scored consolidation 0/10, reflection 1/10 on val).

The order lives in the schema files (schemas/*_wire); `key_order` reads it there, so the grammar,
`order_answer` and `dump_answer` follow it.

**Claim layout v6** (`LAYOUTS`; issue 48, docs/research/inference-speed.md "Quotes chosen by the
codec"): in the turns forms a student may write each claim as `[predicate, value, name, type,
kind, time expression, supersedes]` with no quotes and the trailing fields left out while each is
at its default (`V6_FIELDS`, `V6_DEFAULTS`, `pack_v6`: a plain fact about the user is
`[predicate, value]`). The codec quotes the sentence of the turn's event that the claim points at
(`memworker.spans.choose_sentence`) and from there handles the claim as a v3 record
(`unpack_v6`); training targets are `dump_layout(task, answer, "v6")`. Half a claim's tokens
were its copied quote.

This module only converts shapes, resolves dates and derives what the model does not write;
verification against the inputs (exact spans, known ids, secrets, untrusted sources) is the
codec's job (memworker.inference).
"""

from __future__ import annotations

import json
from typing import Any

from memworker import derive, statements, temporal
from memworker.contracts import load_schema

#: the compact separators of every answer (the grammar writes exactly these)
SEPARATORS = (",", ":")
#: a claim's confidence, derived from its kind (the corpus's gold agrees on every claim)
CONFIDENCE_BY_KIND = {"belief": 0.35, "plan": 0.65}
DEFAULT_CONFIDENCE = 0.9
#: the fields of a wire claim, in the order of its array
CLAIM_FIELDS = ("quotes", "name", "type", "predicate", "value", "kind", "time_expression",
                "supersedes")

_WIRE_SCHEMA = {"extract": "extract_wire", "consolidate": "consolidate_wire",
                "reflect": "reflect_wire"}


def wire_schema_name(task: str) -> str:
    return _WIRE_SCHEMA[task]


def confidence_of(kind: str) -> float:
    return CONFIDENCE_BY_KIND.get(kind, DEFAULT_CONFIDENCE)


def key_order(task: str) -> dict[str, list[str]]:
    """Property order of the wire answer: {"": top level} (an extract claim is an array: its
    order, "claim", is CLAIM_FIELDS)."""
    order = {"": list(load_schema(_WIRE_SCHEMA[task])["properties"])}
    return {**order, "claim": list(CLAIM_FIELDS)} if task == "extract" else order


def _ordered(obj: dict[str, Any], order: list[str]) -> dict[str, Any]:
    extra = sorted(set(obj) - set(order))
    if extra:
        raise ValueError(f"unexpected keys in wire answer: {extra}")
    return {k: obj[k] for k in order if k in obj}


# --- extract claims: records <-> arrays ---------------------------------------------------------

def pack_claim(record: dict[str, Any]) -> list[Any]:
    """A claim record -> the array the model writes."""
    return [[[q["quote"], q["event"]] for q in record["quotes"]], record["subject"]["name"],
            record["subject"]["type"], record["predicate"], record["value"], record["kind"],
            record["time_expression"], list(record["supersedes"])]


def unpack_claim(claim: list[Any]) -> dict[str, Any]:
    """The array the model wrote -> a claim record (raises ValueError on a wrong shape)."""
    if not isinstance(claim, list) or len(claim) != len(CLAIM_FIELDS):
        raise ValueError(f"a claim must be an array of {len(CLAIM_FIELDS)} items "
                         f"({', '.join(CLAIM_FIELDS)})")
    quotes, name, stype, predicate, value, kind, expr, supersedes = claim
    if not isinstance(quotes, list) or not all(isinstance(q, list) and len(q) == 2
                                               for q in quotes):
        raise ValueError("quotes must be an array of [span, event index] pairs")
    return {"quotes": [{"quote": q, "event": i} for q, i in quotes],
            "subject": {"name": name, "type": stype}, "predicate": predicate, "value": value,
            "kind": kind, "time_expression": expr, "supersedes": supersedes}


#: the keys of a claim record (what the model decides, nothing derived)
RECORD_KEYS = ["quotes", "subject", "predicate", "value", "kind", "time_expression",
                "supersedes"]


def _record(claim: Any) -> dict[str, Any]:
    """A claim given as an array (as written) or as a record (keys checked) -> a record."""
    if isinstance(claim, dict):
        record = _ordered(claim, RECORD_KEYS)
        missing = sorted(set(RECORD_KEYS) - set(record))
        if missing:
            raise ValueError(f"claim record lacks {missing}")
        return record
    return unpack_claim(claim)


def claim_records(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The claim records of a wire extract answer."""
    return [unpack_claim(c) for c in answer["claims"]]


def order_answer(task: str, wire: dict[str, Any]) -> dict[str, Any]:
    """The wire answer with keys in grammar order, extract claims as arrays (each given as an
    array or as a record); raises ValueError on unknown keys, a claim of the wrong shape or a
    consolidate observation that is not a string (a canonical answer goes through `to_wire`)."""
    order = key_order(task)
    top = _ordered(wire, order[""])
    missing = sorted(set(order[""]) - set(top))
    if missing:
        raise ValueError(f"wire answer lacks {missing}")
    if task == "extract":
        top["claims"] = [pack_claim(_record(c)) for c in wire["claims"]]
    elif task == "consolidate" and not all(isinstance(o, str) for o in wire["observations"]):
        raise ValueError("a wire observation is its statement alone (a string)")
    return top


def dump_answer(task: str, wire: dict[str, Any]) -> str:
    """The exact assistant text of a training target: compact JSON in grammar order, UTF-8 kept."""
    return json.dumps(order_answer(task, wire), ensure_ascii=False, separators=SEPARATORS)


# --- wire v6: no quote written (the codec quotes the turn's sentence) ----------------------------

#: the claim layouts a model can be trained and run in: "v3" (`CLAIM_FIELDS`) or "v6"
LAYOUTS = ("v3", "v6")
#: a v6 claim's fields in order (no quotes: the codec chooses the sentence of the turn's event,
#: `spans.choose_sentence`); the trailing ones are left out while each is at its default
#: (`V6_DEFAULTS`), so a plain fact about the user is `[predicate, value]`
V6_FIELDS = ("predicate", "value", "name", "type", "kind", "time_expression", "supersedes")
V6_DEFAULTS = {"name": "the user", "type": "person", "kind": "fact", "time_expression": None,
               "supersedes": []}
#: a v6 claim holds at least its predicate and value
V6_MIN_ITEMS = 2


def check_layout(layout: str) -> str:
    """`layout` when it is one of `LAYOUTS`, else ValueError."""
    if layout not in LAYOUTS:
        raise ValueError(f"claim layout {layout!r}: one of {', '.join(LAYOUTS)}")
    return layout


def pack_v6(record: dict[str, Any]) -> list[Any]:
    """A claim record -> the v6 array the model writes: its quotes left out, and the trailing
    fields at their defaults (`V6_DEFAULTS`) left out."""
    items = [record["predicate"], record["value"], record["subject"]["name"],
             record["subject"]["type"], record["kind"], record["time_expression"],
             list(record["supersedes"])]
    while len(items) > V6_MIN_ITEMS and items[-1] == V6_DEFAULTS[V6_FIELDS[len(items) - 1]]:
        items.pop()
    return items


def unpack_v6(claim: list[Any], quotes: list[dict[str, Any]]) -> dict[str, Any]:
    """A v6 array as written -> a claim record with these quotes (the codec's): the left-out
    trailing fields at their defaults. ValueError on a wrong shape."""
    if not isinstance(claim, list) or not V6_MIN_ITEMS <= len(claim) <= len(V6_FIELDS):
        raise ValueError(f"a v6 claim must be an array of {V6_MIN_ITEMS} to {len(V6_FIELDS)} "
                         f"items ({', '.join(V6_FIELDS)})")
    fields = dict(V6_DEFAULTS, **dict(zip(V6_FIELDS, claim, strict=False)))
    return {"quotes": quotes, "subject": {"name": fields["name"], "type": fields["type"]},
            "predicate": fields["predicate"], "value": fields["value"], "kind": fields["kind"],
            "time_expression": fields["time_expression"],
            "supersedes": list(fields["supersedes"]) if isinstance(fields["supersedes"], list)
            else fields["supersedes"]}


def is_v6_claim(claim: Any) -> bool:
    """Whether a written claim array is in the v6 layout (its first item the predicate, a
    string) rather than v3's (its first item the quotes, a list)."""
    return isinstance(claim, list) and bool(claim) and isinstance(claim[0], str)


def dump_layout(task: str, wire: dict[str, Any], layout: str = "v3") -> str:
    """The assistant text of a wire answer in a claim layout: `dump_answer`'s text for v3 (and
    for every answer that is not an extract answer); for v6, each claim packed by `pack_v6`."""
    if check_layout(layout) == "v3" or task != "extract":
        return dump_answer(task, wire)
    claims = order_answer(task, wire)["claims"]
    return json.dumps({"claims": [pack_v6(unpack_claim(c)) for c in claims]},
                      ensure_ascii=False, separators=SEPARATORS)


# --- where each field's value starts in an answer's text ----------------------------------------

def task_of_answer(answer: dict[str, Any]) -> str:
    """The task a wire answer belongs to, by its top-level keys."""
    if "claims" in answer:
        return "extract"
    return "consolidate" if "observations" in answer else "reflect"


def field_starts(text: str) -> list[tuple[int, str, bool]]:
    """[(character offset, field, is a list)] of every value in the text of a wire answer (as
    `dump_answer` writes it), in text order: a string's value starts after its opening quote, a
    list at its "[". Fields are the keys of objects and, inside an extract claim's array, the
    names of CLAIM_FIELDS ("quote" and "event" inside a quote pair). The scalar items of a list
    (ids in supersedes, the statements of observations) have no entry of their own: they belong
    to the list's field, whose entry is its "["; an extract claim is "claim", a quote pair
    "pair". An extract answer in the v6 layout (`dump_layout`) names its claims' items by
    `V6_FIELDS`.
    Raises ValueError when `text` is not exactly what dump_answer writes for its value."""
    answer = json.loads(text)
    task = task_of_answer(answer)
    out: list[tuple[int, str, bool]] = []
    pieces: list[str] = []
    at = 0
    item_sep, key_sep = SEPARATORS

    def emit(piece: str) -> None:
        nonlocal at
        pieces.append(piece)
        at += len(piece)

    def visit(value: Any, field: str, names: tuple[str, ...] | None = None,
              record: bool = True) -> None:
        if isinstance(value, dict):
            emit("{")
            for n, (key, sub) in enumerate(value.items()):
                emit((item_sep if n else "") + json.dumps(key, ensure_ascii=False) + key_sep)
                visit(sub, key)
            emit("}")
        elif isinstance(value, list):
            out.append((at, field, True))
            emit("[")
            for n, sub in enumerate(value):
                if n:
                    emit(item_sep)
                if names is not None:
                    visit(sub, names[n])
                elif task == "extract" and field == "claims":
                    visit(sub, "claim", V6_FIELDS if is_v6_claim(sub) else CLAIM_FIELDS)
                elif field == "quotes":
                    visit(sub, "pair", ("quote", "event"))
                else:
                    visit(sub, field, record=False)
            emit("]")
        else:
            if record:
                out.append((at + isinstance(value, str), field, False))
            emit(json.dumps(value, ensure_ascii=False))

    visit(answer, "")
    try:  # keys in another order, or an extract claim as a record, are not dump_answer's text
        if task == "extract" and any(is_v6_claim(c) for c in answer["claims"]):
            exact = "".join(pieces) == text and all(
                is_v6_claim(c) and pack_v6(unpack_v6(c, [])) == c for c in answer["claims"])
        else:
            exact = "".join(pieces) == text and dump_answer(task, answer) == text
    except (ValueError, KeyError, TypeError):
        exact = False
    if not exact:
        raise ValueError("not the exact text dump_answer writes for this answer")
    return out


# --- the derived statement ------------------------------------------------------------------------

def render_statement(record: dict[str, Any], facts: list[dict[str, Any]] | None = None) -> str:
    """The statement the codec writes for a claim record: one English sentence from its subject,
    predicate, value and kind, worded by the phrase table `memworker/statements.yaml` ("The user
    lives in Lisbon.", "Thea is the user's mentor.", "The user no longer plays guitar."; a
    retraction without a value says which of the request's existing `facts` it retracts).
    Deterministic; the canonical claim keeps the quotes, so the words the fact came from are
    never lost."""
    return statements.render(record, facts)


#: canonical fields the wire does not carry: the codec renders the statement and sets the
#: confidence by kind (the generated corpus's gold agrees with that rule on every claim; a
#: hand-written label of the natural set may not)
DERIVED = ("statement", "confidence")


def comparable(claim: dict[str, Any]) -> dict[str, Any]:
    """A canonical claim without what the wire does not carry (`DERIVED`)."""
    return {k: v for k, v in claim.items() if k not in DERIVED}


def comparable_answer(task: str, answer: dict[str, Any]) -> dict[str, Any]:
    """A canonical answer as far as a round trip through the wire keeps it: an extract answer's
    claims without `DERIVED`; a consolidate or reflect answer whole (its ids are read back from
    its text, `memworker.derive`)."""
    if task != "extract":
        return answer
    return {**answer, "claims": [comparable(c) for c in answer["claims"]]}


# --- extract: canonical <-> wire ------------------------------------------------------------------

def claim_to_wire(claim: dict[str, Any]) -> dict[str, Any]:
    """A canonical claim -> its wire record (what the model decides, nothing derived)."""
    return {
        "quotes": [{"quote": q, "event": i} for i, q in zip(claim["source_indices"], claim["quotes"], strict=True)],
        "subject": dict(claim["subject"]),
        "predicate": claim["predicate"],
        "value": claim["value"],
        "kind": claim["kind"],
        "time_expression": claim["time_expression"],
        "supersedes": list(claim["supersedes"]),
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


def claim_from_wire(record: dict[str, Any], events: list[dict[str, Any]],
                    facts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A claim record -> the canonical claim: dates resolved, statement (worded with the
    request's existing `facts` for a retraction), correction flag and confidence derived."""
    indices = [q["event"] for q in record["quotes"]]
    date, precision = resolve_claim_time(record["time_expression"], indices, events)
    return {
        "source_indices": indices,
        "quotes": [q["quote"] for q in record["quotes"]],
        "subject": dict(record["subject"]),
        "predicate": record["predicate"],
        "value": record["value"],
        "statement": record.get("statement") or render_statement(record, facts),
        "kind": record["kind"],
        "time_expression": record["time_expression"],
        "date": date,
        "date_precision": precision,
        "is_correction": bool(record["supersedes"]),
        "supersedes": list(record["supersedes"]),
        "confidence": confidence_of(record["kind"]),
    }


def to_wire(task: str, canonical: dict[str, Any]) -> dict[str, Any]:
    """Canonical answer -> wire answer, as the model writes it (training targets are this): an
    extract claim without what the codec derives; a consolidate or reflect answer's text alone."""
    if task == "extract":
        return order_answer(task, {"claims": [pack_claim(claim_to_wire(c))
                                              for c in canonical["claims"]]})
    if task == "consolidate":
        return order_answer(task, {"observations": [o["statement"]
                                                    for o in canonical["observations"]]})
    return order_answer(task, {"answer": canonical["answer"]})


def from_wire(task: str, wire: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """Wire answer -> canonical answer (shape, dates and derived fields only: an extract claim's
    statement, flag and confidence, a consolidate observation's supports, a reflection's
    citations and abstention; the codec verifies the rest)."""
    if task == "extract":
        return {"claims": [claim_from_wire(r, inputs["events"], inputs.get("existing_facts"))
                           for r in claim_records(wire)]}
    if task == "consolidate":
        return derive.derive_consolidate(wire, inputs)
    return derive.derive_reflect(wire, inputs)
