"""`python eval/studies/verifier_auc.py`: does the learned claim verifier
(`memworker.inference.verifier`) tell the model's right extract claims from its wrong ones better
than the model's own log-probability, and what would dropping the claims it doubts score?

Input: an evaluation folder whose model arm ran with `eval/run.py --logprobs` (best with
`--propose`, so that its samples hold every claim it proposed, not only those a gate kept). Every
claim of the model's samples is graded again by the evaluator's grader (`grade_sample`, as
`eval/studies/confidence.py` regrades); printed: the number of claims and of supported ones, the
area under the ROC curve of the log-probability score `first(predicate)+first(value)` and of the
verifier's P(keep), and, for each verifier threshold, the support and coverage of the model arm
with the claims below it dropped, beside the log-probability gate that keeps as many claims.
No model runs.

    python eval/studies/verifier_auc.py --out receipts/eval/val --model student
    python eval/studies/verifier_auc.py --out /tmp/nd --model student --json /tmp/nd/verifier.json
    python eval/studies/verifier_auc.py --out DIR --model e22 --either=-0.055,0.93
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memworker.eval.runner import EvalError, grade_sample
from memworker.eval.studies.confidence import Rows, auc
from memworker.inference.gate import DEFAULT_SCORE, SCORES
from memworker.inference.verifier import DEFAULT_WEIGHTS, Verifier, VerifierError

THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def _only(sample: dict[str, Any], keep: list[bool]) -> dict[str, Any]:
    """`sample` with only its claims (output and wire, in step) where `keep` is true."""
    def pick(claims: list[Any]) -> list[Any]:
        return [c for c, k in zip(claims, keep, strict=True) if k]
    return {**sample, "output": {**sample["output"], "claims": pick(sample["output"]["claims"])},
            "wire": {**sample["wire"], "claims": pick(sample["wire"]["claims"])}}


def _counts(verdicts: dict[str, Any]) -> list[int]:
    c = verdicts["counts"]
    return [c["supported"], c["claims"], c["covered"], c["required"]]


def _totals(t: list[int]) -> dict[str, Any]:
    return {"supported": t[0], "claims": t[1], "support": round(t[0] / t[1], 4) if t[1] else None,
            "covered": t[2], "required": t[3],
            "coverage": round(t[2] / t[3], 4) if t[3] else None}


def study(rows: Rows, verifier: Verifier, thresholds: tuple[float, ...] = THRESHOLDS,
          either: tuple[tuple[float, float], ...] = ()) -> dict[str, Any]:
    """The figures: per claim, its log-probability score, the verifier's P(keep) and its regraded
    verdict; the AUCs; the sweep of verifier thresholds (and the log-probability gate keeping as
    many claims)."""
    claims = []   # (item number, position, logprob score, verifier p, supported)
    for n, (row, model, _, stats) in enumerate(rows.items):
        if stats is None:
            continue
        verdicts = grade_sample(row, model)["claims"]
        for k, (claim, f, v) in enumerate(zip(model["output"]["claims"], stats, verdicts,
                                              strict=True)):
            claims.append((n, k, SCORES[DEFAULT_SCORE](f), verifier.prob(claim, row["input"]),
                           v["verdict"] == "supported"))
    if not claims:
        raise EvalError("the model arm proposed no claim that can be scored")

    def totals(keep: set[tuple[int, int]]) -> list[int]:
        total = [0, 0, 0, 0]
        for n, (row, model, _, stats) in enumerate(rows.items):
            if stats is None:
                counts = _counts(model["verdicts"])
            else:
                mask = [(n, k) in keep for k in range(len(model["output"]["claims"]))]
                counts = _counts(grade_sample(row, _only(model, mask)))
            total = [a + b for a, b in zip(total, counts, strict=True)]
        return total

    def auc_of(i: int) -> float:
        return round(auc([c[i] for c in claims if c[4]], [c[i] for c in claims if not c[4]]), 4)

    by_logprob = sorted(claims, key=lambda c: -c[2])
    sweep = []
    for t in thresholds:
        kept = {(c[0], c[1]) for c in claims if c[3] >= t}
        same = {(c[0], c[1]) for c in by_logprob[:len(kept)]}
        sweep.append({"threshold": t, "kept": len(kept), "verifier": _totals(totals(kept)),
                      "logprob_same_kept": _totals(totals(same))})
    every = {(c[0], c[1]) for c in claims}
    unions = []
    for lp, vt in either:   # a claim kept when either score clears its threshold
        kept = {(c[0], c[1]) for c in claims if c[2] >= lp or c[3] >= vt}
        unions.append({"logprob": lp, "verifier": vt, "kept": len(kept),
                       "totals": _totals(totals(kept))})
    return {"rows": len(rows.items), "claims": len(claims),
            "supported": sum(c[4] for c in claims),
            "auc": {DEFAULT_SCORE: auc_of(2), "verifier": auc_of(3)},
            "every_claim": _totals(totals(every)), "sweep": sweep,
            **({"either": unions} if unions else {})}


def parse_either(specs: list[str]) -> tuple[tuple[float, float], ...]:
    """`--either A,B` values as (A, B) pairs; ValueError naming a malformed one."""
    out = []
    for spec in specs:
        a, sep, b = spec.partition(",")
        if not sep:
            raise ValueError(f"--either wants A,B (two numbers), got {spec!r}")
        out.append((float(a), float(b)))
    return tuple(out)


def _fmt(t: dict[str, Any]) -> str:
    support = f"{t['support']:.3f}" if t["support"] is not None else "-"
    coverage = f"{t['coverage']:.3f}" if t["coverage"] is not None else "-"
    return (f"{t['supported']}/{t['claims']} = {support}, cov {t['covered']}/{t['required']} = "
            f"{coverage}")


def report(figures: dict[str, Any]) -> list[str]:
    lines = [f"{figures['claims']} claims in {figures['rows']} rows, {figures['supported']} "
             "supported", "", "| score | AUC (supported above unsupported) |", "|---|---|"]
    lines += [f"| {name} | {value:.3f} |" for name, value in figures["auc"].items()]
    lines += ["", "| drop below | kept | model, verifier | model, log-prob gate keeping as many |",
              "|---|---|---|---|",
              f"| (every claim) | {figures['claims']} | {_fmt(figures['every_claim'])} | |"]
    lines += [f"| P(keep) {s['threshold']:g} | {s['kept']} | {_fmt(s['verifier'])} | "
              f"{_fmt(s['logprob_same_kept'])} |" for s in figures["sweep"]]
    if figures.get("either"):
        lines += ["", f"| keep if {DEFAULT_SCORE} >= A or P(keep) >= B | kept | model |",
                  "|---|---|---|"]
        lines += [f"| A {u['logprob']:g}, B {u['verifier']:g} | {u['kept']} | "
                  f"{_fmt(u['totals'])} |" for u in figures["either"]]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eval/studies/verifier_auc.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path,
                   help="an evaluation folder (its model arm run with --logprobs and --propose)")
    p.add_argument("--model", required=True, help="the model arm's name")
    p.add_argument("--rules", default="rules", help="the folder's rules arm (rules)")
    p.add_argument("--weights", type=Path, default=DEFAULT_WEIGHTS,
                   help="the verifier's weights (default: the committed verifier.json)")
    p.add_argument("--threshold", type=float, action="append",
                   help="a verifier threshold to sweep (repeatable; default 0.1 ... 0.9)")
    p.add_argument("--either", action="append", default=[], metavar="A,B",
                   help="also the gate that keeps a claim when its log-probability score is at "
                        "least A or its P(keep) at least B (repeatable)")
    p.add_argument("--json", type=Path, help="also write the figures here (JSON)")
    args = p.parse_args(argv)
    try:
        verifier = Verifier.load(args.weights)
        figures = study(Rows(args.out, args.model, args.rules), verifier,
                        tuple(args.threshold or THRESHOLDS), parse_either(args.either))
    except (EvalError, VerifierError, OSError, KeyError, ValueError) as exc:
        print(f"eval/studies/verifier_auc.py: error: {exc}", file=sys.stderr)
        return 2
    figures = {"folder": str(args.out), "model": args.model, "weights": str(args.weights),
               **figures}
    print("\n".join(report(figures)))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n", "utf-8")
    return 0
