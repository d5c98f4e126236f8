"""Extraction one event at a time, as a conversation (issue 25 item 2; train/README "E17").

A whole-window extract answer is one long sequence of decisions (wire v3: median 203 tokens on
the train split) in which one wrong token derails what follows. In the *turns* form the window
is shown once, as in the one-call form, and the codec then asks for one event at a time:

    system: (our system prompt)
    user:   (the extract prompt of the window) + "\\n\\nEvent [u0]: its claims."
    assistant: {"claims":[...]}          <- the claims whose latest quote is from event u0
    user:   Event [u1]: its claims.
    assistant: {"claims":[]}
    ...

One turn per event that holds user words (every gold claim of the corpus cites a user event
last). A claim belongs to the latest event it quotes, so a turn's claims may quote earlier events
too, never later ones (each turn's dynamic schema offers the spans of events up to its own).
Each answer is short and local (train split: 57 % of the turns are empty; the others a median 52
answer tokens) and the model sees the events after the one it is asked about, so a fact that a
later event corrects is not claimed from the earlier event (the gold has no claim there).

Training sees one row per window with every turn (answer-only loss on each assistant turn:
`memworker.train.data.encode_chat`): the window is encoded once, not once per event (design (a)
of the issue repeated it in every call: 4,169 training tokens per window against 1,065).
Inference reuses the key/value state of everything before the new turn (llama.cpp keeps the
longest common token prefix with the previous prompt), so the window is processed once too. The
store still gets one extract result per window: `memworker.inference.codec.run_turns` merges the
turns' claims and decodes them as one answer (the no-claim-twice rule drops a repeat across
turns).
"""

from __future__ import annotations

import json
from typing import Any

from memworker import wire
from memworker.prompts import render

#: the user message that opens each turn (the first is appended to the window's prompt)
TURN_TEMPLATE = "Event [{index}]: its claims."


class TurnsError(ValueError):
    """A row or answer that cannot be split into turns."""


def turn_events(events: list[dict[str, Any]]) -> list[int]:
    """The indices of the events that get a turn: those that hold user words, in order."""
    return [e["index"] for e in events if e["role"] == "user"]


def turn_line(index: int) -> str:
    return TURN_TEMPLATE.format(index=index)


def latest_event(claim: list[Any]) -> int:
    """The latest event a wire claim quotes."""
    try:
        return max(int(event) for _, event in claim[0])
    except (TypeError, ValueError, IndexError) as exc:
        raise TurnsError(f"a claim without quotes has no event: {claim!r}") from exc


def split_claims(answer: dict[str, Any], turns: list[int]) -> list[dict[str, Any]]:
    """A whole-window wire extract answer -> one wire answer per turn (claims in their order).
    Raises TurnsError when a claim's latest quoted event has no turn."""
    per: dict[int, list[Any]] = {u: [] for u in turns}
    for claim in answer["claims"]:
        last = latest_event(claim)
        if last not in per:
            raise TurnsError(f"a claim quotes event {last} last, which holds no user words "
                             f"(turns: {turns})")
        per[last].append(claim)
    return [{"claims": per[u]} for u in turns]


def merge_claims(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """The turns' wire answers as one whole-window wire answer (turn order kept)."""
    return {"claims": [c for a in answers for c in a["claims"]]}


def messages(inputs: dict[str, Any], answers: list[str] | None = None) -> list[dict[str, str]]:
    """Chat messages of the turns form with `answers` (assistant texts of turns 0..k-1): the
    prompt of turn k (its user message last), or, when every turn has its answer, the whole
    conversation (training)."""
    turns = turn_events(inputs["events"])
    if not turns:
        raise TurnsError("no event holds user words: there is no turn to ask")
    given = list(answers or [])
    if len(given) > len(turns):
        raise TurnsError(f"{len(given)} answers for {len(turns)} turns")
    out = render("extract", inputs)
    out[-1] = {"role": "user", "content": out[-1]["content"] + "\n\n" + turn_line(turns[0])}
    for k, text in enumerate(given):
        out.append({"role": "assistant", "content": text})
        if k + 1 < len(turns):
            out.append({"role": "user", "content": turn_line(turns[k + 1])})
    return out


def training_messages(inputs: dict[str, Any], answer: dict[str, Any]) -> list[dict[str, str]]:
    """The training conversation of one window: every turn with its gold answer."""
    turns = turn_events(inputs["events"])
    if not turns:
        raise TurnsError("no event holds user words: there is no turn to ask")
    texts = [wire.dump_answer("extract", a) for a in split_claims(answer, turns)]
    return messages(inputs, texts)


def to_turns_row(row: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any] | None:
    """A wire extract training row (messages: system, user, assistant) in the turns form, given
    the window's canonical inputs; None for a window without a user event (nothing to ask:
    its gold must be empty, checked). Other tasks' rows are returned unchanged."""
    if row["task"] != "extract":
        return row
    answer = json.loads(row["messages"][-1]["content"])
    if not turn_events(inputs["events"]):
        if answer["claims"]:
            raise TurnsError(f"row {row.get('id', '?')}: claims but no event with user words")
        return None
    if render("extract", inputs) != row["messages"][:2]:
        raise TurnsError(f"row {row.get('id', '?')}: its prompt is not the one its inputs "
                         "render (canonical and wire rows of different corpora?)")
    return {**row, "messages": training_messages(inputs, answer)}
