"""How people write in a set: one table that puts the hand-written sets beside the synthetic
train split (issue 46 item 5, issue 47 item 1), so a reader sees how far the generator is from
conversation nobody templated.

    python corpus/set_stats.py data/natural data/natural-dev data/corpus:train

Each column is a frozen set (`DIR` = its `test` split, `DIR:SPLIT` another split); figures are
over the extract rows' user messages (each event once per episode) and their gold facts:

- words per user message (mean, median) and required facts per user message;
- verbatim values: gold values that occur in the window as written (case-insensitive);
- pronoun subjects: facts about someone other than the user where a quoted event does not name
  them (the subject is reached through "she", "he", "they" across turns);
- lowercase starts, messages with slang or emoji (`SLANG`, Unicode symbols), messages with letters
  outside ASCII (accents and other scripts: a second language, or names from one).
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any

from memworker.corpus.build import load_rows

SLANG = frozenset((
    "lol", "lmao", "tbh", "btw", "pls", "plz", "gonna", "wanna", "gotta", "idk", "omg", "ngl",
    "haha", "hahaha", "yeah", "nah", "ok", "okay", "u", "ur", "imo", "fyi", "thx", "ty", "kinda",
    "sorta", "dunno", "ya", "yep", "nope", "bc", "cuz", "rn", "tho", "smth", "sth", "asap",
    "whatevs", "ugh", "meh", "yay", "lmk", "af", "bro", "dude"))
_EMOJI = re.compile("[\U0001F300-\U0001FAFF\u2600-\u27BF\u2B50\u2764]")
_NON_ASCII = re.compile(r"[^\x00-\x7F]")
_LETTER_NON_ASCII = re.compile(r"[^\W\d_]", re.UNICODE)
_WORD = re.compile(r"[A-Za-z']+")


def _open(spec: str) -> tuple[str, list[dict[str, Any]]]:
    path, _, split = spec.partition(":")
    return spec, load_rows(Path(path), split or "test", form="canonical")


def stats(rows: list[dict[str, Any]]) -> dict[str, float]:
    extract = [r for r in rows if r["task"] == "extract"]
    messages: dict[tuple[str, int], str] = {}
    assistants: dict[str, list[str]] = {}
    facts, user_msgs_per_row = 0, 0
    verbatim = values = pronoun = others = 0
    for r in extract:
        events = {e["index"]: e for e in r["input"]["events"]}
        user = [e for e in r["input"]["events"] if e["role"] == "user"]
        user_msgs_per_row += len(user)
        for e in user:
            messages[(r["episode"], e["index"])] = e["text"]
        assistants.setdefault(r["episode"], []).extend(
            e["text"] for e in r["input"]["events"] if e["role"] == "assistant")
        window = " ".join(e["text"] for e in r["input"]["events"]).lower()
        for t in r["truth"]["facts"]:
            if t.get("status") != "current" or not t.get("required"):
                continue
            facts += 1
            if t.get("value"):
                values += 1
                verbatim += t["value"].lower() in window
            subject = t.get("subject") or ""
            if subject.lower() not in ("the user", "user") and not subject.lower().startswith(
                    "the user's"):
                others += 1
                name = subject.split("(", 1)[0].strip().lower()
                cited = [events[i]["text"].lower() for i in t.get("source_indices", [])
                         if i in events]
                pronoun += bool(name) and any(name not in text for text in cited)
    texts = list(messages.values())
    words = [len(_WORD.findall(t)) for t in texts]
    lower = sum(1 for t in texts if t[:1].isalpha() and t[:1].islower())
    slang = sum(1 for t in texts if _EMOJI.search(t) or {w.lower() for w in _WORD.findall(t)}
                & SLANG)
    foreign = sum(1 for t in texts if any(_LETTER_NON_ASCII.match(c) for c in
                                          _NON_ASCII.findall(t)))
    n = max(len(texts), 1)
    return {
        "conversations": len(assistants),
        "extract rows": len(extract),
        "user messages": len(texts),
        "words per user message, mean": round(statistics.mean(words), 1) if words else 0.0,
        "words per user message, median": statistics.median(words) if words else 0,
        "required facts per user message": round(facts / max(user_msgs_per_row, 1), 2),
        "gold values verbatim in the window": round(verbatim / max(values, 1), 3),
        "facts about others reached by a pronoun": round(pronoun / max(others, 1), 3),
        "lowercase starts": round(lower / n, 3),
        "slang or emoji": round(slang / n, 3),
        "letters outside ASCII (second language, names)": round(foreign / n, 3),
    }


def table(specs: list[str]) -> str:
    cols = [(spec, stats(rows)) for spec, rows in map(_open, specs)]
    keys = list(cols[0][1])
    lines = ["| figure | " + " | ".join(f"`{s}`" for s, _ in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(f"{c[k]:g}" for _, c in cols) + " |")
    return "\n".join(lines)
