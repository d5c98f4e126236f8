"""Grade anyone's extract answers (issue 46): a person's, a bigger model's behind an
OpenAI-compatible server, another memory system's. One JSON line per extract row of a set:

    {"id": "d01-ceramics-russafa-extract-0", "output": {"claims": [ ... ]}}

`output` is the canonical extract result the store receives (`schemas/extract_output.schema.json`:
each claim with quotes, source_indices, subject, predicate, value, statement, kind, time
expression, date, precision, correction flag, supersedes, confidence). The answers are graded
by the evaluator's own grader (`memworker.eval.grade`, the ruler of eval/README) and summarised
by its own summariser, so the figures read like an evaluation folder's:

    python eval/answers.py --set natural-dev --answers mine.jsonl --out /tmp/mine [--name me]
        [--against receipts/eval/natural-dev/release:student] [--missing skip|failed]

Nothing is graded silently: a line that is not JSON, a missing or unknown field, an unknown row
id, a duplicate, a row of another task, a claim the contract refuses and a quote that is not in
its event's text are each refused with the line and the field. Rows the file does not answer are
left out of the figures (`--missing skip`, said in the report) or count as failed
(`--missing failed`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from memworker import contracts
from memworker.eval import summary as S
from memworker.eval.grade import RULER_VERSION
from memworker.eval.runner import (
    HAND_WRITTEN,
    SAMPLES,
    SETS,
    EvalError,
    grade_sample,
    load_eval_rows,
    read_samples,
)


class AnswersError(ValueError):
    """An answers file line that cannot be graded (the message names the line and the field)."""


def _sample(arm: str, row: dict[str, Any], output: dict[str, Any] | None) -> dict[str, Any]:
    raw = None if output is None else json.dumps(output, ensure_ascii=False)
    sample = {"arm": arm, "id": row["id"], "episode": row["episode"], "task": row["task"],
              "status": "first_try" if output is not None else "failed", "output": output,
              "attempts": [{"raw": raw}] if raw is not None else [], "diagnostics": [],
              "seconds": 0.0, "error": None if output is not None else {
                  "type": "Unanswered", "kind": "missing", "message": "no line in the file"}}
    sample["verdicts"] = grade_sample(row, sample)
    return sample


def _check_output(n: int, row: dict[str, Any], output: Any) -> None:
    where = f"line {n}"
    problems = contracts.errors("extract_output", output)
    if problems:
        raise AnswersError(f"{where}: output/{problems[0]}"
                           + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    events = {e["index"]: e["text"] for e in row["input"]["events"]}
    for k, claim in enumerate(output["claims"]):
        pairs = zip(claim["source_indices"], claim["quotes"], strict=False)
        if len(claim["source_indices"]) != len(claim["quotes"]):
            raise AnswersError(f"{where}: output/claims/{k}: {len(claim['quotes'])} quotes but "
                               f"{len(claim['source_indices'])} source_indices")
        for j, (i, quote) in enumerate(pairs):
            if i not in events:
                raise AnswersError(f"{where}: output/claims/{k}/source_indices/{j}: event {i} is "
                                   f"not in row {row['id']} (events {sorted(events)})")
            if quote not in events[i]:
                raise AnswersError(f"{where}: output/claims/{k}/quotes/{j}: {quote[:60]!r} is not "
                                   f"in the text of event {i}")


def read_answers(path: Path, rows: dict[str, dict[str, Any]], arm: str
                 ) -> list[dict[str, Any]]:
    """The graded samples of an answers file (AnswersError naming the line and the field)."""
    seen: dict[str, int] = {}
    out = []
    for n, line in enumerate(path.read_text("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AnswersError(f"line {n}: not JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(doc, dict) or set(doc) != {"id", "output"}:
            got = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
            raise AnswersError(f"line {n}: expected an object with exactly the fields id and "
                               f"output, got {got}")
        rid = doc["id"]
        if not isinstance(rid, str) or rid not in rows:
            raise AnswersError(f"line {n}: id: {rid!r} is not a row of this set")
        if rid in seen:
            raise AnswersError(f"line {n}: id: {rid!r} is answered twice (first on line "
                               f"{seen[rid]})")
        seen[rid] = n
        row = rows[rid]
        if row["task"] != "extract":
            raise AnswersError(f"line {n}: id: {rid!r} is a {row['task']} row; an answers file "
                               "holds extract rows only")
        _check_output(n, row, doc["output"])
        out.append(_sample(arm, row, doc["output"]))
    if not out:
        raise AnswersError(f"{path}: no answers")
    return out


def _against(spec: str, rows: dict[str, dict[str, Any]], set_name: str
             ) -> tuple[str, list[dict[str, Any]]]:
    folder, _, arm = spec.rpartition(":")
    if not folder or not arm:
        raise AnswersError(f"--against {spec!r}: expected DIR:ARM")
    config = json.loads((Path(folder) / "config.json").read_text("utf-8"))
    if config.get("set") != set_name:
        raise AnswersError(f"--against {spec}: an evaluation of set {config.get('set')!r}, not "
                           f"{set_name!r}")
    samples = [s for s in read_samples(Path(folder) / SAMPLES)
               if s["arm"] == arm and s["id"] in rows and rows[s["id"]]["task"] == "extract"]
    if not samples:
        raise AnswersError(f"--against {spec}: no extract samples of arm {arm!r} there")
    return arm, samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python eval/answers.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", required=True, choices=SETS)
    parser.add_argument("--answers", required=True, type=Path, help="the answers file (JSONL)")
    parser.add_argument("--out", required=True, type=Path, help="folder for summary.json, "
                        "report.md and the graded samples")
    parser.add_argument("--name", default="answers", help="the arm's name (default: answers)")
    parser.add_argument("--corpus", help="the set's frozen folder (default: data/corpus, or "
                        "data/<set> for a hand-written set)")
    parser.add_argument("--against", action="append", default=[], metavar="DIR:ARM",
                        help="an arm of a committed evaluation of the same set: paired "
                        "intervals against it on the rows both answered (repeatable)")
    parser.add_argument("--missing", choices=("skip", "failed"), default="skip",
                        help="rows the file does not answer: left out (default) or failed")
    args = parser.parse_args(argv)
    try:
        corpus = Path(args.corpus or HAND_WRITTEN.get(args.set, "data/corpus"))
        all_rows = load_eval_rows(corpus, args.set)
        rows = {r["id"]: r for r in all_rows}
        samples = read_answers(args.answers, rows, args.name)
        answered = {s["id"] for s in samples}
        extract = [r for r in all_rows if r["task"] == "extract"]
        if args.missing == "failed":
            samples += [_sample(args.name, r, None) for r in extract if r["id"] not in answered]
        arms, others = [], []
        for spec in args.against:
            arm, theirs = _against(spec, rows, args.set)
            if arm == args.name or arm in arms:
                raise AnswersError(f"--against {spec}: arm name {arm!r} is taken; use --name")
            arms.append(arm)
            others += theirs
    except (AnswersError, EvalError, OSError) as exc:
        print(f"answers: {exc}", file=sys.stderr)
        return 2
    graded_ids = {s["id"] for s in samples}
    used = [r for r in all_rows if r["id"] in graded_ids]
    config = {"set": args.set, "corpus": str(corpus), "limit": None,
              "rows_in_set": len(extract), "arms": {args.name: f"answers file {args.answers}",
                                                    **{a: "committed" for a in arms}},
              "answers": {"path": str(args.answers), "sha256": hashlib.sha256(
                  args.answers.read_bytes()).hexdigest(), "rows_answered": len(answered),
                          "extract_rows_in_set": len(extract), "missing": args.missing},
              "ruler": RULER_VERSION,
              "sampler": {"temperature": "n/a", "seed": "n/a", "n_ctx": "n/a",
                          "grammar": "n/a (answers written elsewhere)"}}
    summary = S.summarise(used, samples + [s for s in others if s["id"] in graded_ids],
                          [*arms, args.name], config=config)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n",
                                           "utf-8")
    note = (f"Answers file `{args.answers}`: {len(answered)} of {len(extract)} extract rows "
            f"answered; unanswered rows are {'left out' if args.missing == 'skip' else 'failed'}"
            f" (`--missing`). Ruler {RULER_VERSION} (eval/README \"The ruler\").\n\n")
    (args.out / "report.md").write_text(note + S.report_markdown(summary), "utf-8")
    with open(args.out / SAMPLES, "w", encoding="utf-8") as fh:
        for s in samples:
            fh.write(json.dumps(s, ensure_ascii=False, sort_keys=True) + "\n")
    block = summary["metrics"][args.name]["extract"]["metrics"]
    parts = [f"{m} {block[m]['value']:.3f} ({block[m]['num']:g}/{block[m]['den']:g})"
             for m in ("extract_support", "extract_coverage", "extract_coverage_in_vocab")
             if m in block and block[m]["value"] is not None]
    print(f"answers {args.name} on {args.set}: {len(answered)} of {len(extract)} extract rows; "
          + ", ".join(parts) + f" -> {args.out}/report.md")
    return 0
