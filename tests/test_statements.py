"""The statement the codec writes for a claim reads as a person would write it (issue 45): every
(predicate, kind) pair the corpus generator emits, and every ontology predicate in the fact, plan,
belief and retraction shapes, renders the sentence of the reviewed list tests/golden/statements.jsonl
(each line: the claim's fields, the request's superseded facts, and the sentence as reviewed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memworker import statements, wire
from memworker.ontology import PREDICATES

GOLDEN = Path(__file__).parent / "golden" / "statements.jsonl"
ROWS = [json.loads(line) for line in GOLDEN.read_text("utf-8").splitlines()]


def _render(row):
    record = {"subject": {"name": row["subject"]}, "predicate": row["predicate"],
              "value": row["value"], "kind": row["kind"], "supersedes": row["supersedes"]}
    return wire.render_statement(record, row["facts"])


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['predicate']}-{r['kind']}-{n}"
                                            for n, r in enumerate(ROWS)])
def test_every_pair_renders_its_reviewed_sentence(row):
    assert _render(row) == row["statement"]


def test_the_list_covers_every_predicate_in_every_shape():
    shapes = {(r["predicate"], r["kind"]) for r in ROWS}
    for predicate in PREDICATES:
        for kind in ("fact", "plan", "belief", "retraction"):
            assert (predicate, kind) in shapes or (
                kind == "fact" and {(predicate, k) for k in ("preference", "event",
                                                              "relationship")} & shapes), \
                (predicate, kind)
    assert set(statements.table()["predicates"]) == set(PREDICATES)


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['predicate']}-{r['kind']}-{n}"
                                            for n, r in enumerate(ROWS)])
def test_a_sentence_is_one_plain_sentence(row):
    text = row["statement"]
    assert text[:1].isupper() and text.endswith(".") and text.count(". ") == 0, text
    assert "_" not in text and "  " not in text and " ." not in text, text
    words = re.findall(r"[A-Za-z]+", text.lower())
    assert not [a for a, b in zip(words, words[1:], strict=False) if a == b], text  # "Go Go"
    if row["value"]:
        assert row["value"].rstrip(".") in text, text
    elif row["facts"]:  # a retraction says which fact stopped being true
        assert text.startswith("It is no longer true that ")
    else:
        assert row["supersedes"][0] in text


@pytest.mark.parametrize(("predicate", "kind", "subject", "value", "expected"), [
    ("allergic_to", "fact", "the user", "cashews", "The user is allergic to cashews."),
    ("did_with", "event", "the user", "played tennis with Fraser",
     "The user played tennis with Fraser."),
    ("relationship", "relationship", "Thea (the user's mentor)", "mentor",
     "Thea is the user's mentor."),
    ("plays", "retraction", "the user", "guitar", "The user no longer plays guitar."),
    ("lives_in", "plan", "Maya (the user's sister)", "Porto", "Maya (the user's sister) plans "
     "to move to Porto."),
])
def test_the_issues_examples(predicate, kind, subject, value, expected):
    record = {"subject": {"name": subject}, "predicate": predicate, "value": value,
              "kind": kind, "supersedes": ["F1"] if kind == "retraction" else []}
    assert wire.render_statement(record) == expected


def test_a_retraction_without_a_value_names_the_fact_it_retracts():
    record = {"subject": {"name": "the user"}, "predicate": "relationship", "value": None,
              "kind": "retraction", "supersedes": ["F1"]}
    facts = [{"id": "F1", "statement": "The user has two siblings."}]
    assert wire.render_statement(record, facts) == \
        "It is no longer true that the user has two siblings."
    assert wire.render_statement(record) == "An earlier fact (F1) about the user no longer holds."


def test_a_malformed_table_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / "statements.yaml"
    text = statements.TABLE.read_text("utf-8").replace(
        'lives_in: {is: "lives in", to: "move to", ', 'lives_in: {is: "lives in", ')
    bad.write_text(text, "utf-8")
    monkeypatch.setattr(statements, "TABLE", bad)
    statements.table.cache_clear()
    try:
        with pytest.raises(statements.StatementTableError, match="lives_in"):
            statements.table()
    finally:
        statements.table.cache_clear()
