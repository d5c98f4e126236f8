"""`python train/diagnose.py`: what a trained adapter decides where an extract answer forks.

An extract answer opens with `{"claims":` and its next token either opens the first claim
(`[[`) or closes an empty list (`[]`). That one token decides whether anything is stored, yet
it is one of an answer's hundreds of tokens, so the mean answer loss hardly sees it. This prints, for rows of
a corpus split, the probability the model gives each branch after the gold prompt, and a summary:
how many rows with claims greedy decoding would answer empty, and the mean probability of the
empty branch on rows with and without claims (a model that reads the window gives rows with
claims a low one, rows without a high one; a model that does not gives every row about the same).

    python train/diagnose.py --run runs/general --corpus data/corpus --split val --rows 40
    python train/diagnose.py --base smollm2-135m --corpus data/corpus --split val --rows 40

`--lengths` prints instead how long the gold answers of the split are in the base's tokens, per
task (median, 90th percentile, longest, how many exceed --cap; the evaluation's max-tokens cap
must leave room for them) and each task's share of the split's answer tokens (with
`--loss-scale epoch` every answer token weighs the same, so that is the task's share of the
gradient before decision weights). With `--decision-weight W` and/or `--task-shares` it also
prints each task's share of the training loss as a stage with those settings weighs it (what the
run's receipt records under data.train.tasks) and the multiplier task shares put on its tokens.

    python train/diagnose.py --lengths --base smollm2-135m --split train --rows 0 --cap 512
    python train/diagnose.py --lengths --base smollm2-135m --split train --rows 0 \
        --decision-weight 10 --task-shares extract=1,consolidate=1,reflect=1

`--fields` scores the model teacher-forced on the gold answers instead: for every answer token
whether its most likely token is the gold one, grouped by the JSON field the token belongs to
(`quote`, `event`, `predicate`, `value`, `kind`, ...). The mean loss hides where a student errs:
an adapter that memorised 8 rows (98 % of answer tokens right) still missed most event indices
and predicates, the tokens that decide whether a claim is supported (train/README.md
"Decisions, not tokens").

    python train/diagnose.py --fields --run /tmp/ov/runs/coding --corpus /tmp/ov/corpus --split train --rows 8

`--anatomy` runs no model: it tokenises the split's gold extract answers and prints where their
tokens go per field, how long the same gold claims would be in other wire forms, how many gold
values and subjects the input lets a model choose, and the sizes of two one-decision-at-a-time
designs (`memworker.train.anatomy`).

    python train/diagnose.py --anatomy --base smollm2-135m --split train --rows 0

Rows are the split's first N extract rows in file order. Use the train or val split: the test
split and the held-out rows are for evaluation only.
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
from pathlib import Path
from typing import Any

from memworker import prompts, registry, wire
from memworker.corpus.build import load_rows
from memworker.train import anatomy
from memworker.train import data as tdata
from memworker.train.config import ConfigError, parse_task_shares
from memworker.train.data import answer_offsets, encode_chat, value_starts

PREFIX = '{"claims":'
OPEN, CLOSE = '{"claims":[[', '{"claims":[]}'
SPLITS = ("train", "val")


class DiagnoseError(ValueError):
    """Bad arguments or inputs: reported as one line, exit 2."""


def branch_tokens(tokenizer: Any, prompt: str) -> tuple[list[int], int, int]:
    """(prompt + answer prefix token ids, the id that opens a claim, the id that closes the
    list): both continuations are tokenised whole after the prompt and compared at the first
    position where they differ, so a merge across the boundary cannot shift the fork."""
    opened = tokenizer(prompt + OPEN, add_special_tokens=False)["input_ids"]
    closed = tokenizer(prompt + CLOSE, add_special_tokens=False)["input_ids"]
    k = next(i for i, (a, b) in enumerate(zip(opened, closed, strict=False)) if a != b)
    return opened[:k], opened[k], closed[k]


def decision_rows(model: Any, tokenizer: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    import torch

    out = []
    for row in rows:
        messages, gold = row["messages"][:-1], row["messages"][-1]["content"]
        prompt = tokenizer.apply_chat_template(messages, tokenize=False,
                                               add_generation_prompt=True)
        ids, open_id, close_id = branch_tokens(tokenizer, prompt)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].float()
        probs = logits.softmax(-1)
        out.append({"id": row["id"], "gold_empty": json.loads(gold)["claims"] == [],
                    "p_open": round(float(probs[open_id]), 4),
                    "p_close": round(float(probs[close_id]), 4)})
    return out


def summarise(found: list[dict[str, Any]]) -> dict[str, Any]:
    def part(items: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(items)
        return {"rows": n,
                "greedy_empty": sum(r["p_close"] > r["p_open"] for r in items),
                "mean_p_empty": round(sum(r["p_close"] for r in items) / n, 4) if n else None}
    return {"rows_with_claims": part([r for r in found if not r["gold_empty"]]),
            "rows_without_claims": part([r for r in found if r["gold_empty"]])}


def split_rows(corpus: Path, split: str) -> list[dict[str, Any]]:
    """The wire rows of a train or val split (the only splits this tool reads)."""
    if split not in SPLITS:
        raise DiagnoseError(f"--split {split}: only {' or '.join(SPLITS)} (the test split and "
                            "the held-out rows are for evaluation only)")
    return tdata.load_wire_rows(corpus, split)


def extract_rows(corpus: Path, split: str, n: int) -> list[dict[str, Any]]:
    rows = [r for r in split_rows(corpus, split) if r["task"] == "extract"]
    if not rows:
        raise DiagnoseError(f"no extract rows in the {split} split of {corpus}")
    return rows[:n] if n else rows


def answer_lengths(tokenizer: Any, rows: list[dict[str, Any]], cap: int) -> dict[str, Any]:
    """{task: {rows, median, p90, max, over_cap}} of the gold answers' token counts."""
    by_task: dict[str, list[int]] = {}
    for row in rows:
        answer = row["messages"][-1]["content"]
        by_task.setdefault(row["task"], []).append(
            len(tokenizer(answer, add_special_tokens=False)["input_ids"]))
    out = {}
    total = sum(sum(ns) for ns in by_task.values())
    for task, ns in sorted(by_task.items()):
        ns.sort()
        out[task] = {"rows": len(ns), "median": ns[len(ns) // 2], "p90": ns[int(len(ns) * 0.9)],
                     "max": ns[-1], "over_cap": sum(n > cap for n in ns), "tokens": sum(ns),
                     "share": round(sum(ns) / total, 4) if total else None}
    return out


def field_of(answer: str, offsets: list[int]) -> list[str]:
    """The field each token (by its start offset in `answer`) belongs to: the last field whose
    value starts at or before it (`memworker.wire.field_starts`; "" before the first value, "end"
    for the end-of-turn token)."""
    found = [(c, name) for c, name, _ in wire.field_starts(answer) if name]
    starts = [c for c, _ in found]
    out = []
    for off in offsets:
        k = bisect.bisect_right(starts, off) - 1
        out.append("end" if off >= len(answer) else found[k][1] if k >= 0 else "")
    return out


def field_accuracy(model: Any, tokenizer: Any, rows: list[dict[str, Any]],
                   end_of_turn: str) -> dict[str, dict[str, Any]]:
    """{field: {tokens, right, accuracy, first, first_right}} of teacher-forced greedy predictions
    on gold answers: every token of a field, and the first token of each of its values."""
    import torch

    counts: dict[str, list[int]] = {}
    for row in rows:
        enc = encode_chat(tokenizer, row["messages"], 1 << 20, end_of_turn)
        ids = enc.input_ids
        start = enc.prompt_len
        answer = row["messages"][-1]["content"]
        offsets = answer_offsets(tokenizer, ids[start:])
        fields = field_of(answer, offsets)
        first = value_starts(answer, offsets)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]
        pred = logits[start - 1:len(ids) - 1].argmax(-1).tolist()
        for k, (field, p, gold) in enumerate(zip(fields, pred, ids[start:], strict=True)):
            c = counts.setdefault(field, [0, 0, 0, 0])
            c[0] += 1
            c[1] += int(p == gold)
            if k in first:
                f = counts.setdefault(first[k], [0, 0, 0, 0])
                f[2] += 1
                f[3] += int(p == gold)
    return {f: {"tokens": n, "right": r, "accuracy": round(r / n, 3) if n else None,
                "first": n1, "first_right": r1,
                "first_accuracy": round(r1 / n1, 3) if n1 else None}
            for f, (n, r, n1, r1) in sorted(counts.items(), key=lambda kv: -kv[1][0])}


