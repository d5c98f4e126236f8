"""The re-voiced generator (issue 47 item 2): the same world states and labels, written the way
people write to an assistant.

`python corpus/build.py --out DIR --seed 13 --voice natural` rewrites every generated extract
window before the audit; the default build (no `--voice`) never calls this module, so its
corpus and manifest are unchanged. Consolidate and reflect rows are left as generated (their
inputs are stored facts and evidence, not the user's messages). What the `natural` voice does to
a window, every draw from `rng_for("voice", seed, row id)` (the same seed gives the same corpus):

1. **Several facts per message** (`P_MERGE` of the windows): each same-day run of the user's
   messages becomes one message (`memworker.packing.merge_row`, defined in
   `memworker.corpus.merge`; the assistant replies inside a run left out; a message that
   reaches someone by a pronoun starts a run of its own, so that it stays apart from the
   message naming them), kept only if every quote is still a quotable
   span of a cited event and no pronoun ends up beside its name (`_pronoun_events`).
2. **Casual spelling** (`P_CASUAL` of the user's trusted messages): "I" written "i", a sentence
   started lower case (not where it starts with a name: a word the window writes capitalised
   inside a sentence, or a subject's name), the shortenings of `tables/voice.yaml` ("because"
   -> "bc", "to be honest" -> "tbh", "you" -> "u"; each match with `P_SHORTEN`).
3. **Endings** (casual messages): the final full stop dropped (`P_DROP_PERIOD`), else written
   as an emoji (`P_EMOJI`, "... the growth team 😅"; a quote of that sentence ends the same way).
4. **Fillers** (`P_FILLER`): a line of small talk holding no fact (`tables/voice.yaml`) put in
   as a sentence of its own at a sentence start that no quote spans; a few are in a second
   language ("bon, voilà.", "jaja, típico."). Fillers and emoji follow the template split
   (`templates.allowed`): train windows say the kept ones, val and test the held-out ones.

Labels stay correct by construction: an edit never touches a claim's value, a time expression or
a forbidden string (each occurrence in the text is protected), never straddles a quote's edge,
and every quote is rewritten by exactly the edits inside it. A message whose rewritten quotes are
not all quotable spans (`memworker.spans.candidate_spans`), whose quotes gain or lose a hedge
(`memworker.textnorm.hedged`) or whose time expressions change
(`memworker.temporal.find_expressions`) is kept as generated. The rows then go through the same
audit as any other (`audit.audit_row`).
"""

from __future__ import annotations

import copy
import functools
import re
from collections import Counter
from typing import Any

from memworker.corpus import tables
from memworker.corpus.coding import POOLS_WITH_CODING
from memworker.corpus.merge import chosen, merge_row
from memworker.corpus.pools import FEMALE, MALE, PETS
from memworker.corpus.templates import allowed
from memworker.corpus.world import rng_for
from memworker.spans import candidate_spans, sentence_offsets
from memworker.temporal import find_expressions
from memworker.textnorm import hedged

VOICES = ("natural",)
P_MERGE = 0.9
P_CASUAL = 0.9
P_SHORTEN = 0.8
P_DROP_PERIOD = 0.45
P_EMOJI = 0.6
P_FILLER = 0.6

_CAPITALISED = re.compile(r"\b[A-Z][\w'’-]*")
_WORD_AT = re.compile(r"[\w'’-]+")

#: words that start sentences and are never a name, even where the generator capitalises one
#: inside a sentence ("so yeah, We pulled out ...")
_NEVER_NAMES = frozenset((
    "i", "we", "the", "it", "my", "our", "they", "he", "she", "a", "an", "so", "and", "but",
    "this", "that", "there", "two", "what", "not", "just", "also", "still", "had", "got"))

Edit = tuple[int, int, str]  # replace text[start:end] with the string (start == end: insert)


def _quote_refs(row: dict[str, Any]) -> list[tuple[list[str], int, int]]:
    """(quotes list, position in it, event index) of every quote of the gold and the truth: the
    first cited event whose text holds it."""
    texts = {e["index"]: e["text"] for e in row["input"]["events"]}
    refs = []
    for item in [*row["gold"].get("claims", []), *(row.get("truth") or {}).get("facts", [])]:
        for k, q in enumerate(item.get("quotes") or []):
            where = next((i for i in item.get("source_indices", []) if q in texts.get(i, "")),
                         None)
            if where is not None:
                refs.append((item["quotes"], k, where))
    return refs


def _protected_strings(row: dict[str, Any]) -> list[str]:
    out = []
    truth = row.get("truth") or {}
    for item in [*row["gold"].get("claims", []), *truth.get("facts", [])]:
        for key in ("value", "time_expression"):
            if isinstance(item.get(key), str):
                out.append(item[key])
        subject = item.get("subject")
        name = subject.get("name") if isinstance(subject, dict) else subject
        if isinstance(name, str):
            out.append(name.split("(", 1)[0].strip())
    out += [f for f in truth.get("forbidden", []) if isinstance(f, str)]
    return [s for s in out if s]


