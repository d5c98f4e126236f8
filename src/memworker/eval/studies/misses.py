"""`python eval/studies/misses.py --out <eval folder> --model ARM`: which facts an arm finds and
which it misses, by kind of fact.

Coverage says how many of a set's required facts an arm's extract claims cover, not which. This
reads an evaluation folder (its config.json names the set and the corpus, its samples.jsonl the
answers), grades each extract row of the arm again with the evaluator's grader
(`memworker.eval.grade.grade_extract`, whose `facts_covered` names the facts a supported claim
covered), and counts the required current facts, and those covered, by:

- `kind` (fact, relationship, plan, preference, event, retraction, belief);
- `subject` (the user, or someone else);
- `behaviour` (what the hand-written or generated row exercises: a relative date, coreference,
  a replacement, ...; "-" for none);
- `predicate` (the most frequent first).

    python eval/studies/misses.py --out receipts/eval/natural-dev/e22 --model n1
    python eval/studies/misses.py --out receipts/eval/natural-dev/e22 --model n1 --json /tmp/m.json

It reads and grades; it runs no model. Steer by it on val and natural-dev only: on the held-out,
test and natural sets it describes a result, not a signal to tune to.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memworker.eval.grade import grade_extract
from memworker.eval.runner import SAMPLES, EvalError
from memworker.eval.studies.rowtools import read_folder

GROUPS = ("kind", "subject", "behaviour", "predicate")


def _group(fact: dict[str, Any], by: str) -> str:
    if by == "subject":
        return "the user" if fact.get("subject") == "the user" else "someone else"
    return str(fact.get(by) or "-")


def misses(rows: dict[str, dict[str, Any]], samples: list[dict[str, Any]]
           ) -> dict[str, dict[str, list[int]]]:
    """{group: {value: [covered, required]}} over the extract samples given (one arm's)."""
    out: dict[str, dict[str, list[int]]] = {by: {} for by in GROUPS}
    for sample in samples:
        row = rows.get(sample["id"])
        if row is None:
            raise EvalError(f"sample {sample['id']}: no such row in the set")
        covered = set(grade_extract(row, sample.get("output"))["facts_covered"])
        for i, fact in enumerate(row["truth"].get("facts", [])):
            if fact["status"] != "current" or not fact.get("required"):
                continue
            for by in GROUPS:
                cell = out[by].setdefault(_group(fact, by), [0, 0])
                cell[0] += i in covered
                cell[1] += 1
    return out


def report(figures: dict[str, dict[str, list[int]]], top: int = 15) -> str:
    total = [sum(c[0] for c in figures["kind"].values()),
             sum(c[1] for c in figures["kind"].values())]
    lines = [f"required facts covered: {total[0]}/{total[1]}"]
    for by in GROUPS:
        cells = sorted(figures[by].items(), key=lambda kv: (-kv[1][1], kv[0]))
        shown = cells[:top] if by == "predicate" else cells
        lines += ["", f"| {by} | covered | required | share |", "|---|---|---|---|"]
        lines += [f"| {name} | {c} | {n} | {c / n:.3f} |" for name, (c, n) in shown]
        if len(shown) < len(cells):
            rest = [sum(v[0] for _, v in cells[top:]), sum(v[1] for _, v in cells[top:])]
            lines.append(f"| ({len(cells) - top} others) | {rest[0]} | {rest[1]} | "
                         f"{rest[0] / rest[1]:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eval/studies/misses.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="an evaluation folder")
    p.add_argument("--model", required=True, help="the arm whose extract answers are read")
    p.add_argument("--top", type=int, default=15, help="predicates shown (15; the rest summed)")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args(argv)
    folder = Path(args.out)
    try:
        config, every_row, samples = read_folder(folder)
        rows = {r["id"]: r for r in every_row}
        samples = [s for s in samples if s["arm"] == args.model and s["task"] == "extract"]
        if not samples:
            raise EvalError(f"{folder}/{SAMPLES}: no extract samples of arm {args.model!r}")
        figures = misses(rows, samples)
    except (EvalError, OSError, ValueError, KeyError) as exc:
        print(f"eval/studies/misses.py: error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.model} in {folder} ({config['set']}, {len(samples)} extract rows)")
    print(report(figures, args.top))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1, sort_keys=True), "utf-8")
    return 0
