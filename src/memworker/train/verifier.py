"""Training the claim verifier (`memworker.inference.verifier`): labelled claims from the training
splits, an L2 logistic regression over their features, the weights file.

Examples come from the canonical extract rows of each training corpus (`data/natural-train`,
`data/corpus`): every gold claim is a positive; the negatives are the student's kinds of error
(issue 47), made from the same row and checked against its current facts (a perturbation that
still says a current fact, by subject, predicate, value and the grader's kind rule, is left out):

- `wrong_predicate`: another predicate of the ontology for the same quote and value (half the time
  the one whose words fit the quote best: a template forced onto another fact);
- `subject_swap`: the subject replaced by another person of the window, or the user by one and a
  named person by the user ("My partner is based in Kyoto" -> the user lives in Kyoto);
- `garbled_value`: the value replaced by another span of the quote, sometimes with a word of
  it replaced by a word from elsewhere in the window ("Marta lives in Bilinear");
- `value_swap`: the value of another claim of the row, with this claim's quote;
- `wrong_kind`: a plan claimed as a fact or an event, a fact as a plan;
- `negation_lost`: a retraction claimed as the fact it retracts;
- `stale`: a correction's old value claimed from the correcting sentence;
- `forbidden:<status>`: a value the row's truth says must not be stored (rejected, secret,
  injected, negated, retracted, hypothetical, undecided, reported, past, superseded, already
  stored) claimed from the sentence that holds it;
- `question`, `other_speaker`, `no_fact`: a claim made from a question, from an assistant, tool or
  untrusted sentence, or from a user sentence that holds no fact (small talk), with a span of it
  as value.

The cue table (words per predicate) is cross-fitted: the examples of each of `FOLDS` family folds
get their cue features from a table counted on the other folds, so the regression learns how much
an unseen sentence's cues are worth; the stored table counts every training row. Examples are
weighted so that each corpus, and within it each class, weighs the same. Deterministic: a fixed
seed, examples made per row from a hash of the seed and the row id, Newton's method.

Proposals (`--proposals FILE`, repeatable): the claims a model proposed on a training corpus's
train split (`eval/run.py --set train --corpus data/natural-train --propose ARM --extract-form
turns --logprobs`), graded by the evaluator's grader and written with `eval/studies/proposals.py`
(the trainer does not import the evaluator): a supported claim is a positive
(`proposed_supported`), any other a negative (`proposed_unsupported`), the student's own errors
beside the made-up ones. They form a group of their own in the weighting (as much as a corpus)
and are cross-fitted by family fold like the rest. A file of any other split is refused.

    python train/verifier.py                       # writes src/memworker/inference/verifier.json
    python train/verifier.py --proposals receipts/verifier/nt-v3.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from memworker import ontology
from memworker.corpus import load_rows
from memworker.inference import verifier as v
from memworker.inference.gate import auc
from memworker.spans import candidate_spans, sentence_offsets
from memworker.textnorm import bare_name, is_user, norm, stem, value_key

DEFAULT_CORPORA = ("data/natural-train", "data/corpus")
#: sets that are never trained on nor used for a choice
REFUSED = ("natural", "natural-dev")
FOLDS = 5
SEED = 0
L2 = 1e-3
NEGATED_STATUSES = ("rejected", "secret", "injected", "negated", "retracted", "hypothetical",
                    "undecided", "reported", "past", "superseded", "stored")

Example = dict[str, Any]   # claim, inputs, label, kind, corpus, family


class VerifierTrainError(ValueError):
    """A training corpus the verifier refuses (a test set, no manifest)."""


# --- matching a claim against the row's truth -----------------------------------------------------

def _subject_key(name: str) -> str:
    return "the user" if is_user(name) else norm(bare_name(name))


def _pred_stems(predicate: str) -> set[str]:
    return {stem(w) for w in predicate.split("_") if w not in v.STOP and len(w) > 2}


def _value_close(a: str | None, b: str | None) -> bool:
    ka, kb = value_key(a), value_key(b)
    if not ka or not kb:
        return ka == kb
    short, long_ = sorted((ka, kb), key=len)
    return v._contains(long_, short)


MEANINGFUL_KINDS = ("plan", "belief", "retraction")


def _kind_ok(claimed: str | None, truth: str | None) -> bool:
    """The grader's kind rule: a plan, belief or retraction must be one on both sides."""
    if claimed in MEANINGFUL_KINDS or truth in MEANINGFUL_KINDS:
        return claimed == truth
    return True


