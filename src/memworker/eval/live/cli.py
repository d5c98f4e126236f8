"""`python eval/live.py`: every arm over every scenario in a fresh store -> table, summary.json."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memworker.eval import runner as eval_runner
from memworker.eval.live import resume
from memworker.eval.live import runner as live
from memworker.eval.live.scenarios import DEFAULT_SCENARIOS, ScenarioError, load_scenarios
from memworker.eval.runner import EvalError, Sampler
from memworker.inference import hybrid
from memworker.inference.hmem import MemWorkerBackend
from memworker.receipts import RELEASE_KIND, environment
from memworker.turns import FORMS

#: records a live summary in a release receipt (receipt given to --into-receipt, summary,
#: release folder): the receipt's one writer, `memworker.export.receipt.record_live_file`, which
#: `eval/live.py` hands over (the evaluator does not import the export)
RecordLive = Callable[[Path, dict[str, Any], Path], Any]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="eval/live.py",
        description="Live acceptance: each arm's worker, through MemWorkerBackend, inside a "
                    "small hmem-shaped SQLite store over scripted multi-session scenarios; "
                    "live checks (did the store end right?) beside isolated grades (was each "
                    "worker call right?).")
    p.add_argument("--arm", action="append", required=True, metavar="NAME=SPEC",
                   help="an arm (repeat): NAME=path.gguf, NAME=ollama:MODEL, "
                        "NAME=http://host:port/v1, or rules")
    p.add_argument("--out", default="runs/live", help="output folder (runs/live); each "
                   "finished (arm, scenario) result is stored in OUT/results/ with its identity "
                   "and reused by a rerun whose identity matches (a scenario that runs gets its "
                   "store rebuilt from scratch)")
    p.add_argument("--fresh", action="store_true",
                   help="discard OUT's stored results first and run every arm and scenario")
    p.add_argument("--accept-code-change", action="store_true",
                   help="reuse stored results whose identity differs only in memworker source "
                        "files (listed in summary.json config.code_changed)")
    p.add_argument("--scenarios", default=str(DEFAULT_SCENARIOS),
                   help="scenario YAML (default: the packaged scenarios.yaml)")
    p.add_argument("--only", action="append", default=None, metavar="NAME",
                   help="run only this scenario (repeat)")
    eval_runner.add_sampler_options(p)
    p.add_argument("--max-tokens", type=int, default=None,
                   help="cap every attempt's max_tokens at N (default: the codec's bound from "
                        "each request's schema); the same cap for every arm")
    p.add_argument("--no-grammar", action="store_true",
                   help="decode without the GBNF grammar (the codec still validates)")
    p.add_argument("--extract-form", choices=FORMS, default="window",
                   help="the form model arms extract in (memworker.turns; a student trained in "
                        "the turns form runs with turns); the rules arm answers as always")
    p.add_argument("--claim-gate", action="append", default=None, metavar="[ARM=]SCORE>=T",
                   help="the arm ARM (without ARM=: every model arm) keeps only the extract "
                        "claims it scores at or above T (memworker.inference.gate, as "
                        "eval/run.py --claim-gate); repeatable")
    eval_runner.add_turn_options(p)
    eval_runner.add_propose_option(p)
    eval_runner.add_turn_gate_option(p)
    eval_runner.add_rules_options(p)
    p.add_argument("--into-receipt", default=None, metavar="RECEIPT.json",
                   help="record the summary as the live acceptance of this release receipt "
                        "(`live`, which the gate of a format-2 release reads); the release "
                        "folder is re-signed")
    p.add_argument("--release", default="release", metavar="DIR",
                   help="release folder of the receipt given to --into-receipt (release)")
    return p


def main(argv: list[str] | None = None, *, record_live: RecordLive | None = None) -> int:
    """`record_live` records the summary in a release receipt given to --into-receipt
    (`eval/live.py` passes `memworker.export.receipt.record_live_file`)."""
    args = build_parser().parse_args(argv)
    try:
        if args.into_receipt:
            check_receipt(Path(args.into_receipt), record_live)
        return _main(args, record_live)
    except (EvalError, ScenarioError) as exc:
        print(f"live: error: {exc}", file=sys.stderr)
        return 2


def check_receipt(path: Path, record_live: RecordLive | None) -> None:
    """Before anything runs: --into-receipt names a release receipt and a writer is given."""
    if not path.is_file():
        raise EvalError(f"--into-receipt: receipt not found: {path}")
    try:
        kind = json.loads(path.read_text("utf-8")).get("kind")
    except (ValueError, AttributeError):
        kind = None
    if kind != RELEASE_KIND:
        raise EvalError(f"--into-receipt: {path} is not a release receipt (kind "
                        f"{RELEASE_KIND!r}): live acceptance is recorded in releases only")
    if record_live is None:
        raise EvalError("--into-receipt: a release receipt is signed by its folder: record "
                        "into it with `python eval/live.py … --into-receipt`, which re-signs it")


def _main(args: argparse.Namespace, record_live: RecordLive | None = None) -> int:
    eval_runner.check_turn_options(args)
    arms = eval_runner.assign_gates([eval_runner.parse_arm(a) for a in args.arm],
                                    args.claim_gate, args.extract_form)
    arms = eval_runner.assign_turn_gates(arms, args.turn_gate, args.extract_form)
    arms = eval_runner.assign_proposals(arms, args.propose, args.extract_form)
    arms = eval_runner.assign_with_rules(arms, args.with_rules, args.extract_form)
    arms = eval_runner.assign_reflect_rules(arms, args.reflect_rules)
    arms = eval_runner.assign_consolidate_rules(arms, args.consolidate_rules)
    ungated = [a.name for a in arms if a.propose and a.claim_gate is None]
    if ungated:
        raise EvalError(f"--propose: arm(s) {', '.join(ungated)} have no --claim-gate to keep or "
                        "drop what they propose (a store's worker proposes only with its gate)")
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise EvalError(f"arm names must be unique, got {names}")
    scenarios = load_scenarios(args.scenarios)
    if args.only:
        unknown = sorted(set(args.only) - {s["name"] for s in scenarios})
        if unknown:
            raise EvalError(f"unknown scenario(s) {unknown}; known: "
                            f"{[s['name'] for s in scenarios]}")
        scenarios = [s for s in scenarios if s["name"] in args.only]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sampler = Sampler(seed=args.seed, n_ctx=args.n_ctx, threads=args.threads,
                      grammar=not args.no_grammar, max_tokens_cap=args.max_tokens,
                      extract_form=args.extract_form, turn_history=args.turn_history,
                      event_stamps=args.event_stamps, turn_quotes=args.turn_quotes,
                      turn_gate_tail=args.turn_gate_tail)
    gates = {a.name: a.claim_gate for a in arms if a.claim_gate is not None}
    proposing = sorted(a.name for a in arms if a.propose)
    config = {"arms": {a.name: a.spec for a in arms}, "sampler": eval_runner.sampler_doc(sampler),
              **({"claim_gates": gates} if gates else {}),
              **eval_runner.turn_gates_config(arms),
              **({"proposing": proposing} if proposing else {}),
              **eval_runner.rules_lists(arms),
              "scenario_file": str(args.scenarios), "environment": environment()}

    def progress(arm: str, name: str, result: dict[str, Any]) -> None:
        failed = [c for c, ok in result["checks"].items() if not ok]
        print(f"  {arm} {name}: {'PASS' if result['passed'] else 'FAIL ' + ','.join(failed)}; "
              f"isolated {result['isolated']['passed']}/{result['isolated']['total']}; "
              f"{result['seconds']:.1f} s", file=sys.stderr, flush=True)

    if args.fresh:
        resume.discard(out)
    # every identity first: a stale stored result stops the run before anything is played
    plans, stale = [], {}
    for arm in arms:
        if arm.kind == "gguf" and not Path(arm.target).is_file():
            eval_runner.make_backend(arm, sampler)   # raises the missing-GGUF error
        base = resume.arm_identity(arm, sampler)
        todo, idents, code_changed = [], {}, []
        for s in scenarios:
            idents[s["name"]] = resume.pair_identity(base, args.scenarios, s)
            stored = resume.load(out, arm.name, s["name"])
            if stored is None:
                todo.append(s)
                continue
            diff = resume.differences(stored["identity"], idents[s["name"]])
            code = [d.removeprefix("code_sha256.") for d in diff
                    if d.startswith("code_sha256.")]
            if len(code) < len(diff) or (code and not args.accept_code_change):
                stale[f"{arm.name}/{s['name']}"] = diff
            code_changed += code
        plans.append((arm, todo, idents, sorted(set(code_changed))))
    if stale:
        raise resume.stale_error(out, stale)

    for arm, todo, idents, _ in plans:
        reused = len(scenarios) - len(todo)
        if reused:
            print(f"  {arm.name}: reusing {reused} stored scenario result(s) from "
                  f"{out / resume.RESULTS / arm.name}", file=sys.stderr, flush=True)
        if not todo:
            continue
        backend = eval_runner.make_backend(arm, sampler)
        model = arm.kind != "rules"  # the rules answer in the window form, ungated
        worker = MemWorkerBackend(backend, temperature=sampler.temperature, seed=sampler.seed,
                                  use_grammar=sampler.grammar, max_tokens=sampler.max_tokens_cap,
                                  extract_form=sampler.extract_form if model else "window",
                                  claim_gate=arm.claim_gate, propose=arm.propose,
                                  turn_history=sampler.turn_history if model else "answers",
                                  event_stamps=sampler.event_stamps if model else "full",
                                  turn_quotes=sampler.turn_quotes if model else "upto",
                                  turn_gate=arm.turn_gate if model else None,
                                  turn_gate_tail=sampler.turn_gate_tail
                                  if model and arm.turn_gate is not None else "read",
                                  **hybrid.settings_of(arm))
        clock = [time.perf_counter()]

        def persist(name: str, scenario: str, result: dict[str, Any], arm=arm,
                    idents=idents, clock=clock) -> None:
            now = time.perf_counter()
            resume.save(out, arm, scenario, idents[scenario], result, now - clock[0])
            clock[0] = now
            progress(name, scenario, result)

        try:
            live.run_arm(arm.name, worker, todo, out, arm.kind, arm.target, persist)
        finally:
            eval_runner.close_backend(backend)

    results, workers, seconds, reused_names, code_changed = {}, {}, {}, {}, {}
    for arm, todo, _, changed in plans:
        docs = {s["name"]: resume.load(out, arm.name, s["name"]) for s in scenarios}
        results[arm.name] = live.aggregate({n: d["result"] for n, d in docs.items()})
        # the seconds each scenario took when it ran (as before: not loading the model)
        seconds[arm.name] = round(sum(d["wall_seconds"] for d in docs.values()), 1)
        reused_names[arm.name] = sorted({s["name"] for s in scenarios}
                                        - {s["name"] for s in todo})
        workers[arm.name] = docs[scenarios[-1]["name"]]["result"]["identity"]
        if changed:
            code_changed[arm.name] = changed
    config["seconds"] = seconds
    config["reused"] = reused_names
    if code_changed:
        config["code_changed"] = code_changed
    summary = live.write_summary(out, scenarios, results, workers, config)
    text = live.table(summary)
    (out / "report.md").write_text("# Live acceptance\n\n" + text + "\n", "utf-8")
    print(text)
    print("live: " + "; ".join(f"{a}: {r['passed']}/{r['total']} scenarios, isolated "
                               f"{r['isolated']['passed']}/{r['isolated']['total']} calls, "
                               f"{seconds[a]} s"
                               + (f" ({len(reused_names[a])} reused)" if reused_names[a] else "")
                               for a, r in results.items())
          + f" -> {out}/summary.json")
    if args.into_receipt and record_live is not None:
        try:
            record_live(Path(args.into_receipt), summary, Path(args.release))
        except ValueError as exc:  # the writer's refusal (ExportError), one line
            raise EvalError(str(exc)) from None
        print(f"live: recorded in {args.into_receipt} (release {args.release}, re-signed)")
    return 0
