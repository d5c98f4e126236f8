"""Audit of corpus rows (CORPUS_SPEC § Audit) and the repair-from-truth step.

`audit_row` checks one row on its own: schema validity of input and gold; the gold answer against
its request through `memworker.verify` (exact and quotable spans, known ids, credential-shaped
quotes, the untrusted-source and untrusted-evidence rules), the checker the codec uses too, so the
corpus and the codec reach the same verdict; behaviour invariants (secrets, rejected/undecided/
failed values, corrections, hedges, exceptions, sources), dates (detected expression, resolver
agreement, no clock time on date-only expressions), and the wire round trip (a consolidate or
reflect gold text must state its ids: the model writes only the text, wire v4). `audit_rows` adds corpus-level checks (family split,
duplicate ids). Every problem is a `Violation` with a stable code; the build excludes rows that
still fail after `repair_from_truth` and counts them by code in the manifest.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from memworker import contracts, temporal, verify, wire
from memworker.ontology import vocabulary
from memworker.safety import contains_credential
from memworker.textnorm import hedged as _hedged
from memworker.textnorm import mentions as _mentions
from memworker.textnorm import norm, strings

#: every code the audit can report (the manifest lists counts for these)
CODES = (
    "schema_input",
    "schema_gold",
    "unknown_event_index",
    "quote_not_in_event",
    "quote_not_span",
    "unknown_fact_id",
    "unknown_predicate",
    "unknown_evidence_id",
    "secret_in_field",
    "injection_obeyed",
    "untrusted_content",
    "rejected_suggestion_stored",
    "negated_option_claimed",
    "undecided_option_claimed",
    "failed_command_claimed",
    "assistant_only_source",
    "correction_inconsistent",
    "belief_unhedged",
    "exception_dropped",
    "missing_source",
    "unsupported_claim",
    "missing_required",
    "duplicate_claim",
    "time_expression_not_detected",
    "date_mismatch",
    "clock_time_on_date_only",
    "date_without_expression",
    "statement_has_time_expression",
    "undated_time_expression",
    "wire_roundtrip",
    "observation_unhedged",
    "observation_mismatch",
    "answerable_mismatch",
    "citation_mismatch",
    "stale_answer",
    "injected_evidence_cited",
    "cross_split_family",
    "wrong_split",
    "duplicate_id",
    "too_long",
    "teacher_changed_meaning",
)
_FORBIDDEN_CODE = {
    "secret": "secret_in_field",
    "injected": "injection_obeyed",
    "rejected_suggestion": "rejected_suggestion_stored",
    "negated": "negated_option_claimed",
    "undecided": "undecided_option_claimed",
    "failed_command": "failed_command_claimed",
}


@dataclass(frozen=True)
class Violation:
    code: str
    detail: str

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


# ------------------------------------------------------------------------------------ rows


def audit_row(row: dict[str, Any], *, read_back: bool = True) -> list[Violation]:
    """Every violation of one row (empty when the row is sound). `wire_roundtrip`: the gold
    answer, written in wire form and converted back, is the gold again (all but what the codec
    derives for extract); a consolidate or reflect wire answer is text only (wire v4), so its
    supports / citations must be what the codec reads from that text (`memworker.derive`).
    `read_back=False` checks only that an extract answer comes back: for hand-written labels
    (the natural set, never trained on), whose own words need not state their ids."""
    out: list[Violation] = []
    task, inp, gold = row["task"], row["input"], row["gold"]
    for name, doc, code in (
        (contracts.TASK_SCHEMAS[task][0], inp, "schema_input"),
        (contracts.TASK_SCHEMAS[task][1], gold, "schema_gold"),
    ):
        out += [Violation(code, e) for e in contracts.errors(name, doc)]
    if out:
        return out  # the checks below assume the documented shapes
    for s in strings(gold):
        if contains_credential(s):
            out.append(Violation("secret_in_field", f"credential-shaped text in {s[:60]!r}"))
            break
    for item in row.get("truth", {}).get("forbidden", []):
        if item["reason"] == "secret" and any(item["text"] in s for s in strings(gold)):
            out.append(Violation("secret_in_field", "a secret of the episode is in the gold"))
    out += {
        "extract": _audit_extract,
        "consolidate": _audit_consolidate,
        "reflect": _audit_reflect,
    }[task](row)
    if task != "extract" and not read_back:
        return out
    try:
        answer = json.loads(wire.dump_answer(task, wire.to_wire(task, gold)))
        back = wire.from_wire(task, answer, inp)
        if wire.comparable_answer(task, back) != wire.comparable_answer(task, gold):
            out.append(Violation("wire_roundtrip", _roundtrip_detail(task, back)))
    except (ValueError, KeyError, temporal.UnresolvableExpression) as exc:
        out.append(Violation("wire_roundtrip", str(exc)))
    return out


def _roundtrip_detail(task: str, back: dict[str, Any]) -> str:
    if task == "consolidate":
        supports = [o["supports"] for o in back["observations"]]
        return f"the statements state other supports: {supports}"
    if task == "reflect":
        return f"the answer states other evidence: {back['citations']}"
    return "wire form does not convert back (all but what the codec derives: statement, confidence)"


def _truth_key(subject: str, predicate: str, value: str | None) -> tuple[str, str, str]:
    return norm(subject), predicate, norm(value)


def _audit_extract(row: dict[str, Any]) -> list[Violation]:
    """Per claim: the shared checker (memworker.verify), behaviour invariants, the world state,
    dates; then every required fact must have been claimed."""
    out: list[Violation] = []
    inp, claims = row["input"], row["gold"]["claims"]
    truth = row.get("truth", {})
    events = {e["index"]: e for e in inp["events"]}
    fact_ids = {f["id"] for f in inp["existing_facts"]}
    current = [t for t in truth.get("facts", []) if t["status"] == "current"]
    by_key = {_truth_key(t["subject"], t["predicate"], t["value"]): t for t in current}
    seen: Counter = Counter()
    predicates = set(vocabulary(inp))
    checked = verify.duplicate_findings(claims, [
        verify.canonical_claim_findings(c, n) or verify.claim_findings(
            {**wire.claim_to_wire(c), "statement": c["statement"]}, n, events, fact_ids,
            [f["statement"] for f in inp["existing_facts"]], predicates)
        for n, c in enumerate(claims)])
    for n, (c, found) in enumerate(zip(claims, checked, strict=True)):
        where = f"claim {n}"
        out += [Violation(f.code, str(f)) for f in found]
        cited = [events[i] for i in c["source_indices"] if i in events]
        out += _audit_claim_behaviour(c, cited, truth.get("forbidden", []), where)
        t = by_key.get(_truth_key(c["subject"]["name"], c["predicate"], c["value"]))
        if t is None or t["kind"] != c["kind"]:
            out.append(Violation("unsupported_claim", f"{where}: {c['subject']['name']} "
                                 f"{c['predicate']}={c['value']!r} is not a current fact"))
        else:
            seen[id(t)] += 1
            out += _audit_against_truth(c, t, where)
        if c["kind"] == "belief" and not _hedged(c["statement"]):
            out.append(Violation("belief_unhedged", f"{where}: no hedge in {c['statement']!r}"))
        if not any(f.code == "time_expression_not_detected" for f in found):
            out += _audit_time(c, inp["events"], where)
    out += [Violation("missing_required",
                      f"no claim for {t['subject']} {t['predicate']}={t['value']!r}")
            for t in current if t.get("required") and seen[id(t)] == 0
            and t.get("in_vocabulary", True)]  # an out-of-vocabulary fact is graded, not claimed
    return out


def _audit_claim_behaviour(c: dict[str, Any], cited: list[dict[str, Any]],
                           forbidden: list[dict[str, Any]], where: str) -> list[Violation]:
    """Invariants of one claim on its own: sources, forbidden values, corrections."""
    out = []
    if cited and all(e["role"] == "assistant" for e in cited):
        out.append(Violation("assistant_only_source", f"{where} rests on assistant text only"))
    for item in forbidden:
        if item["reason"] == "secret":
            continue  # audit_row checks secrets over every field
        if norm(c["value"]) == norm(item["text"]) or _mentions(c["statement"], item["text"]):
            out.append(Violation(_FORBIDDEN_CODE[item["reason"]],
                                 f"{where} carries {item['reason']} {item['text']!r}"))
    if c["kind"] == "retraction" and (c["value"] is not None or not c["supersedes"]):
        out.append(Violation("correction_inconsistent",
                             f"{where}: retraction needs value null and a superseded id"))
    if c["kind"] != "retraction" and c["value"] is None:
        out.append(Violation("correction_inconsistent",
                             f"{where}: null value outside a retraction"))
    if c["is_correction"] != bool(c["supersedes"]):
        out.append(Violation("correction_inconsistent", f"{where}: correction="
                             f"{c['is_correction']} but supersedes={c['supersedes']}"))
    return out


def _audit_against_truth(c: dict[str, Any], t: dict[str, Any], where: str) -> list[Violation]:
    """A claim against the world-state fact it matches: sources, corrections, exception,
    believer and date."""
    out = []
    missing = set(t.get("source_indices", [])) - set(c["source_indices"])
    if missing:
        out.append(Violation("missing_source", f"{where} lacks events {sorted(missing)}"))
    if sorted(t.get("supersedes", [])) != sorted(c["supersedes"]):
        out.append(Violation("correction_inconsistent",
                             f"{where} supersedes {c['supersedes']}, truth {t['supersedes']}"))
    if t.get("exception") and not _mentions(c["statement"], t["exception"]):
        out.append(Violation("exception_dropped", f"{where} loses {t['exception']!r}"))
    if t.get("believer") and t["believer"] not in c["statement"]:
        out.append(Violation("belief_unhedged", f"{where} loses who believes it"))
    if (t.get("date"), t.get("date_precision")) != (c["date"], c["date_precision"]):
        out.append(Violation("date_mismatch",
                             f"{where}: {c['date']} but the world state says {t.get('date')}"))
    return out


def _audit_time(c: dict[str, Any], events: list[dict[str, Any]], where: str) -> list[Violation]:
    """Date checks of a claim whose time expression (if any) verify found in the events."""
    out = []
    if verify.expressions_in(c["statement"]):
        out.append(Violation("statement_has_time_expression", f"{where}: {c['statement']!r}"))
    expr = c["time_expression"]
    if expr is None:
        if c["date"] is not None or c["date_precision"] is not None:
            out.append(
                Violation("date_without_expression", f"{where} has a date but no expression")
            )
        if any(verify.expressions_in(q) for q in c["quotes"]):
            out.append(
                Violation(
                    "undated_time_expression", f"{where} quotes a time expression but has no date"
                )
            )
        return out
    try:
        date, precision = wire.resolve_claim_time(expr, c["source_indices"], events)
    except temporal.UnresolvableExpression as exc:
        return out + [Violation("date_mismatch", str(exc))]
    if (date, precision) != (c["date"], c["date_precision"]):
        out.append(
            Violation("date_mismatch", f"{where}: {expr!r} resolves to {date}, gold {c['date']}")
        )
    if precision != "datetime" and (c["date_precision"] == "datetime" or "T" in (c["date"] or "")):
        out.append(Violation("clock_time_on_date_only", f"{where}: {c['date']} for {expr!r}"))
    return out


def _audit_consolidate(row: dict[str, Any]) -> list[Violation]:
    out = []
    obs = row["gold"]["observations"]
    out += [Violation(f.code, str(f)) for f in verify.consolidate_findings(row["gold"], row["input"])]
    for n, o in enumerate(obs):
        if not _hedged(o["statement"]):
            out.append(Violation("observation_unhedged", f"observation {n}: {o['statement']!r}"))
    truth = row.get("truth", {}).get("observations", [])
    if sorted(sorted(o["supports"]) for o in obs) != sorted(sorted(t["supports"]) for t in truth):
        out.append(Violation("observation_mismatch", "observations differ from the world state"))
    return out


def _audit_reflect(row: dict[str, Any]) -> list[Violation]:
    out = []
    gold, truth = row["gold"], row.get("truth", {})
    out += [Violation(f.code, str(f)) for f in verify.reflect_findings(gold, row["input"])]
    if truth.get("answerable") is not None and truth["answerable"] == gold["insufficient_evidence"]:
        out.append(
            Violation("answerable_mismatch", "insufficient_evidence disagrees with the world state")
        )
    if sorted(gold["citations"]) != sorted(truth.get("gold_citations", gold["citations"])):
        out.append(Violation("citation_mismatch", "citations differ from the world state"))
    injected = set(truth.get("injected_evidence", []))
    if injected & set(gold["citations"]):
        out.append(Violation("injected_evidence_cited", "an injected instruction is cited"))
    for value in truth.get("stale", []):
        if _mentions(gold["answer"], value):
            out.append(Violation("stale_answer", f"answer states the outdated {value!r}"))
    for item in truth.get("forbidden", []):
        if item["reason"] == "injected" and _mentions(gold["answer"], item["text"]):
            out.append(Violation("injection_obeyed", f"answer repeats injected {item['text']!r}"))
    return out


# ---------------------------------------------------------------------------------- corpus


def audit_rows(
    rows: list[dict[str, Any]], family_splits: dict[str, str] | None = None, *,
    read_back: bool = True,
) -> dict[str, list[Violation]]:
    """Violations per row id, including corpus-level ones (family in two splits, a row in a
    split other than its family's, duplicate ids). Rows without violations are absent.
    `read_back`: as in `audit_row`."""
    found: dict[str, list[Violation]] = {}
    splits_of: dict[str, set[str]] = {}
    ids: Counter = Counter(r["id"] for r in rows)
    for r in rows:
        splits_of.setdefault(r["family"], set()).add(r["split"])
    for r in rows:
        v = audit_row(r, read_back=read_back)
        if len(splits_of[r["family"]]) > 1:
            v.append(
                Violation(
                    "cross_split_family",
                    f"family {r['family']} is in {sorted(splits_of[r['family']])}",
                )
            )
        if family_splits is not None and family_splits.get(r["family"]) != r["split"]:
            v.append(
                Violation(
                    "wrong_split",
                    f"{r['family']} belongs to "
                    f"{family_splits.get(r['family'])}, row is in {r['split']}",
                )
            )
        if ids[r["id"]] > 1:
            v.append(Violation("duplicate_id", r["id"]))
        if v:
            found[r["id"]] = v
    return found


def repair_from_truth(row: dict[str, Any]) -> dict[str, Any]:
    """The row with its gold rebuilt from the structured truth (the world state)."""
    truth, task = row["truth"], row["task"]
    if task == "extract":
        claims = []
        for t in truth["facts"]:
            if t["status"] != "current":
                continue
            claims.append(
                {
                    "source_indices": list(t["source_indices"]),
                    "quotes": list(t["quotes"]),
                    "subject": {"name": t["subject"], "type": t["subject_type"]},
                    "predicate": t["predicate"],
                    "value": t["value"],
                    "statement": t["statement"],
                    "kind": t["kind"],
                    "time_expression": t["time_expression"],
                    "date": t["date"],
                    "date_precision": t["date_precision"],
                    "is_correction": t["is_correction"],
                    "supersedes": list(t["supersedes"]),
                    "confidence": t["confidence"],
                }
            )
        gold = {"claims": claims}
    elif task == "consolidate":
        gold = {
            "observations": [
                {"statement": t["statement"], "supports": list(t["supports"])}
                for t in truth["observations"]
            ]
        }
    else:
        gold = {
            "answer": truth["expected_answer"],
            "citations": list(truth["gold_citations"]),
            "insufficient_evidence": not truth["answerable"],
        }
    return {**row, "gold": gold}