def says_current(claim: dict[str, Any], truth: dict[str, Any]) -> bool:
    """The claim says (or nearly says) one of the row's current facts: the same subject, a
    predicate of the same words or listed as an alternative, a value one of whose heads holds
    the other. Cautious on purpose: a perturbation it flags is not used as a negative."""
    for fact in truth["facts"]:
        if fact["status"] != "current" or _subject_key(fact["subject"]) != _subject_key(
                claim["subject"]["name"]):
            continue
        alt = fact.get("alternatives") or {}
        if claim.get("kind") == "retraction" and fact.get("kind") == "retraction":
            return True
        if not _kind_ok(claim.get("kind"), fact.get("kind")):
            continue
        same_pred = (claim["predicate"] == fact["predicate"]
                     or claim["predicate"] in alt.get("predicates", ())
                     or bool(_pred_stems(claim["predicate"]) & _pred_stems(fact["predicate"])))
        values = [fact.get("value"), *alt.get("values", ())]
        if same_pred and any(_value_close(claim.get("value"), x) for x in values):
            return True
    return False


# --- making claims --------------------------------------------------------------------------------

def _claim(name: str, predicate: str, value: str | None, kind: str, quotes: list[str],
           indices: list[int], subject_type: str = "person") -> dict[str, Any]:
    return {"subject": {"name": name, "type": subject_type}, "predicate": predicate,
            "value": value, "kind": kind, "quotes": quotes, "source_indices": indices,
            "time_expression": None, "supersedes": [], "statement": "", "date": None,
            "date_precision": None, "is_correction": False, "confidence": 0.9}


class Pool:
    """What the negatives draw from: the training gold's predicates per kind, each predicate's
    usual kind, and the cue table of the fold (for a plausible predicate)."""

    def __init__(self, golds: Iterable[dict[str, Any]], cues: v.Cues | None):
        by_kind: dict[str, Counter] = {}
        kinds: dict[str, Counter] = {}
        for g in golds:
            by_kind.setdefault(g["kind"], Counter())[g["predicate"]] += 1
            kinds.setdefault(g["predicate"], Counter())[g["kind"]] += 1
        self.by_kind = {k: sorted(c) for k, c in sorted(by_kind.items())}
        self.every = sorted({p for c in by_kind.values() for p in c} & set(ontology.PREDICATES))
        self.kind_of = {p: c.most_common(1)[0][0] for p, c in kinds.items()}
        self.cues = cues

    def predicate(self, rng: random.Random, kind: str, sentence: str, value: str | None,
                  avoid: set[str], inputs: dict[str, Any]) -> str | None:
        """Half the time a random predicate of `kind` from the ontology, else the one whose quote
        and value words fit best (the student's mistake: a template forced onto another fact)."""
        allowed = set(ontology.vocabulary(inputs))
        near = set().union(*(_pred_stems(a) for a in avoid))
        choices = [p for p in self.by_kind.get(kind, self.every) if p in allowed
                   and p not in avoid and not (_pred_stems(p) & near)]
        if not choices:
            return None
        if self.cues is None or rng.random() < 0.5:
            return rng.choice(choices)
        qstems, vstems = v.content_stems(sentence), v.content_stems(value)
        return max(choices, key=lambda p: (self.cues.affinity("quote", p, qstems)[0]
                                           + self.cues.affinity("value", p, vstems)[0], p))


