"""`python eval/studies/restyle.py`: does an extractor keep finding the same facts when the same
conversation is written in fewer, longer messages?

The released student answers 146 of the natural set's 156 turns with no claim; the natural set
may not steer a design. This diagnostic rewrites extract rows of a design split with each day's
user messages merged into one (`memworker.packing.merge_row`: same words, same facts, labels
carried over); a rewritten row must pass the corpus audit (`memworker.corpus.audit.audit_row`),
else it is left out and counted. The facts to find are the same, so coverage should not move.

Each arm (`eval/run.py`'s arm syntax; a model arm with `--extract-form` and `--claim-gate` as a
release runs it) answers the first N extract rows of the split as they are and rewritten, graded
by the evaluator's grader. Printed first, the gold claims per user message (by the message a
turn would ask for them: the latest event a claim quotes); then per arm: user messages and
turns, turns with a claim, claims written (before the gate), claims kept, support and coverage, and the paired coverage difference
(rewritten − as is) with its 95 % interval over episodes. Design sets only (val): it changes the
rows' wording, not their labels, so it tells whether a training change carries over to longer
messages without touching the natural or test sets.

    python eval/studies/restyle.py --arm g3=release/memworker-smollm2-135m-coding-q8_0.gguf \\
        --arm rules --set val --limit 64 --extract-form turns \\
        --claim-gate "g3=first(predicate)+first(value)>=-0.14"
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from typing import Any

from memworker.corpus.audit import audit_row
from memworker.eval import stats
from memworker.eval.runner import (
    EvalError,
    Sampler,
    add_propose_option,
    assign_gates,
    assign_proposals,
    close_backend,
    load_eval_rows,
    make_backend,
    parse_arm,
    run_row,
)
from memworker.inference.gate import claim_spans
from memworker.packing import merge_row

DESIGN_SETS = ("val",)


def restyled_rows(rows: list[dict[str, Any]]) -> tuple[list[tuple[dict, dict]], dict[str, int]]:
    """(as is, rewritten) pairs of the extract rows that merge and pass the audit, and counts of
    the rows left out (nothing to merge, audit violations)."""
    pairs, left = [], {"nothing to merge": 0, "audit violations": 0}
    for row in rows:
        merged = merge_row(row)
        if merged is None:
            left["nothing to merge"] += 1
        elif audit_row(merged):
            left["audit violations"] += 1
        else:
            pairs.append((row, merged))
    return pairs, left


def gold_per_message(rows: list[dict[str, Any]]) -> dict[str, int]:
    """The rows' gold claims by the user message a turn would ask for them (the latest event a
    claim quotes, as `memworker.turns` assigns them): messages holding one and two or more."""
    out = {"claims": 0, "messages": 0, "with_one": 0, "with_more": 0}
    for row in rows:
        per = Counter(max(c["source_indices"]) for c in row["gold"].get("claims", []))
        out["claims"] += sum(per.values())
        out["messages"] += sum(e["role"] == "user" for e in row["input"]["events"])
        out["with_one"] += sum(n == 1 for n in per.values())
        out["with_more"] += sum(n > 1 for n in per.values())
    return out


def _counts(sample: dict[str, Any]) -> dict[str, int]:
    generations = sample.get("turns") or sample.get("attempts") or []
    accepted = [g for g in generations if g.get("error") is None]
    written = [len(claim_spans(g["raw"])) for g in accepted] if sample.get("turns") else \
        [len(claim_spans(accepted[-1]["raw"]))] if accepted else []
    c = sample["verdicts"]["counts"]
    return {"turns": len(written), "turns_with_claims": sum(n > 0 for n in written),
            "written": sum(written), "kept": c["claims"], "supported": c["supported"],
            "covered": c["covered"], "required": c["required"]}


def compare(arm_samples: list[tuple[dict, dict, dict, dict]]) -> dict[str, Any]:
    """Totals as is / rewritten and the paired coverage difference from (row, merged row,
    sample as is, sample rewritten) of one arm."""
    counts = [(_counts(a), _counts(b)) for _, _, a, b in arm_samples]

    def total(k: int) -> dict[str, int]:
        out: dict[str, int] = {}
        for pair in counts:
            for name, v in pair[k].items():
                out[name] = out.get(name, 0) + v
        out["user_messages"] = sum(e["role"] == "user" for entry in arm_samples
                                   for e in entry[k]["input"]["events"])
        return out

    cov = [[(pair[k]["covered"], pair[k]["required"]) for pair in counts] for k in (0, 1)]
    episodes = [e[0]["episode"] for e in arm_samples]
    return {"as_is": total(0), "rewritten": total(1),
            "coverage_diff": (stats.ratio(cov[1]) or 0.0) - (stats.ratio(cov[0]) or 0.0),
            "coverage_ci": stats.paired_bootstrap(cov[1], cov[0], episodes)}


def _line(name: str, t: dict[str, int]) -> str:
    sup = f"{t['supported']}/{t['kept']}" + (f" = {t['supported'] / t['kept']:.3f}" if t["kept"]
                                             else "")
    cov = f"{t['covered']}/{t['required']}" + (
        f" = {t['covered'] / t['required']:.3f}" if t["required"] else "")
    return (f"  {name}: {t['user_messages']} user messages, {t['turns']} answers "
            f"({t['turns_with_claims']} with a claim), {t['written']} claims written, "
            f"{t['kept']} kept; support {sup}, coverage {cov}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eval/studies/restyle.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--arm", action="append", required=True, help="as eval/run.py (repeatable)")
    p.add_argument("--set", default="val", choices=DESIGN_SETS, help="a design split (val)")
    p.add_argument("--corpus", default="data/corpus")
    p.add_argument("--limit", type=int, default=64, help="first N extract rows that merge (64)")
    p.add_argument("--extract-form", default="window", help="model arms' extraction form")
    p.add_argument("--claim-gate", action="append", default=[], metavar="[ARM=]SPEC",
                   help="a model arm's claim gate, as eval/run.py")
    p.add_argument("--max-tokens", type=int, default=1024)
    p.add_argument("--threads", type=int, default=1)
    add_propose_option(p)
    args = p.parse_args(argv)
    try:
        arms = [parse_arm(a) for a in args.arm]
        arms = assign_gates(arms, args.claim_gate, args.extract_form)
        arms = assign_proposals(arms, args.propose, args.extract_form)
        rows = [r for r in load_eval_rows(args.corpus, args.set) if r["task"] == "extract"]
        pairs, left = restyled_rows(rows)
        pairs = pairs[:args.limit]
        if not pairs:
            raise EvalError(f"no {args.set} extract row merges")
        sampler = Sampler(threads=args.threads, max_tokens_cap=args.max_tokens,
                          extract_form=args.extract_form)
        print(f"{len(pairs)} {args.set} extract rows rewritten (of {len(rows)}; left out: "
              f"{left['nothing to merge']} with nothing to merge, {left['audit violations']} "
              "failing the audit)")
        for label, k in (("as is", 0), ("rewritten", 1)):
            g = gold_per_message([pair[k] for pair in pairs])
            print(f"gold, {label}: {g['claims']} claims on {g['messages']} user messages; "
                  f"{g['with_one']} messages hold one, {g['with_more']} two or more")
        for arm in arms:
            backend = make_backend(arm, sampler)
            form = "window" if arm.kind == "rules" else args.extract_form
            started, done = time.perf_counter(), []
            try:
                for row, merged in pairs:
                    a, b = (run_row(backend, r, sampler, form=form, claim_gate=arm.claim_gate,
                                    propose=arm.propose)
                            for r in (row, merged))   # graded by the evaluator's grader
                    done.append((row, merged, a, b))
            finally:
                close_backend(backend)
            result = compare(done)
            ci = result["coverage_ci"]
            print(f"{arm.name} ({time.perf_counter() - started:.0f} s):")
            print(_line("as is    ", result["as_is"]))
            print(_line("rewritten", result["rewritten"]))
            print(f"  coverage rewritten − as is: {result['coverage_diff']:+.3f}"
                  + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else ""))
    except (EvalError, OSError, ValueError) as exc:
        print(f"eval/studies/restyle.py: error: {exc}", file=sys.stderr)
        return 2
    return 0
