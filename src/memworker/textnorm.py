"""Text normalisation for matching (one place; the corpus audit and the evaluator share it)."""

from __future__ import annotations

import re
import unicodedata
from typing import Any


def norm(text: str | None) -> str:
    """Normalised text for matching: NFKC, lower case, punctuation and extra spaces removed."""
    if text is None:
        return ""
    text = unicodedata.normalize("NFKC", text).lower()
    return " ".join(re.sub(r"[^\w\s]", " ", text).split())


def bare_name(name: str) -> str:
    """A subject name without its parenthesised relation ("Uma (the user's client)" -> "Uma")."""
    return name.split(" (", 1)[0]


def is_user(name: str) -> bool:
    """The subject is the user, written "the user" or "user" (any case)."""
    return name.strip().lower() in ("the user", "user")


def mentions(text: str, phrase: str) -> bool:
    """Whole-word, case-insensitive occurrence of `phrase` in `text` ("npm" not in "pnpm")."""
    if not phrase:
        return False
    return re.search(rf"(?<![\w-]){re.escape(phrase)}(?![\w-])", text, re.I) is not None


ARTICLES = ("the ", "a ", "an ")


def value_key(value: str | None) -> str:
    """A value as matching compares it: normalised (`norm`), a leading article dropped."""
    text = norm(value)
    for article in ARTICLES:
        if text.startswith(article):
            return text[len(article):]
    return text


def stem(word: str) -> str:
    """A crude stem for matching content words: plural and verb endings and a final "e" dropped
    ("lives", "live", "lived", "living" -> "liv"); words stay at least 3 letters where they can."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word


def strings(obj: Any) -> list[str]:
    """Every string inside a JSON-like value (dict values, list items), depth first."""
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in strings(v)]
    return []


#: the one list of hedges: words that mark a statement as uncertain or second-hand. The corpus
#: audit requires one in a belief's statement and in every consolidate observation; matched as
#: whole words, case-insensitive (`hedged`), so "may" does not match "mayor".
HEDGES = (
    "probably", "probable", "might", "may", "maybe", "perhaps", "possibly", "possible", "likely",
    "unlikely", "could", "seem", "seems", "seemed", "seemingly", "appear", "appears", "appeared",
    "apparently", "reckon", "reckons", "reckoned", "guess", "guesses", "i guess", "suppose",
    "supposes", "supposedly", "presumably", "allegedly", "think", "thinks", "thought", "believe",
    "believes", "believed", "suspect", "suspects", "suspected", "not sure", "unsure",
    "not confirmed", "unconfirmed", "not certain", "uncertain", "sounds like", "looks like",
    "as far as", "i gather", "gathers", "i hear", "rumour", "rumor", "suggests", "tends to",
)
_HEDGE_RE = re.compile(r"(?<![\w-])(?:" + "|".join(
    re.escape(h).replace(r"\ ", r"\s+") for h in sorted(HEDGES, key=len, reverse=True))
    + r")(?![\w-])", re.I)


def hedged(text: str) -> bool:
    """True when `text` contains one of `HEDGES` as whole words."""
    return _HEDGE_RE.search(unicodedata.normalize("NFKC", text)) is not None