def _span_value(rng: random.Random, sentence: str, avoid: set[str]) -> str | None:
    """A short span (1 to 4 words) of `sentence` sharing less than half its content with
    `avoid` (stems), stripped of punctuation; "my" becomes "their" a third of the time (as the
    student writes it)."""
    tokens = [t.strip(".,;:!?\"'()[]…") for t in sentence.split()]
    tokens = [t for t in tokens if t]
    if not tokens:
        return None
    for _ in range(6):
        length = rng.randint(1, min(4, len(tokens)))
        start = rng.randrange(0, len(tokens) - length + 1)
        span = tokens[start:start + length]
        text = " ".join(span)
        stems = v.content_stems(text)
        if len(text) < 3 or not stems or (avoid and sum(s in avoid for s in stems) * 2
                                          >= len(stems)):
            continue
        if rng.random() < 1 / 3:
            text = " ".join("their" if w.lower() == "my" else w for w in span)
        return text
    return None


def _drift(rng: random.Random, value: str, window_words: list[str]) -> str:
    """`value` with one of its words replaced by a word from elsewhere in the window."""
    tokens = value.split()
    if not window_words:
        return value
    tokens[rng.randrange(len(tokens))] = rng.choice(window_words)
    return " ".join(tokens)


def _sentences(event: dict[str, Any]) -> list[str]:
    """The sentences of an event that it may quote (candidate spans)."""
    spans = set(candidate_spans(event["text"]))
    return [s for a, b in sentence_offsets(event["text"])
            if (s := event["text"][a:b]) in spans]


def _where(value: str, events: list[dict[str, Any]]) -> tuple[str, int] | None:
    """The shortest candidate span (quote, event index) holding every content word of `value`,
    else, for a value no span may hold (a credential), the span just before it."""
    stems = v.content_stems(value)
    if not stems:
        return None
    best = None
    for e in events:
        for span in candidate_spans(e["text"]):
            have = {stem(w) for w in v.words(span)}
            if all(s in have for s in stems) and (best is None or len(span) < len(best[0])):
                best = (span, e["index"])
    if best is None:
        for e in events:
            at = e["text"].find(value)
            before = [s for s in candidate_spans(e["text"]) if 0 <= e["text"].find(s) < at]
            if at >= 0 and before:
                return min(before, key=lambda s: (at - e["text"].find(s), len(s))), e["index"]
    return best


def _persons(row: dict[str, Any]) -> list[str]:
    """The named persons of a row as its truth writes them ("Anna (the user's colleague)")."""
    names = [g["subject"]["name"] for g in row["gold"]["claims"]
             if g["subject"].get("type", "person") == "person"]
    names += [f["subject"] for f in row["truth"]["facts"] if f.get("subject_type", "person")
              == "person"]
    return sorted({n for n in names if not is_user(n)})


