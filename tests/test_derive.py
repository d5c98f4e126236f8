"""memworker.derive: a reflection's citations and abstention read from the evidence its answer
states, an observation's supports from the facts its statement states."""

from __future__ import annotations

import pytest

from memworker import derive
from memworker.corpus import load_rows

EVIDENCE = [{"id": "E1", "text": "Ana (the user's sister) lives in Lisbon."},
            {"id": "E2", "text": "The user went to a gig with Grace (the user's neighbour). "
                                 "Date: 2025-03-09."},
            {"id": "E3", "text": "The user likes tea."}]
FACTS = [{"id": "F1", "statement": "Gus (the user's teammate) plays the harp."},
         {"id": "F2", "statement": "Gus (the user's teammate) works as a software tester."},
         {"id": "F3", "statement": "The user commutes by tram."},
         {"id": "F4", "statement": "The user is on the security team."}]


@pytest.mark.parametrize("answer,cited", [
    ("From the evidence: Ana (the user's sister) lives in Lisbon.", ["E1"]),
    ("ana (the user's sister) lives in lisbon", ["E1"]),                 # normalised
    ("On 2025-03-09, 19 days before the question.", ["E2"]),             # the date stated
    ("Ana lives in Lisbon.", []),                                        # a paraphrase: none
    ("The user likes tea. Ana (the user's sister) lives in Lisbon.", ["E1", "E3"]),
    ("The user likes teapots.", []),                                     # word boundaries
    ("The evidence does not say.", []),
])
def test_citations_are_the_evidence_the_answer_states(answer, cited):
    assert derive.derive_citations(answer, EVIDENCE) == cited
    inputs = {"question": "What do we know?", "evidence": EVIDENCE}
    assert derive.derive_reflect({"answer": answer}, inputs) == {
        "insufficient_evidence": not cited, "citations": cited, "answer": answer}


DATED = [{"id": "E1", "text": "The user's half marathon is scheduled. Date: 2026-05."},
         {"id": "E2", "text": "The user played tennis with Alice. Date: 2026-05-02."},
         {"id": "E3", "text": "The user booked a wellness retreat. Date: 2026-05-02."},
         {"id": "E4", "text": "The user drove to the coast with Emily. Date: 2026-05-02."}]


@pytest.mark.parametrize("answer,question,cited", [
    # a date counts whole: "2026-05" is not stated by "2026-05-02"
    ("The half marathon is in 2026-05.", "", ["E1"]),
    # an item stated by its text accounts for its date: the others of that date are not meant
    ("5 days ago (the user played tennis with Alice on 2026-05-02).", "", ["E2"]),
    # a date alone that several items carry: those sharing words with the question and answer
    ("About 19 days earlier, on 2026-05-02.", "How long ago did the user drive to the coast?",
     ["E4"]),
    ("The retreat was booked on 2026-05-02.", "When?", ["E3"]),
    ("On 2026-05-02.", "When?", ["E2", "E3", "E4"]),            # nothing tells them apart
])
def test_a_date_cites_the_item_it_belongs_to(answer, question, cited):
    assert derive.derive_citations(answer, DATED, question) == cited


def test_the_reference_stores_date_suffix_is_a_date_too():
    """eval/live's store writes a memory's date as "(date: 2025-02)" after its text."""
    evidence = [{"id": "M1", "text": "The user lives in Porto."},
                {"id": "M2", "text": "The user lives in Lisbon. (date: 2025-02)"}]
    assert derive.derive_citations("The user lives in Lisbon.", evidence) == ["M2"]
    assert derive.derive_citations("Since 2025-02.", evidence) == ["M2"]


@pytest.mark.parametrize("statement,supports", [
    ("Since the user commutes by tram and the user is on the security team, the user might be "
     "invested in work.", ["F3", "F4"]),
    ("Gus (the user's teammate) plays the harp and works as a software tester.", ["F1", "F2"]),
    ("The user commutes by tram, so they like trams.", []),            # one fact: none
    ("The user probably likes music.", []),
])
def test_supports_are_the_facts_the_statement_states(statement, supports):
    assert derive.derive_supports(statement, FACTS) == supports


def test_an_observation_without_two_facts_or_a_repeat_goes():
    statements = ["The user commutes by tram and the user is on the security team.",
                  "The user is on the security team; the user commutes by tram.",  # the same
                  "The user likes music."]
    assert derive.read_observations(statements, FACTS) == (
        {0: ["F3", "F4"]}, {1: "states the same facts as observations/0",
                            2: "states fewer than two of the facts"})
    assert derive.derive_consolidate({"observations": statements}, {"facts": FACTS}) == {
        "observations": [{"supports": ["F3", "F4"], "statement": statements[0]}]}


def test_the_gold_choices_are_read_back_from_the_gold_text(tiny_corpus):
    """Every consolidation and every reflection gold of the tiny corpus (the default corpus:
    tests/test_corpus.py, `test_the_default_corpus_gold_reads_back_from_its_wire_text`)."""
    rows = [r for split in ("train", "val", "test")
            for r in load_rows(tiny_corpus, split, form="canonical")]
    checked = 0
    for row in rows:
        if row["task"] == "consolidate":
            got = derive.derive_consolidate(
                {"observations": [o["statement"] for o in row["gold"]["observations"]]},
                row["input"])
            assert got == row["gold"], row["id"]
            assert sorted(sorted(o["supports"]) for o in got["observations"]) == sorted(
                sorted(o["supports"]) for o in row["truth"]["observations"])
            checked += 1
        elif row["task"] == "reflect":
            got = derive.derive_reflect({"answer": row["gold"]["answer"]}, row["input"])
            assert got == row["gold"], row["id"]
            assert got["citations"] == row["truth"]["gold_citations"]
            checked += 1
    assert checked >= 10


# --- an item restated in the answer's own words (issue 45) ---------------------------------------

RESTATE_EVIDENCE = [
    {"id": "E1", "text": "The user allergic to cashews. Date: 2025-03-02."},
    {"id": "E2", "text": "The user lives in Porto. Date: 2025-01-10."},
]


@pytest.mark.parametrize(("answer", "cited"), [
    # must count: the same content words in other order or with the verb the store left out
    ("The user is allergic to cashews.", ["E1"]),
    ("Cashews: the user is allergic to them.", ["E1"]),
    ("They live in Porto.", ["E2"]),  # "user" is a plain word: the content is live, Porto
    # must not count
    ("The user is not allergic to cashews.", []),       # a negation the item lacks
    ("The user is allergic to peanuts.", []),           # another value
    ("I do not know.", []),                             # nothing restated: an abstention
    # an item stated whole is cited as before, and then no restatement is looked for
    ("The user, allergic to cashews, lives in Porto.", ["E1"]),
])
def test_an_answer_restating_one_item_in_its_own_words_cites_it(answer, cited):
    assert derive.derive_citations(answer, RESTATE_EVIDENCE) == cited


def test_restated_needs_exactly_one_item_and_two_content_words():
    items = [("E1", "The user plays chess"), ("E2", "The user plays chess online")]
    assert derive.restated("The user now plays chess online.", items) == set()  # two qualify
    assert derive.restated("The user plays.", [("E1", "The user plays")]) == set()  # one word
    assert derive.restated("Chess is what the user plays.", items[:1]) == {"E1"}
