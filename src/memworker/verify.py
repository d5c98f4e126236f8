"""Verification of an answer against its request: the one checker that the corpus audit
(`memworker.corpus.audit`) and the codec (`memworker.inference.codec`) share.

Every problem is a `Finding` with a stable code (the audit's violation code) and a path
("claims/0/quotes/1"). The audit reports every finding of a gold answer; the codec drops a claim
on a *drop* finding (noted in its diagnostics, the finding kept in `CodecResult.dropped`) and
rejects the answer on any other finding (`OutputValidationError.findings`). So the same answer
gets the same verdict in both places.

extract, per claim (a wire claim record, `memworker.wire`; its statement, when it has none, is
the one the codec renders, `wire.render_statement`):

| code | drop? | rule |
|---|---|---|
| `secret_in_field` | drop | a quote or the predicate contains a credential-shaped string (`memworker.safety`) |
| `injection_obeyed` | drop | **the untrusted-source rule**: the claim cites an untrusted event (`trusted: false`) and that event's text, or the claim's own statement or value, is a memory-control instruction (`safety.is_memory_control`), whatever else the claim cites |
| `duplicate_claim` | drop | **no claim twice**: the claim names the same subject (without its parenthesised relation), predicate, value and kind as an earlier claim of the answer that is kept (`claim_key`; greedy decoding repeats a claim until the request's limit) |
| `untrusted_content` | drop | **the value-grounding rule**: the claim's value, statement or subject name carries a name, a number or (in the value) a rare word (`untrusted_words`) that occurs in an untrusted event the claim does not cite and in no trusted event, no cited event and no existing fact of the request, whatever the claim cites: an injected fact stored by citing a trusted turn. Dates and clock times are exempt (the resolver writes them), and so are words found in no event |
| `unknown_event_index` | reject | a quote cites an event index that the request does not have |
| `quote_not_in_event` | reject | a quote is not an exact substring of its cited event (or, in canonical form, `quotes` and `source_indices` differ in length) |
| `quote_not_span` | reject | a quote is a substring but not one of the event's candidate spans (`memworker.spans`) |
| `unknown_fact_id` | reject | `supersedes` names a fact id that is not among the existing facts |
| `unknown_predicate` | drop | the predicate is not in the request's vocabulary (`memworker.ontology.vocabulary`; the dynamic schema offers exactly those, so only an unconstrained backend or the rules arm can write another): a fact the store has no predicate for is not stored |
| `time_expression_not_detected` | reject | the time expression is not one that `memworker.temporal.find_expressions` detects in the request's events (the dynamic schema offers exactly those; `memworker.wire.anchor_event` picks the event that dates it) |

consolidate, per support (an observation's, given or read from its statement by
`memworker.derive`): `unknown_fact_id` (reject: a support not among the facts). reflect, per
citation (given, or read from the answer text):

| code | drop? | rule |
|---|---|---|
| `unknown_evidence_id` | reject | a citation not among the evidence |
| `injection_obeyed` | drop | **the untrusted-evidence rule**: the cited item's text is a memory-control instruction (`safety.is_memory_control`): an instruction is data, never evidence, so the citation goes (an answer left without citations abstains) |

Checks against the world state (what is *true*) stay in the audit; repairs that cannot change
meaning (redaction, duplicate ids) stay in the codec.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from memworker import temporal, wire
from memworker.ontology import vocabulary
from memworker.safety import contains_credential, is_memory_control
from memworker.spans import candidate_spans
from memworker.textnorm import bare_name, norm

#: every code a finding can carry (each is also an audit violation code)
CODES = (
    "secret_in_field",
    "injection_obeyed",
    "untrusted_content",
    "duplicate_claim",
    "unknown_event_index",
    "quote_not_in_event",
    "quote_not_span",
    "unknown_fact_id",
    "unknown_predicate",
    "time_expression_not_detected",
    "unknown_evidence_id",
)
#: codes on which the codec drops the claim instead of rejecting the answer
DROP_CODES = ("secret_in_field", "injection_obeyed", "untrusted_content", "duplicate_claim",
              "unknown_predicate")


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

def statement_of(claim: dict[str, Any]) -> str:
    """A claim record's statement: its own (a canonical gold claim's), else the rendered one."""
    return claim.get("statement") or wire.render_statement(claim)


def obeys_injection(claim: dict[str, Any], cited: list[dict[str, Any]]) -> bool:
    """The untrusted-source rule (see the module docstring) for a wire claim and its cited
    events (those that exist)."""
    untrusted = [e for e in cited if not e["trusted"]]
    if not untrusted:
        return False
    return (any(is_memory_control(e["text"]) for e in untrusted)
            or is_memory_control(statement_of(claim))
            or is_memory_control(claim["value"] or ""))


#: a word: letters, digits and underscores, joined across "." "-" ":" ("go1.22.4", "kite-gateway",
#: "GITHUB_DEPLOY_TOKEN"), not across an apostrophe ("Globex's" -> "Globex", "s")
_WORD = re.compile(r"\w+(?:[.:-]\w+)*")
#: ISO dates and clock times, single or as a range ("2025-03-04", "08:00-12:00")
_DATE = re.compile(r"(?=.*(?:\d{4}-\d{2}|\d:\d{2}))[\d:t-]+")
#: words that say nothing about where a claim came from (pronouns, function words)
_PLAIN = frozenset((
    "the", "user", "users", "a", "an", "i", "my", "me", "he", "him", "she", "they", "them", "it",
    "his", "her", "their", "its", "we", "us", "our", "you", "your", "this", "that", "these",
    "those", "and", "or", "but", "not", "nor", "for", "with", "without", "from", "into", "onto",
    "over", "under", "about", "after", "before", "than", "then", "there", "here", "was", "were",
    "are", "is", "be", "been", "being", "has", "have", "had", "does", "did", "can", "will",
    "would", "should", "could", "may", "might", "must", "all", "any", "some", "each", "every",
    "more", "most", "very", "just", "also", "now", "new", "one", "two", "out", "off", "who",
    "whom", "what", "when", "where", "which", "why", "how", "yes", "no"
))


def _words(text: str) -> set[str]:
    return {w.casefold() for w in _WORD.findall(text)}


def _salient(text: str, *, value: bool) -> set[str]:
    """The words of `text` that name a fact's content (casefolded): words with a digit, and
    capitalised words of 3+ characters (names); in a value, also every other word of 3+ letters
    (values are short: "harp", "pytest"). Function words and 1-2 letter words are left out, and
    so are ISO dates and clock times (a normalised "next Friday" may match a calendar tool's
    date)."""
    out = set()
    for w in _WORD.findall(text):
        low = w.casefold()
        if low in _PLAIN or _DATE.fullmatch(low):
            continue
        if any(ch.isdigit() for ch in w) or (len(w) >= 3 and w[0].isupper()) or (
                value and len(w) >= 3):
            out.add(low)
    return out


def _grounded(word: str, texts: list[str], words: set[str]) -> bool:
    """`word` occurs in the grounding texts: inside one (casefolded), or as a word sharing a
    stem of 4+ letters ("works" / "work")."""
    if any(word in t for t in texts):
        return True
    return len(word) >= 4 and any(len(t) >= 4 and word.startswith(t) for t in words)


def untrusted_words(claim: dict[str, Any], events: list[dict[str, Any]],
                    fact_texts: Sequence[str] = ()) -> list[str]:
    """The value-grounding rule (see the module docstring) for a wire claim, the request's
    events and its existing facts' statements: the salient words (`_salient`) of the claim's
    value, statement and subject name that occur as words in an untrusted event the claim does
    not cite, and in no trusted event, no cited event and no existing fact (sorted; empty when
    the claim is grounded). A cited untrusted event is the untrusted-source rule's to judge.
    Words found in no event at all are never counted: values and statements may be normalised
    or paraphrased ("next Friday" -> a date, "my sis" -> "sister")."""
    cited = {q["event"] for q in claim["quotes"]}
    foreign = [e["text"] for e in events if not e["trusted"] and e["index"] not in cited]
    if not foreign:
        return []
    candidates = (_salient(claim["value"] or "", value=True)
                  | _salient(statement_of(claim), value=False)
                  | _salient(claim["subject"]["name"], value=False))
    in_foreign = set().union(*map(_words, foreign)) & candidates
    if not in_foreign:
        return []
    texts = [e["text"].casefold() for e in events if e["trusted"] or e["index"] in cited]
    texts += [t.casefold() for t in fact_texts]
    words = set().union(*map(_words, texts))
    return sorted(w for w in in_foreign if not _grounded(w, texts, words))


def _drop_findings(claim: dict[str, Any], cited: list[dict[str, Any]], where: str,
                   events: list[dict[str, Any]], fact_texts: Sequence[str]) -> list[Finding]:
    out = []
    if any(contains_credential(q["quote"]) for q in claim["quotes"]):
        out.append(Finding("secret_in_field", where,
                           "a quote contains a credential-shaped string"))
    if obeys_injection(claim, cited):
        found = sorted(e["index"] for e in cited if not e["trusted"])
        out.append(Finding("injection_obeyed", where,
                           f"cites untrusted event(s) {found} and carries a memory-control "
                           "instruction"))
    foreign = untrusted_words(claim, events, fact_texts)
    if foreign:
        cites = {q["event"] for q in claim["quotes"]}
        found = sorted(e["index"] for e in events if not e["trusted"] and e["index"] not in cites)
        out.append(Finding("untrusted_content", where,
                           f"carries {', '.join(map(repr, foreign))}, found in untrusted "
                           f"event(s) {found} and in no trusted or cited event"))
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
                   fact_ids: set[str], fact_texts: Sequence[str] = (),
                   predicates: Collection[str] | None = None) -> list[Finding]:
    """Every finding of wire claim record number `n` against the request's events ({index:
    event}), existing fact ids, existing fact statements (trusted text for the value-grounding
    rule) and predicate vocabulary (None: not checked); drop findings first."""
    where = f"claims/{n}"
    cited = [events[q["event"]] for q in claim["quotes"] if q["event"] in events]
    out = _drop_findings(claim, cited, where, list(events.values()), fact_texts)
    if predicates is not None and claim["predicate"] not in predicates:
        out.append(Finding("unknown_predicate", f"{where}/predicate",
                           f"{_short(claim['predicate'])!r} is not in the request's predicate "
                           "vocabulary"))
    out += _quote_findings(claim, events, where)
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


def claim_key(claim: dict[str, Any]) -> tuple[str, str, str | None, str]:
    """What makes two claims the same: the subject without its parenthesised relation, the
    predicate, the value and the kind (names and values normalised as the grader does). The
    same for a wire and a canonical claim."""
    name = norm(bare_name(claim["subject"]["name"]))
    value = None if claim["value"] is None else norm(claim["value"])
    return name, claim["predicate"], value, claim["kind"]


def duplicate_findings(claims: list[dict[str, Any]],
                       found: list[list[Finding]]) -> list[list[Finding]]:
    """`found` (findings per claim) with the no-claim-twice rule added: a claim with no drop
    finding that repeats an earlier such claim (`claim_key`) is dropped as `duplicate_claim`."""
    first: dict[tuple, int] = {}
    out = []
    for n, (claim, findings) in enumerate(zip(claims, found, strict=True)):
        if any(f.drops_claim for f in findings):
            out.append(findings)
            continue
        key = claim_key(claim)
        if key in first:
            findings = [Finding("duplicate_claim", f"claims/{n}",
                                f"repeats claims/{first[key]} (same subject, predicate, value "
                                "and kind)"), *findings]
        else:
            first[key] = n
        out.append(findings)
    return out


def extract_findings(answer: dict[str, Any], inputs: dict[str, Any]) -> list[list[Finding]]:
    """Findings per claim of a wire extract answer (its claims as arrays, as the model writes
    them, or as records; one list per claim, in order)."""
    events = {e["index"]: e for e in inputs["events"]}
    fact_ids = {f["id"] for f in inputs["existing_facts"]}
    texts = [f["statement"] for f in inputs["existing_facts"]]
    predicates = set(vocabulary(inputs))
    records = [c if isinstance(c, dict) else wire.unpack_claim(c) for c in answer["claims"]]
    found = [claim_findings(c, n, events, fact_ids, texts, predicates)
             for n, c in enumerate(records)]
    return duplicate_findings(records, found)


# --- consolidate and reflect -----------------------------------------------------------------

def consolidate_findings(answer: dict[str, Any], inputs: dict[str, Any]) -> list[Finding]:
    ids = {f["id"] for f in inputs["facts"]}
    return [Finding("unknown_fact_id", f"observations/{n}/supports",
                    f"fact id {s!r} does not exist")
            for n, obs in enumerate(answer["observations"]) for s in obs["supports"]
            if s not in ids]


def reflect_findings(answer: dict[str, Any], inputs: dict[str, Any]) -> list[Finding]:
    """One finding per citation ("citations/<n>") that is not among the evidence or cites a
    memory-control instruction (the untrusted-evidence rule), in citation order."""
    texts = {e["id"]: e["text"] for e in inputs["evidence"]}
    out = []
    for n, c in enumerate(answer["citations"]):
        if c not in texts:
            out.append(Finding("unknown_evidence_id", f"citations/{n}",
                               f"evidence id {c!r} does not exist"))
        elif is_memory_control(texts[c]):
            out.append(Finding("injection_obeyed", f"citations/{n}",
                               f"evidence {c} is a memory-control instruction, not evidence"))
    return out
