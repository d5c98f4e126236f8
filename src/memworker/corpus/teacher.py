"""Optional teacher: paraphrase the user's events of extract rows through an OpenAI-compatible
endpoint (e.g. `python -m llama_cpp.server`), through the one OpenAI-compatible client,
`memworker.inference.backends.OpenAICompatBackend`: the URL is its base URL ending in /v1, and
the answer is constrained by our own GBNF grammar (never `response_format`, whose server-side
conversion lets control characters into strings).

A teacher that cannot be reached, or whose request fails, is a build error (`TeacherError`): a
corpus never silently falls back to the world-state rendering. The manifest's teacher report
records the URL, the model name sent, the model ids the server says it serves, and the settings
(temperature, seed, max_tokens, sha256 of the system prompt and of the grammar's JSON schema).

The teacher only rewords; labels still come from the world state. A paraphrased event is kept
only if it still contains, as quotable spans, every gold quote taken from it, keeps every time
expression a claim uses, and adds no name, number, time expression, credential or instruction
that the original did not have. The row is then re-audited like any other; if it fails, it is
repaired from the world state (the original rendering is restored) and the reason is counted in
the manifest's teacher report.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from typing import Any

from memworker import temporal
from memworker.corpus.audit import audit_row
from memworker.hashing import sha256_bytes, sha256_json
from memworker.inference.backends import BackendError, OpenAICompatBackend, served_models
from memworker.inference.grammar import schema_to_gbnf
from memworker.safety import contains_credential, is_memory_control
from memworker.spans import candidate_spans

SYSTEM = (
    "You rewrite chat messages so they sound natural and varied while meaning exactly the "
    "same. You answer with JSON only."
)
_CAPITALISED = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w'-]*")
_NUMBER = re.compile(r"\d+")


MAX_TOKENS = 600
TIMEOUT_S = 120.0


class TeacherError(RuntimeError):
    """The teacher endpoint could not be reached or its request failed (a build error)."""


def answer_schema(n_texts: int) -> dict[str, Any]:
    """The JSON schema (and so the grammar) of a teacher answer for `n_texts` messages."""
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["texts"],
        "properties": {
            "texts": {
                "type": "array",
                "minItems": n_texts,
                "maxItems": n_texts,
                "items": {"type": "string", "maxLength": 400},
            }
        },
    }


def chat(teacher: OpenAICompatBackend, messages: list[dict[str, str]], schema: dict[str, Any],
         seed: int) -> str:
    """One chat completion (temperature 0, fixed seed, constrained by `schema`'s grammar)."""
    try:
        gen = teacher.generate(messages, schema=schema, grammar=schema_to_gbnf(schema),
                               max_tokens=MAX_TOKENS, temperature=0.0, seed=seed)
    except BackendError as exc:
        raise TeacherError(f"teacher failed: {exc}") from None
    return gen.text


def _words(text: str, pattern: re.Pattern[str]) -> set[str]:
    return {m.group(0) for m in pattern.finditer(text)}


def accept(old: str, new: str, keep: list[str], times: list[str]) -> str | None:
    """None when `new` may replace `old`, else the reason it may not."""
    if not new.strip() or len(new) > 600:
        return "empty_or_too_long"
    if len(new) > 1.5 * len(old) + 20:
        return "grew_too_much"  # a paraphrase that adds content could add an unlabelled fact
    spans = set(candidate_spans(new))
    if any(q not in spans for q in keep):
        return "lost_quote"
    found = temporal.find_expressions(new)
    if any(t not in found for t in times) or not set(found) <= set(temporal.find_expressions(old)):
        return "changed_time_expression"
    if contains_credential(new) or is_memory_control(new):
        return "credential_or_instruction"
    if not _words(new, _CAPITALISED) - {"I"} <= _words(old, _CAPITALISED) | _words(
        old, re.compile(r"\b\w[\w'-]*")
    ):
        return "new_name"
    if not _words(new, _NUMBER) <= _words(old, _NUMBER):
        return "new_number"
    return None


def paraphrase_row(
    row: dict[str, Any], teacher: OpenAICompatBackend, seed: int
) -> tuple[dict[str, Any], Counter]:
    """The row with accepted paraphrases (or unchanged) and per-event outcome counts."""
    outcome: Counter = Counter()
    events = row["input"]["events"]
    claims = row["gold"]["claims"]
    targets = [
        e
        for e in events
        if e["role"] == "user" and e["trusted"] and not contains_credential(e["text"])
    ]
    if not targets:
        return row, outcome
    keep = {
        e["index"]: [
            q
            for c in claims
            for i, q in zip(c["source_indices"], c["quotes"], strict=False)
            if i == e["index"]
        ]
        for e in targets
    }
    times = {
        e["index"]: [
            c["time_expression"]
            for c in claims
            if c["time_expression"]
            and e["index"] in c["source_indices"]
            and c["time_expression"] in e["text"]
        ]
        for e in targets
    }
    lines = []
    for n, e in enumerate(targets, 1):
        lines.append(f"{n}. {e['text']}")
        for q in keep[e["index"]]:
            lines.append(f"   KEEP EXACTLY: {q}")
    prompt = (
        "Rewrite each numbered message. Copy every KEEP EXACTLY sentence word for word. "
        "Do not add names, numbers, dates or new facts.\n\n"
        + "\n".join(lines)
        + f'\n\nAnswer with JSON: {{"texts": [{len(targets)} strings, in order]}}'
    )
    content = chat(
        teacher,
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
        answer_schema(len(targets)),
        seed,
    )
    try:
        texts = json.loads(content)["texts"]
    except (json.JSONDecodeError, KeyError, TypeError):
        outcome["unparseable_answer"] += 1
        return row, outcome
    new_events = [dict(e) for e in events]
    for e, text in zip(targets, texts if isinstance(texts, list) else [], strict=False):
        if not isinstance(text, str) or text == e["text"]:
            outcome["unchanged"] += 1
            continue
        reason = accept(e["text"], text, keep[e["index"]], times[e["index"]])
        if reason:
            outcome[reason] += 1
            continue
        new_events[e["index"]]["text"] = text
        outcome["accepted"] += 1
    if not outcome["accepted"]:
        return row, outcome
    return {**row, "input": {**row["input"], "events": new_events}}, outcome


def paraphrase_rows(
    rows: list[dict[str, Any]],
    url: str,
    model: str,
    seed: int,
    max_rows: int | None = None,
    progress: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Paraphrase extract rows in order (at most `max_rows`); a row whose paraphrase fails the
    audit is restored from its world-state rendering. Returns (rows, report for the manifest).
    Raises TeacherError when the teacher cannot be reached or a request fails."""
    teacher = OpenAICompatBackend(url, model=model, timeout=TIMEOUT_S)
    try:
        served = served_models(url)
    except BackendError as exc:
        raise TeacherError(f"teacher unreachable: {exc}") from None
    events: Counter = Counter()
    reverted: Counter = Counter()
    sent = changed = 0
    out = []
    for row in rows:
        if row["task"] != "extract" or (max_rows is not None and sent >= max_rows):
            out.append(row)
            continue
        sent += 1
        new, outcome = paraphrase_row(row, teacher, seed)
        events.update(outcome)
        if new is row:
            out.append(row)
            continue
        problems = audit_row(new)
        if problems:
            reverted[problems[0].code] += 1
            out.append(row)  # repaired from the world state: the original rendering
        else:
            changed += 1
            out.append(new)
        if progress and sent % 10 == 0:
            print(f"teacher: {sent} rows sent, {changed} paraphrased", file=sys.stderr)
    report = {
        "url": url,
        "model": model,
        "served_models": served,
        "settings": {"temperature": 0.0, "seed": seed, "max_tokens": MAX_TOKENS,
                     "system_sha256": sha256_bytes(SYSTEM.encode("utf-8")),
                     "answer_schema_sha256": sha256_json(answer_schema(0))},
        "rows_sent": sent,
        "rows_paraphrased": changed,
        "event_outcomes": dict(sorted(events.items())),
        "rows_restored_after_audit": dict(sorted(reverted.items())),
    }
    return out, report
