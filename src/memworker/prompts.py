"""Prompt templates and the renderer that turns (task, inputs) into chat messages.

Templates are the text files in the repository's `prompts/` folder (packaged as
`memworker/_prompts` in a wheel): SYSTEM, EXTRACT, CONSOLIDATE, REFLECT. Placeholders are
`{{name}}`. Rendering is byte-stable: the same inputs always give the same messages
(tests/test_prompts.py holds a golden rendering), and `template_hashes()` gives the sha256 that
every receipt records.

    >>> from memworker.prompts import render
    >>> msgs = render("consolidate", {"facts": [{"id": "F1", "statement": "Ana runs."}]})
    >>> [m["role"] for m in msgs]
    ['system', 'user']
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from memworker.contracts import TASKS, validate_input
from memworker.hashing import sha256_bytes

TEMPLATE_NAMES = ("SYSTEM", "EXTRACT", "CONSOLIDATE", "REFLECT")
_TASK_LINE = "TASK: "
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


class PromptError(ValueError):
    """A template is missing or a rendered prompt cannot be understood."""


def prompt_dir() -> Path:
    """The folder holding the template files (wheel install first, then the source checkout)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_prompts", here.parents[1] / "prompts"):
        if (candidate / "SYSTEM.txt").is_file():
            return candidate
    raise PromptError(f"prompt templates not found next to {here} nor in the repository's prompts/")


@cache
def _template_bytes(name: str) -> bytes:
    if name not in TEMPLATE_NAMES:
        raise PromptError(f"unknown template {name!r}; known: {', '.join(TEMPLATE_NAMES)}")
    return (prompt_dir() / f"{name}.txt").read_bytes()


def template(name: str) -> str:
    """Template text without its final newline."""
    return _template_bytes(name).decode("utf-8").rstrip("\n")


def template_hashes() -> dict[str, str]:
    """sha256 (hex) of each template file's bytes, keyed SYSTEM/EXTRACT/CONSOLIDATE/REFLECT."""
    return {name: sha256_bytes(_template_bytes(name)) for name in TEMPLATE_NAMES}


def system_prompt() -> str:
    return template("SYSTEM")


# --- rendering of task inputs -------------------------------------------------------------------

def format_event(event: dict[str, Any], stamps: str = "full") -> str:
    """`[2] 2025-10-08T09:12:00+02:00 tool (untrusted): text` — the text is copied unchanged so
    that quotes the model copies from the prompt are exact substrings of the event; the
    timestamp as `stamps` writes it (`show_stamp`)."""
    role = event["role"] if event["trusted"] else f"{event['role']} (untrusted)"
    return f"[{event['index']}] {show_stamp(event['timestamp'], stamps)} {role}: {event['text']}"


#: how an extract prompt writes its events' timestamps (`restamp`): "full" (the ISO timestamp as
#: the event has it, `2025-10-08T09:12:00+02:00`) or "minute" (`2025-10-08 09:12`: the local date
#: and time to the minute, no seconds, no UTC offset). The model never writes a date (the codec
#: resolves a chosen time expression from the event's own timestamp), so "minute" drops only
#: what it cannot use: ~12 tokens an event (docs/research/inference-speed.md "Wire cost").
EVENT_STAMPS = ("full", "minute")
_ISO_MINUTE = re.compile(r"^(\d{4}-\d\d-\d\d)T(\d\d:\d\d)")


def check_stamps(stamps: str) -> str:
    """`stamps` when it is one of `EVENT_STAMPS`, else PromptError (a ValueError)."""
    if stamps not in EVENT_STAMPS:
        raise PromptError(f"event stamps {stamps!r}: one of {', '.join(EVENT_STAMPS)}")
    return stamps


def show_stamp(timestamp: str, stamps: str = "full") -> str:
    """An event's timestamp as an extract prompt with `stamps` (`EVENT_STAMPS`) writes it."""
    if check_stamps(stamps) == "full":
        return timestamp
    m = _ISO_MINUTE.match(timestamp)
    return f"{m.group(1)} {m.group(2)}" if m else timestamp


#: the extract prompt's lines that describe a claim (prompts/EXTRACT.txt), per claim layout
#: (`memworker.wire.LAYOUTS`): v6 writes no quote (the codec quotes the turn's sentence) and
#: leaves the trailing defaults out (`memworker.wire.pack_v6`)
LAYOUT_LINES = {
    "v3": ("- Each claim: [quotes, subject, subject type, predicate, value, kind, time "
           "expression, superseded ids].\n"
           "- quotes: [exact words, event number]. time expression: copied word for word, or "
           "null. Never write a date."),
    "v6": ("- Each claim: [predicate, value, subject, subject type, kind, time expression, "
           'superseded ids], the last ones left out while they are "the user", "person", '
           '"fact", null, [].\n'
           "- No quotes: the sentence is quoted for you. time expression: copied word for "
           "word, or null. Never write a date."),
}


