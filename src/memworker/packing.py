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

import copy
from typing import Any

from memworker import turns
from memworker.corpus.build import wire_row


def _mergeable(event: dict[str, Any]) -> bool:
    return event["role"] == "user" and event.get("trusted", True)


def _day(event: dict[str, Any]) -> str:
    return event["timestamp"][:10]


def merge_row(row: dict[str, Any]) -> dict[str, Any] | None:
    """The extract `row` with each same-day run of trusted user messages (assistant replies
    between them left out) merged into one message, every index in its input, gold and truth
    renumbered; None when nothing merges (the row would be the same)."""
    events = row["input"]["events"]
    groups: list[list[int]] = []      # event positions kept, a merged message's members together
    open_group: list[int] | None = None
    for pos, event in enumerate(events):
        run_day = _day(events[open_group[0]]) if open_group is not None else None
        if _mergeable(event):
            if _day(event) == run_day:
                open_group.append(pos)
                continue
            open_group = [pos]
            groups.append(open_group)
            continue
        following = events[pos + 1] if pos + 1 < len(events) else None
        if (event["role"] == "assistant" and following is not None and _mergeable(following)
                and _day(following) == run_day):
            continue                  # a reply inside a run (a same-day user message next)
        open_group = None
        groups.append([pos])
    if len(groups) == len(events):    # a reply is left out only where a message joins a run
        return None
    new_index: dict[int, int] = {}
    merged_events = []
    for k, group in enumerate(groups):
        first = dict(events[group[0]])
        first["text"] = " ".join(events[p]["text"] for p in group)
        first["index"] = k
        merged_events.append(first)
        for p in group:
            new_index[events[p]["index"]] = k
    out = copy.deepcopy(row)
    out["input"]["events"] = merged_events

    def renumber(item: dict[str, Any]) -> None:
        if "source_indices" in item:
            item["source_indices"] = [new_index[i] for i in item["source_indices"]]

    for claim in out["gold"].get("claims", []):
        renumber(claim)
    for fact in (out.get("truth") or {}).get("facts", []):
        renumber(fact)
    return out


def chosen(row_id: str, share: float) -> bool:
    """Whether a window is in a `share` of the rows, by its id's sha256 (stable across runs)."""
    import hashlib

    return int(hashlib.sha256(row_id.encode("utf-8")).hexdigest()[:8], 16) < share * 0x100000000


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
