"""The statement the codec writes for an extract claim: one English sentence from its subject,
predicate, value and kind ("The user is allergic to cashews.", "Thea is the user's mentor.",
"The user no longer plays guitar."). The words are data, `statements.yaml` beside this module;
this module only loads and fills them. The store keeps this text and a later answer model reads
it, so it must read as a person would write it (issue 45): tests/test_statements.py renders
every (predicate, kind) pair of the ontology against a reviewed list.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import yaml

from memworker.textnorm import bare_name, is_user

TABLE = Path(__file__).with_name("statements.yaml")
KINDS = ("fact", "preference", "plan", "event", "belief", "relationship", "retraction")
PHRASES = ("is", "to", "neg", "did")


class StatementTableError(ValueError):
    """statements.yaml is malformed (a missing phrase, an unknown key)."""


@functools.lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    """The phrase table, checked: every kind has a sentence, every predicate its four phrases."""
    doc = yaml.safe_load(TABLE.read_text("utf-8"))
    kinds, predicates = doc.get("kinds") or {}, doc.get("predicates") or {}
    missing = [k for k in (*KINDS, "retraction_of_fact", "retraction_of_id", "no_value")
               if k not in kinds]
    if missing:
        raise StatementTableError(f"{TABLE}: kinds lacks {missing}")
    allowed = {*PHRASES, *KINDS, "user"}
    for name, entry in predicates.items():
        if not isinstance(entry, dict) or set(PHRASES) - set(entry) or set(entry) - allowed:
            raise StatementTableError(
                f"{TABLE}: predicate {name!r} needs exactly the phrases {PHRASES} and optional "
                f"per-kind sentences {KINDS} (got {sorted(entry) if isinstance(entry, dict) else entry})")
    return doc


def _bare(name: str) -> str:
    return bare_name(name).strip() or name.strip()


def _possessive(name: str) -> str:
    bare = "the user" if is_user(name) else _bare(name)
    return bare + ("'" if bare.endswith("s") and not is_user(name) else "'s")


def _sentence(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"\s+([,.:])", r"\1", text)
    return text[:1].upper() + text[1:]


#: first words of a predicate outside the table that read as a verb ("has_pets", "visits")
_VERBS = {"is", "has", "had", "was", "can", "will", "does", "did", "owns", "uses", "goes"}


def _verb_first(predicate: str) -> bool:
    first = predicate.split("_", 1)[0].lower()
    return first in _VERBS or (first.endswith("s") and not first.endswith(("ss", "us", "is"))
                               and len(first) > 3)


def _fact_clause(statement: str) -> str:
    s = statement.strip()
    if s.startswith("The "):
        s = "the " + s[4:]
    return s if s.endswith((".", "!", "?")) else s + "."


def render(record: dict[str, Any], facts: list[dict[str, Any]] | None = None) -> str:
    """The sentence for a claim record (`subject.name`, `predicate`, `value`, `kind`,
    `supersedes`); `facts`, the request's existing facts, lets a retraction without a value say
    which fact stopped being true. Deterministic."""
    doc = table()
    name = record["subject"]["name"].strip()
    value = (record.get("value") or "").strip().rstrip(".")
    predicate = record["predicate"]
    kind = record["kind"]
    ids = list(record.get("supersedes") or [])
    possessive = _possessive(name)  # "the user's", "Thea's"
    fields = {"S": name, "N": _bare(name), "P": possessive, "V": value,
              "s": "the user" if is_user(name) else name, "p": possessive,
              "ids": f" ({', '.join(ids)})" if ids else "",
              "words": predicate.replace("_", " ").strip()}
    entry = doc["predicates"].get(predicate)
    if kind == "retraction" and not value:
        by_id = {f.get("id"): f.get("statement") for f in facts or []}
        old = [by_id[i] for i in ids if by_id.get(i)]
        if len(old) == 1:
            return _sentence(doc["kinds"]["retraction_of_fact"].format(
                fact=_fact_clause(old[0])))
        template = (doc["kinds"]["retraction_of_id"] if entry is not None
                    else doc["unknown"]["retraction_of_id"])
        return _sentence(template.format(**fields))
    if entry is None:
        unknown = doc["unknown"]
        if not value:
            return _sentence(unknown["no_value"].format(**fields))
        forms = unknown["verb" if _verb_first(predicate) else "noun"]
        return _sentence((forms.get(kind) or forms["any"]).format(**fields))
    if not value:
        return _sentence(doc["kinds"]["no_value"].format(**fields, **{k: entry[k] for k in PHRASES}))
    if predicate == "relationship" and is_user(name) and "user" in entry:
        template = entry["user"]
    else:
        template = entry.get(kind) or doc["kinds"][kind]
    return _sentence(template.format(**fields, **{k: entry[k] for k in PHRASES}))