def negatives(row: dict[str, Any], pool: Pool, rng: random.Random) -> list[tuple[str, dict]]:
    """(kind, claim) for every perturbation of a row that does not say a current fact."""
    inputs, truth = row["input"], row["truth"]
    events = sorted(inputs["events"], key=lambda e: e["index"])
    by_index = {e["index"]: e for e in events}
    golds = row["gold"]["claims"]
    persons = _persons(row)
    window_words = sorted({w.strip(".,;:!?\"'()") for e in events for w in e["text"].split()
                           if len(w.strip(".,;:!?\"'()")) > 3})
    out: list[tuple[str, dict]] = []

    for g in golds:
        sentence = " ".join(s for _, _, s, _ in v.quote_sentences(g, by_index))
        base = {**g, "subject": dict(g["subject"])}
        # a wrong predicate
        kind = "fact" if g["kind"] == "relationship" else g["kind"]
        fact = next((f for f in truth["facts"] if f["status"] == "current"
                     and f["predicate"] == g["predicate"] and f.get("value") == g["value"]), {})
        avoid = {g["predicate"], *((fact.get("alternatives") or {}).get("predicates", ()))}
        if g["value"]:
            p = pool.predicate(rng, kind, sentence, g["value"], avoid, inputs)
            if p:
                out.append(("wrong_predicate", {**base, "predicate": p, "kind": kind}))
        # another subject
        name = g["subject"]["name"]
        others = [n for n in persons if _subject_key(n) != _subject_key(name)]
        if is_user(name):
            swapped = rng.choice(others) if others else None
        else:
            swapped = "the user" if not others or rng.random() < 0.5 else rng.choice(others)
        if swapped:
            out.append(("subject_swap", {**base, "subject": {"name": swapped, "type": "person"}}))
        # a garbled value
        quote = rng.choice(g["quotes"]) if g["quotes"] else ""
        garbled = _span_value(rng, quote, set(v.content_stems(g["value"])))
        if garbled and rng.random() < 1 / 3:
            garbled = _drift(rng, garbled, window_words)
        if garbled and g["kind"] != "retraction":
            out.append(("garbled_value", {**base, "value": garbled}))
        # the value of another claim of the row
        other_values = [x["value"] for x in golds if x["value"] and not _value_close(
            x["value"], g["value"]) and not set(v.content_stems(x["value"])) <= set(
                v.content_stems(sentence))]
        if other_values and g["kind"] != "retraction":
            out.append(("value_swap", {**base, "value": rng.choice(other_values)}))
        # the wrong kind (only where the grader tells kinds apart)
        new_kind = {"fact": "plan", "event": "plan", "preference": "plan", "belief": "fact",
                    "plan": rng.choice(("fact", "event"))}.get(g["kind"])
        if new_kind and rng.random() < 0.5:
            out.append(("wrong_kind", {**base, "kind": new_kind}))
        # a retraction or a correction read as the old fact
        for old in truth["facts"]:
            if old["status"] not in ("retracted", "superseded", "negated") or not old.get(
                    "value") or _subject_key(old["subject"]) != _subject_key(name):
                continue
            if g["kind"] == "retraction" and old["status"] in ("retracted", "negated"):
                out.append(("negation_lost", {**base, "predicate": old["predicate"],
                                              "value": old["value"], "supersedes": [],
                                              "kind": pool.kind_of.get(old["predicate"], "fact")}))
            elif g.get("supersedes") and old["predicate"] == g["predicate"] and not \
                    _value_close(old["value"], g["value"]):
                out.append(("stale", {**base, "value": old["value"], "supersedes": []}))

    # a value the truth says must not be stored, claimed from its sentence
    for fact in truth["facts"]:
        if fact["status"] not in NEGATED_STATUSES or not fact.get("value"):
            continue
        found = _where(fact["value"], events)
        if found is None:
            continue
        quote, index = found
        predicate = fact["predicate"]
        if predicate not in pool.kind_of:   # a predicate no gold uses (decision, credential)
            predicate = pool.predicate(rng, "fact", quote, fact["value"], set(), inputs)
            if predicate is None:
                continue
        out.append((f"forbidden:{fact['status']}", _claim(
            fact["subject"], predicate, fact["value"], pool.kind_of.get(predicate, "fact"),
            [quote], [index], fact.get("subject_type", "person"))))

    # claims made from sentences that hold no fact to store
    gold_quotes = [(q, i) for g in golds for q, i in zip(g["quotes"], g["source_indices"],
                                                         strict=False)]
    values = [f["value"] for f in truth["facts"] if f.get("value")]
    made = {"question": [], "other_speaker": [], "no_fact": []}
    for e in events:
        for s in _sentences(e):
            if any(i == e["index"] and (q in s or s in q) for q, i in gold_quotes):
                continue
            if s.rstrip().endswith("?"):
                made["question"].append((s, e["index"]))
            elif e["role"] != "user" or not e.get("trusted", True):
                made["other_speaker"].append((s, e["index"]))
            elif not any(v.content_stems(x) and set(v.content_stems(x)) <= {
                    stem(w) for w in v.words(s)} for x in values):
                made["no_fact"].append((s, e["index"]))
    for kind, limit in (("question", 2), ("other_speaker", 2), ("no_fact", 3)):
        found = made[kind]
        for s, index in rng.sample(found, min(limit, len(found))):
            value = _span_value(rng, s, set())
            claim_kind = rng.choice(("fact", "event", "preference", "plan"))
            p = pool.predicate(rng, claim_kind, s, value, set(), inputs) if value else None
            if p:
                out.append((kind, _claim("the user", p, value, claim_kind, [s], [index])))

    return [(k, c) for k, c in out if not says_current(c, truth)]


