"""Anatomy of gold extract answers: where their tokens go, and what other wire forms would cost.

`python train/diagnose.py --anatomy` prints, for the extract rows of a train or val split (the
canonical gold of `data/<corpus>/canonical/<split>.jsonl`, tokenised by the base's tokenizer):

1. **Shares per field** of the answer tokens of today's wire form (`memworker.wire.dump_answer`):
   every character of the answer is labelled with the field whose value it belongs to (quote
   text, event index, subject name, subject type, predicate, value, statement, kind, time
   expression, correction, supersedes, confidence) or `keys` (JSON keys, quotes around strings,
   brackets, separators), and each token takes the label of most of its characters.
2. **Levers**: the same gold claims written in other wire forms, cumulatively (each adds one
   change to the one before), with the median, 90th percentile and mean answer tokens per row.
   These are renderings of the gold, not models: they say how long an answer the student would
   have to write, not whether it could.
3. **Choices the gold allows**: how many gold values occur verbatim (ignoring case) in the
   claim's own quotes, and how many gold subjects are "the user" or a name found in the window or
   the existing facts (so that the subject could be chosen from candidates).
4. **One decision at a time**: the answers of two split designs — (a) one call per event that
   holds user words, answering only that event's claims (a claim belongs to the latest event it
   cites); (b) one call per window that walks the events in order — in the tuple form, and the
   training tokens each design costs per window (prompt + answer; design (a) repeats the window
   before each event in its prompt).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from memworker import wire

FIELDS = ("quote", "event", "name", "type", "predicate", "value", "statement", "kind",
          "time_expression", "correction", "supersedes", "confidence")
_RELATION = " ("


def labelled_json(obj: Any, label: str = "keys") -> list[tuple[str, str]]:
    """`json.dumps(obj, ensure_ascii=False)` as (text, label) pieces: the characters inside a
    scalar value take the label of the key that holds it (a list item its list's key); keys,
    string quotes, brackets and separators are labelled "keys"."""
    if isinstance(obj, dict):
        out = [("{", "keys")]
        for n, (k, v) in enumerate(obj.items()):
            out.append((", " if n else "", "keys"))
            out.append((json.dumps(k, ensure_ascii=False) + ": ", "keys"))
            out += labelled_json(v, k)
        return out + [("}", "keys")]
    if isinstance(obj, list):
        out = [("[", "keys")]
        for n, v in enumerate(obj):
            out.append((", " if n else "", "keys"))
            out += labelled_json(v, label)
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


def _name_field(wire_claim: dict[str, Any]) -> dict[str, Any]:
    """A wire claim with the subject's keys renamed to the labels of FIELDS (name, type)."""
    return {**wire_claim, "subject": {"name": wire_claim["subject"]["name"],
                                      "type": wire_claim["subject"]["type"]}}


def field_shares(tokenizer: Any, rows: list[dict[str, Any]]) -> dict[str, int]:
    """{label: answer tokens} over the rows' gold answers in today's wire form."""
    counts: Counter = Counter()
    for row in rows:
        answer = wire.to_wire("extract", row["gold"])
        pieces = labelled_json(answer)
        if "".join(t for t, _ in pieces) != wire.dump_answer("extract", answer):
            raise ValueError(f"{row['id']}: labelled text differs from the training target")
        counts.update(token_labels(tokenizer, pieces))
    return dict(counts.most_common())


# --- other wire forms of the same gold claims -----------------------------------------------------

def bare_name(name: str) -> str:
    """A subject name without its parenthesised relation ("Uma (the user's client)" -> "Uma")."""
    return name.split(_RELATION, 1)[0]


def _quotes(c: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"quote": q, "event": i} for i, q in zip(c["source_indices"], c["quotes"], strict=True)]


