"""`python eval/hybrid.py`: what a hybrid rules-and-model worker would score, from an evaluation
folder that holds a rules arm and a model arm.

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
- consolidate, reflect `derived`: the model's answer with its choices read from its own text
  (`memworker.derive`): an observation's supports are the facts its statement states, a
  reflection's citations the evidence its answer states, and an answer that states none
  abstains. Only the model's text goes to the codec (wire v4), which reads them; on a sample of
  an older wire (ids written before or after the text) the written supports, citations and flag
  are ignored. It is a function of the model's raw answer alone, so it is what a worker whose
  codec derived them scores (on a wire v4 sample it is the `model` policy).

With `--min-score T` the model's extract claims scoring below T under `--score` (a claim's score
from its own token log-probabilities, `memworker.eval.confidence.SCORES`; the model arm must have
run with `eval/run.py --logprobs`) are dropped before the merge: the rules plus only the model's
surest claims. Set T on half A of the val rows with `eval/confidence.py`, read it on half B.

A hybrid row's seconds are the two arms' seconds added (the worker runs both). Choose a policy on
the val split only; on held-out, test and natural sets this describes a result.

    python eval/hybrid.py --out receipts/eval/val --model student --to /tmp/hybrid
    python eval/hybrid.py --out receipts/eval/val --model student --to /tmp/surest --min-score -0.022
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memworker import wire
from memworker.eval import confidence
from memworker.eval.grade import _value_key, predicate_match, subject_match
from memworker.eval.runner import SAMPLES, EvalError, grade_sample, load_eval_rows, read_samples
from memworker.hashing import canonical_json, write_json

EXTRACT_POLICIES = ("union", "fill", "rules", "model")
OTHER_POLICIES = ("rules", "model", "derived")
DEFAULT_SCORE = "first(predicate)+first(value)"


def _says(record: dict[str, Any]) -> tuple[str, str, str]:
    """What a claim says: subject name, predicate, value key."""
    return record["subject"]["name"], record["predicate"], _value_key(record["value"])


def _same(a: tuple[str, str, str], b: tuple[str, str, str]) -> bool:
    """Two claims say the same fact by the grader's own matchers (`grade.claim_matches`:
    subject, predicate family and value), read both ways."""
    return a[2] == b[2] and (subject_match(a[0], b[0]) or subject_match(b[0], a[0])) and (
        predicate_match(a[1], b[1]) or predicate_match(b[1], a[1]))


def merge_extract(rules_wire: dict[str, Any] | None, model_wire: dict[str, Any] | None,
                  policy: str, limit: int) -> dict[str, Any]:
    """The merged wire extract answer (claims as arrays, the rules' first)."""
    rules_claims = list((rules_wire or {}).get("claims", []))
    model_claims = list((model_wire or {}).get("claims", []))
    if policy == "rules":
        return {"claims": rules_claims[:limit]}
    if policy == "model":
        return {"claims": model_claims[:limit]}
    out = rules_claims[:limit]
    said = [_says(wire.unpack_claim(c)) for c in out]
    rule_events = {q["event"] for c in out for q in wire.unpack_claim(c)["quotes"]}
    for claim in model_claims:
        if len(out) >= limit:
            break
        record = wire.unpack_claim(claim)
        says = _says(record)
        if any(_same(says, s) for s in said):
            continue
        if policy == "fill" and {q["event"] for q in record["quotes"]} & rule_events:
            continue
        out.append(claim)
        said.append(says)
    return {"claims": out}


def text_only(task: str, answer: dict[str, Any]) -> dict[str, Any]:
    """The wire v4 answer (text only) of a consolidate or reflect sample's verified wire answer:
    a v4 one as it is; an older one (the canonical shape, ids written by the model) without its
    ids, which the codec then reads from the text."""
    if task == "consolidate":
        return {"observations": [o["statement"] if isinstance(o, dict) else o
                                 for o in answer["observations"]]}
    return {"answer": answer["answer"]}


def _claim_limit(schema: dict[str, Any]) -> int:
    return int(schema["properties"]["claims"].get("maxItems", 0))


def compose_row(row: dict[str, Any], rules: dict[str, Any], model: dict[str, Any],
                policies: dict[str, str], name: str) -> dict[str, Any]:
    """The hybrid's sample for one row from the rules' and the model's samples of it."""
    from memworker.inference import codec
    from memworker.inference.schema import build_schema

    task = row["task"]
    policy = policies[task]
    seconds = round(float(rules["seconds"]) + float(model["seconds"]), 4)
    if task != "extract" and policy != "derived":
        source = rules if policy == "rules" else model
        return {**source, "arm": name, "seconds": seconds}
    schema = build_schema(task, row["input"])
    if task == "extract":
        merged = merge_extract(rules.get("wire"), model.get("wire"), policy,
                               _claim_limit(schema))
    elif model.get("wire") is None:  # the model's answer failed: nothing to read choices from
        return {**model, "arm": name, "seconds": float(model["seconds"])}
    else:
        merged = text_only(task, model["wire"])
        seconds = float(model["seconds"])  # the model alone: the rules do not run
    raw = wire.dump_answer(task, merged)
    sample: dict[str, Any] = {
        "arm": name, "id": row["id"], "episode": row["episode"], "task": task,
        "prompt_sha256": model["prompt_sha256"], "schema_sha256": model["schema_sha256"],
        "max_tokens": model["max_tokens"], "seconds": seconds}
    try:
        result = codec.decode(task, row["input"], raw, finish_reason="stop", schema=schema)
    except codec.CodecError as exc:
        sample.update(attempts=[{"raw": raw, "finish_reason": "stop", "error": str(exc)}],
                      status="failed", output=None, wire=None, diagnostics=[],
                      error={"type": type(exc).__name__, "kind": exc.kind, "message": str(exc)})
    else:
        sample.update(attempts=[{"raw": raw, "finish_reason": "stop", "error": None}],
                      status="first_try", output=result.output, wire=result.wire,
                      diagnostics=result.diagnostics, error=None)
    sample["verdicts"] = grade_sample(row, sample)
    return sample


def surest(row: dict[str, Any], sample: dict[str, Any], score: str,
           threshold: float) -> dict[str, Any]:
    """An extract sample of the model with its claims scoring below `threshold` dropped (a failed
    sample as it is; one without log-probabilities is an error)."""
    if sample.get("output") is None:
        return sample
    stats = confidence.kept_claim_stats(sample, row["input"])
    if stats is None:
        raise EvalError(f"{sample['id']}: arm {sample['arm']!r} has no token log-probabilities "
                        "for --min-score; run it with `eval/run.py --logprobs`")
    return confidence.surest(sample, stats, score, threshold)


def compose(out_dir: Path, model: str, to: Path, policies: dict[str, str], *,
            rules: str = "rules", name: str = "hybrid", resamples: int = 2000,
            min_score: float | None = None, score: str = DEFAULT_SCORE) -> dict[str, Any]:
    """Write the hybrid folder `to` from the evaluation folder `out_dir`; returns its summary.
    With `min_score`, the model's extract claims scoring below it under `score` are dropped
    before the merge."""
    from memworker.eval.summary import report_markdown, summarise

    config_path = out_dir / "config.json"
    if not config_path.is_file():
        raise EvalError(f"{out_dir}: no config.json (not an eval/run.py folder)")
    config = json.loads(config_path.read_text("utf-8"))
    rows = load_eval_rows(config["corpus"]["path"], config["set"])
    samples = read_samples(out_dir / SAMPLES)
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
    if min_score is not None and score not in confidence.SCORES:
        raise EvalError(f"unknown score {score!r} (one of: {', '.join(sorted(confidence.SCORES))})")
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
    import tempfile

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
    p = argparse.ArgumentParser(prog="eval/hybrid.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="an evaluation folder with a rules and a model arm")
    p.add_argument("--model", required=True, help="the model arm's name in that folder")
    p.add_argument("--rules", default="rules", help="the rules arm's name (rules)")
    p.add_argument("--to", help="the hybrid's folder (written; not with --sweep)")
    p.add_argument("--name", default="hybrid", help="the hybrid arm's name (hybrid)")
    p.add_argument("--extract", default="union", choices=EXTRACT_POLICIES)
    p.add_argument("--consolidate", default="rules", choices=OTHER_POLICIES)
    p.add_argument("--reflect", default="rules", choices=OTHER_POLICIES)
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (2000)")
    p.add_argument("--min-score", type=float, default=None, metavar="T",
                   help="drop the model's extract claims scoring below T before the merge (the "
                        "model arm must have run with eval/run.py --logprobs)")
    p.add_argument("--score", default=DEFAULT_SCORE, choices=sorted(confidence.SCORES),
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
            print(f"eval/hybrid.py: error: {exc}", file=sys.stderr)
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
        print(f"eval/hybrid.py: error: {exc}", file=sys.stderr)
        return 2
    from memworker.eval.summary import table_lines

    print("\n".join(table_lines(summary)))
    print(f"wrote {args.to}/summary.json and report.md")
    return 0