def row_rng(seed: int, row_id: str) -> random.Random:
    return random.Random(int(hashlib.sha256(f"{seed}:{row_id}".encode()).hexdigest()[:16], 16))


def fold_of(family: str) -> int:
    return int(hashlib.sha256(family.encode()).hexdigest(), 16) % FOLDS


def examples(rows: list[dict[str, Any]], corpus: str, pool: Pool, seed: int) -> list[Example]:
    out = []
    for row in rows:
        common = {"inputs": row["input"], "corpus": corpus, "family": row["family"]}
        out += [{**common, "claim": g, "label": 1, "kind": "gold"} for g in row["gold"]["claims"]]
        out += [{**common, "claim": c, "label": 0, "kind": k}
                for k, c in negatives(row, pool, row_rng(seed, row["id"]))]
    return out


# --- the regression -------------------------------------------------------------------------------

def fit(x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = L2, steps: int = 50
        ) -> tuple[np.ndarray, float]:
    """Weighted L2 logistic regression by Newton's method on standardised `x` (the bias not
    penalised): (weights, bias)."""
    n, d = x.shape
    xb = np.hstack([x, np.ones((n, 1))])
    beta = np.zeros(d + 1)
    w = w / w.sum()
    penalty = np.full(d + 1, l2)
    penalty[-1] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(xb @ beta)))
        grad = xb.T @ (w * (p - y)) + penalty * beta
        hess = (xb * (w * p * (1 - p))[:, None]).T @ xb + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return beta[:-1], float(beta[-1])


def _matrix(exs: list[Example], cues: v.Cues) -> np.ndarray:
    return np.array([[f[n] for n in v.MODEL_FEATURES] for f in (
        v.features(e["claim"], e["inputs"], cues) for e in exs)], dtype=float).reshape(
        len(exs), len(v.MODEL_FEATURES))


def _weights(exs: list[Example]) -> np.ndarray:
    """Each corpus weighs the same, and within it each class."""
    count = Counter((e["corpus"], e["label"]) for e in exs)
    return np.array([1.0 / count[(e["corpus"], e["label"])] for e in exs])


def _round(xs: Iterable[float], digits: int = 6) -> list[float]:
    return [round(float(x), digits) for x in xs]


def _manifest(folder: Path) -> str:
    path = folder / "manifest.json"
    if not path.is_file():
        raise VerifierTrainError(f"no manifest.json: training corpus {folder}")
    return json.loads(path.read_text("utf-8"))["manifest_sha256"]


def _extract_rows(folder: Path, split: str) -> list[dict[str, Any]]:
    return [r for r in load_rows(folder, split, form="canonical") if r["task"] == "extract"]