def _names(row: dict[str, Any]) -> set[str]:
    """Words the window writes capitalised inside a sentence, and every word of a subject's
    name: a sentence starting with one keeps its capital."""
    names: set[str] = set()
    for e in row["input"]["events"]:
        text = e["text"]
        starts = {s for s, _ in sentence_offsets(text)}
        for m in _CAPITALISED.finditer(text):
            if m.start() not in starts:
                names.add(m.group(0).lower())
    for s in _protected_strings(row):
        names.update(w.lower() for w in _WORD_AT.findall(s) if w[:1].isupper())
    for f in row["input"].get("existing_facts", []):
        starts = {s for s, _ in sentence_offsets(f["statement"])}
        names.update(m.group(0).lower() for m in _CAPITALISED.finditer(f["statement"])
                     if m.start() not in starts)
    return (names | _proper_words()) - _NEVER_NAMES


@functools.cache
def _proper_words() -> frozenset[str]:
    """People's and pets' names of every split and the capitalised words of the value pools
    (places, employers, products): a sentence starting with one keeps its capital."""
    words = {n.lower() for n in (*FEMALE, *MALE, *PETS)}
    for values in POOLS_WITH_CODING.values():
        for v in values if isinstance(values, (list, tuple)) else ():
            if isinstance(v, str):
                words.update(m.group(0).lower() for m in _CAPITALISED.finditer(v))
    return frozenset(words)


def _intervals(text: str, strings: list[str]) -> list[tuple[int, int]]:
    low = text.lower()
    out = []
    for s in strings:
        s = s.lower()
        start = low.find(s)
        while start >= 0:
            out.append((start, start + len(s)))
            start = low.find(s, start + 1)
    return out


def _overlaps(a: int, b: int, spans: list[tuple[int, int]]) -> bool:
    return any(a < e and s < b for s, e in spans) or any(s == e == a == b for s, e in spans)


def _shortening_patterns(short: tuple[tuple[str, str], ...]) -> list[tuple[re.Pattern, str]]:
    return [(re.compile(r"(?<![\w'’])" + re.escape(p) + r"(?![\w'’])", re.IGNORECASE), c)
            for p, c in short]


def _apply(text: str, edits: list[Edit]) -> str:
    out, last = [], 0
    for s, e, new in sorted(edits, key=lambda x: (x[0], x[1])):
        out.append(text[last:s])
        out.append(new)
        last = e
    out.append(text[last:])
    return "".join(out)


def _edits(rng, text: str, protected: list[tuple[int, int]], quotes: list[tuple[int, int]],
           names: set[str], table, counts: Counter) -> list[Edit]:
    fillers, emoji, patterns = table
    edits: list[Edit] = []
    taken: list[tuple[int, int]] = []

    def free(s: int, e: int) -> bool:
        if _overlaps(s, e, protected) or _overlaps(s, e, taken):
            return False
        # never straddle a quote's edge: inside it or outside it
        return all(e <= qs or s >= qe or (qs <= s and e <= qe) for qs, qe in quotes)

    def add(s: int, e: int, new: str) -> None:
        edits.append((s, e, new))
        taken.append((s, e))

    casual = rng.random() < P_CASUAL
    if casual:
        counts["casual_messages"] += 1
        for m in re.finditer(r"(?<![\w'’])I(?![\w])", text):
            if free(m.start(), m.end()):
                add(m.start(), m.end(), "i")
        for pattern, casual_form in patterns:
            for m in pattern.finditer(text):
                if rng.random() < P_SHORTEN and free(m.start(), m.end()):
                    add(m.start(), m.end(), casual_form)
                    counts["shortenings"] += 1
        for s, _ in sentence_offsets(text):
            word = _WORD_AT.match(text, s)
            if (word and text[s].isupper() and word.group(0).lower() not in names
                    and free(s, s + 1)):
                add(s, s + 1, text[s].lower())
    end = len(text)
    if text.endswith(".") and not text.endswith("..") and casual and \
            rng.random() < P_DROP_PERIOD and free(end - 1, end):
        add(end - 1, end, "")
        counts["dropped_periods"] += 1
    elif casual and text.endswith(".") and not text.endswith("..") and \
            rng.random() < P_EMOJI and free(end - 1, end):
        # the full stop becomes the emoji ("... team 😅"): a quote of the last sentence takes
        # it with it (a lone emoji after a full stop would be a sentence of its own)
        add(end - 1, end, " " + emoji[rng.randrange(len(emoji))])
        counts["emoji"] += 1
    if rng.random() < P_FILLER:
        starts = [s for s, _ in sentence_offsets(text)
                  if all(not (qs < s < qe) for qs, qe in quotes) and free(s, s)]
        if starts:
            at = starts[rng.randrange(len(starts))]
            line = fillers[rng.randrange(len(fillers))]
            add(at, at, (line if casual else line[:1].upper() + line[1:]) + " ")
            counts["fillers"] += 1
    return edits


