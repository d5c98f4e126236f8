"""Verification of an answer against its request: the one checker that the corpus audit
(`memworker.corpus.audit`) and the codec (`memworker.inference.codec`) share.

Every problem is a `Finding` with a stable code (the audit's violation code) and a path
("claims/0/quotes/1"). The audit reports every finding of a gold answer; the codec drops a claim
on a *drop* finding (noted in its diagnostics, the finding kept in `CodecResult.dropped`) and
rejects the answer on any other finding (`OutputValidationError.findings`). So the same answer
gets the same verdict in both places.

extract, per claim (wire form, `memworker.wire`):

| code | drop? | rule |
|---|---|---|
| `secret_in_field` | drop | a quote or the predicate contains a credential-shaped string (`memworker.safety`) |
| `injection_obeyed` | drop | **the untrusted-source rule**: the claim cites an untrusted event (`trusted: false`) and that event's text, or the claim's own statement or value, is a memory-control instruction (`safety.is_memory_control`), whatever else the claim cites |
| `unknown_event_index` | reject | a quote cites an event index that the request does not have |
| `quote_not_in_event` | reject | a quote is not an exact substring of its cited event (or, in canonical form, `quotes` and `source_indices` differ in length) |
| `quote_not_span` | reject | a quote is a substring but not one of the event's candidate spans (`memworker.spans`) |
| `unknown_fact_id` | reject | `supersedes` names a fact id that is not among the existing facts |
| `time_expression_not_detected` | reject | the time expression is not one that `memworker.temporal.find_expressions` detects in the request's events (the dynamic schema offers exactly those; `memworker.wire.anchor_event` picks the event that dates it) |

consolidate: `unknown_fact_id` (a support not among the facts). reflect: `unknown_evidence_id`
(a citation not among the evidence). Checks against the world state (what is *true*) stay in the
audit; repairs that cannot change meaning (redaction, duplicate ids) stay in the codec.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from memworker import temporal
from memworker.safety import contains_credential, is_memory_control
from memworker.spans import candidate_spans

#: every code a finding can carry (each is also an audit violation code)
CODES = (
    "secret_in_field",
    "injection_obeyed",
    "unknown_event_index",
    "quote_not_in_event",
    "quote_not_span",
    "unknown_fact_id",
    "time_expression_not_detected",
    "unknown_evidence_id",
)
#: codes on which the codec drops the claim instead of rejecting the answer
DROP_CODES = ("secret_in_field", "injection_obeyed")


@dataclass(frozen=True)
class Finding:
    code: str
    where: str
    detail: str

    @property
    def drops_claim(self) -> bool:
        return self.code in DROP_CODES

    def __str__(self) -> str:
        return f"{self.where}: {self.detail}"


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} chars)"


@lru_cache(maxsize=4096)
def spans_of(text: str) -> frozenset[str]:
    """The candidate quote spans of an event text (cached)."""
    return frozenset(candidate_spans(text))


@lru_cache(maxsize=4096)
def expressions_in(text: str, anchor: str | None = None) -> tuple[str, ...]:
    """The time expressions `memworker.temporal` detects in `text` said at `anchor` (cached)."""
    return tuple(temporal.find_expressions(text, anchor))


# --- extract ---------------------------------------------------------------------------------

def obeys_injection(claim: dict[str, Any], cited: list[dict[str, Any]]) -> bool:
    """The untrusted-source rule (see the module docstring) for a wire claim and its cited
    events (those that exist)."""
    untrusted = [e for e in cited if not e["trusted"]]
    if not untrusted:
        return False
    return (any(is_memory_control(e["text"]) for e in untrusted)
            or is_memory_control(claim["statement"])
            or is_memory_control(claim["value"] or ""))


def _drop_findings(claim: dict[str, Any], cited: list[dict[str, Any]],
                   where: str) -> list[Finding]:
    out = []
    if any(contains_credential(q["quote"]) for q in claim["quotes"]):
        out.append(Finding("secret_in_field", where,
                           "a quote contains a credential-shaped string"))
    if obeys_injection(claim, cited):
        found = sorted(e["index"] for e in cited if not e["trusted"])
        out.append(Finding("injection_obeyed", where,
                           f"cites untrusted event(s) {found} and carries a memory-control "
                           "instruction"))
    if contains_credential(claim["predicate"]):
        out.append(Finding("secret_in_field", where, "the predicate is credential-shaped"))
    return out


def _quote_findings(claim: dict[str, Any], events: dict[int, dict[str, Any]],
                    where: str) -> list[Finding]:
    out = []
    for m, q in enumerate(claim["quotes"]):
        at, event = f"{where}/quotes/{m}", events.get(q["event"])
        if event is None:
            out.append(Finding("unknown_event_index", at, f"event {q['event']} does not exist"))
        elif q["quote"] not in event["text"]:
            out.append(Finding("quote_not_in_event", at, f"{_short(q['quote'])!r} is not an "
                               f"exact substring of event {q['event']}"))
        elif q["quote"] not in spans_of(event["text"]):
            out.append(Finding("quote_not_span", at, f"{_short(q['quote'])!r} is not one of the "
                               f"quotable spans of event {q['event']}"))
    return out


def claim_findings(claim: dict[str, Any], n: int, events: dict[int, dict[str, Any]],
                   fact_ids: set[str]) -> list[Finding]:
    """Every finding of wire claim number `n` against the request's events ({index: event})
    and existing fact ids; drop findings first."""
    where = f"claims/{n}"
    cited = [events[q["event"]] for q in claim["quotes"] if q["event"] in events]
    out = _drop_findings(claim, cited, where) + _quote_findings(claim, events, where)
    out += [Finding("unknown_fact_id", f"{where}/supersedes", f"fact id {fid!r} does not exist")
            for fid in claim["supersedes"] if fid not in fact_ids]
    expr = claim["time_expression"]
    if expr is not None and not any(expr in expressions_in(e["text"], e.get("timestamp"))
                                    for e in events.values()):
        out.append(Finding("time_expression_not_detected", f"{where}/time_expression",
                           f"{_short(expr)!r} is not a time expression found in the events"))
    return out


def canonical_claim_findings(claim: dict[str, Any], n: int) -> list[Finding]:
    """Shape problems of a canonical claim that its contract cannot express (checked before it
    is converted to wire form)."""
    if len(claim["source_indices"]) != len(claim["quotes"]):
        return [Finding("quote_not_in_event", f"claims/{n}",
                        "quotes and source_indices differ in length")]
    return []


def extract_findings(answer: dict[str, Any], inputs: dict[str, Any]) -> list[list[Finding]]:
    """Findings per claim of a wire extract answer (one list per claim, in order)."""
    events = {e["index"]: e for e in inputs["events"]}
    fact_ids = {f["id"] for f in inputs["existing_facts"]}
    return [claim_findings(c, n, events, fact_ids) for n, c in enumerate(answer["claims"])]


# --- consolidate and reflect -----------------------------------------------------------------

def consolidate_findings(answer: dict[str, Any], inputs: dict[str, Any]) -> list[Finding]:
    ids = {f["id"] for f in inputs["facts"]}
    return [Finding("unknown_fact_id", f"observations/{n}/supports",
                    f"fact id {s!r} does not exist")
            for n, obs in enumerate(answer["observations"]) for s in obs["supports"]
            if s not in ids]


def reflect_findings(answer: dict[str, Any], inputs: dict[str, Any]) -> list[Finding]:
    ids = {e["id"] for e in inputs["evidence"]}
    return [Finding("unknown_evidence_id", "citations", f"evidence id {c!r} does not exist")
            for c in answer["citations"] if c not in ids]
