"""`python eval/studies/hybrid.py`: what a hybrid rules-and-model worker would score, from an
evaluation folder that holds a rules arm and a model arm.

A hybrid worker runs the rules and the model on the same request and merges their answers before
the codec. Both are deterministic (the rules by construction, a model arm at temperature 0 with a
fixed seed), so the hybrid's answer to a row is a function of the two arms' answers already in the
folder: this composes it from their samples — the two verified wire answers merged, the merged text
decoded by the same codec (`memworker.inference.codec.decode`, the row's request schema) and graded
by the same grader — and writes a new folder (config.json, samples.jsonl with the two arms and the
hybrid, summary.json, report.md with the paired comparisons). It runs no model.

Policies (per task):

- extract `union`: the rules' claims, then the model's claims that say something the rules did not
  (another subject, predicate family or value), up to the schema's claim limit;
- extract `fill`: the rules' claims, then only those model claims whose quotes cite no event the
  rules took a claim from (the model fills the sentences the rules cannot read);
- extract, consolidate, reflect `rules` or `model`: that arm's answer as it is;
- reflect `fallback`: the model's answer, or the rules' where the model abstains and the rules
  answer from a memory holding every content word of the question (the worker's
  `reflect_rules="fallback"`, `memworker.inference.hybrid.falls_back`);
- consolidate, reflect `derived`: the model's answer with its choices read from its own text
  (`memworker.derive`): an observation's supports are the facts its statement states, a
  reflection's citations the evidence its answer states, and an answer that states none
  abstains. Only the model's text goes to the codec (wire v4), which reads them; on a sample of
  an older wire (ids written before or after the text) the written supports, citations and flag
  are ignored. It is a function of the model's raw answer alone, so it is what a worker whose
  codec derived them scores (on a wire v4 sample it is the `model` policy).

With `--min-score T` the model's extract claims scoring below T under `--score` (a claim's score
from its own token log-probabilities, `memworker.eval.SCORES`; the model arm must have
run with `eval/run.py --logprobs`) are dropped before the merge: the rules plus only the model's
surest claims. Set T on half A of the val rows with `eval/studies/confidence.py`, read it on half B.

A hybrid row's seconds are the two arms' seconds added (the worker runs both). Choose a policy on
the val split only; on held-out, test and natural sets this describes a result.

    python eval/studies/hybrid.py --out receipts/eval/val --model student --to /tmp/hybrid
    python eval/studies/hybrid.py --out receipts/eval/val --model student --to /tmp/surest \\
        --min-score -0.022
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from memworker.eval.runner import SAMPLES, EvalError
from memworker.eval.studies import rowtools
from memworker.eval.studies.rowtools import (
    EXTRACT_POLICIES,
    OTHER_POLICIES,
    REFLECT_POLICIES,
    compose_row,
    read_folder,
)
from memworker.eval.summary import report_markdown, summarise, table_lines
from memworker.hashing import canonical_json, write_json
from memworker.inference.gate import SCORES

DEFAULT_SCORE = "first(predicate)+first(value)"


def surest(row: dict[str, Any], sample: dict[str, Any], score: str,
           threshold: float) -> dict[str, Any]:
    """An extract sample of the model with its claims scoring below `threshold` dropped (a failed
    sample as it is; one without log-probabilities is an error)."""
    if sample.get("output") is None:
        return sample
    stats = rowtools.kept_claim_stats(sample, row["input"])
    if stats is None:
        raise EvalError(f"{sample['id']}: arm {sample['arm']!r} has no token log-probabilities "
                        "for --min-score; run it with `eval/run.py --logprobs`")
    return rowtools.surest(sample, stats, score, threshold)


def compose(out_dir: Path, model: str, to: Path, policies: dict[str, str], *,
            rules: str = "rules", name: str = "hybrid", resamples: int = 2000,
            min_score: float | None = None, score: str = DEFAULT_SCORE) -> dict[str, Any]:
    """Write the hybrid folder `to` from the evaluation folder `out_dir`; returns its summary.
    With `min_score`, the model's extract claims scoring below it under `score` are dropped
    before the merge."""
    config, rows, samples = read_folder(out_dir)
    by_arm: dict[str, dict[str, dict[str, Any]]] = {}
    for s in samples:
        by_arm.setdefault(s["arm"], {})[s["id"]] = s
    for arm in (rules, model):
        if arm not in by_arm:
            raise EvalError(f"{out_dir}: no samples of arm {arm!r} (arms: "
                            f"{', '.join(sorted(by_arm)) or 'none'})")
    if name in (rules, model):
        raise EvalError(f"the hybrid's name {name!r} is already an arm's")
    both = [r for r in rows if r["id"] in by_arm[rules] and r["id"] in by_arm[model]]
    if not both:
        raise EvalError(f"{out_dir}: no row has samples of both {rules!r} and {model!r}")
    if min_score is not None and score not in SCORES:
        raise EvalError(f"unknown score {score!r} (one of: {', '.join(sorted(SCORES))})")
    to.mkdir(parents=True, exist_ok=True)
    out_samples = [by_arm[a][r["id"]] for a in (model, rules) for r in both]

    def model_sample(r: dict[str, Any]) -> dict[str, Any]:
        s = by_arm[model][r["id"]]
        return surest(r, s, score, min_score) if (
            min_score is not None and r["task"] == "extract") else s

    out_samples += [compose_row(r, by_arm[rules][r["id"]], model_sample(r), policies, name)
                    for r in both]
    with open(to / SAMPLES, "wb") as fh:
        for s in out_samples:
            fh.write(canonical_json(s) + b"\n")
    new_config = {**config, "arms": {model: config["arms"].get(model, model),
                                     rules: config["arms"].get(rules, "rules"),
                                     name: f"hybrid of {rules} and {model}: " + ", ".join(
                                         f"{t} {p}" for t, p in policies.items()) + (
                                         f" (model's extract claims with {score} ≥ {min_score})"
                                         if min_score is not None else "")},
                  "hybrid": {"from": str(out_dir), "rules": rules, "model": model,
                             "policies": policies, "rows": len(both),
                             **({"min_score": {"score": score, "threshold": min_score}}
                                if min_score is not None else {})}}
    write_json(to / "config.json", new_config)
    summary = summarise(both, out_samples, [model, rules, name], config=new_config,
                        resamples=resamples)
    write_json(to / "summary.json", summary)
    (to / "report.md").write_text(report_markdown(summary), "utf-8")
    return summary


def sweep(out_dir: Path, model: str, thresholds: list[float], policies: dict[str, str], *,
          rules: str = "rules", score: str = DEFAULT_SCORE, resamples: int = 2000
          ) -> list[dict[str, Any]]:
    """For each threshold, the hybrid of `compose` (written to a temporary folder) against the
    rules at extraction: support and coverage, the paired differences and their intervals, and
    the smaller of the two lower bounds (what the release gate needs above 0)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, t in enumerate(thresholds):
            summary = compose(out_dir, model, Path(tmp) / str(n), policies, rules=rules,
                              name="gated", resamples=resamples, min_score=t, score=score)
            versus = next(c for c in summary["comparisons"]
                          if c["a"] == "gated" and c["b"] == rules)["tasks"]["extract"]
            mine = summary["metrics"]["gated"]["extract"]["metrics"]
            row = {"threshold": t}
            for metric in ("extract_support", "extract_coverage"):
                row[metric] = {"num": mine[metric]["num"], "den": mine[metric]["den"],
                               "diff": versus[metric]["diff"], "ci": versus[metric]["ci"]}
            # an undefined difference (no claim kept: no support) cannot pass the gate
            row["min_lower"] = min(row[m]["ci"][0] if row[m]["ci"] else float("-inf")
                                   for m in ("extract_support", "extract_coverage"))
            rows.append(row)
    return rows


