"""Candidate quote spans of an event: the only strings a claim may quote from it.

The codec's dynamic schema offers exactly these spans per event (an enum), and the corpus builds
its gold quotes from them, so every training target is representable under the grammar. Spans
are exact substrings of the event text: the whole text, each line, each sentence, and each clause
of a sentence (split at , ; : and dashes), stripped of surrounding whitespace. A sentence ends
after . ! ? and whitespace, except after a title or "e.g."/"i.e." (`ABBREVIATIONS`). Spans
that contain a credential-shaped string are never offered. Order is deterministic (document
order, longest first at each position), duplicates removed.
"""

from __future__ import annotations

import re

from memworker.safety import contains_credential

MAX_SPAN_CHARS = 600
MAX_SPANS_PER_EVENT = 40
MIN_SPAN_CHARS = 3

#: abbreviations whose full stop does not end a sentence ("Ms. Lee", "e.g. the park")
ABBREVIATIONS = ("Mr", "Mrs", "Ms", "Mx", "Dr", "Prof", "St", "Jr", "Sr", "vs", "e.g", "i.e",
                 "E.g", "I.e", "approx")
_SENTENCE_END = re.compile(
    "".join(rf"(?<!\b{re.escape(a)}\.)" for a in ABBREVIATIONS) + r"(?<=[.!?])\s+")
_CLAUSE_SPLIT = re.compile(r"\s*(?:[,;:]\s+|\s[-–—]\s)")


def _pieces(text: str, start: int, splitter: re.Pattern[str]) -> list[tuple[int, str]]:
    """(offset, piece) for the parts of text[start:...] between splitter matches."""
    out, last = [], 0
    for m in splitter.finditer(text):
        out.append((start + last, text[last:m.start()]))
        last = m.end()
    out.append((start + last, text[last:]))
    return out


def _strip(offset: int, piece: str) -> tuple[int, str]:
    stripped = piece.strip()
    return offset + (len(piece) - len(piece.lstrip())), stripped


def sentence_offsets(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of `text` in order, split as `candidate_spans` splits them
    (lines, then sentence ends), stripped of surrounding whitespace; empty pieces left out."""
    out = []
    line_offset = 0
    for line in text.split("\n"):
        for s_off, sentence in _pieces(line, line_offset, _SENTENCE_END):
            start, piece = _strip(s_off, sentence)
            if piece:
                out.append((start, start + len(piece)))
        line_offset += len(line) + 1
    return out


def candidate_spans(text: str) -> list[str]:
    """The quotable spans of one event's text (may be empty: such an event cannot be cited)."""
    found: list[tuple[int, int, str]] = []  # (offset, -length, span)

    def add(offset: int, piece: str) -> None:
        offset, piece = _strip(offset, piece)
        if MIN_SPAN_CHARS <= len(piece) <= MAX_SPAN_CHARS and not contains_credential(piece):
            found.append((offset, -len(piece), piece))

    add(0, text)
    line_offset = 0
    for line in text.split("\n"):
        add(line_offset, line)
        for s_off, sentence in _pieces(line, line_offset, _SENTENCE_END):
            add(s_off, sentence)
            for c_off, clause in _pieces(sentence, s_off, _CLAUSE_SPLIT):
                add(c_off, clause)
        line_offset += len(line) + 1
    seen: set[str] = set()
    spans = []
    for _, _, span in sorted(found):
        if span not in seen:
            seen.add(span)
            spans.append(span)
    return spans[:MAX_SPANS_PER_EVENT]


#: words left out when a claim's words are matched against sentences (`choose_sentence`)
_FUNCTION_WORDS = frozenset((
    "a", "an", "the", "and", "or", "but", "of", "to", "in", "on", "at", "for", "with", "by",
    "from", "as", "is", "are", "was", "were", "be", "been", "am", "it", "its", "this", "that",
    "i", "me", "my", "we", "our", "you", "your", "he", "she", "his", "her", "they", "their",
    "do", "does", "did", "so", "just", "have", "has", "had", "will", "would", "not", "no", "user"))
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")


def _content_words(text: str | None) -> set[str]:
    from memworker.textnorm import stem  # here: textnorm is a leaf, spans is imported early

    return {stem(w) for w in _WORD.findall((text or "").lower()) if w not in _FUNCTION_WORDS}


def choose_sentence(text: str, value: str | None, subject: str = "",
                    predicate: str = "") -> str | None:
    """The sentence of an event's `text` that a claim with this value, subject name and predicate
    most likely quotes, when the claim's writer does not copy a quote: among the sentences that
    are candidate spans (`sentence_offsets`, the whole text when it has none), the one sharing
    the most content words with the value, then with the subject's name, then with the
    predicate's words, then the earliest. None when no sentence is a candidate span (the event
    cannot be quoted). On gold claims it picks the sentence the gold quotes in 0.984 of val's
    claims and 0.925 of natural-dev's (docs/research/inference-speed.md "Quotes chosen by the
    codec")."""
    offered = set(candidate_spans(text))
    pieces = [text[a:b] for a, b in sentence_offsets(text) or [(0, len(text))]]
    pieces = [p for p in pieces if p in offered]
    if not pieces:
        return None
    value_w, subject_w = _content_words(value), _content_words(subject.split(" (", 1)[0])
    predicate_w = _content_words(predicate.replace("_", " "))

    def fit(item: tuple[int, str]) -> tuple[int, int, int, int]:
        n, piece = item
        words = _content_words(piece)
        return (len(value_w & words), len(subject_w & words), len(predicate_w & words), -n)

    return max(enumerate(pieces), key=fit)[1]
