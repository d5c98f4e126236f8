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

**The walk** (design (b) of the issue, `walk_*`): one call per window whose answer walks the
events that hold user words in order, `{"events":[[0,[claims]],[2,[]],...]}`; the grammar writes
each event's index (a `const` in the request's schema), the model only its claims (quotes up to
that event). One generation, the prompt of the one-call form plus one line; training tokens as
the one-call form (answers a median 233 tokens instead of 203). The codec flattens the walk into
the one-call answer (`walk_claims`) and decodes that (`codec.run_walk`).

`FORMS`: the extraction forms a student can be trained and evaluated in — "window" (one call,
one answer), "turns", "walk" (`train/run.py --extract-form`, `eval/run.py --extract-form`).
"""

from __future__ import annotations

import json
from typing import Any

from memworker import wire
from memworker.prompts import render

#: the user message that opens each turn (the first is appended to the window's prompt)
TURN_TEMPLATE = "Event [{index}]: its claims."
#: the line the walk form appends to the window's prompt
WALK_LINE = ('Answer event by event, for each event with user words in order: '
             '{"events":[[event number,[its claims]],...]}')
FORMS = ("window", "turns", "walk")


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


# --- the walk (design (b)) ----------------------------------------------------------------------

def walk_messages(inputs: dict[str, Any]) -> list[dict[str, str]]:
    """The prompt of the walk form: the window's extract prompt and `WALK_LINE`."""
    out = render("extract", inputs)
    out[-1] = {"role": "user", "content": out[-1]["content"] + "\n\n" + WALK_LINE}
    return out


def walk_answer(answer: dict[str, Any], turns: list[int]) -> dict[str, Any]:
    """A whole-window wire extract answer as a walk: [[event, [claims]], ...] per turn."""
    return {"events": [[u, part["claims"]] for u, part in zip(turns, split_claims(answer, turns),
                                                               strict=True)]}


def dump_walk(walk: dict[str, Any]) -> str:
    """The exact text of a walk answer (compact separators, as the grammar writes it)."""
    return json.dumps({"events": [[u, [wire.pack_claim(wire.unpack_claim(c)) for c in claims]]
                                  for u, claims in walk["events"]]},
                      ensure_ascii=False, separators=wire.SEPARATORS)


def walk_claims(walk: Any, turns: list[int]) -> dict[str, Any]:
    """A walk answer -> the one-call wire answer (claims in walk order). Raises TurnsError when
    it is not a walk of exactly these events in order, or a claim quotes a later event than the
    one it is listed under."""
    if not isinstance(walk, dict) or set(walk) != {"events"} or \
            not isinstance(walk["events"], list):
        raise TurnsError('a walk answer is {"events":[[event,[claims]],...]}')
    steps = walk["events"]
    if [s[0] if isinstance(s, list) and len(s) == 2 else None for s in steps] != turns:
        raise TurnsError(f"a walk lists the events {turns} in order, each as [event,[claims]]")
    claims = []
    for u, part in steps:
        if not isinstance(part, list):
            raise TurnsError(f"event {u}: its claims are not an array")
        for claim in part:
            if latest_event(claim) > u:
                raise TurnsError(f"event {u}: a claim quotes the later event "
                                 f"{latest_event(claim)}")
            claims.append(claim)
    return {"claims": claims}


def walk_field_starts(text: str) -> list[tuple[int, str, bool]]:
    """`memworker.wire.field_starts` of a walk answer's text: each event's claims as the one-call
    answer's (the event indices are the grammar's, no field of the model's). Raises ValueError
    when the text is not exactly what `dump_walk` writes."""
    walk = json.loads(text)
    if dump_walk(walk) != text:
        raise ValueError("not the exact text dump_walk writes for this answer")
    out: list[tuple[int, str, bool]] = []
    at = len('{"events":[')
    for n, (u, claims) in enumerate(walk["events"]):
        at += (1 if n else 0) + len(f"[{u},")
        part = wire.dump_answer("extract", {"claims": claims})
        shift = at - len('{"claims":')
        out += [(c + shift, name, is_list) for c, name, is_list in wire.field_starts(part)]
        at += len(part) - len('{"claims":')  # the claims array ("}" dropped), then "]"
    return out


def to_form_row(row: dict[str, Any], inputs: dict[str, Any], form: str) -> dict[str, Any] | None:
    """A wire training row (messages: system, user, assistant) in an extraction form (`FORMS`),
    given the window's canonical inputs; other tasks' rows unchanged; None for a window without a
    user event in the turns and walk forms (nothing to ask: its gold must be empty, checked)."""
    if form not in FORMS:
        raise TurnsError(f"unknown extraction form {form!r}; forms: {', '.join(FORMS)}")
    if form == "window" or row["task"] != "extract":
        return row
    answer = json.loads(row["messages"][-1]["content"])
    asked = turn_events(inputs["events"])
    if not asked:
        if answer["claims"]:
            raise TurnsError(f"row {row.get('id', '?')}: claims but no event with user words")
        return None
    if render("extract", inputs) != row["messages"][:2]:
        raise TurnsError(f"row {row.get('id', '?')}: its prompt is not the one its inputs "
                         "render (canonical and wire rows of different corpora?)")
    if form == "turns":
        return {**row, "messages": training_messages(inputs, answer)}
    return {**row, "messages": walk_messages(inputs) + [
        {"role": "assistant", "content": dump_walk(walk_answer(answer, asked))}]}

