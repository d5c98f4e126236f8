"""`python eval/confidence.py`: does the model's own probability tell its right extract claims from
its wrong ones, and what would dropping the unsure ones score?

Input: an evaluation folder whose model arm ran with `eval/run.py --logprobs` (every answer token's
log-probability under the model, before the grammar) and a rules arm. For each claim the codec kept,
the tokens of each wire field (quote text, subject name and type, predicate, value, kind) are found
in the raw answer (in the turns form, each turn's own answer and tokens), and a claim's score is
one of `SCORES` (e.g. the first predicate token's
log-probability plus the first value token's). Printed:

- the area under the ROC curve of each score (a supported claim ranked above an unsupported one);
- for the chosen scores, at thresholds set by quantiles of the claim scores on half A of the rows,
  the support and coverage of (1) the model with the claims below the threshold dropped and (2) the
  union of the rules' claims and those kept model claims (`eval/hybrid.py --extract union`), on
  half A, half B and all rows, beside the rules. The halves split episodes by the parity of their
  name's sha256, so a threshold can be chosen on A and read on B.

Every figure is a regrade with the evaluator's own grader and codec (dropping claims is a function
of the raw answer and its log-probabilities); no model runs. Choose on the val split only.

    python eval/confidence.py --out /tmp/e15 --model student
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memworker import wire
from memworker.eval.runner import EvalError, grade_sample, load_eval_rows, read_samples

Span = tuple[int, int]
Fields = dict[str, dict[str, float]]

#: a claim's score from its fields' token log-probabilities (higher: surer)
SCORES: dict[str, Callable[[Fields], float]] = {
    "first(predicate)+first(value)": lambda f: f["predicate"]["first"] + f["value"]["first"],
    "sum(predicate,value)": lambda f: f["predicate"]["sum"] + f["value"]["sum"],
    "min(name,predicate,value)": lambda f: min(f["name"]["min"], f["predicate"]["min"],
                                               f["value"]["min"]),
    "mean(claim)": lambda f: f["claim"]["mean"],
    "min(claim)": lambda f: f["claim"]["min"],
    "min(quote)": lambda f: f["quote"]["min"],
}
QUANTILES = (0.5, 0.7, 0.8, 0.9, 0.95)
_DROPPED = re.compile(r"^claims/(\d+): dropped")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")


def _value_spans(text: str, i: int = 0) -> tuple[tuple[Span, list[Any]], int]:
    """((span, children), end) of the JSON value at text[i:]; a string's span is inside its
    quotes; an object's children are its values (keys skipped)."""
    while text[i] in " \t\r\n":
        i += 1
    if text[i] == '"':
        j = i + 1
        while text[j] != '"':
            j += 2 if text[j] == "\\" else 1
        return ((i + 1, j), []), j + 1
    if text[i] in "[{":
        close, kids, j = ("]" if text[i] == "[" else "}"), [], i + 1
        while True:
            while text[j] in " \t\r\n,":
                j += 1
            if text[j] == close:
                return ((i, j + 1), kids), j + 1
            if close == "}":
                _, j = _value_spans(text, j)   # the key
                while text[j] in " \t\r\n:":
                    j += 1
            kid, j = _value_spans(text, j)
            kids.append(kid)
    m = _NUMBER.match(text, i)
    if m is None:
        raise ValueError(f"not JSON at offset {i}: {text[i:i + 20]!r}")
    return ((i, m.end()), []), m.end()


def claim_spans(raw: str) -> list[dict[str, Span]]:
    """Character spans of each wire claim's fields in a raw extract answer `{"claims":[...]}`:
    the `CLAIM_FIELDS`, `quote` (the first quote's text) and `claim` (the whole array)."""
    (_, (claims,)), _ = _value_spans(raw)
    out = []
    for span, fields in claims[1]:
        spans = {name: value[0] for name, value in zip(wire.CLAIM_FIELDS, fields, strict=False)}
        quotes = fields[0][1]
        spans["quote"] = quotes[0][1][0][0] if quotes else spans["quotes"]
        spans["claim"] = span
        out.append(spans)
    return out


def field_stats(spans: dict[str, Span], tokens: list[list[Any]]) -> Fields:
    """Per field, the log-probabilities of the tokens that overlap its span: min, sum, mean and
    the first one (an empty field — "" — takes the token that holds its position)."""
    offsets, pos = [], 0
    for piece, logprob in tokens:
        offsets.append((pos, pos + len(piece), float(logprob)))
        pos += len(piece)
    stats = {}
    for name, (a, b) in spans.items():
        overlap = [lp for s, e, lp in offsets if s < b and e > a] if b > a else []
        lps = overlap or [lp for s, e, lp in offsets if s <= a < e] or [0.0]
        stats[name] = {"min": min(lps), "sum": sum(lps), "mean": sum(lps) / len(lps),
                       "first": lps[0]}
    return stats


