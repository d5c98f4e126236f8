"""`python eval/studies/claims.py --out <eval folder>`: which part of an arm's extract claims is
wrong.

The grader calls a claim *supported* only when subject, predicate family, value and kind all agree
with one current fact, its quotes are exact and it cites a source event of that fact
(`memworker.eval.grade`); a support of 0 says nothing about which of those failed. This reads an
evaluation folder (its config.json names the set and the corpus, its samples.jsonl the arms'
answers), takes each arm's extract claims as the codec kept them, and counts per arm:

- `claims`, `distinct` (a claim repeated word for word counts once from here on);
- `cite a source`: distinct claims that cite a source event of at least one current fact of the
  row (they found a sentence that holds a fact);
- of those, how many agree with one of the facts of the events they cite, field by field:
  `subject`, `predicate` (family), `value`, `kind`, each checked alone with the grader's own
  `subject_match`, `predicate_match`, value key and `kind_match`, and `all four` (the claim
  matches such a fact);
- `supported`: the grader's own count over all claims, repeats included (its numerator).

    python eval/studies/claims.py --out receipts/eval/heldout
    python eval/studies/claims.py --out /tmp/val --arm student --json /tmp/val-claims.json

It reads and grades; it runs no model. Steer training on the train and val splits only: on the
held-out, test and natural sets this is a description of a result, not a signal to tune to.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memworker.eval.grade import (
    claim_matches,
    kind_match,
    predicate_match,
    subject_match,
)
from memworker.eval.runner import EvalError
from memworker.eval.studies.rowtools import read_folder
from memworker.textnorm import value_key

COLUMNS = ("rows", "claims", "distinct", "cite_source", "subject", "predicate", "value", "kind",
           "all_four", "supported")


def _key(claim: dict[str, Any]) -> str:
    return json.dumps(claim, sort_keys=True)


def breakdown(row: dict[str, Any], output: dict[str, Any] | None) -> dict[str, int]:
    """The counts of one extract row's answer (`output` as the codec kept it; None = failed)."""
    current = [f for f in row["truth"].get("facts", []) if f["status"] == "current"]
    claims = (output or {}).get("claims", [])
    out = dict.fromkeys(COLUMNS, 0)
    out["rows"], out["claims"] = 1, len(claims)
    seen: set[str] = set()
    for c in claims:
        key = _key(c)
        if key in seen:
            continue
        seen.add(key)
        out["distinct"] += 1
        cited = set(c.get("source_indices") or [])
        facts = [f for f in current if cited & set(f.get("source_indices") or [])]
        if not facts:
            continue
        out["cite_source"] += 1
        checks = {
            "subject": [subject_match(c["subject"]["name"], f["subject"]) for f in facts],
            "predicate": [bool(f.get("predicate")) and predicate_match(c["predicate"],
                                                                        f["predicate"])
                          for f in facts],
            "value": [value_key(c["value"]) == value_key(f.get("value")) for f in facts],
            "kind": [kind_match(c["kind"], f.get("kind")) for f in facts]}
        for name, ok in checks.items():
            out[name] += any(ok)
        # the grader's own match (grade_extract): subject, predicate family and value, and kind
        out["all_four"] += any(claim_matches(c, f) and kind_match(c["kind"], f.get("kind"))
                               for f in facts)
    return out


def arm_breakdowns(out_dir: Path, arms: list[str] | None = None) -> tuple[str, dict[str, Any]]:
    """(set name, {arm: counts summed over the set's extract rows}) of an evaluation folder."""
    config, every_row, samples = read_folder(out_dir)
    set_name = config["set"]
    rows = {r["id"]: r for r in every_row}
    have = {s["arm"] for s in samples}
    names = arms or sorted(have)
    missing = [a for a in names if a not in have]
    if missing:
        raise EvalError(f"{out_dir}: no samples of arm(s) {', '.join(missing)}")
    found: dict[str, Any] = {arm: dict.fromkeys(COLUMNS, 0) for arm in names}
    for s in samples:
        if s["arm"] not in found or s.get("task") != "extract":
            continue
        if s["id"] not in rows:
            raise EvalError(f"{out_dir}: sample {s['id']} is not a row of the {set_name} "
                            f"set of {config['corpus']['path']}")
        one = breakdown(rows[s["id"]], s.get("output"))
        one["supported"] = ((s.get("verdicts") or {}).get("counts") or {}).get("supported", 0)
        total = found[s["arm"]]
        for k in COLUMNS:
            total[k] += one[k]
    return set_name, found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eval/studies/claims.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="an evaluation folder (eval/run.py --out)")
    p.add_argument("--arm", action="append", default=None, help="only this arm (repeatable)")
    p.add_argument("--json", default=None, help="also write the counts to this file")
    args = p.parse_args(argv)
    try:
        set_name, found = arm_breakdowns(Path(args.out), args.arm)
    except (EvalError, OSError, KeyError, ValueError) as exc:
        print(f"eval/studies/claims.py: error: {exc}", file=sys.stderr)
        return 2
    print(f"extract claims of {args.out} (set {set_name}); subject..all_four count the distinct "
          "claims that cite a source event of a current fact")
    print(" ".join(f"{c:>11}" for c in ("arm", *COLUMNS)))
    for arm, t in found.items():
        print(" ".join(f"{v:>11}" for v in (arm, *(t[c] for c in COLUMNS))))
    if args.json:
        Path(args.json).write_text(json.dumps({"set": set_name, "arms": found}, indent=1) + "\n",
                                   "utf-8")
    return 0