def proposal_examples(path: Path) -> tuple[dict[str, Any], list[Example]]:
    """(provenance record, labelled examples) of a file of graded proposals
    (`eval/studies/proposals.py`): every claim a model proposed on a training corpus's train
    split, a positive where the evaluator's grader found it supported; the record is the file's
    path, sha256 and header. A file of any other split is refused."""
    try:
        data = path.read_bytes()
        lines = [json.loads(line) for line in data.decode("utf-8").splitlines() if line]
    except (OSError, ValueError) as exc:
        raise VerifierTrainError(f"{path}: not a proposals file ({exc})") from None
    head = lines[0].get("proposals") if lines and isinstance(lines[0], dict) else None
    if not isinstance(head, dict):
        raise VerifierTrainError(f"{path}: no proposals header (write it with "
                                 "eval/studies/proposals.py)")
    if head.get("set") != "train" or Path(str(head.get("corpus"))).name in REFUSED:
        raise VerifierTrainError(f"{path}: proposals must come from a training corpus's train "
                                 f"split, not {head.get('set')!r} of {head.get('corpus')}")
    name = f"proposals {head['arm']}@{Path(str(head['corpus'])).name}"
    out: list[Example] = []
    for row in lines[1:]:
        for claim, good in zip(row["claims"], row["supported"], strict=True):
            out.append({"inputs": row["inputs"], "corpus": name, "family": row["family"],
                        "claim": claim, "label": int(good),
                        "kind": "proposed_supported" if good else "proposed_unsupported"})
    if not out:
        raise VerifierTrainError(f"{path}: no proposed claim")
    return {"file": str(path), "sha256": hashlib.sha256(data).hexdigest(), **head}, out


def evaluate(model: v.Verifier, exs: list[Example]) -> dict[str, Any]:
    """AUC of the verifier's score, gold against every negative and against each kind."""
    scores = [model.score(e["claim"], e["inputs"]) for e in exs]
    pos = [s for s, e in zip(scores, exs, strict=True) if e["label"]]
    by_kind: dict[str, list[float]] = {}
    for s, e in zip(scores, exs, strict=True):
        if not e["label"]:
            by_kind.setdefault(e["kind"], []).append(s)
    return {"auc": round(auc(pos, [s for k in by_kind.values() for s in k]), 4),
            "positives": len(pos), "negatives": sum(len(k) for k in by_kind.values()),
            "by_kind": {k: {"n": len(s), "auc": round(auc(pos, s), 4)}
                        for k, s in sorted(by_kind.items())}}


