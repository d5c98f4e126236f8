"""`python eval/studies/proposals.py`: a model's proposed extract claims on a training corpus's
train split, graded by the evaluator, as the labelled file `train/verifier.py --proposals` trains
the claim verifier on (the student's own errors as negatives, issue 47 item 4).

Input: an `eval/run.py` folder run with `--set train` on a training corpus (best with
`--extract-form turns --propose ARM --logprobs`, so that every turn writes its best guess). Output:
JSONL, a header line `{"proposals": {arm, set, corpus, manifest_sha256, samples_sha256, rows,
claims, supported}}`, then one line per extract row with an accepted answer: `id`, `family`,
`inputs`, `claims` (the canonical claims) and `supported` (one flag per claim, the grader's
verdict). A folder of any other set is refused: proposals on a split that is measured or chosen
on must never become training data. No model runs.

    python eval/studies/proposals.py --out /tmp/nt-v3 --model v3 --write receipts/verifier/nt-v3.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from memworker.eval.runner import EvalError, grade_sample, load_eval_rows, read_samples


def graded(out_dir: Path, model: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, rows) of the graded proposals of arm `model` in `out_dir`."""
    config_path = out_dir / "config.json"
    if not config_path.is_file():
        raise EvalError(f"{out_dir}: no config.json (not an eval/run.py folder)")
    config = json.loads(config_path.read_text("utf-8"))
    if config.get("set") != "train":
        raise EvalError(f"{out_dir}: set {config.get('set')!r}; only a training corpus's train "
                        "split (eval/run.py --set train) may become verifier training data")
    samples_path = out_dir / "samples.jsonl"
    samples = {s["id"]: s for s in read_samples(samples_path) if s["arm"] == model}
    if not samples:
        raise EvalError(f"{out_dir}: no samples of arm {model!r}")
    rows = []
    for row in load_eval_rows(config["corpus"]["path"], "train"):
        sample = samples.get(row["id"])
        if row["task"] != "extract" or sample is None or sample["output"] is None:
            continue
        verdicts = grade_sample(row, sample)["claims"]
        rows.append({"id": row["id"], "family": row["family"], "inputs": row["input"],
                     "claims": sample["output"]["claims"],
                     "supported": [v["verdict"] == "supported" for v in verdicts]})
    head = {"arm": model, "set": "train", "corpus": config["corpus"]["path"],
            "manifest_sha256": config["corpus"].get("manifest_sha256"),
            "samples_sha256": hashlib.sha256(samples_path.read_bytes()).hexdigest(),
            "rows": len(rows), "claims": sum(len(r["claims"]) for r in rows),
            "supported": sum(sum(r["supported"]) for r in rows)}
    return head, rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eval/studies/proposals.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path,
                   help="an eval/run.py folder run with --set train")
    p.add_argument("--model", required=True, help="the model arm's name")
    p.add_argument("--write", required=True, type=Path, help="the labelled proposals (JSONL)")
    args = p.parse_args(argv)
    try:
        head, rows = graded(args.out, args.model)
    except (EvalError, OSError, KeyError, ValueError) as exc:
        print(f"eval/studies/proposals.py: error: {exc}", file=sys.stderr)
        return 2
    args.write.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"proposals": head}, sort_keys=True)]
    lines += [json.dumps(r, sort_keys=True, ensure_ascii=False) for r in rows]
    args.write.write_text("\n".join(lines) + "\n", "utf-8")
    print(f"{head['rows']} rows, {head['claims']} claims, {head['supported']} supported "
          f"-> {args.write}")
    return 0
