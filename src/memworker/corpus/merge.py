"""Merging a day's user messages into one (`merge_row`) and choosing a share of rows by id
(`chosen`): used by `memworker.packing` (training and the restyle study) and by the re-voiced
generator (`memworker.corpus.voice`). `memworker.packing`'s docstring says what a merge does."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Collection
from typing import Any


def _mergeable(event: dict[str, Any]) -> bool:
    return event["role"] == "user" and event.get("trusted", True)


def _day(event: dict[str, Any]) -> str:
    return event["timestamp"][:10]


def merge_row(row: dict[str, Any], apart: Collection[int] = ()) -> dict[str, Any] | None:
    """The extract `row` with each same-day run of trusted user messages (assistant replies
    between them left out) merged into one message, every index in its input, gold and truth
    renumbered; None when nothing merges (the row would be the same). A user message whose
    index is in `apart` starts a run of its own (the messages after it may join it)."""
    events = row["input"]["events"]
    groups: list[list[int]] = []      # event positions kept, a merged message's members together
    open_group: list[int] | None = None
    for pos, event in enumerate(events):
        run_day = _day(events[open_group[0]]) if open_group is not None else None
        if _mergeable(event):
            if _day(event) == run_day and event["index"] not in apart:
                open_group.append(pos)
                continue
            open_group = [pos]
            groups.append(open_group)
            continue
        following = events[pos + 1] if pos + 1 < len(events) else None
        if (event["role"] == "assistant" and following is not None and _mergeable(following)
                and _day(following) == run_day and following["index"] not in apart):
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
    return int(hashlib.sha256(row_id.encode("utf-8")).hexdigest()[:8], 16) < share * 0x100000000