def relayout(messages: list[dict[str, str]], layout: str = "v3") -> list[dict[str, str]]:
    """`messages` of an extract request with the lines that describe a claim written for claim
    layout `layout` (`LAYOUT_LINES`; v3 is the template's own text, returned unchanged).
    Training rows and the codec's prompts both pass through here. PromptError for an unknown
    layout or when no user message holds the template's lines."""
    if layout not in LAYOUT_LINES:
        raise PromptError(f"claim layout {layout!r}: one of {', '.join(LAYOUT_LINES)}")
    if layout == "v3":
        return messages
    return _replace_in_user(messages, LAYOUT_LINES["v3"], LAYOUT_LINES[layout],
                            "the extract prompt's claim lines to relayout")


def _replace_in_user(messages: list[dict[str, str]], old: str, new: str,
                     what: str) -> list[dict[str, str]]:
    """`messages` with `old` replaced by `new` (once) in every user message holding it;
    PromptError naming `what` when none does."""
    out, found = [], False
    for m in messages:
        if m["role"] == "user" and old in m["content"]:
            found = True
            m = {**m, "content": m["content"].replace(old, new, 1)}
        out.append(m)
    if not found:
        raise PromptError(f"no user message holds {what}")
    return out


def events_block(inputs: dict[str, Any], stamps: str = "full") -> str:
    """The events of an extract request as its prompt lists them."""
    return _lines(inputs["events"], lambda event: format_event(event, stamps))


def restamp(messages: list[dict[str, str]], inputs: dict[str, Any],
            stamps: str = "full") -> list[dict[str, str]]:
    """`messages` of an extract request (any form: the window, its turns, a read-once turn, the
    walk; with answers or not) with the events' timestamps written as `stamps` says: the
    rendered events block is replaced whole in every user message holding it, so event texts are
    never touched. Training rows and the codec's prompts both pass through here, so a student
    sees the same prompt in both. PromptError when no user message holds the block."""
    if check_stamps(stamps) == "full":
        return messages
    return _replace_in_user(messages, events_block(inputs, "full"), events_block(inputs, stamps),
                            "the request's events to restamp")


def format_existing_fact(fact: dict[str, Any]) -> str:
    since = f" (since {fact['valid_from']})" if fact.get("valid_from") else ""
    return f"{fact['id']}: {fact['statement']}{since}"


def format_fact(fact: dict[str, Any]) -> str:
    return f"{fact['id']}: {fact['statement']}"


def format_evidence(item: dict[str, Any]) -> str:
    return f"{item['id']} ({item['timestamp']}): {item['text']}"


def _lines(items: list[dict[str, Any]], fmt) -> str:
    return "\n".join(fmt(item) for item in items) if items else "(none)"


def _fields(task: str, inputs: dict[str, Any]) -> dict[str, str]:
    if task == "extract":
        return {
            "existing_facts": _lines(inputs["existing_facts"], format_existing_fact),
            "events": events_block(inputs),
        }
    if task == "consolidate":
        return {"facts": _lines(inputs["facts"], format_fact)}
    return {
        "question": inputs["question"],
        "asked_at": inputs["asked_at"],
        "evidence": _lines(inputs["evidence"], format_evidence),
    }


def render_user(task: str, inputs: dict[str, Any]) -> str:
    """The user message for `task`; validates `inputs` against the task's input contract."""
    validate_input(task, inputs)
    fields = _fields(task, inputs)
    # one pass, so that input text containing "{{...}}" is never substituted again
    return _PLACEHOLDER.sub(lambda m: fields[m.group(1)], template(task.upper()))


def render(task: str, inputs: dict[str, Any]) -> list[dict[str, str]]:
    """Chat messages [system, user] for one task row. Always passes our system prompt (the base
    model's chat template would otherwise inject its own)."""
    return [
        {"role": "system", "content": system_prompt()},
        {"role": "user", "content": render_user(task, inputs)},
    ]


def to_chatml(messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """ChatML text of `messages` as both registry bases (SmolLM2, Qwen3-Instruct) format it; this is
    the raw prompt sent to backends that take text (Ollama `raw=True`)."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def detect_task(rendered: str) -> str:
    """The task of a rendered prompt (plain user message, chat messages as text, or ChatML)."""
    for line in rendered.splitlines():
        if line.startswith(_TASK_LINE):
            task = line[len(_TASK_LINE):].strip()
            if task in TASKS:
                return task
    raise PromptError("cannot tell the task: the prompt has no 'TASK: extract|consolidate|reflect' line")
