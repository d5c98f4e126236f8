"""Choices derived from what an answer states: a reflection's citations and abstention from the
evidence its answer quotes, an observation's supports from the facts its statement states.

The decision tasks fail where the model *writes an id*: the proof student (train/README E12) wrote
the citations of a reflection and the supports of an observation before its text and got them
right in 13 of 131 answerable val rows and 10 of 192 consolidation rows, while the text it wrote
after them often said the right thing (its answers state the expected answer in 61 of 131 rows).
Reading the choice back from the text is the extract rule again (a claim's event is read from its
quote, not written by the model): this module is that rule for the other two tasks, as pure
functions of an answer and its request. `eval/hybrid.py --consolidate derived --reflect derived`
measures it on an evaluation folder's samples; the codec does not apply it (yet).

- `derive_citations(answer, evidence)`: the evidence items the answer states — the item's text
  (its trailing `Date: …` left out) occurs in the answer after normalisation, or the item's
  `Date:` value does (a "when" or "how long ago" answer states the date, not the sentence). An
  answer that states no evidence item is an abstention: `insufficient_evidence` is then true.
- `derive_supports(statement, facts)`: the facts the statement states whole; when that is fewer
  than two, the facts it states without their leading subject ("Gus plays the harp and works as
  a software tester"). An observation needs two: fewer is no observation.

On the corpus's gold answers (train split) the rules recover the gold choice for every
consolidation row (913 / 913) and 896 of 913 reflection rows: the other 17 are yes/no answers
that state only the exception ("Yes, except incident reviews.").
"""

from __future__ import annotations

import re
from typing import Any

from memworker.textnorm import mentions, norm

_DATE = re.compile(r"\s*Date:\s*(\S+?)\.?\s*$")
#: a fact statement's leading subject: "The user", "Gus", "Gus (the user's teammate)"
_SUBJECT = re.compile(r"^(?:the user|[A-Z][\w'-]*(?: \([^)]*\))?)\s+", re.I)


def _contains(haystack: str, needle: str) -> bool:
    """`needle` occurs in `haystack` as whole words, both normalised (`textnorm.norm`)."""
    return mentions(norm(haystack), norm(needle))


def derive_citations(answer: str, evidence: list[dict[str, Any]]) -> list[str]:
    """The ids of the evidence items `answer` states (their text, or their date), in order."""
    cited = []
    for item in evidence:
        text = item["text"]
        m = _DATE.search(text)
        body = text[: m.start()] if m else text
        if _contains(answer, body.rstrip(". ")) or (m and m.group(1) in answer):
            cited.append(item["id"])
    return cited


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
    """A reflect wire answer with its citations and abstention read from its answer text."""
    cited = derive_citations(wire_answer["answer"], inputs["evidence"])
    return {**wire_answer, "insufficient_evidence": not cited, "citations": cited}


def derive_consolidate(wire_answer: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """A consolidate wire answer with each observation's supports read from its statement; an
    observation that states fewer than two facts, or the same facts as an earlier one, goes."""
    out, seen = [], set()
    for obs in wire_answer["observations"]:
        supports = derive_supports(obs["statement"], inputs["facts"])
        key = frozenset(supports)
        if supports and key not in seen:
            seen.add(key)
            out.append({**obs, "supports": supports})
    return {**wire_answer, "observations": out}
