"""Choices derived from what an answer states: a reflection's citations and abstention from the
evidence its answer states, an observation's supports from the facts its statement states.

The decision tasks fail where the model *writes an id*: the proof student (train/README E12) wrote
the citations of a reflection and the supports of an observation before its text and got them
right in 13 of 131 answerable val rows and 10 of 192 consolidation rows, while the text it wrote
after them often said the right thing (its answers state the expected answer in 61 of 131 rows).
Reading the choice back from the text is the extract rule again (a claim's event is read from its
quote, not written by the model): this module is that rule for the other two tasks, as pure
functions of an answer and its request. The codec applies it (wire v4, `memworker.wire`: the
model writes only the observations' statements and the answer text); `eval/studies/hybrid.py
--consolidate derived --reflect derived` applies it to the samples of an older wire.

- `derive_citations(answer, evidence, question)`: the evidence items the answer states — the
  item's text (its trailing `Date: …`, or the reference store's `(date: …)`, left out) occurs in
  the answer after normalisation, or the item's date does as a whole date (a "when" or "how
  long ago" answer states the date, not the sentence). A date counts only for items whose text
  the answer does not state and whose date no stated item carries (a stated item accounts for
  its date); when several such items carry the stated date, those sharing the most words with
  the question and the answer are meant ("How long ago did the user drive to the coast?": the
  drive, not the retreat booked that day). When the answer states no item either way, an item
  it restates in its own words counts (`restated`: all the item's content words are in the
  answer, no negation added, and only one item qualifies). An answer that states no evidence
  item is an abstention: `insufficient_evidence` is then true.
- `derive_supports(statement, facts)`: the facts the statement states whole; when that is fewer
  than two, the facts it states without their leading subject ("Gus plays the harp and works as
  a software tester"). An observation needs two: fewer is no observation, and so is one that
  states the same facts as an earlier one (`derive_consolidate`).

On the corpus's gold answers (generator 2.1.0, seed 13) the rules recover the gold choice of
every consolidation and every reflection row in every split (train 913 + 913, val 192 + 192, test
195 + 195; before 2.1.0 and the date rules above, 896 of 913 train reflections: 14 yes/no answers
that stated only the exception, "Yes, except incident reviews.", and 3 dates another item shares);
the corpus audit requires it of every generated row (`wire_roundtrip`).
"""

from __future__ import annotations

import re
from typing import Any

from memworker.textnorm import mentions, norm, stem

#: an evidence item's trailing date: the corpus's "Date: 2025-03-09." or the reference store's
#: "(date: 2025-03)" (eval/live)
_DATE = re.compile(r"\s*(?:Date:\s*(\S+?)\.?|\(date:\s*([^)\s]+)\))\s*$")
#: a fact statement's leading subject: "The user", "Gus", "Gus (the user's teammate)"
_SUBJECT = re.compile(r"^(?:the user|[A-Z][\w'-]*(?: \([^)]*\))?)\s+", re.I)
#: words that tell no evidence item from another (the tie-break between items of one date)
_PLAIN = frozenset(("the", "a", "an", "user", "s", "is", "are", "was", "were", "be", "of", "to",
                    "in", "on", "at", "and", "or", "with", "for", "by", "from", "it", "that",
                    "did", "does", "do", "what", "when", "where", "which", "who", "how", "long",
                    "ago", "date"))


def _contains(haystack: str, needle: str) -> bool:
    """`needle` occurs in `haystack` as whole words, both normalised (`textnorm.norm`)."""
    return mentions(norm(haystack), norm(needle))


def _states_date(answer: str, date: str) -> bool:
    """`date` occurs in `answer` as a whole date ("2026-05" not inside "2026-05-02")."""
    return re.search(rf"(?<![\d-]){re.escape(date)}(?!-?\d)", answer) is not None


def _words(text: str) -> set[str]:
    return {stem(w) for w in norm(text).split() if w not in _PLAIN}


def _split(item: dict[str, Any]) -> tuple[str, str | None]:
    """(an evidence item's text without its trailing `Date: …`, that date or None)."""
    text = item["text"]
    m = _DATE.search(text)
    return (text[: m.start()] if m else text).rstrip(". "), (m and (m.group(1) or m.group(2)))


