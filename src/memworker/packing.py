"""Conversation packing: the same conversation in fewer, longer messages.

The corpus writes a user's news as several short messages with assistant replies between them;
people often write one long message instead (the hand-written natural set does). `merge_row`
rewrites an extract row so that each run of trusted user messages on one calendar day, with only
assistant replies between them, becomes one message: their texts joined in order with a space,
at the first one's time; the assistant replies inside the run are left out; tool output,
untrusted text and other days stay as they were. Every gold claim and world-state fact keeps its
quotes (still exact spans of the merged message) and points to the merged message's index; the
facts to find do not change. Used by `eval/studies/restyle.py` (the design set: val rows rewritten)
and by training (`merged_days`: a share of the train windows also trained merged; train/README
"Longer messages").
"""

from __future__ import annotations

from typing import Any

from memworker import turns
from memworker.corpus.build import wire_row
from memworker.corpus.merge import chosen, merge_row

__all__ = ["chosen", "merge_row", "training_row"]


def training_row(canonical: dict[str, Any], form: str) -> dict[str, Any] | None:
    """The wire training row (chat messages) of an extract window with each day's user messages
    merged (`merge_row`), as the corpus writes a row (`corpus.build.wire_row`) and training puts
    it in its extraction form (`turns.to_form_row`); None when nothing merges. Its id is the
    window's with "+merged"."""
    merged = merge_row(canonical)
    if merged is None:
        return None
    row = {**wire_row(merged), "id": canonical["id"] + "+merged"}
    return turns.to_form_row(row, merged["input"], form)
