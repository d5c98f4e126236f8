"""Anatomy of gold extract answers: where their tokens go, and what other wire forms would cost.

`python train/diagnose.py --anatomy` prints, for the extract rows of a train or val split (the
canonical gold of `data/<corpus>/canonical/<split>.jsonl`, tokenised by the base's tokenizer):

1. **Shares per field** of the answer tokens of the wire form before v3 (`v2_claim`: keyed
   objects, spaced separators, the statement, correction flag and confidence written by the
   model) and of today's (`memworker.wire.dump_answer`, v3): every character of the answer is
   labelled with the field whose value it belongs to (quote text, event index, subject name,
   subject type, predicate, value, statement, kind, time expression, correction, supersedes,
   confidence) or `keys` (JSON keys, quotes around strings, brackets, separators), and each
   token takes the label of most of its characters.
2. **Levers**: the same gold claims written in other wire forms, cumulatively (each adds one
   change to the one before: v2 -> ... -> v3 -> beyond), with the median, 90th percentile and
   mean answer tokens per row. These are renderings of the gold, not models: they say how long
   an answer the student would have to write, not whether it could.
3. **Choices the gold allows**: how many gold values occur verbatim (ignoring case) in the
   claim's own quotes, and how many gold subjects are "the user" or a name found in the window or
   the existing facts (so that the subject could be chosen from candidates).
4. **One decision at a time**: the answers of two split designs — (a) one call per event that
   holds user words, answering only that event's claims (a claim belongs to the latest event it
   cites); (b) one call per window that walks the events in order — with wire v3 claims, and the
   training tokens each design costs per window (prompt + answer; design (a) repeats the window
   before each event in its prompt).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from memworker import wire
from memworker.corpus.behaviours import split_sentences
from memworker.textnorm import bare_name


def labelled_json(obj: Any, label: str = "keys", names: tuple[str, ...] | None = None,
                  separators: tuple[str, str] = (", ", ": ")) -> list[tuple[str, str]]:
    """`json.dumps(obj, ensure_ascii=False, separators=separators)` as (text, label) pieces: the
    characters inside a scalar value take the label of the key that holds it (a list item its
    list's key; the items of an extract claim array and of a quote pair the names of
    `memworker.wire.CLAIM_FIELDS` and quote/event); keys, string quotes, brackets and
    separators are labelled "keys"."""
    item_sep, key_sep = separators
    if isinstance(obj, dict):
        out = [("{", "keys")]
        for n, (k, v) in enumerate(obj.items()):
            out.append((item_sep if n else "", "keys"))
            out.append((json.dumps(k, ensure_ascii=False) + key_sep, "keys"))
            out += labelled_json(v, k, separators=separators)
        return out + [("}", "keys")]
    if isinstance(obj, list):
        out = [("[", "keys")]
        for n, v in enumerate(obj):
            out.append((item_sep if n else "", "keys"))
            if names is not None:
                out += labelled_json(v, names[n], separators=separators)
            elif label == "claims" and isinstance(v, list):
                out += labelled_json(v, "claim", wire.CLAIM_FIELDS, separators)
            elif label == "quotes" and isinstance(v, list):
                out += labelled_json(v, "pair", ("quote", "event"), separators)
            else:
                out += labelled_json(v, label, separators=separators)
        return out + [("]", "keys")]
    text = json.dumps(obj, ensure_ascii=False)
    if isinstance(obj, str):
        return [('"', "keys"), (text[1:-1], label), ('"', "keys")]
    return [(text, label)]


def token_labels(tokenizer: Any, pieces: list[tuple[str, str]]) -> list[str]:
    """The label of each token of the joined text: the label of most of its characters."""
    chars = [lab for text, lab in pieces for _ in text]
    text = "".join(t for t, _ in pieces)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    out = []
    for start, end in enc["offset_mapping"]:
        labels = Counter(chars[start:end]) if end > start else Counter({"keys": 1})
        out.append(labels.most_common(1)[0][0])
    return out


def field_shares(tokenizer: Any, rows: list[dict[str, Any]], form: str = "v3") -> dict[str, int]:
    """{label: answer tokens} over the rows' gold answers in the v2 or today's (v3) wire form."""
    counts: Counter = Counter()
    for row in rows:
        if form == "v2":
            answer, separators = {"claims": [v2_claim(c) for c in row["gold"]["claims"]]}, None
            target = _spaced(answer)
        else:
            answer = wire.to_wire("extract", row["gold"])
            separators, target = wire.SEPARATORS, wire.dump_answer("extract", answer)
        pieces = labelled_json(answer, separators=separators or (", ", ": "))
        if "".join(t for t, _ in pieces) != target:
            raise ValueError(f"{row['id']}: labelled text differs from the {form} answer")
        counts.update(token_labels(tokenizer, pieces))
    return dict(counts.most_common())


# --- other wire forms of the same gold claims -----------------------------------------------------

def _quotes(c: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"quote": q, "event": i} for i, q in zip(c["source_indices"], c["quotes"], strict=True)]


def v2_claim(c: dict[str, Any]) -> dict[str, Any]:
    """A canonical claim in the wire form before v3 (keyed, everything written by the model)."""
    confidence = {0.35: "low", 0.65: "medium"}.get(c["confidence"], "high")
    return {"quotes": _quotes(c), "subject": dict(c["subject"]), "predicate": c["predicate"],
            "value": c["value"], "statement": c["statement"], "kind": c["kind"],
            "time_expression": c["time_expression"], "correction": c["is_correction"],
            "supersedes": list(c["supersedes"]), "confidence": confidence}


def derived_dropped(c: dict[str, Any]) -> dict[str, Any]:
    """Lever 1: the statement, confidence and correction flag are left to the codec."""
    return {"quotes": _quotes(c), "subject": dict(c["subject"]), "predicate": c["predicate"],
            "value": c["value"], "kind": c["kind"], "time_expression": c["time_expression"],
            "supersedes": list(c["supersedes"])}


def flat_subject(c: dict[str, Any]) -> dict[str, Any]:
    """Lever 2: the subject's name and type side by side, not an object."""
    out = derived_dropped(c)
    subject = out.pop("subject")
    return {"quotes": out.pop("quotes"), "subject": subject["name"], "type": subject["type"],
            **out}


