"""The model card's evaluation section reads the evaluator's summary structure (no model)."""

from __future__ import annotations

from memworker.export.card import _evaluation


def test_card_tabulates_each_metric_of_an_evaluator_summary():
    summary = {"rows": 64, "metrics": {
        "student": {"extract": {"rows": 32, "metrics": {
            "extract_support": {"value": 0.75, "num": 9, "den": 12, "n_rows": 32,
                                "ci": [0.5, 0.9]}}}},
        "rules": {"reflect": {"rows": 16, "metrics": {
            "reflect_correct": {"value": 0.5, "num": 8, "den": 16, "n_rows": 16, "ci": None}}}}}}
    lines = _evaluation({"heldout": summary, "note": {"judge": "none"}})
    assert lines[0].startswith("Set `heldout` (64 rows;")
    assert "| student | extract | extract_support | 0.7500 (9/12) | [0.5000, 0.9000] | 32 |" in lines
    assert "| rules | reflect | reflect_correct | 0.5000 (8/16) | – | 16 |" in lines
    assert "| `note.judge` | none |" in lines          # anything else is still shown


def test_card_says_when_nothing_was_evaluated():
    assert _evaluation(None)[0].startswith("Not evaluated yet")
