"""`python eval/studies/wire_cost.py`: what candidate extract wires and reading schedules of the
turns form would cost a worker, measured on gold answers before anyone changes the wire (issue 48
items 1 and 3: "A worker that answers a window in under 3 seconds on 2 cores"). No model runs:
the embedded SmolLM2 tokenizer only (`memworker.corpus.tokens`, as the corpus counts its rows).

Every extract window of the set is asked in the turns form (`memworker.turns`: the window once,
then one user turn per event with user words), its gold claims converted to the wire and split
into the turns (`turns.split_claims`) standing for the model's answers. Per window, medians and
p90 over windows of:

1. **Prompt tokens read beyond the cached instructions.** The cached instructions are the tokens
   of the rendered prompt before the window's own content: the system message and the extract
   template up to its first placeholder (`Existing facts:` and its line end), the same for every
   window, the part the prefix cache (`memworker.inference.kv_prefix`) keeps across windows (it
   may keep a few tokens more where two windows happen to agree further). Three schedules:
   (a) today's: each turn's prompt holds the turns before it, and the prefix cache cuts the
   answer just decoded out of the context, so each turn reads again the previous answer, its end
   token and the next question (docs/research/inference-speed.md "Keeping the previous answer's
   KV cells"); (b) read once, the answers' cells kept: each turn reads only the previous answer's
   end token (sampled, never evaluated), the chat scaffolding and its question; (c) read once,
   turns that do not show the previous answers: each turn's prompt is the window with its own
   question, the cache rolled back to the end of the window (the end of its events) before each
   turn. Token counts are those of the full prompt texts, as llama.cpp tokenizes them: a turn
   reads what its prompt's tokens hold beyond the longest prefix the context already has.
2. **Answer tokens written**, every turn's `{"claims":[...]}` and its end token `<|im_end|>`,
   for four wires: `v3` (today's: `[quotes, name, type, predicate, value, kind,
   time_expression, supersedes]`, quotes `[[span, event], ...]`); `v5a` (the same fields,
   predicate and value first: `[predicate, value, name, type, kind, quotes, time_expression,
   supersedes]`); `v5b` (v5a with each quote written as a reference `[event, sentence]`, the
   sentence numbered from 1 as `spans.sentence_offsets` splits the event's text (as the
   sentences form numbers them); a quote over several sentences is one reference per sentence
   it touches; two quotes of a claim in one sentence are one reference); `v5c` (v5b with the
   subject's name and type null when the subject is the user: the codec would write "the user",
   "person", as the gold always has it); `v5d` (the shortest: `[predicate, value, sentence
   references, name, type, kind, time_expression, supersedes]` with the trailing fields left
   out while each is at its default, as `wire.pack_v6` leaves them out (`wire.V6_DEFAULTS`:
   "the user", "person", "fact", null, `[]`), so a fact about the user with no time is
   `[predicate, value, refs]`; the codec would fill them back); `v6` (v5d with no quote at all: the codec would choose the quoted sentence of
   the turn's event itself, `spans.choose_sentence`, from the claim's value, subject and
   predicate). Per claim: its tokens and the tokens before the token
   that holds the value's first character (where the gate's score `first(predicate)+
   first(value)` is known, once that token is written; `eval/studies/confidence.py
   --early-stop` counts that token too, one more); the reference "window form" is the one-call
   answer.
3. **Whether the quote can be chosen instead of copied**: each gold quote is a whole sentence,
   lies inside one, or spans several; whole sentences that are not candidate spans
   (`spans.candidate_spans`: at most 40 spans an event, 3-600 characters, no credential); and
   the real test: every gold quote replaced by its sentence(s) (one quote per sentence touched),
   the answer put through the codec (`codec.verify_canonical`; a claim whose sentence quote is
   not a candidate span is left out, the codec would reject the answer) and graded by the
   evaluator's grader (`runner.grade_sample`) beside the unchanged gold graded the same way.

Printed: a markdown table per part with issue 48's per-window targets beside the figures (≤ 700
prompt tokens beyond the cached instructions and ≤ 100 answer tokens in the median window), and
an estimate of the seconds a window would take at release v3's measured rates (arithmetic, not a
measurement: `PROMPT_TOK_S`, `DECODE_S`).

    python eval/studies/wire_cost.py --set val --corpus data/corpus --json /tmp/wire_cost_val.json
    python eval/studies/wire_cost.py --set natural-dev --limit 20
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import re
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from memworker import prompts, spans, turns, wire
from memworker.corpus import tokens as corpus_tokens
from memworker.corpus.sets import HAND_WRITTEN, load_eval_rows
from memworker.eval.runner import EvalError, grade_sample
from memworker.inference import codec

SETS = ("val", "natural-dev")
DEFAULT_CORPUS = {"val": "data/corpus", "natural-dev": HAND_WRITTEN["natural-dev"]}
WIRES = ("v3", "v5a", "v5b", "v5c", "v5d", "v6")
SCHEDULES = ("a", "b", "c")
SCHEDULE_HELP = {
    "a": "(a) today's: each turn reads the previous answer again",
    "b": "(b) read once, the answers' cells kept",
    "c": "(c) read once, turns without the previous answers",
}
#: issue 48's per-window targets (median window)
TARGETS = {"prompt": 700, "answer": 100}
#: release v3's measured rates (docs/research/inference-speed.md "Where the worker's time goes"):
#: prompt tokens per second, seconds per written token
PROMPT_TOK_S = 346.0
DECODE_S = 0.0151
END = "<|im_end|>"
USER = "the user"
WRITTEN_END = 1  # the end token <|im_end|> each turn's answer closes with
#: an event line's timestamp in the extract prompt (`[3] 2024-07-21T18:55:05+05:30 user: ...`)
EVENT_STAMP = re.compile(r"^(\[\d+\]) (\d{4}-\d\d-\d\d)T(\d\d:\d\d):\d\d(?:Z|[+-]\d\d:\d\d) ",
                         re.M)
#: how the timestamps of the window's events could be written instead (`stamped`)
STAMPS = {"minute": r"\1 \2 \3 ", "date": r"\1 \2 ", "none": r"\1 "}
STAMP_HELP = {"minute": "to the minute, no offset", "date": "as the date alone", "none": "left out"}


# --- the wires ------------------------------------------------------------------------------------

def sentence_pieces(text: str) -> list[tuple[int, int]]:
    """The sentences of an event's text as `turns.asked` numbers them (from 1): its
    `sentence_offsets`, or the whole text as one when it has none."""
    return spans.sentence_offsets(text) or [(0, len(text))]


def quote_sentences(quote: str, text: str) -> tuple[list[int], str]:
    """(the numbers, from 1, of the sentences of `text` that the first occurrence of `quote`
    touches, its class): "sentence" (exactly one whole sentence), "inside" (within one sentence,
    not all of it), "several" (touches more than one), "none" (not in the text)."""
    at = text.find(quote)
    if at < 0 or not quote:
        return [], "none"
    end = at + len(quote)
    pieces = sentence_pieces(text)
    touched = [n for n, (a, b) in enumerate(pieces, 1) if a < end and b > at]
    if not touched:
        return [], "none"
    if len(touched) > 1:
        return touched, "several"
    a, b = pieces[touched[0] - 1]
    return touched, "sentence" if (a, b) == (at, end) else "inside"


def sentence_refs(quotes: list[list[Any]], texts: dict[int, str]) -> list[list[int]]:
    """A v3 claim's quotes `[[span, event], ...]` as v5b references `[[event, sentence], ...]`:
    one per sentence a quote touches, each once, in order."""
    out: list[list[int]] = []
    for quote, event in quotes:
        touched, _ = quote_sentences(quote, texts[event])
        for n in touched:
            if [event, n] not in out:
                out.append([event, n])
    return out


def claim_fields(claim: list[Any], form: str, texts: dict[int, str]) -> list[tuple[str, Any]]:
    """A v3 wire claim (array) as the (field, value) items of wire `form`, in its order."""
    if form not in WIRES:
        raise ValueError(f"unknown wire {form!r}; wires: {', '.join(WIRES)}")
    if form == "v3":
        return list(zip(wire.CLAIM_FIELDS, claim, strict=True))
    quotes, name, stype, predicate, value, kind, expr, supersedes = claim
    if form in ("v5b", "v5c", "v5d"):
        quotes = sentence_refs(quotes, texts)
    if form == "v5c" and name == USER:
        name = stype = None
    if form in ("v5d", "v6"):  # v6's fields as the model writes them, v5d with references
        fields = list(zip(wire.V6_FIELDS, wire.pack_v6(wire.unpack_claim(claim)),
                          strict=False))
        refs = [("quotes", quotes)] if form == "v5d" else []
        return [*fields[:2], *refs, *fields[2:]]
    return [("predicate", predicate), ("value", value), ("name", name), ("type", stype),
            ("kind", kind), ("quotes", quotes), ("time_expression", expr),
            ("supersedes", supersedes)]


def dump_claims(claims: list[list[tuple[str, Any]]]) -> tuple[str, list[tuple[int, int, int]]]:
    """The text of an answer `{"claims":[...]}` holding these claims (compact separators, as
    `wire.dump_answer` writes a v3 answer) and per claim the character offsets (start of its
    "[", its value's first character (after a string's opening quote), its end)."""
    text = '{"claims":['
    offsets = []
    for n, fields in enumerate(claims):
        text += "," if n else ""
        start, value_at = len(text), None
        text += "["
        for k, (field, value) in enumerate(fields):
            text += "," if k else ""
            if field == "value":
                value_at = len(text) + isinstance(value, str)
            text += json.dumps(value, ensure_ascii=False, separators=wire.SEPARATORS)
        text += "]"
        offsets.append((start, value_at, len(text)))
    return text + "]}", offsets


def stamped(text: str, how: str) -> str:
    """`text` (a rendered extract prompt) with its events' timestamps written as `how` says
    (`STAMPS`: to the minute without the UTC offset, the date alone, or none)."""
    return EVENT_STAMP.sub(STAMPS[how], text)


# --- counting -------------------------------------------------------------------------------------

def encode(texts: list[str]) -> list[list[int]]:
    """Token ids of each text with the embedded base's tokenizer (special tokens as such)."""
    if not texts:
        return []
    return corpus_tokens.tokenizer()(texts, add_special_tokens=False)["input_ids"]


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def cached_text() -> str:
    """The rendered chat before a window's own content: the system message and the extract
    template up to its first placeholder, as ChatML (the same for every window)."""
    head = prompts.template("EXTRACT").split("{{", 1)[0]
    chat = prompts.to_chatml([{"role": "system", "content": prompts.system_prompt()},
                              {"role": "user", "content": head}], add_generation_prompt=False)
    return chat[:-len(END + "\n")]


