"""The default predicate vocabulary (memworker.ontology) is exactly what the corpus generator can
emit: its domains' attributes plus its behaviours' own predicates, and every gold claim of a
generated corpus uses one of them (so the dynamic schema's predicate enum can represent the gold)."""

from __future__ import annotations

import dataclasses

from memworker.corpus.build import generate_rows
from memworker.corpus.coding import CODING
from memworker.corpus.domains import GENERAL
from memworker.ontology import BEHAVIOUR_PREDICATES, PREDICATES, vocabulary


def _domain_predicates(obj, depth: int = 0, found: set[str] | None = None) -> set[str]:
    found = set() if found is None else found
    if depth > 6 or isinstance(obj, type):
        return found
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.name in ("pred", "predicate") and isinstance(value, str):
                found.add(value)
            _domain_predicates(value, depth + 1, found)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _domain_predicates(item, depth + 1, found)
    elif isinstance(obj, dict):
        for item in obj.values():
            _domain_predicates(item, depth + 1, found)
    return found


def test_the_vocabulary_is_what_the_generator_emits():
    assert list(PREDICATES) == sorted(set(PREDICATES))
    emitted = _domain_predicates(GENERAL) | _domain_predicates(CODING) | set(BEHAVIOUR_PREDICATES)
    assert set(PREDICATES) == emitted


def test_every_gold_claim_of_a_generated_corpus_is_in_the_vocabulary():
    for domain in ("general", "coding"):
        rows, _ = generate_rows(domain, 13, 120)
        used = {c["predicate"] for r in rows if r["task"] == "extract"
                for c in r["gold"]["claims"]}
        assert used and used <= set(PREDICATES), sorted(used - set(PREDICATES))


def test_a_request_vocabulary_replaces_the_default_and_facts_join_it():
    episode = {"episode_id": "e", "events": [], "existing_facts": [
        {"id": "F1", "statement": "x", "valid_from": None, "predicate": "home_city"}]}
    assert vocabulary(episode) == [*PREDICATES, "home_city"]
    assert vocabulary({**episode, "predicates": ["lives_in"]}) == ["lives_in"]