def _kept(spans: list[Any], diagnostics: list[str], prefix: str = "") -> list[Any]:
    """`spans` (one per claim of an answer, in order) without the claims the codec dropped
    (its diagnostics `<prefix>claims/N: dropped ...`)."""
    dropped = {int(m.group(1)) for d in diagnostics if d.startswith(prefix)
               and (m := _DROPPED.match(d[len(prefix):]))}
    return [s for n, s in enumerate(spans) if n not in dropped]


def _tokens(sample: dict[str, Any], attempt: dict[str, Any]) -> list[list[Any]] | None:
    tokens = attempt.get("token_logprobs")
    if tokens and "".join(p for p, _ in tokens) != attempt["raw"]:
        raise EvalError(f"{sample['id']}: the recorded tokens do not spell the raw answer")
    return tokens or None


def kept_claim_stats(sample: dict[str, Any], inputs: dict[str, Any] | None = None
                     ) -> list[Fields] | None:
    """Field statistics of each claim in `sample["output"]` (the codec's kept claims, in order),
    or None when the sample has none to score (failed, or no log-probabilities recorded).

    A sample in the turns form (`eval/run.py --extract-form turns`) is scored from each turn's
    accepted generation (its own tokens): the claims each turn kept, joined in turn order, less
    those the merge dropped (a repeat across turns) and those beyond the contract's limit. Its
    turns' event indices come from `inputs` (the row's input)."""
    if sample.get("output") is None:
        return None
    n_out = len(sample["output"]["claims"])
    if sample.get("turns") is not None:
        if inputs is None:
            raise EvalError(f"{sample['id']}: a turns-form sample needs its row's input")
        from memworker.turns import turn_events

        accepted = [t for t in sample["turns"] if t.get("error") is None]
        events = turn_events(inputs["events"])
        if len(accepted) != len(events):
            raise EvalError(f"{sample['id']}: {len(accepted)} accepted turns for "
                            f"{len(events)} events")
        merged: list[tuple[dict[str, Span], list[list[Any]]]] = []
        for event, turn in zip(events, accepted, strict=True):
            tokens = _tokens(sample, turn)
            if tokens is None:
                return None
            merged += [(spans, tokens) for spans in _kept(
                claim_spans(turn["raw"]), sample["diagnostics"], f"event {event}: ")]
        kept = _kept(merged, sample["diagnostics"])[:n_out]
    else:
        attempt = sample["attempts"][-1]
        tokens = _tokens(sample, attempt)
        if tokens is None:
            return None
        kept = [(spans, tokens) for spans in _kept(claim_spans(attempt["raw"]),
                                                   sample["diagnostics"])]
    if len(kept) != n_out:
        raise EvalError(f"{sample['id']}: {len(kept)} claims found in the raw answer after the "
                        f"codec's drops, {n_out} in its output")
    return [field_stats(spans, tokens) for spans, tokens in kept]


def half(episode: str) -> str:
    return "AB"[int(hashlib.sha256(episode.encode("utf-8")).hexdigest(), 16) % 2]


def auc(positive: list[float], negative: list[float]) -> float:
    """P(a positive scores above a negative), ties counted half."""
    if not positive or not negative:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in positive for n in negative)
    return wins / (len(positive) * len(negative))


def _filtered(sample: dict[str, Any], keep: list[bool]) -> dict[str, Any]:
    return {**sample,
            "output": {**sample["output"], "claims": [c for c, k in zip(
                sample["output"]["claims"], keep, strict=True) if k]},
            "wire": {**sample["wire"], "claims": [c for c, k in zip(
                sample["wire"]["claims"], keep, strict=True) if k]}}


def surest(sample: dict[str, Any], stats: list[Fields], score: str,
           threshold: float) -> dict[str, Any]:
    """`sample` without its claims whose `score` (from `stats`, `kept_claim_stats`'s) is below
    `threshold`."""
    return _filtered(sample, [SCORES[score](f) >= threshold for f in stats])


def _counts(verdicts: dict[str, Any]) -> list[int]:
    c = verdicts["counts"]
    return [c["supported"], c["claims"], c["covered"], c["required"]]


