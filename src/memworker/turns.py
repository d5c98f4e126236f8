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

One turn per event that holds user words (every gold claim of the generated corpus cites a user
event last). A claim belongs to the latest event it quotes, so a turn's claims may quote earlier
events too, never later ones (each turn's dynamic schema offers the spans of events up to its
own). A claim whose latest quote holds no user words (an assistant's or a tool's words the user
takes up: 11 of the 1,264 gold claims of natural-train's train split) belongs to the first turn
after it (`turn_of`); a window with a claim after every turn (4 of them) is left out of training
in these forms.
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

**Sentences** (`asked(events, "sentences")`): the turns form with one turn per *sentence* of each
event that holds user words, the sentence quoted in the turn's line
(`Event [3], sentence 2: "…" Its claims.`). A claim belongs to the sentence of its latest event
that holds the end of its last quote from that event (`assign_sentence`). Why: the turns-form
student writes about one claim per answer whatever the message holds, so when a conversation comes
in fewer, longer messages it finds fewer facts (val, `eval/studies/restyle.py`: coverage 0.094 as
the corpus packs it, 0.024 with each day's messages merged; train/README "Longer messages"); the
rules, which read sentence by sentence, do not move. Asked per sentence, the same words give the
same questions however they are packed into messages. Sentences are split as `memworker.spans`
splits them (so a gold quote, a clause or a sentence, lies in one; a quote over several sentences,
such as a whole multi-sentence message, belongs to the last one it touches), and each turn's schema
still offers the spans of every event up to its own.

**Read once** (`history="none"`, issue 48 item 2): turn k's prompt is the window's prompt with
turn k's line alone, no earlier turn or answer (`once_messages`). Every turn's prompt then starts
with the same tokens, the window's, so a backend that keeps the longest common prompt prefix
keeps the window's cells from the first turn and evaluates only the new question; no answer's
cells, decoded one token at a time, are ever read back, so the answers are byte-identical to a
fresh evaluation of every prompt (tests/test_kv_prefix.py). Today's schedule
(`history="answers"`) re-reads each earlier answer, and keeping the cells its decoding left
changes answers (docs/research/inference-speed.md "Keeping the previous answer's KV cells").
A turn no longer sees what earlier turns claimed: the codec's no-claim-twice rule drops a repeat.
`HISTORIES`: "answers" (default), "none".

`FORMS`: the extraction forms a student can be trained and evaluated in — "window" (one call,
one answer), "turns", "walk", "sentences" (`train/run.py --extract-form`, `eval/run.py
--extract-form`); `TURN_FORMS`, those asked turn by turn (`codec.run_turns`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from memworker import wire
from memworker.prompts import relayout, render
from memworker.spans import sentence_offsets

#: the user message that opens each turn (the first is appended to the window's prompt)
TURN_TEMPLATE = "Event [{index}]: its claims."
#: the same in the sentences form (the sentence as the event holds it, in double quotes)
SENTENCE_TEMPLATE = 'Event [{index}], sentence {n}: "{text}" Its claims.'
#: the line the walk form appends to the window's prompt
WALK_LINE = ('Answer event by event, for each event with user words in order: '
             '{"events":[[event number,[its claims]],...]}')
FORMS = ("window", "turns", "walk", "sentences")
#: the forms asked one turn at a time
TURN_FORMS = ("turns", "sentences")
#: what a turn's prompt holds before its own question: every earlier turn with its answer
#: ("answers") or nothing, the window read once ("none")
HISTORIES = ("answers", "none")
#: which events a turn's claims may quote (`codec.run_turns(own_quotes=)`): "upto", its own and
#: the earlier ones; "own", its own only
TURN_QUOTES = ("upto", "own")


def _asking(prompt: list[dict[str, str]], line: str) -> list[dict[str, str]]:
    """The window's rendered prompt with `line` after its user message (a turn's question, the
    walk's instruction)."""
    return prompt[:-1] + [{"role": "user", "content": prompt[-1]["content"] + "\n\n" + line}]


class TurnsError(ValueError):
    """A row or answer that cannot be split into turns."""


class NoTurnError(TurnsError):
    """A claim whose latest quoted event comes after every event with user words: no turn can
    ask for it."""


def turn_events(events: list[dict[str, Any]]) -> list[int]:
    """The indices of the events that get a turn: those that hold user words, in order."""
    return [e["index"] for e in events if e["role"] == "user"]


def turn_line(index: int) -> str:
    return TURN_TEMPLATE.format(index=index)


@dataclass(frozen=True)
class Turn:
    """One question of a turns form: an event, and in the sentences form one of its sentences
    (`sentence`: its number from 1, `start`/`end`: its offsets in the event's text)."""

    event: int
    sentence: int | None = None
    text: str | None = None
    start: int = 0
    end: int = 0

    def line(self) -> str:
        if self.sentence is None:
            return turn_line(self.event)
        return SENTENCE_TEMPLATE.format(index=self.event, n=self.sentence, text=self.text)

    @property
    def label(self) -> str:
        """What the codec's diagnostics of this turn start with (before ": ")."""
        return (f"event {self.event}" if self.sentence is None
                else f"event {self.event} sentence {self.sentence}")


def asked(events: list[dict[str, Any]], form: str = "turns") -> list[Turn]:
    """The turns a window is asked in `form` ("turns": one per event with user words;
    "sentences": one per sentence of those events, an event without a sentence one turn of its
    whole text)."""
    if form == "turns":
        return [Turn(u) for u in turn_events(events)]
    if form != "sentences":
        raise TurnsError(f"{form!r} is not a form asked turn by turn ({', '.join(TURN_FORMS)})")
    out = []
    for e in events:
        if e["role"] != "user":
            continue
        pieces = sentence_offsets(e["text"]) or [(0, len(e["text"]))]
        out += [Turn(e["index"], n, e["text"][a:b], a, b) for n, (a, b) in enumerate(pieces, 1)]
    return out


def assign_sentence(claim: list[Any], turns: list[Turn], texts: dict[int, str]) -> int:
    """The position in `turns` (sentences form) of the turn a wire claim belongs to: the
    sentence of its latest quoted event that holds the end of its last quote from that event (a
    quote over several sentences belongs to the last it touches). Raises TurnsError when the
    event has no turn or the quote is not in its text."""
    last = latest_event(claim)
    events = sorted({t.event for t in turns})
    if last not in events:  # an event without user words: the first sentence of the next turn
        return [t.event for t in turns].index(turn_of(last, events))
    mine = [k for k, t in enumerate(turns) if t.event == last]
    text = texts.get(last, "")
    ends = []
    for quote, event in claim[0]:
        if int(event) == last:
            at = text.find(str(quote))
            if at < 0:
                raise TurnsError(f"quote {quote!r} is not in event {last}")
            ends.append(at + len(str(quote)))
    end = max(ends)
    held = [k for k in mine if turns[k].start < end]
    return held[-1] if held else mine[0]


def latest_event(claim: list[Any]) -> int:
    """The latest event a wire claim quotes."""
    try:
        return max(int(event) for _, event in claim[0])
    except (TypeError, ValueError, IndexError) as exc:
        raise TurnsError(f"a claim without quotes has no event: {claim!r}") from exc


def turn_of(last: int, turns: list[int]) -> int:
    """The turn (an event index in `turns`) a claim whose latest quoted event is `last` is asked
    in: that event's own turn, or, when it holds no user words (an assistant's or a tool's
    words that the user takes up: the hand-written sets have a few), the first turn after it,
    whose schema offers its spans. Raises NoTurnError when every turn comes before it."""
    later = [u for u in turns if u >= last]
    if not later:
        raise NoTurnError(f"a claim quotes event {last} last, after every event with user "
                          f"words (turns: {turns})")
    return later[0]


def split_claims(answer: dict[str, Any], turns: list[int]) -> list[dict[str, Any]]:
    """A whole-window wire extract answer -> one wire answer per turn (claims in their order,
    each in `turn_of` its latest quoted event). Raises NoTurnError when a claim has no turn."""
    per: dict[int, list[Any]] = {u: [] for u in turns}
    for claim in answer["claims"]:
        per[turn_of(latest_event(claim), turns)].append(claim)
    return [{"claims": per[u]} for u in turns]


def merge_claims(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """The turns' wire answers as one whole-window wire answer (turn order kept)."""
    return {"claims": [c for a in answers for c in a["claims"]]}


def split_sentences(answer: dict[str, Any], turns: list[Turn],
                    events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`split_claims` for the sentences form: one wire answer per sentence turn
    (`assign_sentence`)."""
    texts = {e["index"]: e["text"] for e in events}
    per: list[list[Any]] = [[] for _ in turns]
    for claim in answer["claims"]:
        per[assign_sentence(claim, turns, texts)].append(claim)
    return [{"claims": c} for c in per]


def messages(inputs: dict[str, Any], answers: list[str] | None = None,
             form: str = "turns", only: list[int] | None = None) -> list[dict[str, str]]:
    """Chat messages of a turns form (`TURN_FORMS`) with `answers` (assistant texts of turns
    0..k-1): the prompt of turn k (its user message last), or, when every turn has its answer,
    the whole conversation (training). `only` (turn indices, rising): the conversation holds
    those turns alone, in order, `answers` being theirs (a worker that leaves the turns it does
    not ask out of the prompt, `codec.run_turns(tail="omit")`)."""
    turns = asked(inputs["events"], form)
    if not turns:
        raise TurnsError("no event holds user words: there is no turn to ask")
    if only is not None:
        if not only or sorted(set(only)) != list(only) or not 0 <= only[0] <= only[-1] < len(turns):
            raise TurnsError(f"turns {only}: rising indices of the {len(turns)} turns")
        turns = [turns[k] for k in only]
    given = list(answers or [])
    if len(given) > len(turns):
        raise TurnsError(f"{len(given)} answers for {len(turns)} turns")
    out = _asking(render("extract", inputs), turns[0].line())
    for k, text in enumerate(given):
        out.append({"role": "assistant", "content": text})
        if k + 1 < len(turns):
            out.append({"role": "user", "content": turns[k + 1].line()})
    return out


def once_messages(inputs: dict[str, Any], k: int, form: str = "turns") -> list[dict[str, str]]:
    """The prompt of turn k read once (`history="none"`): the window's extract prompt and turn
    k's line, no earlier turn."""
    turns = asked(inputs["events"], form)
    if not 0 <= k < len(turns):
        raise TurnsError(f"turn {k} of {len(turns)}")
    return _asking(render("extract", inputs), turns[k].line())


def training_messages(inputs: dict[str, Any], answer: dict[str, Any],
                      form: str = "turns", ask: list[bool] | None = None
                      ) -> list[dict[str, str]]:
    """The training conversation of one window: every turn with its gold answer. `ask` (the
    turns form, one flag per turn, at least one true): the conversation of a worker that asks
    only those turns with `codec.run_turns(tail="omit")`: the window up to the last asked turn's
    event, the asked turns alone with their gold answers (an unasked turn's gold is not in it)."""
    turns = asked(inputs["events"], form)
    if not turns:
        raise TurnsError("no event holds user words: there is no turn to ask")
    parts = (split_claims(answer, [t.event for t in turns]) if form == "turns"
             else split_sentences(answer, turns, inputs["events"]))
    texts = [wire.dump_answer("extract", a) for a in parts]
    if ask is None:
        return messages(inputs, texts, form)
    if form != "turns" or len(ask) != len(turns) or not any(ask):
        raise TurnsError(f"ask: {len(ask)} flags for {len(turns)} turns of the turns form, one "
                         "of them true")
    only = [k for k, a in enumerate(ask) if a]
    return messages(shown_asked(inputs, ask, form), [texts[k] for k in only], form, only)


def shown_upto(inputs: dict[str, Any], event: int) -> dict[str, Any]:
    """An extract request's inputs as the window ending at event `event` (its events up to and
    including that one): what a worker that asks no later turn shows (`codec.run_turns(tail=)`)."""
    at = next(i for i, e in enumerate(inputs["events"]) if e["index"] == event)
    return {**inputs, "events": inputs["events"][:at + 1]}


def shown_asked(inputs: dict[str, Any], ask: list[bool], form: str = "turns") -> dict[str, Any]:
    """`shown_upto` the event of the last turn `ask` flags (one flag per turn of `form`, at least
    one true): the window a worker asking those turns with a tail dropped or omitted shows."""
    turns = asked(inputs["events"], form)
    return shown_upto(inputs, turns[max(k for k, a in enumerate(ask) if a)].event)


def read_once_rows(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A turns-form training row (`to_form_row`: system, the window's prompt with the first
    turn's line, then answer, line, answer, ...) as one row per turn read once: turn k's row is
    the window's prompt with turn k's line alone and turn k's answer (`once_messages`, the prompt
    the codec sends with `history="none"`). Each keeps the window's id under "window" (a batch
    of one window's turns shares the window's tokens: `memworker.train.data`) and gets the id
    `<window id>#<k>`. Other tasks' rows come back as they are, alone."""
    if row.get("task") != "extract":
        return [row]
    messages = row["messages"]
    if len(messages) < 3 or messages[0]["role"] != "system" or messages[1]["role"] != "user" \
            or [m["role"] for m in messages[2:]] != ["assistant", "user"] * \
            ((len(messages) - 3) // 2) + ["assistant"]:
        raise TurnsError(f"row {row.get('id', '?')}: not a turns-form conversation")
    answers = [m["content"] for m in messages[2::2]]
    lines = [messages[1]["content"].rpartition("\n\n")[2]] + [m["content"]
                                                                for m in messages[3::2]]
    window = messages[1]["content"].rpartition("\n\n")[0]
    if not window or any(not line.startswith("Event [") for line in lines):
        raise TurnsError(f"row {row.get('id', '?')}: its turns are not asked by event")
    prompt = [messages[0], {"role": "user", "content": window}]
    return [{**row, "id": f"{row.get('id', '?')}#{k}", "window": row.get("id", "?"),
             "messages": _asking(prompt, line) + [{"role": "assistant", "content": answer}]}
            for k, (line, answer) in enumerate(zip(lines, answers, strict=True))]


def layout_row(row: dict[str, Any], layout: str) -> dict[str, Any]:
    """A training row of a turns form with its extract answers and prompt in claim layout
    `layout` (`memworker.wire.LAYOUTS`): each assistant answer rewritten by
    `wire.dump_layout` (v6: no quotes, the trailing defaults left out) and the prompt's claim
    lines by `prompts.relayout`. Other tasks' rows, and every row in v3, come back as they are."""
    if wire.check_layout(layout) == "v3" or row.get("task") != "extract":
        return row
    out = []
    for m in relayout(row["messages"], layout):
        if m["role"] == "assistant":
            m = {**m, "content": wire.dump_layout("extract", json.loads(m["content"]), layout)}
        out.append(m)
    return {**row, "messages": out}


# --- the walk (design (b)) ----------------------------------------------------------------------

def walk_messages(inputs: dict[str, Any]) -> list[dict[str, str]]:
    """The prompt of the walk form: the window's extract prompt and `WALK_LINE`."""
    return _asking(render("extract", inputs), WALK_LINE)


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


def to_form_row(row: dict[str, Any], inputs: dict[str, Any], form: str,
                ask: list[bool] | None = None) -> dict[str, Any] | None:
    """A wire training row (messages: system, user, assistant) in an extraction form (`FORMS`),
    given the window's canonical inputs; other tasks' rows unchanged; None for a window without a
    user event in the turns and walk forms (nothing to ask: its gold must be empty, checked).
    `ask` (turns form): `training_messages(ask=)`, None when no flag is true (nothing asked)."""
    if form not in FORMS:
        raise TurnsError(f"unknown extraction form {form!r}; forms: {', '.join(FORMS)}")
    if ask is not None and form != "turns":
        raise TurnsError(f"asking some turns only is built for the turns form, not {form!r}")
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
    if ask is not None and not any(ask):
        return None
    if form in TURN_FORMS:
        return {**row, "messages": training_messages(inputs, answer, form, ask)}
    return {**row, "messages": walk_messages(inputs) + [
        {"role": "assistant", "content": dump_walk(walk_answer(answer, asked))}]}