def train(corpora: list[Path], seed: int = SEED, l2: float = L2, command: str = "",
          validate: bool = True, proposals: list[Path] | None = None
          ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(weights, validation report): the verifier trained on the train splits of `corpora` (and
    the graded `proposals` files), measured on their val splits."""
    for folder in corpora:
        if folder.name in REFUSED:
            raise VerifierTrainError(f"a test or design set, never trained on: {folder}")
    train_rows = {str(f): _extract_rows(f, "train") for f in corpora}
    read = [proposal_examples(path) for path in proposals or []]
    proposed = [e for _, examples_ in read for e in examples_]
    # each corpus counts about as much in the cue table (the smaller one's claims counted more
    # than once): the natural text's words are not drowned by the generator's templates
    largest = max(sum(len(r["gold"]["claims"]) for r in rows) for rows in train_rows.values())
    times = {name: max(1, round(largest / max(1, sum(len(r["gold"]["claims"]) for r in rows))))
             for name, rows in train_rows.items()}
    every = [(g, r["input"], times[name]) for name, rows in train_rows.items() for r in rows
             for g in r["gold"]["claims"]]
    golds = [g for g, *_ in every]
    exs: list[Example] = []
    parts: list[np.ndarray] = []
    for k in range(FOLDS):
        inside = [(name, [r for r in rows if fold_of(r["family"]) == k])
                  for name, rows in train_rows.items()]
        cues = v.Cues(v.Cues.count((g, r["input"], times[name])
                                   for name, rows in train_rows.items() for r in rows
                                   if fold_of(r["family"]) != k for g in r["gold"]["claims"]))
        pool = Pool(golds, cues)
        fold_exs = [e for name, rows in inside for e in examples(rows, name, pool, seed)]
        fold_exs += [e for e in proposed if fold_of(e["family"]) == k]
        exs += fold_exs
        parts.append(_matrix(fold_exs, cues))
    x = np.vstack(parts)
    y = np.array([e["label"] for e in exs], dtype=float)
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    coef, bias = fit((x - mean) / scale, y, _weights(exs), l2)
    fitted = ((x - mean) / scale) @ coef + bias
    train_auc = {}
    for name in dict.fromkeys(e["corpus"] for e in exs):   # on the examples it was fitted on
        # (their cue features cross-fitted)
        mine = [(s, e["label"]) for s, e in zip(fitted, exs, strict=True) if e["corpus"] == name]
        train_auc[name] = round(auc([s for s, y_ in mine if y_], [s for s, y_ in mine if not y_]),
                                4)
    table = v.Cues.count(every)
    counts: dict[str, dict[str, int]] = {}
    for e in exs:
        counts.setdefault(e["corpus"], Counter())[e["kind"]] += 1
    weights = {
        "version": v.VERSION, "features": list(v.MODEL_FEATURES), "mean": _round(mean),
        "scale": _round(scale), "weights": _round(coef), "bias": round(bias, 6), "cues": table,
        "provenance": {
            "command": command, "seed": seed, "l2": l2, "folds": FOLDS, "cue_times": times,
            "corpora": {str(f): {"manifest_sha256": _manifest(f), "split": "train",
                                 "rows": len(train_rows[str(f)])} for f in corpora},
            "proposals": [record for record, _ in read],
            "examples": {name: dict(sorted(c.items())) for name, c in counts.items()},
            "train_auc": train_auc}}
    report: dict[str, Any] = {}
    if validate:
        model = v.Verifier(weights)
        pool = Pool(golds, model.cues)
        for f in corpora:
            val = examples(_extract_rows(f, "val"), str(f), pool, seed)
            report[str(f)] = evaluate(model, val)
        weights["provenance"]["validation"] = {
            name: {"split": "val", "auc": r["auc"], "positives": r["positives"],
                   "negatives": r["negatives"]} for name, r in report.items()}
    return weights, report


def dump(weights: dict[str, Any]) -> str:
    """The weights file's text: one key a line, the cue table on one line."""
    lines = [f" {json.dumps(k)}: {json.dumps(weights[k], sort_keys=True, ensure_ascii=False)}"
             for k in sorted(weights)]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="train/verifier.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", action="append", type=Path,
                   help=f"a training corpus (repeatable; default: {', '.join(DEFAULT_CORPORA)}); "
                        "its train split is trained on, its val split measured")
    p.add_argument("--out", type=Path, default=v.DEFAULT_WEIGHTS, help="the weights file "
                   "(default: the committed src/memworker/inference/verifier.json)")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--l2", type=float, default=L2)
    p.add_argument("--report", type=Path, help="also write the validation report (JSON)")
    p.add_argument("--proposals", action="append", default=[], type=Path, metavar="FILE",
                   help="also train on a model's graded proposals on a training corpus's train "
                        "split (written by eval/studies/proposals.py; repeatable)")
    args = p.parse_args(argv)
    corpora = args.corpus or [Path(c) for c in DEFAULT_CORPORA]
    command = " ".join(["python train/verifier.py", *(argv if argv is not None else sys.argv[1:])])
    try:
        weights, report = train(corpora, args.seed, args.l2, command, proposals=args.proposals)
    except (VerifierTrainError, OSError, ValueError) as exc:
        print(f"train/verifier.py: error: {exc}", file=sys.stderr)
        return 2
    args.out.write_text(dump(weights), "utf-8")
    for name, counts in weights["provenance"]["examples"].items():
        print(f"{name} (train): " + ", ".join(f"{k} {n}" for k, n in counts.items()))
    for name, r in report.items():
        print(f"{name} (val): AUC {r['auc']:.3f} ({r['positives']} gold, {r['negatives']} "
              "perturbed); by kind: " + ", ".join(f"{k} {x['auc']:.3f} (n={x['n']})"
                                                   for k, x in r["by_kind"].items()))
    if args.report:
        args.report.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", "utf-8")
    print(f"wrote {args.out}")
    return 0