def derived_dropped(c: dict[str, Any]) -> dict[str, Any]:
    """Lever 1: the statement, confidence and correction flag are left to the codec."""
    return {"quotes": _quotes(c), "subject": dict(c["subject"]), "predicate": c["predicate"],
            "value": c["value"], "kind": c["kind"], "time_expression": c["time_expression"],
            "supersedes": list(c["supersedes"])}


def bare_subject(c: dict[str, Any]) -> dict[str, Any]:
    """Lever 2: the subject is a bare name (a candidate) beside its type, not an object."""
    out = derived_dropped(c)
    subject = out.pop("subject")
    return {"quotes": out.pop("quotes"), "subject": bare_name(subject["name"]),
            "type": subject["type"], **out}


_SHORT = {"claims": "c", "quotes": "q", "quote": "q", "event": "e", "subject": "s", "type": "t",
          "predicate": "p", "value": "v", "kind": "k", "time_expression": "w", "supersedes": "x"}


def short_keys(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {_SHORT.get(k, k): short_keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [short_keys(v) for v in obj]
    return obj


def as_tuple(c: dict[str, Any]) -> list[Any]:
    """Lever 5: a claim as a fixed-order array (the schema's prefixItems), no keys at all."""
    b = bare_subject(c)
    return [[[q["quote"], q["event"]] for q in b["quotes"]], b["subject"], b["type"],
            b["predicate"], b["value"], b["kind"], b["time_expression"], b["supersedes"]]


def _compact(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _spaced(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


#: (name, claim form, serialiser, whether keys are shortened); cumulative
LEVERS = (
    ("today's wire form (v2)", None, _spaced, False),
    ("1. statement, confidence, correction derived by the codec", derived_dropped, _spaced, False),
    ("2. subject a bare candidate name beside its type", bare_subject, _spaced, False),
    ("3. compact separators (',' ':')", bare_subject, _compact, False),
    ("4. one-letter keys", bare_subject, _compact, True),
    ("5. a claim is a fixed-order array (no keys)", as_tuple, _compact, False),
)


def render(row: dict[str, Any], lever: tuple) -> str:
    _, form, dump, short = lever
    if form is None:
        return wire.dump_answer("extract", wire.to_wire("extract", row["gold"]))
    answer = {"claims": [form(c) for c in row["gold"]["claims"]]}
    return dump(short_keys(answer) if short else answer)


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
    for row in rows:
        events = row["input"]["events"]
        window = " ".join(e["text"] for e in events) + " " + " ".join(
            f["statement"] for f in row["input"]["existing_facts"])
        for c in row["gold"]["claims"]:
            claims += 1
            name = bare_name(c["subject"]["name"])
            subject_candidate += name == "the user" or name in window
            if c["value"] is not None:
                values += 1
                value_in_quote += any(c["value"].casefold() in q.casefold() for q in c["quotes"])
    return {"value_is_a_span_of_its_quotes": [value_in_quote, values],
            "subject_is_the_user_or_a_name_in_the_window": [subject_candidate, claims]}


# --- one decision at a time ---------------------------------------------------------------------

def split_designs(count, rows: list[dict[str, Any]], prompt_tokens) -> dict[str, Any]:
    """Answer tokens per call and training tokens per window of designs (a) and (b).

    prompt_tokens(row, last_event): tokens of the prompt showing the window up to and including
    that event (None: the whole window)."""
    per_call, per_call_claims, a_train, b_answer, b_train, whole_train = [], [], [], [], [], []
    for row in rows:
        claims = row["gold"]["claims"]
        user = [e["index"] for e in row["input"]["events"] if e["role"] == "user"]
        train = 0
        walk = []
        for u in user:
            mine = [as_tuple(c) for c in claims if max(c["source_indices"]) == u]
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
    return {"a_answer_per_call": stats(per_call), "a_answer_per_call_with_claims":
            stats(per_call_claims), "a_train_tokens_per_window": stats(a_train),
            "b_answer_per_window": stats(b_answer), "b_train_tokens_per_window": stats(b_train),
            "v2_train_tokens_per_window": stats(whole_train)}
