"""Every hand-written gold claim is written in the product's conventions (issue 46): an ontology
predicate or marked out of vocabulary, relationships as the corpus writes them, a subject whose
name is in the window or its facts (`memworker.corpus.natural.convention_problems`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memworker.corpus.natural import (
    NaturalSetError,
    convention_problems,
    conversation_rows,
    load_conversation,
    load_natural,
)
from memworker.ontology import PREDICATES

ROOT = Path(__file__).resolve().parent.parent
SETS = [d for d in ("natural", "natural-dev", "natural-train") if (ROOT / "corpus" / d).is_dir()]


@pytest.fixture(scope="module", params=SETS)
def rows(request):
    return load_natural(ROOT / "corpus" / request.param)[0]


def test_every_gold_claim_follows_the_conventions(rows):
    problems = [p for r in rows for p in convention_problems(r)]
    assert not problems, "\n".join(problems[:20])


def test_rows_send_the_store_vocabulary_not_a_set_list(rows):
    for r in rows:
        if r["task"] == "extract":
            assert "predicates" not in r["input"]
            assert all(c["predicate"] in PREDICATES for c in r["gold"]["claims"])


def test_out_of_vocabulary_facts_are_graded_not_claimed(rows):
    extract = [r for r in rows if r["task"] == "extract"]
    oov = [t for r in extract for t in r["truth"]["facts"] if t.get("in_vocabulary") is False]
    assert all(t["required"] and t["predicate"] not in PREDICATES for t in oov)
    gold = {(r["id"], c["predicate"], c["value"]) for r in extract for c in r["gold"]["claims"]}
    assert not [t for r in extract for t in r["truth"]["facts"]
                if t.get("in_vocabulary") is False and (r["id"], t["predicate"], t["value"]) in gold]


CONV = """id: x01-case
domain: family
tz: "+01:00"
events:
  - {i: 0, role: user, at: "2025-03-03 19:02", text: "My sister Lena moved to Hamburg."}
extract:
  - window: [0, 0]
    claims:
      - quotes: [[0, "My sister Lena moved to Hamburg."]]
        subject: SUBJECT
        predicate: PREDICATE
        value: VALUE
        statement: "Lena is the user's sister."
        kind: KIND
"""


@pytest.mark.parametrize(("subject", "predicate", "value", "kind", "problem"), [
    ("Lena (the user's sister)", "relationship", "sister", "relationship", None),
    ("Lena (the user's sister)", "sister_of", "the user", "relationship",
     "predicate not in the ontology"),
    ("Lena", "relationship", "sister", "relationship", "a relationship is (Name"),
    ("Lena (the user's sister)", "relationship", "sibling", "relationship",
     "a relationship is (Name"),
    ("Mara (the user's sister)", "relationship", "sister", "relationship", "occurs neither"),
])
def test_conventions_must_and_must_not(tmp_path, subject, predicate, value, kind, problem):
    path = tmp_path / "x01-case.yaml"
    path.write_text(CONV.replace("SUBJECT", f'"{subject}"').replace("PREDICATE", predicate)
                    .replace("VALUE", f'"{value}"').replace("KIND", kind), "utf-8")
    (row,) = conversation_rows(load_conversation(path))
    found = convention_problems(row)
    if problem is None:
        assert found == []
    else:
        assert any(problem in f for f in found), found


def test_oov_on_an_ontology_predicate_is_refused(tmp_path):
    path = tmp_path / "x01-case.yaml"
    path.write_text(CONV.replace("SUBJECT", '"the user"').replace("PREDICATE", "lives_in")
                    .replace("VALUE", '"Hamburg"').replace("KIND", "fact")
                    .replace("        kind: fact\n", "        kind: fact\n        oov: true\n"),
                    "utf-8")
    with pytest.raises(NaturalSetError, match="in the ontology: drop `oov: true`"):
        conversation_rows(load_conversation(path))


def test_set_statistics_show_the_registers_natural_dev_was_written_for(rows):
    from memworker.corpus.setstats import stats

    figures = stats(rows)
    assert figures["extract rows"] == sum(1 for r in rows if r["task"] == "extract")
    assert 0 < figures["gold values verbatim in the window"] <= 1
    assert figures["words per user message, mean"] > 15  # the synthetic train split: 15.3
    assert figures["lowercase starts"] > 0.5 and figures["slang or emoji"] > 0.25
