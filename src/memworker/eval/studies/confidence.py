"""`python eval/studies/confidence.py`: does the model's own probability tell its right extract
claims from its wrong ones, and what would dropping the unsure ones score?

Input: an evaluation folder whose model arm ran with `eval/run.py --logprobs` (every answer token's
log-probability under the model, before the grammar) and a rules arm. For each claim the codec kept,
the tokens of each wire field (quote text, subject name and type, predicate, value, kind) are found
in the raw answer (in the turns form, each turn's own answer and tokens), and a claim's score is
one of `SCORES` (e.g. the first predicate token's
log-probability plus the first value token's). Printed:

- the area under the ROC curve of each score (a supported claim ranked above an unsupported one);
- for the chosen scores, at thresholds set by quantiles of the claim scores on half A of the rows,
  the support and coverage of (1) the model with the claims below the threshold dropped and (2) the
  union of the rules' claims and those kept model claims (`eval/studies/hybrid.py --extract union`),
  on half A, half B and all rows, beside the rules. The halves split episodes by the parity of their
  name's sha256, so a threshold can be chosen on A and read on B.

Every figure is a regrade with the evaluator's own grader and codec (dropping claims is a function
of the raw answer and its log-probabilities); no model runs. Choose on the val split only.

    python eval/studies/confidence.py --out /tmp/e15 --model student
    python eval/studies/confidence.py --out receipts/eval/val-e20 --model g3 --early-stop=-0.14
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import statistics
import sys
from pathlib import Path
from typing import Any

from memworker.eval.runner import EvalError, grade_sample, read_samples
from memworker.eval.studies.rowtools import compose_row, kept_claim_stats, read_folder, surest
from memworker.inference.gate import SCORES, Fields, auc, claim_spans, field_stats

__all__ = ["SCORES", "Fields", "claim_spans", "field_stats", "kept_claim_stats", "surest", "half",
           "auc", "Rows", "report", "main"]

QUANTILES = (0.5, 0.7, 0.8, 0.9, 0.95)


def half(episode: str) -> str:
    return "AB"[int(hashlib.sha256(episode.encode("utf-8")).hexdigest(), 16) % 2]


def _counts(verdicts: dict[str, Any]) -> list[int]:
    c = verdicts["counts"]
    return [c["supported"], c["claims"], c["covered"], c["required"]]


class Rows:
    """The extract rows of a folder with their model and rules samples and claim statistics."""

    def __init__(self, out_dir: Path, model: str, rules: str = "rules",
                 corpus: str | Path | None = None):
        _, every_row, samples = read_folder(out_dir, corpus)
        by_arm: dict[str, dict[str, dict[str, Any]]] = {}
        for s in samples:
            by_arm.setdefault(s["arm"], {})[s["id"]] = s
        for arm in (model, rules):
            if arm not in by_arm:
                raise EvalError(f"{out_dir}: no samples of arm {arm!r}")
        rows = [r for r in every_row if r["task"] == "extract" and r["id"] in by_arm[model]
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
                else:   # the hybrid of eval/studies/hybrid.py, composed the same way
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


def early_stop(samples: list[dict[str, Any]], model: str, threshold: float,
               score: str = "first(predicate)+first(value)") -> dict[str, int]:
    """What stopping each turn at its first claim scoring below `threshold` would do, from the
    model arm's turns-form extract samples (each turn's raw answer and tokens): the answer tokens
    it would not write (those after the token holding that claim's first value character, where
    its score is known) and the claims scoring at or above the threshold, as generated (before
    the codec's own checks), that it keeps and that it loses (written after a dropped one). Per
    claim written, `claim_tokens` (its tokens, brackets included) and `value_at` (which of them
    holds the value's first character, counting from 1): how far in a gate can decide."""
    out: dict[str, Any] = {"turns": 0, "turns_cut": 0, "tokens": 0, "tokens_saved": 0,
                           "claims_kept": 0, "claims_lost": 0, "value_at": [], "claim_tokens": []}
    for sample in samples:
        if sample.get("arm") != model or sample.get("task") != "extract":
            continue
        for turn in sample.get("turns") or []:
            if turn.get("error") is not None:
                continue
            tokens = turn.get("token_logprobs")
            if not tokens:
                raise EvalError(f"{sample['id']}: a turn without token log-probabilities")
            ends, pos = [], 0
            for piece, _ in tokens:
                pos += len(piece)
                ends.append(pos)
            cut = None
            for spans in claim_spans(turn["raw"]):
                # the token holding a character: the first whose end lies beyond it
                start = bisect.bisect_right(ends, spans["claim"][0])
                value = bisect.bisect_right(ends, spans["value"][0])
                out["value_at"].append(value - start + 1)
                out["claim_tokens"].append(bisect.bisect_right(ends, spans["claim"][1] - 1)
                                           - start + 1)
                if SCORES[score](field_stats(spans, tokens)) >= threshold:
                    out["claims_lost" if cut is not None else "claims_kept"] += 1
                elif cut is None:
                    cut = value + 1
            out["turns"] += 1
            out["tokens"] += len(tokens)
            if cut is not None:
                out["turns_cut"] += 1
                out["tokens_saved"] += len(tokens) - cut
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eval/studies/confidence.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="an evaluation folder (model arm run with "
                                                "--logprobs, and a rules arm)")
    p.add_argument("--model", required=True, help="the model arm's name")
    p.add_argument("--rules", default="rules", help="the rules arm's name (rules)")
    p.add_argument("--score", action="append", choices=sorted(SCORES),
                   help="score(s) to sweep (default: first(predicate)+first(value))")
    p.add_argument("--early-stop", type=float, metavar="T",
                   help="instead: what stopping each turn at its first claim scoring below T "
                        "would save (answer tokens) and lose (claims at or above T written "
                        "after it), from the model arm's turns-form samples")
    args = p.parse_args(argv)
    if args.early_stop is not None:
        score = (args.score or ["first(predicate)+first(value)"])[0]
        try:
            e = early_stop(read_samples(Path(args.out) / "samples.jsonl"), args.model,
                           args.early_stop, score)
        except (EvalError, OSError, KeyError, ValueError) as exc:
            print(f"eval/studies/confidence.py: error: {exc}", file=sys.stderr)
            return 2
        if not e["turns"]:
            print(f"eval/studies/confidence.py: error: no turns-form extract samples of arm "
                  f"{args.model!r} in {args.out}", file=sys.stderr)
            return 2
        kept = e["claims_kept"] + e["claims_lost"]
        print(f"{score} < {args.early_stop}: {e['turns_cut']} of {e['turns']} turns stopped "
              f"early; answer tokens not written {e['tokens_saved']} of {e['tokens']} "
              f"({e['tokens_saved'] / e['tokens']:.1%}); claims the gate keeps: "
              f"{e['claims_kept']} of {kept} still written, {e['claims_lost']} lost")
        if e["value_at"]:
            print(f"{len(e['value_at'])} claims written: each "
                  f"{statistics.median(e['claim_tokens']):g} tokens (median, brackets included), "
                  f"its score known at the value's first token, a median "
                  f"{statistics.median(e['value_at']):g} tokens in (mean "
                  f"{statistics.mean(e['value_at']):.1f})")
        return 0
    try:
        rows = Rows(Path(args.out), args.model, args.rules)
        lines = report(rows, args.score or ["first(predicate)+first(value)"])
    except (EvalError, OSError, KeyError, ValueError) as exc:
        print(f"eval/studies/confidence.py: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0