class Rows:
    """The extract rows of a folder with their model and rules samples and claim statistics."""

    def __init__(self, out_dir: Path, model: str, rules: str = "rules"):
        config_path = out_dir / "config.json"
        if not config_path.is_file():
            raise EvalError(f"{out_dir}: no config.json (not an eval/run.py folder)")
        config = json.loads(config_path.read_text("utf-8"))
        by_arm: dict[str, dict[str, dict[str, Any]]] = {}
        for s in read_samples(out_dir / "samples.jsonl"):
            by_arm.setdefault(s["arm"], {})[s["id"]] = s
        for arm in (model, rules):
            if arm not in by_arm:
                raise EvalError(f"{out_dir}: no samples of arm {arm!r}")
        rows = [r for r in load_eval_rows(config["corpus"]["path"], config["set"])
                if r["task"] == "extract" and r["id"] in by_arm[model]
                and r["id"] in by_arm[rules]]
        if not rows:
            raise EvalError(f"{out_dir}: no extract row has samples of both arms")
        self.items = [(r, by_arm[model][r["id"]], by_arm[rules][r["id"]],
                       kept_claim_stats(by_arm[model][r["id"]], r["input"])) for r in rows]
        if all(stats is None for *_, stats in self.items):
            raise EvalError(f"{out_dir}: arm {model!r} has no token log-probabilities; run it "
                            "with `eval/run.py --logprobs`")

    def part(self, name: str) -> list[tuple[Any, ...]]:
        return self.items if name == "all" else [i for i in self.items
                                                 if half(i[0]["episode"]) == name]

    def scores(self, score: str, part: str = "all") -> list[float]:
        return [SCORES[score](f) for _, _, _, stats in self.part(part) for f in stats or []]

    def auc(self, score: str) -> float:
        pos, neg = [], []
        for _, model, _, stats in self.items:
            for f, v in zip(stats or [], model["verdicts"]["claims"], strict=False):
                (pos if v["verdict"] == "supported" else neg).append(SCORES[score](f))
        return auc(pos, neg)

    def totals(self, part: str, arm: str, score: str | None = None,
               threshold: float = float("-inf")) -> list[int]:
        """[supported, claims, covered, required] of `arm` ("model", "rules", or "union": the
        rules' claims plus the model's kept ones) with the model's claims scoring below
        `threshold` dropped."""
        from memworker.eval.hybrid import compose_row

        total = [0, 0, 0, 0]
        for row, model, rules, stats in self.part(part):
            if arm == "rules":
                counts = _counts(rules["verdicts"])
            else:
                if stats is not None and score is not None:
                    model = surest(model, stats, score, threshold)
                if arm == "model":
                    counts = _counts(grade_sample(row, model)) if stats is not None \
                        else _counts(model["verdicts"])
                else:   # the hybrid of eval/hybrid.py, composed the same way
                    counts = _counts(compose_row(row, rules, model, {"extract": "union"},
                                                 "union")["verdicts"])
            total = [a + b for a, b in zip(total, counts, strict=True)]
        return total


def _fmt(t: list[int]) -> str:
    return (f"{t[0]}/{t[1]} = {t[0] / t[1]:.3f}, cov {t[2]}/{t[3]} = {t[2] / t[3]:.3f}"
            if t[1] else f"0/0, cov {t[2]}/{t[3]} = {t[2] / t[3]:.3f}")


def report(rows: Rows, scores: list[str], quantiles: tuple[float, ...] = QUANTILES) -> list[str]:
    lines = ["| score | AUC (supported above unsupported) |", "|---|---|"]
    lines += [f"| {name} | {rows.auc(name):.3f} |" for name in SCORES]
    parts = ("A", "B", "all")
    lines += ["", "| | " + " | ".join((f"half {p}" if p != "all" else "all") + f" ({len(rows.part(p))} rows)" for p in parts)
              + " |", "|---|---|---|---|"]
    lines.append("| rules | " + " | ".join(_fmt(rows.totals(p, "rules")) for p in parts) + " |")
    lines.append("| model, every claim | " + " | ".join(_fmt(rows.totals(p, "model"))
                                                      for p in parts) + " |")
    for score in scores:
        values = sorted(rows.scores(score, "A"))
        for q in quantiles:
            t = values[min(int(q * len(values)), len(values) - 1)]
            for arm in ("model", "union"):
                label = "model" if arm == "model" else "rules + model"
                lines.append(f"| {label}, {score} ≥ {t:.3f} (A's q{q:.2f}) | " + " | ".join(
                    _fmt(rows.totals(p, arm, score, t)) for p in parts) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eval/confidence.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="an evaluation folder (model arm run with "
                                                "--logprobs, and a rules arm)")
    p.add_argument("--model", required=True, help="the model arm's name")
    p.add_argument("--rules", default="rules", help="the rules arm's name (rules)")
    p.add_argument("--score", action="append", choices=sorted(SCORES),
                   help="score(s) to sweep (default: first(predicate)+first(value))")
    args = p.parse_args(argv)
    try:
        rows = Rows(Path(args.out), args.model, args.rules)
        lines = report(rows, args.score or ["first(predicate)+first(value)"])
    except (EvalError, OSError, KeyError, ValueError) as exc:
        print(f"eval/confidence.py: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0