def base_key(run: str | None, base: str | None) -> str | None:
    """The base a finished stage run was trained on (its receipt), else `base`."""
    if not run:
        return base
    receipt_path = Path(run) / "receipt.json"
    if not receipt_path.is_file() or not (Path(run) / "adapter" / "adapter_config.json").is_file():
        raise DiagnoseError(f"{run}: not a finished stage run (needs receipt.json and "
                            "adapter/adapter_config.json)")
    b = json.loads(receipt_path.read_text("utf-8"))["base"]
    return b["path"] if b.get("source") == "local" else b["key"]


def load(run: str | None, base: str | None, threads: int | None) -> tuple[Any, Any, str, str]:
    """(model, tokenizer, name, the base's end-of-turn token)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if threads:
        torch.set_num_threads(threads)
    adapter = Path(run) / "adapter" if run else None
    prepared = registry.prepare(base_key(run, base) or registry.DEFAULT_BASE)
    tokenizer = AutoTokenizer.from_pretrained(prepared.path)
    model = AutoModelForCausalLM.from_pretrained(prepared.path, dtype=torch.float32)
    name = f"base {prepared.model.key}"
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter))
        name = f"{run} (adapter on {prepared.model.key})"
    model.eval()
    return model, tokenizer, name, prepared.model.end_of_turn


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="train/diagnose.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--run", help="a finished stage run folder (runs/<stage>): its adapter")
    who.add_argument("--base", help="a base key or local HF folder, without an adapter")
    p.add_argument("--corpus", default="data/corpus")
    p.add_argument("--split", default="val", help="train or val (val)")
    p.add_argument("--rows", type=int, default=40, help="first N extract rows (0 = all; 40)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=None, help="also write rows and summary to this file")
    p.add_argument("--lengths", action="store_true",
                   help="gold answer lengths per task in the base's tokens (no model is run)")
    p.add_argument("--cap", type=int, default=1024, help="with --lengths: count answers over it")
    p.add_argument("--decision-weight", type=float, default=1.0,
                   help="with --lengths: the stage's decision_weight, for the loss shares")
    p.add_argument("--task-shares", default="",
                   help="with --lengths: the stage's task_shares, for the loss shares")
    p.add_argument("--fields", action="store_true",
                   help="teacher-forced token accuracy per answer field instead of the fork")
    p.add_argument("--anatomy", action="store_true",
                   help="token shares per field of the gold extract answers and the length of "
                        "other wire forms (no model is run)")
    args = p.parse_args(argv)
    try:
        if args.lengths:
            return _lengths(args)
        if args.anatomy:
            return _anatomy(args)
        rows = extract_rows(Path(args.corpus), args.split, args.rows)
        model, tokenizer, name, end_of_turn = load(args.run, args.base, args.threads)
    except (DiagnoseError, FileNotFoundError) as exc:
        print(f"train/diagnose.py: {exc}", file=sys.stderr)
        return 2
    if args.fields:
        return _fields(args, rows, model, tokenizer, name, end_of_turn)
    found = decision_rows(model, tokenizer, rows)
    for r in found:
        print(f"{r['id']:<32} {'no claims' if r['gold_empty'] else 'claims':<9} "
              f"P(open a claim)={r['p_open']:.3f}  P(empty)={r['p_close']:.3f}")
    summary = summarise(found)
    w, wo = summary["rows_with_claims"], summary["rows_without_claims"]
    print(f"{name}, {args.split} split, {len(found)} extract rows: rows with claims "
          f"{w['rows']} (greedy empty {w['greedy_empty']}, mean P(empty) {w['mean_p_empty']}); "
          f"rows without claims {wo['rows']} (greedy empty {wo['greedy_empty']}, mean P(empty) "
          f"{wo['mean_p_empty']})")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": name, "split": args.split,
                                               "rows": found, "summary": summary}, indent=1)
                                   + "\n", "utf-8")
    return 0


def _fields(args: argparse.Namespace, rows: list[dict[str, Any]], model: Any, tokenizer: Any,
            name: str, end_of_turn: str) -> int:
    acc = field_accuracy(model, tokenizer, rows, end_of_turn)
    print(f"{'field':<16} {'all tokens right':>22}   {'first token of a value right':>28}")
    for field, f in acc.items():
        first = (f"{f['first_right']:>6} / {f['first']:<6} {f['first_accuracy']:.3f}"
                 if f["first"] else "")
        print(f"{field or '(opening)':<16} {f['right']:>6} / {f['tokens']:<6} "
              f"{f['accuracy']:.3f}   {first}")
    total = sum(f["tokens"] for f in acc.values())
    right = sum(f["right"] for f in acc.values())
    print(f"{name}, {args.split} split, {len(rows)} extract rows: {right} / {total} answer "
          f"tokens right teacher-forced ({right / total:.3f})")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": name, "split": args.split,
                                               "fields": acc}, indent=1) + "\n", "utf-8")
    return 0


def _lengths(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    rows = split_rows(Path(args.corpus), args.split)
    prepared = registry.prepare(base_key(args.run, args.base) or registry.DEFAULT_BASE)
    rows = rows[:args.rows] if args.rows else rows
    tokenizer = AutoTokenizer.from_pretrained(prepared.path)
    found = answer_lengths(tokenizer, rows, args.cap)
    for task, f in found.items():
        print(f"{args.split} {task}: {f['rows']} rows, gold answer tokens median {f['median']}, "
              f"p90 {f['p90']}, max {f['max']}; {f['over_cap']} over {args.cap}; "
              f"{f['tokens']} answer tokens in all, {f['share']:.1%} of the split's (the share "
              "of the gradient under --loss-scale epoch, before decision weights)")
    if args.decision_weight != 1.0 or args.task_shares:
        found = {"lengths": found,
                 "loss_shares": loss_shares(tokenizer, prepared.model.end_of_turn, rows, args)}
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=1) + "\n", "utf-8")
    return 0


def loss_shares(tokenizer: Any, end_of_turn: str, rows: list[dict[str, Any]],
                args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Each task's share of the training loss as a stage with --decision-weight and
    --task-shares weighs the rows (data.task_shares, as the run's receipt records it)."""
    try:
        shares = parse_task_shares(args.task_shares)
    except ConfigError as exc:
        raise DiagnoseError(str(exc)) from None
    encoded, _ = tdata.encode_rows(tokenizer, rows, 1 << 20, end_of_turn, args.decision_weight)
    try:
        tasks = tdata.task_shares(encoded, shares)
    except tdata.DataError as exc:
        raise DiagnoseError(str(exc)) from None
    for task, t in tasks.items():
        print(f"{args.split} {task}: loss share {t['share']:.1%} (natural {t['natural_share']:.1%}"
              f" with decision weight {args.decision_weight:g}; answer-token weights "
              f"x{t['multiplier']:.3f})")
    return tasks