def _claim_tokens(text: str, offsets: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """(tokens of the claim, tokens before the one holding the value's first character) per
    claim of an answer text (its tokens counted in the whole answer, as the model writes it)."""
    tok = corpus_tokens.tokenizer()
    pieces = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    ends = [b for _, b in pieces]

    def holding(char: int) -> int:  # the token holding a character: the first ending beyond it
        return bisect.bisect_right(ends, char)

    return [(holding(end - 1) - holding(start) + 1, holding(value) - holding(start))
            for start, value, end in offsets]


class NoTurns(ValueError):
    """A window the turns form does not ask; its message is the reason (no event with user
    words, or a claim after every turn)."""


def window_figures(row: dict[str, Any], cached_ids: list[int]) -> dict[str, Any]:
    """The figures of one extract window (see the module docstring)."""
    inputs = row["input"]
    events = inputs["events"]
    texts = {e["index"]: e["text"] for e in events}
    asked = turns.turn_events(events)
    if not asked:
        raise NoTurns("no event with user words")
    v3 = wire.to_wire("extract", row["gold"])
    try:
        parts = turns.split_claims(v3, asked)
    except turns.NoTurnError:
        raise NoTurns("a claim after every turn") from None
    answers: dict[str, list[str]] = {}
    per_claim: dict[str, list[tuple[int, int]]] = {}
    for form in WIRES:
        dumped = [dump_claims([claim_fields(c, form, texts) for c in part["claims"]])
                  for part in parts]
        if form == "v3" and [t for t, _ in dumped] != [wire.dump_answer("extract", p)
                                                       for p in parts]:
            raise ValueError(f"{row['id']}: the v3 text is not what wire.dump_answer writes")
        answers[form] = [t for t, _ in dumped]
        per_claim[form] = [c for t, offsets in dumped for c in _claim_tokens(t, offsets)]
    whole = {form: dump_claims([claim_fields(c, form, texts) for c in v3["claims"]])[0]
             for form in WIRES}

    # the prompts: today's (answers shown) per wire, and the window with each question alone
    user = prompts.render("extract", inputs)
    window = prompts.to_chatml(user, add_generation_prompt=False)[:-len(END + "\n")]
    alone = [prompts.to_chatml([user[0], {"role": "user", "content": user[1]["content"] + "\n\n"
                                          + turns.turn_line(u)}]) for u in asked]
    shown = {form: [prompts.to_chatml(turns.messages(inputs, answers[form][:k]))
                    for k in range(len(asked))] for form in WIRES}
    texts_in = [window, prompts.to_chatml(user), wire.dump_answer("extract", {"claims": []}),
                *alone, *(stamped(window, how) for how in STAMPS)]
    for form in WIRES:
        texts_in += shown[form] + answers[form] + [whole[form]]
    ids = iter(encode(texts_in))
    window_ids, one_call, empty = next(ids), next(ids), next(ids)
    alone_ids = [next(ids) for _ in asked]
    stamp_ids = {how: next(ids) for how in STAMPS}
    cached = common_prefix(cached_ids, window_ids)
    out: dict[str, Any] = {"id": row["id"], "turns": len(asked), "claims": len(v3["claims"]),
                           "empty_turns": sum(not part["claims"] for part in parts),
                           "cached": cached, "window_once": len(window_ids) - cached,
                           "one_call_prompt": len(one_call) - cached,
                           "prompt": {}, "answer": {}, "window_form_answer": {},
                           "empty_answers": len(asked) * (len(empty) + WRITTEN_END),
                           "per_claim": per_claim}
    # (c): the window once, then each turn its question after the window's end
    out["prompt"]["c"] = len(window_ids) - cached + sum(
        len(q) - common_prefix(q, window_ids) for q in alone_ids)
    # (c) with the events' timestamps written shorter: the questions read as before
    out["stamps"] = {how: len(t) - cached for how, t in stamp_ids.items()}
    for how, t in stamp_ids.items():
        out["prompt"][f"c/{how}"] = out["prompt"]["c"] - (len(window_ids) - len(t))
    for form in WIRES:
        prompt_ids = [next(ids) for _ in asked]
        answer_ids = [next(ids) for _ in asked]
        whole_ids = next(ids)
        out["answer"][form] = sum(len(a) + WRITTEN_END for a in answer_ids)
        out["window_form_answer"][form] = len(whole_ids) + WRITTEN_END
        first = len(prompt_ids[0]) - common_prefix(cached_ids, prompt_ids[0])
        # (a): the context holds the previous prompt (its answer cut out); (b): and the answer
        # as written (its end token sampled, never evaluated)
        later = prompt_ids[1:]
        out["prompt"][f"a/{form}"] = first + sum(
            len(p) - common_prefix(p, before)
            for before, p in zip(prompt_ids, later, strict=False))
        out["prompt"][f"b/{form}"] = first + sum(
            len(p) - common_prefix(p, before + a)
            for before, a, p in zip(prompt_ids, answer_ids, later, strict=False))
    return out


# --- quotes chosen, not copied --------------------------------------------------------------------

def _sentence_answer(claims: list[dict[str, Any]], texts: dict[int, str]
                     ) -> tuple[list[dict[str, Any]], int, int]:
    """The canonical claims with every quote replaced by the sentence(s) it touches (one quote
    per sentence, each once), leaving out a claim with a sentence that is not a candidate span of
    its event: (claims, quotes not candidates, claims left out)."""
    out, rejected, left_out = [], 0, 0
    for claim in claims:
        pairs: list[tuple[int, str]] = []
        for event, quote in zip(claim["source_indices"], claim["quotes"], strict=True):
            touched, _ = quote_sentences(quote, texts[event])
            pieces = sentence_pieces(texts[event])
            for n in touched:
                a, b = pieces[n - 1]
                if (event, texts[event][a:b]) not in pairs:
                    pairs.append((event, texts[event][a:b]))
        bad = sum(1 for event, s in pairs if s not in spans.candidate_spans(texts[event]))
        rejected += bad
        if bad or not pairs:
            left_out += 1
            continue
        out.append({**claim, "source_indices": [e for e, _ in pairs],
                    "quotes": [s for _, s in pairs]})
    return out, rejected, left_out


def _graded(row: dict[str, Any], claims: list[dict[str, Any]]) -> tuple[Counter, list[str]]:
    """The grader's counts of these canonical claims put through the codec as an arm's answer,
    and each kept claim's verdict (a rejected answer: every claim counted as given, none
    supported, no verdicts)."""
    try:
        result = codec.verify_canonical("extract", row["input"], {"claims": claims})
    except codec.CodecError:
        return Counter(claims=len(claims), rejected_answers=1), []
    sample = {"status": "first_try", "output": result.output, "attempts": [{"raw": result.raw}],
              "diagnostics": result.diagnostics}
    verdict = grade_sample(row, sample)
    c = verdict["counts"]
    return (Counter(claims=c["claims"], supported=c["supported"], covered=c["covered"],
                    required=c["required"], dropped_by_codec=len(claims) - c["claims"],
                    secrets_retained=verdict["safety"]["secrets_retained"]),
            [v["verdict"] for v in verdict["claims"]])


def _span_reason(sentence: str, offered: list[str]) -> str:
    if len(sentence) < spans.MIN_SPAN_CHARS:
        return "shorter than the minimum"
    if len(sentence) > spans.MAX_SPAN_CHARS:
        return "longer than the maximum"
    if len(offered) >= spans.MAX_SPANS_PER_EVENT:
        return f"past the event's {spans.MAX_SPANS_PER_EVENT} spans"
    return "a credential-shaped string"


def quote_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Part 3 over the windows: the gold quotes' classes, the sentences that are not candidate
    spans, and the gold graded with its quotes and with their sentences instead."""
    classes: Counter = Counter()
    sentences, missing = 0, Counter()
    gold, chosen, picks, by_codec = Counter(), Counter(), Counter(), Counter()
    rejected = left_out = 0
    moved: Counter = Counter()  # claims whose verdict the sentence quotes change
    for row in rows:
        texts = {e["index"]: e["text"] for e in row["input"]["events"]}
        for text in texts.values():
            offered = spans.candidate_spans(text)
            for a, b in sentence_pieces(text):
                sentences += 1
                if text[a:b] not in offered:
                    missing[_span_reason(text[a:b], offered)] += 1
        claims = row["gold"]["claims"]
        for claim in claims:
            for event, quote in zip(claim["source_indices"], claim["quotes"], strict=True):
                classes[quote_sentences(quote, texts[event])[1]] += 1
        changed, bad, out = _sentence_answer(claims, texts)
        rejected += bad
        left_out += out
        as_written, before = _graded(row, claims)
        sentence_quoted, after = _graded(row, changed)
        gold += as_written
        chosen += sentence_quoted
        picked, right = _codec_chosen(claims, texts)
        picks += right
        by_codec += _graded(row, picked)[0]
        if len(before) == len(after) == len(claims):  # the same claims, in order
            moved.update(f"{a} -> {b}" for a, b in zip(before, after, strict=True) if a != b)
    return {"quotes": sum(classes.values()), "classes": dict(classes),
            "sentences": sentences, "sentences_not_candidates": dict(missing),
            "sentence_quotes_not_candidates": rejected, "claims_left_out": left_out,
            "gold": dict(gold), "sentence_quoted": dict(chosen), "verdicts_changed": dict(moved),
            "codec_chosen": {**dict(picks), "graded": dict(by_codec)}}


def codec_quote(claim: dict[str, Any], texts: dict[int, str]) -> tuple[int, str] | None:
    """(event, sentence) a v6 codec would quote for a canonical claim: the sentence
    `spans.choose_sentence` picks in the latest event the claim cites; None when that event
    offers none."""
    event = max(claim["source_indices"])
    sentence = spans.choose_sentence(texts.get(event, ""), claim["value"],
                                     claim["subject"]["name"], claim["predicate"])
    return None if sentence is None else (event, sentence)


def _codec_chosen(claims: list[dict[str, Any]], texts: dict[int, str]
                  ) -> tuple[list[dict[str, Any]], Counter]:
    """The canonical claims with their quotes replaced by the one sentence the codec would
    choose in the latest event each cites (`spans.choose_sentence`, wire v6), and the count of
    claims whose chosen sentence is one the gold quotes there ("right") of those it could be
    chosen for ("claims"); a claim whose event offers no sentence is left out ("none")."""
    out, counts = [], Counter()
    for claim in claims:
        chosen = codec_quote(claim, texts)
        if chosen is None:
            counts["none"] += 1
            continue
        event, sentence = chosen
        text = texts[event]
        counts["claims"] += 1
        quoted = {n for e, q in zip(claim["source_indices"], claim["quotes"], strict=True)
                  if e == event for n in quote_sentences(q, text)[0]}
        pieces = sentence_pieces(text)
        counts["right"] += any(text[a:b] == sentence for n, (a, b) in enumerate(pieces, 1)
                               if n in quoted)
        counts["several_events"] += len(set(claim["source_indices"])) > 1
        out.append({**claim, "source_indices": [event], "quotes": [sentence]})
    return out, counts


# --- the study ------------------------------------------------------------------------------------

def quantiles(values: list[float]) -> dict[str, float]:
    """Median and p90 (nearest rank) of `values`."""
    ordered = sorted(values)
    return {"median": statistics.median(ordered),
            "p90": ordered[max(math.ceil(0.9 * len(ordered)) - 1, 0)]}


def study(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of the extract windows among `rows` (see the module docstring)."""
    extract = [r for r in rows if r["task"] == "extract"]
    cached_ids = encode([cached_text()])[0]
    windows, skipped = [], Counter()
    for row in extract:
        try:
            windows.append(window_figures(row, cached_ids))
        except NoTurns as exc:
            skipped[str(exc)] += 1
    if not windows:
        raise EvalError("no extract window that the turns form asks")
    asked = {w["id"] for w in windows}
    prompt = {key: quantiles([w["prompt"][key] for w in windows]) for key in windows[0]["prompt"]}
    answer = {form: quantiles([w["answer"][form] for w in windows]) for form in WIRES}
    answer["empty"] = quantiles([w["empty_answers"] for w in windows])
    estimate = {}
    for s in SCHEDULES:
        for form in WIRES:
            read = [w["prompt"]["c" if s == "c" else f"{s}/{form}"] for w in windows]
            written = [w["answer"][form] for w in windows]
            seconds = [p / PROMPT_TOK_S + a * DECODE_S for p, a in zip(read, written, strict=True)]
            within = sum(p <= TARGETS["prompt"] and a <= TARGETS["answer"]
                         for p, a in zip(read, written, strict=True))
            estimate[f"{s}/{form}"] = {**quantiles(seconds),
                                       "within_targets": round(within / len(windows), 4)}
    per_claim = {}
    for form in WIRES:
        pairs = [c for w in windows for c in w["per_claim"][form]]
        per_claim[form] = {"claims": len(pairs), "tokens": quantiles([t for t, _ in pairs]),
                           "before_value": quantiles([v for _, v in pairs])} if pairs else None
    return {"windows": len(windows), "skipped": dict(skipped),
            "targets": TARGETS, "rates": {"prompt_tok_s": PROMPT_TOK_S, "decode_s": DECODE_S},
            "cached": sorted(set(w["cached"] for w in windows)),
            "turns": quantiles([w["turns"] for w in windows]),
            "claims": quantiles([w["claims"] for w in windows]),
            "claims_total": sum(w["claims"] for w in windows),
            "turns_total": sum(w["turns"] for w in windows),
            "empty_turns_total": sum(w["empty_turns"] for w in windows),
            "window_once": quantiles([w["window_once"] for w in windows]),
            "window_stamps": {how: quantiles([w["stamps"][how] for w in windows])
                              for how in STAMPS},
            "one_call_prompt": quantiles([w["one_call_prompt"] for w in windows]),
            "prompt": prompt, "answer": answer,
            "window_form_answer": {form: quantiles([w["window_form_answer"][form]
                                                    for w in windows]) for form in WIRES},
            "per_claim": per_claim, "estimate_s": estimate,
            "quote_choice": quote_figures([r for r in extract if r["id"] in asked]),
            "per_window": [{k: v for k, v in w.items() if k != "per_claim"} for w in windows]}


def _q(q: dict[str, float]) -> str:
    return f"{q['median']:g} | {q['p90']:g}"


def _ratio(n: int, d: int) -> str:
    return f"{n}/{d} = {n / d:.3f}" if d else f"{n}/0"


def report(f: dict[str, Any]) -> list[str]:
    t = f["targets"]
    skipped = ", ".join(f"{n} {why}" for why, n in f["skipped"].items()) or "none"
    lines = [f"{f['windows']} extract windows of {f['set']} (skipped: {skipped}); "
             f"{f['claims_total']} gold claims, a median {f['claims']['median']:g} a window; "
             f"turns a median {f['turns']['median']:g} (p90 {f['turns']['p90']:g}), "
             f"{f['empty_turns_total']} of {f['turns_total']} without a gold claim; cached "
             f"instructions {'/'.join(map(str, f['cached']))} tokens", "",
             "| per window (tokens) | median | p90 | issue 48 target (median window) |",
             "|---|---|---|---|",
             f"| prompt: the window's content alone | {_q(f['window_once'])} | |"]
    lines += [f"| prompt: the window's content alone, event timestamps {STAMP_HELP[how]} | "
              f"{_q(f['window_stamps'][how])} | |" for how in STAMPS]
    lines += [
             f"| prompt: one call (window form) | {_q(f['one_call_prompt'])} | "
             f"≤ {t['prompt']} |"]
    for s in SCHEDULES:
        keys = (["c", *(f"c/{how}" for how in STAMPS)] if s == "c"
                else [f"{s}/{form}" for form in WIRES])
        for key in keys:
            tail = key.split("/")[1] if "/" in key else None
            wire_note = ("" if tail is None else f", event timestamps {STAMP_HELP[tail]}"
                         if tail in STAMPS else f", {tail} answers")
            lines.append(f"| prompt {SCHEDULE_HELP[s]}{wire_note} | {_q(f['prompt'][key])} | "
                         f"≤ {t['prompt']} |")
    for form in WIRES:
        lines.append(f"| answer, turns form, {form} | {_q(f['answer'][form])} | "
                     f"≤ {t['answer']} |")
    lines.append(f"| answer, turns form, every turn without a claim (its brackets and end token "
                 f"alone) | {_q(f['answer']['empty'])} | ≤ {t['answer']} |")
    for form in WIRES:
        lines.append(f"| answer, window form (one call), {form} | "
                     f"{_q(f['window_form_answer'][form])} | ≤ {t['answer']} |")
    lines += ["", "| wire | claims | tokens a claim, median | p90 | tokens before the value's "
              "first token, median | p90 |", "|---|---|---|---|---|---|"]
    for form in WIRES:
        c = f["per_claim"][form]
        if c is not None:
            lines.append(f"| {form} | {c['claims']} | {_q(c['tokens'])} | "
                         f"{_q(c['before_value'])} |")
    r = f["rates"]
    lines += ["", f"Estimated seconds a window (arithmetic at {r['prompt_tok_s']:g} prompt "
              f"tok/s and {r['decode_s'] * 1000:g} ms a written token, not a measurement): "
              "median s, p90 s, share of windows within both targets", "",
              "| schedule | " + " | ".join(WIRES) + " |", "|---|" + "---|" * len(WIRES)]
    for s in SCHEDULES:
        cells = [f"{e['median']:.2f}, {e['p90']:.2f}, {e['within_targets']:.0%}"
                 for e in (f["estimate_s"][f"{s}/{form}"] for form in WIRES)]
        lines.append(f"| {SCHEDULE_HELP[s]} | " + " | ".join(cells) + " |")
    q = f["quote_choice"]
    cls = q["classes"]
    missing = ", ".join(f"{n} {why}" for why, n in q["sentences_not_candidates"].items())
    lines += ["", "| gold quotes | count |", "|---|---|",
              f"| every quote | {q['quotes']} |",
              f"| exactly a whole sentence | {_ratio(cls.get('sentence', 0), q['quotes'])} |",
              f"| inside one sentence (a part of it) | "
              f"{_ratio(cls.get('inside', 0), q['quotes'])} |",
              f"| spanning several sentences | {_ratio(cls.get('several', 0), q['quotes'])} |",
              f"| not found in its event | {cls.get('none', 0)} |",
              f"| sentences of the windows' events that are not candidate spans | "
              f"{sum(q['sentences_not_candidates'].values())} of {q['sentences']}"
              f"{' (' + missing + ')' if missing else ''} |",
              f"| sentence quotes the codec rejects (not a candidate span) | "
              f"{q['sentence_quotes_not_candidates']} ({q['claims_left_out']} claims left out) |",
              "", "| graded by the evaluator | claims | supported | covered (required facts) | "
              "secrets retained |", "|---|---|---|---|---|"]
    for label, g in (("gold as written", q["gold"]),
                     ("gold, each quote replaced by its sentence(s)", q["sentence_quoted"]),
                     ("gold, one sentence of its latest event chosen by the codec (v6)",
                      q["codec_chosen"]["graded"])):
        lines.append(f"| {label} | {g.get('claims', 0)} | "
                     f"{_ratio(g.get('supported', 0), g.get('claims', 0))} | "
                     f"{_ratio(g.get('covered', 0), g.get('required', 0))} | "
                     f"{g.get('secrets_retained', 0)} |")
    changed = ", ".join(f"{n} {pair}" for pair, n in q["verdicts_changed"].items()) or "none"
    lines += ["", f"Claims whose verdict the sentence quotes change: {changed}."]
    c = q["codec_chosen"]
    lines += [f"The codec's choice (`spans.choose_sentence`, v6): the sentence the gold quotes in "
              f"its latest event for {_ratio(c.get('right', 0), c.get('claims', 0))} claims "
              f"({c.get('several_events', 0)} of them cite several events, of which v6 quotes "
              f"the latest only; {c.get('none', 0)} claims whose event offers no sentence)."]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eval/studies/wire_cost.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--set", default="val", choices=SETS, help="the evaluation set (val)")
    p.add_argument("--corpus", type=Path,
                   help="its frozen corpus (val: data/corpus, natural-dev: data/natural-dev)")
    p.add_argument("--limit", type=int, help="the first N extract windows only")
    p.add_argument("--json", type=Path, help="also write the figures here (JSON)")
    args = p.parse_args(argv)
    corpus = args.corpus or Path(DEFAULT_CORPUS[args.set])
    try:
        rows = [r for r in load_eval_rows(corpus, args.set) if r["task"] == "extract"]
        figures = study(rows[:args.limit] if args.limit is not None else rows)
    except (EvalError, corpus_tokens.TokenizerUnavailable, OSError, ValueError) as exc:
        print(f"eval/studies/wire_cost.py: error: {exc}", file=sys.stderr)
        return 2
    figures = {"set": args.set, "corpus": str(corpus), "limit": args.limit, **figures}
    print("\n".join(report(figures)))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, ensure_ascii=False) + "\n", "utf-8")
    return 0
