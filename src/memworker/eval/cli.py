"""`python eval/run.py`: arguments -> run every arm -> summary.json, report.md, plots."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NamedTuple

from memworker.contracts import TASKS
from memworker.eval import plots, runner
from memworker.eval import summary as S
from memworker.eval.judge import run_judge
from memworker.eval.runner import Arm, ConfigMismatch, EvalError, Sampler
from memworker.eval.summary import RecordRelease
from memworker.hashing import sha256_file, write_json
from memworker.prompts import template_hashes
from memworker.receipts import environment
from memworker.turns import FORMS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="eval/run.py",
        description="Matched evaluation: every arm over the same rows through the same codec, "
                    "schema, sampler and context size; deterministic grades against each row's "
                    "truth; paired statistics.")
    p.add_argument("--arm", action="append", required=True, metavar="NAME=SPEC",
                   help="an arm (repeat): NAME=path.gguf, NAME=ollama:MODEL, "
                        "NAME=http://host:port/v1, or rules")
    p.add_argument("--set", default="heldout", choices=runner.SETS,
                   help="rows: the frozen held-out 64 (default), the test or val split, a "
                        "hand-written set, or a corpus's train split (to gather a model's "
                        "proposals for train/verifier.py, not to measure)")
    p.add_argument("--corpus", default=None,
                   help="frozen corpus folder (default data/corpus; data/natural for --set "
                        "natural)")
    p.add_argument("--out", required=True, help="output folder (resumes if samples exist)")
    p.add_argument("--limit", type=int, default=None, help="only the first N rows")
    p.add_argument("--task", action="append", default=None, choices=TASKS,
                   help="only the rows of this task (repeat for several; default: every task); "
                        "--limit then counts those rows")
    runner.add_sampler_options(p)
    p.add_argument("--max-tokens", type=int, default=None,
                   help="cap every attempt's max_tokens at N (default: the codec's bound from the "
                        "request's schema); the same cap for every arm, recorded in the config")
    p.add_argument("--extract-form", choices=FORMS, default="window",
                   help="the form model arms extract in (memworker.turns): window (one call, "
                        "the default), turns (the window once, one short answer per event with "
                        "user words; --max-tokens caps each turn) or walk (one answer walking "
                        "those events); for a student trained with that --extract-form; the "
                        "rules arm answers as always")
    runner.add_turn_options(p)
    runner.add_propose_option(p)
    runner.add_turn_gate_option(p)
    runner.add_rules_options(p)
    p.add_argument("--no-grammar", action="store_true",
                   help="decode without the GBNF grammar (the codec still validates)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (2000)")
    p.add_argument("--judge-url", default=None,
                   help="optional LLM judge: OpenAI-compatible base URL (…/v1)")
    p.add_argument("--judge-model", default="judge", help="model name sent to the judge")
    p.add_argument("--into-receipt", default=None, metavar="RECEIPT.json",
                   help="merge the summary into this receipt's `evaluation` section (a release "
                        "receipt through its release folder, which is re-signed)")
    p.add_argument("--release", default="release", metavar="DIR",
                   help="release folder of a release receipt given to --into-receipt (release)")
    p.add_argument("--no-run", action="store_true",
                   help="run nothing: re-grade and summarise the samples already in --out (an "
                        "arm's missing rows are reported with their n)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--claim-gate", action="append", default=None, metavar="[ARM=]SCORE>=T",
                   help="the arm ARM (without ARM=: every model arm) keeps only the extract "
                        "claims it scores at or above T from its own token log-probabilities "
                        "(memworker.inference.gate; e.g. "
                        "'student=first(predicate)+first(value)>=-0.249', or just "
                        "'student=-0.249'); a threshold is one model's own, chosen on val with "
                        "eval/studies/confidence.py; repeatable")
    p.add_argument("--logprobs", action="store_true",
                   help="model arms record each answer token's log-probability in the samples "
                        "(GGUF; an Ollama or OpenAI-compatible server that returns them); the "
                        "answers do not change; for `eval/studies/confidence.py`")
    return p


def _gguf_hashes(arms: list[Arm]) -> dict[str, Any]:
    return {a.name: {"path": a.target, "sha256": sha256_file(a.target)}
            for a in arms if a.kind == "gguf" and Path(a.target).is_file()}


def _corpus_identity(corpus: Path) -> dict[str, Any]:
    manifest = json.loads((corpus / "manifest.json").read_text("utf-8"))
    return {"path": str(corpus), "manifest_sha256": sha256_file(corpus / "manifest.json"),
            "generator_version": manifest.get("generator_version"),
            "seed": manifest.get("seed"),
            "heldout_sha256": manifest.get("files", {}).get("heldout.jsonl")}


#: what must be the same for samples already in an output folder to be resumed or joined
_SAME = ("set", "corpus", "sampler", "prompt_sha256")


#: the config's lists of arm names (an arm's worker settings beyond its gate): key -> how a
#: mismatch reads (the arm was in it and now is not, or the other way round)
ARM_LISTS = {"proposing": ("proposing, now not", "not proposing, now proposing"),
             "with_rules": ("with the rules' claims, now without",
                            "without the rules' claims, now with"),
             "reflect_rules": ("reflection falling back to the rules', now not",
                               "reflection not falling back to the rules', now falling back"),
             "consolidate_rules": ("consolidation by the rules, now by the model",
                                   "consolidation by the model, now by the rules")}


def continue_config(out: Path, config: dict[str, Any]) -> dict[str, Any]:
    """The configuration to record in `out` when this invocation adds to the samples already
    there (another session, another arm): refuses when the set, corpus, sampler or prompts
    differ, or when an arm that has samples in `out` now names another model (a GGUF with other
    bytes, another spec); arms recorded before and not given now are kept."""
    path = out / "config.json"
    have = {s["arm"] for s in runner.read_samples(out / runner.SAMPLES)}
    if not have:
        return config
    try:
        before = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigMismatch(f"{out} holds samples but no readable config.json ({exc}), so "
                             "what made them is unknown",
                             "use another --out, or remove the folder to start over") from None
    where = f"{out} holds samples made with"
    for key in _SAME:
        if key == "corpus":
            mine, theirs = (config[key].get("manifest_sha256"),
                            before.get(key, {}).get("manifest_sha256"))
        else:
            mine, theirs = config[key], before.get(key)
        if mine != theirs:
            raise ConfigMismatch(f"{where} another {key} ({theirs!r}, now {mine!r})",
                                 "use another --out, or remove the folder to start over")
    for name in sorted(have & set(config["arms"])):
        old_gate = before.get("claim_gates", {}).get(name)
        new_gate = config.get("claim_gates", {}).get(name)
        if old_gate != new_gate:
            raise ConfigMismatch(f"{where} another claim gate for arm {name!r} ({old_gate}, now "
                                 f"{new_gate})", "name the arm differently, or remove its samples "
                                 "to run it again")
        old_turns = (before.get("turn_gates", {}).get(name), before.get("turn_gate_sha256"))
        new_turns = (config.get("turn_gates", {}).get(name), config.get("turn_gate_sha256"))
        if old_turns[0] != new_turns[0] or (old_turns[0] is not None
                                            and old_turns[1] != new_turns[1]):
            raise ConfigMismatch(f"{where} another turn gate for arm {name!r} (P >= "
                                 f"{old_turns[0]}, weights {old_turns[1]}; now P >= "
                                 f"{new_turns[0]}, weights {new_turns[1]})",
                                 "name the arm differently, or remove its samples to run it "
                                 "again")
        for key, (was, now) in ARM_LISTS.items():
            had = name in before.get(key, [])
            if had != (name in config.get(key, [])):
                raise ConfigMismatch(f"{where} arm {name!r} " + (was if had else now),
                                     "name the arm differently, or remove its samples to run it "
                                     "again")
        old_spec, old_gguf = before.get("arms", {}).get(name), before.get("gguf", {}).get(name)
        new_gguf = config["gguf"].get(name)
        if old_spec != config["arms"][name] or (old_gguf or {}).get("sha256") != \
                (new_gguf or {}).get("sha256"):
            raise ConfigMismatch(
                f"{where} another model for arm {name!r} ({old_spec}, sha256 "
                f"{(old_gguf or {}).get('sha256')}; now {config['arms'][name]}, sha256 "
                f"{(new_gguf or {}).get('sha256')})",
                "name the arm differently, or remove its samples to run it again")
    joined = {**config, "arms": {**before.get("arms", {}), **config["arms"]},
              "gguf": {**before.get("gguf", {}), **config["gguf"]}}
    gates = {**before.get("claim_gates", {}), **config.get("claim_gates", {})}
    if gates:
        joined["claim_gates"] = gates
    turn_gates = {**before.get("turn_gates", {}), **config.get("turn_gates", {})}
    if turn_gates:
        joined["turn_gates"] = turn_gates
        joined["turn_gate_sha256"] = config.get("turn_gate_sha256") or \
            before.get("turn_gate_sha256")
    for key in ARM_LISTS:   # an arm run again takes this run's membership
        names = sorted({n for n in before.get(key, []) if n not in config["arms"]}
                       | set(config.get(key, [])))
        if names:
            joined[key] = names
    return joined


def main(argv: list[str] | None = None, *, record_release: RecordRelease | None = None) -> int:
    """`record_release` records the summary in a release receipt given to --into-receipt and
    re-signs its folder (the receipt's one writer, `memworker.export.receipt.record_set`, handed
    over by `python eval/run.py` and the main job); without it such a receipt is refused."""
    args = build_parser().parse_args(argv)
    try:
        return _main(args, record_release)
    except EvalError as exc:
        print(f"eval: error: {exc}", file=sys.stderr)
        return 2


def planned_config(argv: list[str]) -> tuple[Path, dict[str, Any]]:
    """The output folder and the configuration `eval/run.py ARGV` records there before joining
    the samples already in it (`continue_config`); runs and writes nothing."""
    plan = _plan(build_parser().parse_args(argv))
    return plan.out, plan.config


class Plan(NamedTuple):
    """What an invocation runs (arms over rows with one sampler), where, and the configuration
    it records."""
    arms: list[Arm]
    rows: list[dict[str, Any]]
    out: Path
    sampler: Sampler
    config: dict[str, Any]


def _plan(args: argparse.Namespace) -> Plan:
    arms = [runner.parse_arm(a) for a in args.arm]
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise EvalError(f"arm names must be unique, got {names}")
    corpus = Path(args.corpus or runner.HAND_WRITTEN.get(args.set, "data/corpus"))
    rows = runner.load_eval_rows(corpus, args.set)
    rows_in_set = len(rows)
    if args.task:
        rows = [r for r in rows if r["task"] in args.task]
    if args.limit is not None:
        rows = rows[: args.limit]
    arms = runner.assign_gates(arms, args.claim_gate, args.extract_form)
    arms = runner.assign_turn_gates(arms, args.turn_gate, args.extract_form)
    arms = runner.assign_proposals(arms, args.propose, args.extract_form)
    arms = runner.assign_with_rules(arms, args.with_rules, args.extract_form)
    arms = runner.assign_reflect_rules(arms, args.reflect_rules)
    arms = runner.assign_consolidate_rules(arms, args.consolidate_rules)
    gates = {a.name: a.claim_gate for a in arms if a.claim_gate is not None}
    turn_gates = runner.turn_gates_config(arms)
    proposing = sorted(a.name for a in arms if a.propose)
    runner.check_turn_options(args)
    sampler = Sampler(seed=args.seed, n_ctx=args.n_ctx, threads=args.threads,
                      grammar=not args.no_grammar, max_tokens_cap=args.max_tokens,
                      extract_form=args.extract_form, turn_quotes=args.turn_quotes,
                      turn_history=args.turn_history, event_stamps=args.event_stamps,
                      claim_layout=args.claim_layout, turn_gate_tail=args.turn_gate_tail)
    sampler_doc = runner.sampler_doc(sampler)  # samples made before a later field: the same
    config = {"set": args.set, "corpus": _corpus_identity(corpus), "limit": args.limit,
              "rows_in_set": rows_in_set, **({"tasks": sorted(set(args.task))} if args.task
                                             else {}),
              "arms": {a.name: a.spec for a in arms}, "sampler": sampler_doc,
              "gguf": _gguf_hashes(arms), "prompt_sha256": template_hashes(),
              "environment": environment(), **({"logprobs": True} if args.logprobs else {}),
              **({"claim_gates": gates} if gates else {}),
              **turn_gates,
              **({"proposing": proposing} if proposing else {}),
              **runner.rules_lists(arms)}
    return Plan(arms, rows, Path(args.out), sampler, config)


def _main(args: argparse.Namespace, record_release: RecordRelease | None) -> int:
    arms, rows, out, sampler, config = _plan(args)
    names = [a.name for a in arms]
    out.mkdir(parents=True, exist_ok=True)
    if not args.no_run:
        config = continue_config(out, config)
        write_json(out / "config.json", config)
    elif (out / "config.json").is_file():   # the configuration the samples were made with
        config = {**json.loads((out / "config.json").read_text("utf-8")),
                  "resummarised_with": {"arms": config["arms"], "limit": args.limit,
                                        "corpus": config["corpus"],  # the rows graded now
                                        **({"tasks": config["tasks"]} if "tasks" in config
                                           else {})}}
    speed = {}
    for arm in [] if args.no_run else arms:
        record = runner.run_arm(arm, rows, out, sampler, progress=not args.no_progress,
                                record_logprobs=args.logprobs)
        if record["rows_run"]:
            record["rows_per_s"] = round(record["rows_run"] / record["wall_seconds"], 4)
        speed[arm.name] = record
        print(f"arm {arm.name}: {record['rows_run']} rows run, {record['rows_skipped']} already "
              f"done, {record.get('rows_per_s', '–')} rows/s", file=sys.stderr)
    samples = runner.read_samples(out / runner.SAMPLES)
    judge = None
    if args.judge_url:
        judge = run_judge(args.judge_url, args.judge_model, rows, samples, out, seed=args.seed)
    summary = S.summarise(rows, samples, names, config=config, speed=speed,
                          resamples=args.resamples, seed=args.seed, judge=judge)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n",
                                      "utf-8")
    (out / "report.md").write_text(S.report_markdown(summary), "utf-8")
    if not args.no_plots:
        plots.plot(summary, out)
    if args.into_receipt:
        try:
            S.merge_into_receipt(args.into_receipt, args.set, summary, args.release,
                                 record_release=record_release)
        except (FileNotFoundError, ValueError) as exc:
            raise EvalError(str(exc)) from None
    heads = []
    for arm in names:
        parts = []
        for t in S.TASKS:
            entry = S.primary_entry(summary, arm, t)
            if entry and entry["value"] is not None:
                parts.append(f"{t} {entry['value']:.3f} (n={entry['n_rows']})")
        heads.append(f"{arm}: " + ", ".join(parts))
    print(f"eval {args.set}: {len(rows)} rows; " + "; ".join(heads) + f" -> {out}/report.md")
    return 0