def _quotable(row: dict[str, Any]) -> bool:
    texts = {e["index"]: e["text"] for e in row["input"]["events"]}
    spans: dict[int, set[str]] = {}
    for item in [*row["gold"].get("claims", []), *(row.get("truth") or {}).get("facts", [])]:
        for q in item.get("quotes") or []:
            ok = False
            for i in item.get("source_indices", []):
                if i in texts and q in spans.setdefault(i, set(candidate_spans(texts[i]))):
                    ok = True
                    break
            if not ok:
                return False
    return True


def _pronoun_events(row: dict[str, Any]) -> set[tuple[int, int]]:
    """(fact position, event index) where a cited event reaches a fact about someone else by a
    pronoun (it does not name them: "she is learning the cello" after "i ran into my client
    Rosa"). The merge keeps such messages apart from the one before them, and is not made
    where a name would still end up beside its pronoun."""
    texts = {e["index"]: e["text"].lower() for e in row["input"]["events"]}
    out = set()
    for k, fact in enumerate((row.get("truth") or {}).get("facts", [])):
        subject = fact.get("subject") or ""
        subject = subject.get("name", "") if isinstance(subject, dict) else subject
        name = subject.split("(", 1)[0].strip().lower()
        if name and name != "the user" and not name.startswith("the user's"):
            out.update((k, i) for i in fact.get("source_indices", [])
                       if name not in texts.get(i, name))
    return out


def voice_row(row: dict[str, Any], seed: int, counts: Counter | None = None,
              table=None) -> dict[str, Any]:
    """The extract `row` in the natural voice (a new row; other tasks are returned as given)."""
    if row["task"] != "extract":
        return row
    counts = counts if counts is not None else Counter()
    table = table or _table()
    rng = rng_for("voice", seed, row["id"])
    fillers, emoji, patterns = table
    # the template split: train windows say the kept fillers and emoji, val/test the held out
    table = (allowed("voice.fillers", fillers, row["split"]),
             allowed("voice.emoji", emoji, row["split"]), patterns)
    out = row
    if chosen("voice-merge:" + row["id"], P_MERGE):
        pronouns = _pronoun_events(row)
        merged = merge_row(row, apart={i for _, i in pronouns})
        if (merged is not None and _quotable(merged)
                and len(_pronoun_events(merged)) >= len({k for k, _ in pronouns})):
            out = merged
            counts["merged_windows"] += 1
    out = copy.deepcopy(out)
    names = _names(out)
    protect = _protected_strings(out)
    refs = _quote_refs(out)
    for event in out["input"]["events"]:
        if event["role"] != "user" or not event.get("trusted", True) or not event["text"]:
            continue
        text = event["text"]
        mine = [(quotes, k) for quotes, k, i in refs if i == event["index"]]
        spans = [(text.find(quotes[k]), text.find(quotes[k]) + len(quotes[k]))
                 for quotes, k in mine]
        protected = _intervals(text, protect)
        for expr in find_expressions(text, event["timestamp"]):
            protected += _intervals(text, [expr])
        edits = _edits(rng, text, protected, spans, names, table, counts)
        if not edits:
            continue
        new_text = _apply(text, edits)
        new_quotes = [_apply(text[qs:qe], [(s - qs, e - qs, n) for s, e, n in edits
                                             if qs <= s and e <= qe and not (s == e == qs)
                                             and not (s == e == qe)])
                      for qs, qe in spans]
        quotable = set(candidate_spans(new_text))
        if (not all(q in quotable for q in new_quotes)
                or any(hedged(q) != hedged(text[a:b])
                       for q, (a, b) in zip(new_quotes, spans, strict=True))
                or find_expressions(new_text, event["timestamp"])
                != find_expressions(text, event["timestamp"])):
            counts["messages_kept_as_generated"] += 1
            continue
        event["text"] = new_text
        for (quotes, k), q in zip(mine, new_quotes, strict=True):
            quotes[k] = q
        counts["messages_voiced"] += 1
    return out


def _table():
    fillers, emoji, short = tables.voice()
    return fillers, emoji, _shortening_patterns(short)


def voice_rows(rows: list[dict[str, Any]], seed: int, voice: str
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every row in `voice` (extract windows rewritten, other rows as given) and the manifest's
    `voice` report (what was done, counted)."""
    if voice not in VOICES:
        raise ValueError(f"unknown voice {voice!r} (known: {', '.join(VOICES)})")
    table = _table()
    counts: Counter = Counter()
    out = [voice_row(r, seed, counts, table) for r in rows]
    report = {"voice": voice, "windows": sum(r["task"] == "extract" for r in rows),
              "shares": {"merge": P_MERGE, "casual": P_CASUAL, "shorten": P_SHORTEN,
                         "drop_period": P_DROP_PERIOD, "emoji": P_EMOJI, "filler": P_FILLER},
              "counts": dict(sorted(counts.items()))}
    return out, report
