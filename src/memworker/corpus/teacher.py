"""Optional teacher: paraphrase the user's events of extract rows through an OpenAI-compatible
endpoint (plain urllib POST to /v1/chat/completions; e.g. `python -m llama_cpp.server`).

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
import urllib.error
import urllib.request
from collections import Counter
from typing import Any

from memworker import temporal
from memworker.corpus.audit import audit_row
from memworker.safety import contains_credential, is_memory_control
from memworker.spans import candidate_spans

SYSTEM = (
    "You rewrite chat messages so they sound natural and varied while meaning exactly the "
    "same. You answer with JSON only."
)
_CAPITALISED = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w'-]*")
_NUMBER = re.compile(r"\d+")


class TeacherError(RuntimeError):
    """The teacher endpoint could not be reached or answered something unusable."""


def chat(
    url: str,
    model: str,
    messages: list[dict[str, str]],
    schema: dict[str, Any],
    seed: int,
    timeout: float = 120.0,
    max_tokens: int = 600,
) -> str:
    """One chat completion (temperature 0, fixed seed, JSON constrained by `schema`)."""
    body = {
        "model": model,
        "messages": messages,
        "temperature": 0,
        "seed": seed,
        "max_tokens": max_tokens,
        "response_format": {"type": "json_object", "schema": schema},
    }
    req = urllib.request.Request(
        url.rstrip("/") + "/v1/chat/completions",
        data=json.dumps(body).encode("utf-8"),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            doc = json.loads(resp.read().decode("utf-8"))
        return doc["choices"][0]["message"]["content"]
    except (
        urllib.error.URLError,
        TimeoutError,
        OSError,
        KeyError,
        IndexError,
        json.JSONDecodeError,
    ) as exc:
        raise TeacherError(f"teacher at {url} failed: {exc}") from exc


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
    row: dict[str, Any], url: str, model: str, seed: int
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
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["texts"],
        "properties": {
            "texts": {
                "type": "array",
                "minItems": len(targets),
                "maxItems": len(targets),
                "items": {"type": "string", "maxLength": 400},
            }
        },
    }
    content = chat(
        url,
        model,
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
        schema,
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
    audit is restored from its world-state rendering. Returns (rows, report for the manifest)."""
    events: Counter = Counter()
    reverted: Counter = Counter()
    sent = changed = errors = 0
    out = []
    for row in rows:
        if row["task"] != "extract" or (max_rows is not None and sent >= max_rows):
            out.append(row)
            continue
        sent += 1
        try:
            new, outcome = paraphrase_row(row, url, model, seed)
        except TeacherError as exc:
            errors += 1
            if errors == 1 and progress:
                print(f"teacher: {exc}", file=sys.stderr)
            out.append(row)
            continue
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
        "rows_sent": sent,
        "rows_paraphrased": changed,
        "request_errors": errors,
        "event_outcomes": dict(sorted(events.items())),
        "rows_restored_after_audit": dict(sorted(reverted.items())),
    }
    return out, report