def as_array(c: dict[str, Any]) -> list[Any]:
    """Lever 4: a claim as a fixed-order array (the schema's prefixItems), no keys: wire v3."""
    return wire.pack_claim(wire.claim_to_wire(c))


def bare_subject(c: dict[str, Any]) -> list[Any]:
    """Lever 5 (beyond v3): the subject without its parenthesised relation, a name a model could
    choose from candidates (the grader accepts it; the store would lose the relation)."""
    out = as_array(c)
    out[1] = bare_name(out[1])
    return out


def _compact(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=wire.SEPARATORS)


def _spaced(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


#: (name, claim form, serialiser); cumulative
LEVERS = (
    ("v2: keyed objects, every field written", v2_claim, _spaced),
    ("1. statement, confidence, correction derived by the codec", derived_dropped, _spaced),
    ("2. subject name and type side by side", flat_subject, _spaced),
    ("3. compact separators (',' ':')", flat_subject, _compact),
    ("4. a claim is a fixed-order array (no keys) = wire v3", as_array, _compact),
    ("5. beyond v3: the subject a bare name", bare_subject, _compact),
)


def render(row: dict[str, Any], lever: tuple) -> str:
    _, form, dump = lever
    return dump({"claims": [form(c) for c in row["gold"]["claims"]]})


def stats(ns: list[int]) -> dict[str, Any]:
    ns = sorted(ns)
    if not ns:
        return {"n": 0, "median": None, "p90": None, "mean": None}
    return {"n": len(ns), "median": ns[len(ns) // 2], "p90": ns[int(len(ns) * 0.9)],
            "mean": round(sum(ns) / len(ns), 1)}


def lever_lengths(count, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"lever": lever[0], **stats([count(render(r, lever)) for r in rows])}
            for lever in LEVERS]


# --- choices the gold allows ------------------------------------------------------------------------

def choice_shares(rows: list[dict[str, Any]]) -> dict[str, list[int]]:
    """{what: [gold claims where it holds, gold claims]}."""
    value_in_quote = subject_candidate = values = claims = 0
    quotes = whole_sentence = one_sentence = 0
    for row in rows:
        events = row["input"]["events"]
        window = " ".join(e["text"] for e in events) + " " + " ".join(
            f["statement"] for f in row["input"]["existing_facts"])
        for c in row["gold"]["claims"]:
            claims += 1
            for i, quote in zip(c["source_indices"], c["quotes"], strict=True):
                sentences = split_sentences(events[i]["text"])
                quotes += 1
                whole_sentence += quote in sentences
                one_sentence += any(quote in s for s in sentences)
            name = bare_name(c["subject"]["name"])
            subject_candidate += name == "the user" or name in window
            if c["value"] is not None:
                values += 1
                value_in_quote += any(c["value"].casefold() in q.casefold() for q in c["quotes"])
    return {"value_is_a_span_of_its_quotes": [value_in_quote, values],
            "subject_is_the_user_or_a_name_in_the_window": [subject_candidate, claims],
            # a quote could be chosen as [event, sentence] instead of written (the codec would
            # quote the whole sentence: still an exact span of the event the grader checks)
            "quote_is_a_whole_sentence_of_its_event": [whole_sentence, quotes],
            "quote_lies_in_one_sentence_of_its_event": [one_sentence, quotes]}


# --- one decision at a time ---------------------------------------------------------------------

def split_designs(count, rows: list[dict[str, Any]], prompt_tokens) -> dict[str, Any]:
    """Answer tokens per call and training tokens per window of designs (a) and (b).

    prompt_tokens(row, last_event): tokens of the prompt showing the window up to and including
    that event (None: the whole window)."""
    per_call, per_call_claims, a_train, b_answer, b_train = [], [], [], [], []
    whole_train, v3_train = [], []
    for row in rows:
        claims = row["gold"]["claims"]
        user = [e["index"] for e in row["input"]["events"] if e["role"] == "user"]
        train = 0
        walk = []
        for u in user:
            mine = [as_array(c) for c in claims if max(c["source_indices"]) == u]
            n = count(_compact({"claims": mine}))
            per_call.append(n)
            if mine:
                per_call_claims.append(n)
            train += prompt_tokens(row, u) + n
            walk.append([u, mine])
        a_train.append(train)
        nb = count(_compact({"events": walk}))
        b_answer.append(nb)
        whole = prompt_tokens(row, None)
        b_train.append(whole + nb)
        whole_train.append(whole + count(render(row, LEVERS[0])))
        v3_train.append(whole + count(render(row, LEVERS[4])))
    return {"a_answer_per_call": stats(per_call), "a_answer_per_call_with_claims":
            stats(per_call_claims), "a_train_tokens_per_window": stats(a_train),
            "b_answer_per_window": stats(b_answer), "b_train_tokens_per_window": stats(b_train),
            "v2_train_tokens_per_window": stats(whole_train),
            "v3_train_tokens_per_window": stats(v3_train)}