def _sweep_lines(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in rows:
        cells = []
        for metric in ("extract_support", "extract_coverage"):
            m = r[metric]
            versus = (f"{m['diff']:+.3f} [{m['ci'][0]:+.3f}, {m['ci'][1]:+.3f}]" if m["ci"]
                      else "undefined")
            cells.append(f"{metric[8:]} {m['num']}/{m['den']}, vs rules {versus}")
        lines.append(f"T {r['threshold']:g}: " + "; ".join(cells)
                     + f"; smaller lower bound {r['min_lower']:+.3f}")
    best = max(rows, key=lambda r: r["min_lower"])
    lines.append(f"largest smaller lower bound: T {best['threshold']:g} ({best['min_lower']:+.3f})")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eval/studies/hybrid.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="an evaluation folder with a rules and a model arm")
    p.add_argument("--model", required=True, help="the model arm's name in that folder")
    p.add_argument("--rules", default="rules", help="the rules arm's name (rules)")
    p.add_argument("--to", help="the hybrid's folder (written; not with --sweep)")
    p.add_argument("--name", default="hybrid", help="the hybrid arm's name (hybrid)")
    p.add_argument("--extract", default="union", choices=EXTRACT_POLICIES)
    p.add_argument("--consolidate", default="rules", choices=OTHER_POLICIES)
    p.add_argument("--reflect", default="rules", choices=REFLECT_POLICIES)
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (2000)")
    p.add_argument("--min-score", type=float, default=None, metavar="T",
                   help="drop the model's extract claims scoring below T before the merge (the "
                        "model arm must have run with eval/run.py --logprobs)")
    p.add_argument("--score", default=DEFAULT_SCORE, choices=sorted(SCORES),
                   help=f"the claim score --min-score applies to ({DEFAULT_SCORE})")
    p.add_argument("--sweep", metavar="T,T,...",
                   help="instead of one folder: for each threshold, the model's extract claims "
                        "scoring below it dropped, support and coverage against the rules with "
                        "their paired intervals (written nowhere); with --extract model, what a "
                        "claim gate at each threshold would score (choose on val only)")
    args = p.parse_args(argv)
    policies = {"extract": args.extract, "consolidate": args.consolidate, "reflect": args.reflect}
    if (args.min_score is not None or args.sweep) and args.extract == "rules":
        p.error("--min-score and --sweep filter the model's extract claims: not with "
                "--extract rules")
    if args.sweep:
        try:
            thresholds = [float(t) for t in args.sweep.split(",") if t.strip()]
            rows = sweep(Path(args.out), args.model, thresholds, policies, rules=args.rules,
                         score=args.score, resamples=args.resamples)
        except (EvalError, OSError, KeyError, ValueError) as exc:
            print(f"eval/studies/hybrid.py: error: {exc}", file=sys.stderr)
            return 2
        print("\n".join(_sweep_lines(rows)))
        return 0
    if args.to is None:
        p.error("give --to (the hybrid's folder) or --sweep")
    try:
        summary = compose(Path(args.out), args.model, Path(args.to), policies, rules=args.rules,
                          name=args.name, resamples=args.resamples, min_score=args.min_score,
                          score=args.score)
    except (EvalError, OSError, KeyError, ValueError) as exc:
        print(f"eval/studies/hybrid.py: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(table_lines(summary)))
    print(f"wrote {args.to}/summary.json and report.md")
    return 0
