"""natural-train (issue 47): hand-written conversations to train on, kept apart from the sets
designs are chosen on (natural-dev) and tested on (natural): no event text, no window and no
(person, predicate) pair is shared; split by conversation into train and val."""

from __future__ import annotations

from pathlib import Path

import pytest

from memworker.corpus.natural import load_natural, training_split

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "corpus" / "natural-train"

pytestmark = pytest.mark.skipif(not TRAIN.is_dir(), reason="natural-train not written yet")


def _rows(name: str):
    return load_natural(ROOT / "corpus" / name)[0]


@pytest.fixture(scope="module")
def sets():
    return {name: _rows(name) for name in ("natural-train", "natural", "natural-dev")}


def _texts(rows):
    """Event texts of three words or more (a bare "👍" or "ok" may be anyone's)."""
    return {e["text"].strip() for r in rows if r["task"] == "extract"
            for e in r["input"]["events"] if len(e["text"].split()) >= 3}


def _windows(rows):
    return {tuple(e["text"] for e in r["input"]["events"]) for r in rows if r["task"] == "extract"}


def _people(rows):
    out = set()
    for r in rows:
        if r["task"] != "extract":
            continue
        for t in r["truth"]["facts"]:
            name = (t.get("subject") or "").split("(", 1)[0].strip().lower()
            if t.get("predicate") and name and name not in ("the user", "user") \
                    and not name.startswith("the user's"):
                out.add((name, t["predicate"]))
    return out


@pytest.mark.parametrize("other", ["natural", "natural-dev"])
def test_nothing_is_shared_with_a_test_or_design_set(sets, other):
    train, them = sets["natural-train"], sets[other]
    assert not _texts(train) & _texts(them)
    assert not _windows(train) & _windows(them)
    shared = _people(train) & _people(them)
    assert not shared, sorted(shared)[:10]


def test_split_by_conversation_into_train_and_val(sets):
    rows = sets["natural-train"]
    by_conv = {}
    for r in rows:
        by_conv.setdefault(r["episode"], set()).add(r["split"])
    assert all(len(s) == 1 for s in by_conv.values())  # a conversation is in one split
    assert all(s == {training_split(c)} for c, s in by_conv.items())
    assert {r["split"] for r in rows} <= {"train", "val"}
