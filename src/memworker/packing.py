"""Conversation packing: the same conversation in fewer, longer messages.

The corpus writes a user's news as several short messages with assistant replies between them;
people often write one long message instead (the hand-written natural set does). `merge_row`
rewrites an extract row so that each run of trusted user messages on one calendar day, with only
assistant replies between them, becomes one message: their texts joined in order with a space,
at the first one's time; the assistant replies inside the run are left out; tool output,
untrusted text and other days stay as they were. Every gold claim and world-state fact keeps its
quotes (still exact spans of the merged message) and points to the merged message's index; the
facts to find do not change. Used by `eval/restyle.py` (the design set: val rows rewritten) and
by training (`merged_days`: a share of the train windows also trained merged; train/README
"Longer messages").
"""

from __future__ import annotations

import copy
from typing import Any


def _mergeable(event: dict[str, Any]) -> bool:
    return event["role"] == "user" and event.get("trusted", True)


def merge_row(row: dict[str, Any]) -> dict[str, Any] | None:
    """The extract `row` with each same-day run of trusted user messages (assistant replies
    between them left out) merged into one message, every index in its input, gold and truth
    renumbered; None when nothing merges (the row would be the same)."""
    events = row["input"]["events"]
    groups: list[list[int]] = []      # event positions kept, a merged message's members together
    open_group: list[int] | None = None
    for pos, event in enumerate(events):
        day = event["timestamp"][:10]
        if _mergeable(event):
            if open_group is not None and events[open_group[0]]["timestamp"][:10] == day:
                open_group.append(pos)
                continue
            open_group = [pos]
            groups.append(open_group)
        elif event["role"] == "assistant" and open_group is not None and any(
                _mergeable(e) and e["timestamp"][:10] == events[open_group[0]]["timestamp"][:10]
                for e in events[pos + 1:pos + 2]):
            continue                  # a reply inside a run (a same-day user message next)
        else:
            open_group = None
            groups.append([pos])
    if all(len(g) == 1 for g in groups) and len(groups) == len(events):
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
    merged (`merge_row`), in the window or turns form (`memworker.turns`); None when nothing
    merges. Its id is the window's with "+merged"."""
    from memworker import turns, wire
    from memworker.prompts import render

    merged = merge_row(canonical)
    if merged is None:
        return None
    inputs, answer = merged["input"], wire.to_wire("extract", merged["gold"])
    if form == "turns":
        messages = turns.training_messages(inputs, answer)
    elif form == "window":
        messages = render("extract", inputs) + [
            {"role": "assistant", "content": wire.dump_answer("extract", answer)}]
    else:
        raise ValueError(f"merged windows are trained in the window or turns form, not {form!r}")
    keep = ("behaviours", "domain", "episode", "family", "split", "task")
    return {**{k: canonical[k] for k in keep if k in canonical},
            "id": canonical["id"] + "+merged", "messages": messages}