def derive_citations(answer: str, evidence: list[dict[str, Any]], question: str = "") -> list[str]:
    """The ids of the evidence items `answer` states (their text, or their date), in evidence
    order (see the module docstring)."""
    parts = [(item["id"], *_split(item)) for item in evidence]
    stated = {i for i, body, _ in parts if _contains(answer, body)}
    accounted = {date for i, _, date in parts if i in stated and date}
    dated = {i: body for i, body, date in parts
             if i not in stated and date and date not in accounted and _states_date(answer, date)}
    if len(dated) > 1:
        context = _words(answer) | _words(question)
        shared = {i: len(_words(body) & context) for i, body in dated.items()}
        best = max(shared.values())
        dated = {i: body for i, body in dated.items() if shared[i] == best}
    if not stated and not dated:  # no item stated whole or by date: one restated in other words
        stated = restated(answer, [(i, body) for i, body, _ in parts])
    return [i for i, _, _ in parts if i in stated or i in dated]


#: words that turn a statement around: an answer using one restates no item that lacks it
_NEGATIONS = frozenset(("not", "no", "never", "longer", "neither", "nor", "without", "t", "isn",
                        "doesn", "don", "didn", "won", "wasn", "aren", "weren", "cannot"))


def restated(answer: str, items: list[tuple[str, str]]) -> set[str]:
    """The ids of the items `answer` restates in its own words: every content word of the item
    (stemmed, `_PLAIN` words left out, at least two) occurs in the answer, the answer adds no
    negation the item lacks, and exactly one item qualifies ("The user is allergic to cashews."
    restates "The user allergic to cashews."; "The user is not allergic to cashews." does not)."""
    said = _words(answer)
    negations = said & _NEGATIONS
    found = set()
    for i, body in items:
        words = _words(body)
        if len(words) >= 2 and words <= said and negations <= words & _NEGATIONS:
            found.add(i)
    return found if len(found) == 1 else set()


def _rest(statement: str) -> str:
    text = statement.strip().rstrip(".")
    m = _SUBJECT.match(text)
    return text[m.end():] if m else text


def derive_supports(statement: str, facts: list[dict[str, Any]]) -> list[str]:
    """The ids of the facts `statement` states (whole; else without their subject), in order;
    [] when fewer than two."""
    whole = [f["id"] for f in facts if _contains(statement, f["statement"].strip().rstrip("."))]
    if len(whole) >= 2:
        return whole
    rest = [f["id"] for f in facts if _contains(statement, _rest(f["statement"]))]
    return rest if len(rest) >= 2 else []


def derive_reflect(wire_answer: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """A reflect wire answer ({"answer": …}) -> the canonical answer: its citations the evidence
    it states, insufficient_evidence when it states none."""
    cited = derive_citations(wire_answer["answer"], inputs["evidence"], inputs["question"])
    return {"insufficient_evidence": not cited, "citations": cited,
            "answer": wire_answer["answer"]}


def read_observations(statements: list[str], facts: list[dict[str, Any]]
                      ) -> tuple[dict[int, list[str]], dict[int, str]]:
    """({index: supports} of the statements that are observations: each states two or more facts,
    a set no earlier one states; {index: why} of the others)."""
    supports: dict[int, list[str]] = {}
    dropped: dict[int, str] = {}
    first: dict[frozenset[str], int] = {}
    for n, statement in enumerate(statements):
        found = derive_supports(statement, facts)
        key = frozenset(found)
        if not found:
            dropped[n] = "states fewer than two of the facts"
        elif key in first:
            dropped[n] = f"states the same facts as observations/{first[key]}"
        else:
            first[key] = n
            supports[n] = found
    return supports, dropped


def derive_consolidate(wire_answer: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """A consolidate wire answer ({"observations": [statement, …]}) -> the canonical answer:
    each observation's supports read from its statement; one that states fewer than two facts,
    or the same facts as an earlier one, goes (`read_observations`)."""
    statements = wire_answer["observations"]
    supports, _ = read_observations(statements, inputs["facts"])
    return {"observations": [{"supports": found, "statement": statements[n]}
                             for n, found in supports.items()]}