def _anatomy(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    if args.split not in SPLITS:
        raise DiagnoseError(f"--split {args.split}: only {' or '.join(SPLITS)}")
    rows = [r for r in load_rows(args.corpus, args.split, "canonical") if r["task"] == "extract"]
    rows = rows[:args.rows] if args.rows else rows
    if not rows:
        raise DiagnoseError(f"no extract rows in the {args.split} split of {args.corpus}")
    prepared = registry.prepare(base_key(args.run, args.base) or registry.DEFAULT_BASE)
    tokenizer = AutoTokenizer.from_pretrained(prepared.path)

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_tokens(row: dict[str, Any], last: int | None) -> int:
        inputs = row["input"]
        if last is not None:
            inputs = {**inputs, "events": [e for e in inputs["events"] if e["index"] <= last]}
        return count(tokenizer.apply_chat_template(prompts.render("extract", inputs),
                                                   tokenize=False, add_generation_prompt=True))

    claims = sum(len(r["gold"]["claims"]) for r in rows)
    shares = {form: anatomy.field_shares(tokenizer, rows, form) for form in ("v2", "v3")}
    for form, found in shares.items():
        total = sum(found.values())
        print(f"{args.split} split, {len(rows)} extract rows, {claims} gold claims, {total} answer "
              f"tokens in wire form {form}; share per field:")
        for label, n in found.items():
            print(f"  {label:<16} {n:>7}  {n / total:6.1%}  ({n / max(claims, 1):.1f} per claim)")
    levers = anatomy.lever_lengths(count, rows)
    print("answer tokens per row, gold claims in other wire forms (cumulative levers):")
    for lv in levers:
        print(f"  {lv['lever']:<58} median {lv['median']:>4}  p90 {lv['p90']:>4}  "
              f"mean {lv['mean']}")
    choices = anatomy.choice_shares(rows)
    for what, (k, n) in choices.items():
        print(f"  {what.replace('_', ' ')}: {k} / {n} ({k / max(n, 1):.1%})")
    designs = anatomy.split_designs(count, rows, prompt_tokens)
    print("one decision at a time (claims as wire v3 arrays):")
    for what, st in designs.items():
        print(f"  {what.replace('_', ' '):<40} n {st['n']:>5}  median {st['median']}  "
              f"p90 {st['p90']}  mean {st['mean']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"split": args.split, "rows": len(rows),
                                               "claims": claims, "field_tokens": shares,
                                               "levers": levers, "choices": choices,
                                               "designs": designs}, indent=1) + "\n", "utf-8")
    return 0
