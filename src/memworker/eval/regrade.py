"""Regrade, don't rerun (issue 46): grade an evaluation folder's recorded answers again with
today's ruler and rows, without running a model, and show what moved: per arm and metric the
totals the folder's samples were graded with (their stored `verdicts`) beside today's, and
every extract claim whose verdict changed (the claims the ruler newly admits are read by hand:
eval/README "The ruler").

    python eval/regrade.py --out receipts/eval/heldout [--corpus data/corpus] [--claims]

The folder is not written; `python eval/run.py ... --no-run` rewrites its summary and report
from the same samples once the table is read.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from memworker.eval.grade import SAFETY_COUNTERS
from memworker.eval.runner import (
    HAND_WRITTEN,
    SAMPLES,
    EvalError,
    grade_sample,
    load_eval_rows,
    read_samples,
)


def _totals(verdicts: dict[str, dict[str, Any]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for v in verdicts.values():
        for metric, (num, den) in v.get("metrics", {}).items():
            out[metric][0] += num
            out[metric][1] += den
        for counter in SAFETY_COUNTERS:
            out[f"safety: {counter}"][0] += (v.get("safety") or {}).get(counter, 0)
    return out


def regrade(out: Path, corpus: str | None = None) -> dict[str, Any]:
    """{arm: {"before": totals, "after": totals, "changed": [claim changes]}} for a folder."""
    config = json.loads((out / "config.json").read_text("utf-8"))
    set_name = config["set"]
    path = corpus or config["corpus"].get("path") or HAND_WRITTEN.get(set_name, "data/corpus")
    rows = {r["id"]: r for r in load_eval_rows(path, set_name)}
    samples = read_samples(out / SAMPLES)
    before: dict[str, dict[str, Any]] = defaultdict(dict)
    after: dict[str, dict[str, Any]] = defaultdict(dict)
    changed: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in samples:
        row = rows.get(s["id"])
        if row is None:
            continue
        old, new = s.get("verdicts") or {}, grade_sample(row, s)
        before[s["arm"]][s["id"]], after[s["arm"]][s["id"]] = old, new
        if s["task"] != "extract" or s["output"] is None:
            continue
        was = {c["claim"]: c["verdict"] for c in old.get("claims", [])}
        for c in new.get("claims", []):
            if was.get(c["claim"]) != c["verdict"]:
                claim = s["output"]["claims"][c["claim"]]
                changed[s["arm"]].append({
                    "row": s["id"], "claim": c["claim"], "before": was.get(c["claim"]),
                    "after": c["verdict"], "subject": claim["subject"]["name"],
                    "predicate": claim["predicate"], "value": claim["value"],
                    "kind": claim["kind"], "quotes": claim["quotes"]})
    return {arm: {"before": _totals(before[arm]), "after": _totals(after[arm]),
                  "changed": changed[arm]} for arm in before}


def _cell(t: list[float]) -> str:
    num, den = t
    return f"{num:g}" if den == 0 else f"{num / den:.3f} ({num:g}/{den:g})"


def table(result: dict[str, Any]) -> str:
    lines = ["| arm | metric | before | after |", "|---|---|---|---|"]
    for arm, r in result.items():
        for metric in sorted(set(r["before"]) | set(r["after"])):
            b, a = r["before"].get(metric, [0, 0]), r["after"].get(metric, [0, 0])
            mark = "" if list(b) == list(a) else " **moved**"
            lines.append(f"| {arm} | {metric} | {_cell(b)} | {_cell(a)}{mark} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python eval/regrade.py", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="an evaluation folder")
    parser.add_argument("--corpus", help="the rows' corpus (default: the folder's config)")
    parser.add_argument("--claims", action="store_true",
                        help="also list every extract claim whose verdict changed")
    parser.add_argument("--json", type=Path, help="write the result as JSON here")
    args = parser.parse_args(argv)
    try:
        result = regrade(args.out, args.corpus)
    except (EvalError, OSError, KeyError) as exc:
        print(f"regrade: {exc}", file=sys.stderr)
        return 2
    print(f"## {args.out}\n\n{table(result)}")
    if args.claims:
        for arm, r in result.items():
            print(f"\n### {arm}: {len(r['changed'])} claims changed verdict")
            for c in r["changed"]:
                print(f"- {c['row']} #{c['claim']}: {c['before']} -> {c['after']}: "
                      f"({c['subject']}, {c['predicate']}, {c['value']!r}, {c['kind']}) "
                      f"quotes {c['quotes']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False), "utf-8")
    return 0
