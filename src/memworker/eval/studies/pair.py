"""`python eval/studies/pair.py`: two arms from two evaluation folders, compared on the rows both
ran.

A new candidate is judged against the committed student on val without running the committed one
again: each folder's samples are re-graded by the same grader and summarised together
(`memworker.eval.summary.summarise`: the paired bootstrap over episodes, exact McNemar), as if
one evaluation had run both arms. The folders must hold the same set of the same corpus (their
`config.json`: set and corpus manifest sha256), and each arm's samples must have been made with
the same sampler settings that matter for a comparison (extract form, max tokens cap, grammar);
a difference is an error naming it, unless `--differ FIELD` names it: then the comparison is
of that setting (e.g. `--differ turn_history`: the turns form read once against today's
schedule, issue 48), and the summary's config records both values. Runs no model; writes
nothing unless `--to`.

    python eval/studies/pair.py --arm g3=receipts/eval/val-e20:g3 --arm e21=/tmp/e21/val:e21
    python eval/studies/pair.py --arm g3=/tmp/g3-gated:gated --arm e21=/tmp/e21-gated:gated --to DIR
    python eval/studies/pair.py --arm v3=receipts/eval/val-47/v3:v3 --arm tg=FOLDER:tg \
        --gate "v3=first(predicate)+first(value)>=-0.055"

`--gate NAME=SPEC` applies a claim gate to an arm that ran proposing without one (its recorded
claims, `gated_sample`): the worker with that gate, since a gate only filters the codec's answer;
`--with-rules NAME` then composes it with its folder's rules arm as the hybrid worker does.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from memworker.eval import stats
from memworker.eval import summary as S
from memworker.eval.runner import (
    LATER_DEFAULTS,
    SAMPLES,
    EvalError,
    grade_sample,
    load_eval_rows,
    read_samples,
)
from memworker.eval.studies.rowtools import (
    compose_row,
    folder_corpus,
    gate_mask,
    kept_claim_stats,
)
from memworker.eval.studies.verifier_auc import _only
from memworker.hashing import write_json
from memworker.inference.gate import ClaimGate
from memworker.inference.verifier import Verifier, VerifierError

#: sampler fields two folders must share for their arms to be compared
SAMPLER_FIELDS = ("extract_form", "max_tokens_cap", "grammar", "turn_quotes", "turn_history",
                  "event_stamps", "claim_layout", "turn_gate_tail")


def parse_arm(spec: str) -> tuple[str, Path, str]:
    """`NAME=FOLDER:ARM` -> (NAME, FOLDER, ARM)."""
    name, eq, rest = spec.partition("=")
    folder, colon, arm = rest.rpartition(":")
    if not (eq and colon and name and folder and arm):
        raise EvalError(f"--arm {spec!r}: expected NAME=FOLDER:ARM (e.g. g3=receipts/eval/val:g3)")
    return name, Path(folder), arm


def _config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        raise EvalError(f"{folder}: no config.json (not an evaluation folder)")
    return json.loads(path.read_text("utf-8"))


def parse_gates(specs: list[str]) -> dict[str, ClaimGate]:
    """`NAME=SPEC` values of `--gate` -> {arm name: its claim gate}."""
    out: dict[str, ClaimGate] = {}
    for text in specs:
        m = re.match(r"^([A-Za-z0-9_.-]+)=(?!=)(.+)$", text)
        name, spec = (m.group(1), m.group(2)) if m else ("", "")
        if not m:
            raise EvalError(f"--gate {text!r}: expected NAME=SPEC (e.g. v3=first(predicate)+"
                            "first(value)>=-0.055)")
        if name in out:
            raise EvalError(f"--gate: two gates for arm {name!r}")
        try:
            out[name] = ClaimGate.parse(spec)
        except ValueError as exc:
            raise EvalError(f"--gate {text!r}: {exc}") from None
    return out


def gated_sample(row: dict[str, Any], sample: dict[str, Any], gate: ClaimGate,
                 verifier: Verifier | None = None) -> dict[str, Any]:
    """An extract sample of an ungated proposing arm with `gate` applied as the worker applies
    it (its claims the gate drops left out, `ClaimGate.apply`'s rule) and graded again: what the
    worker with that gate answers, since the gate only filters the codec's answer. Other
    samples as they are; EvalError for a sample a gate already ran on, or one without the token
    log-probabilities a log-probability gate reads."""
    if row["task"] != "extract" or sample.get("output") is None:
        return sample
    if sample.get("gate"):
        raise EvalError(f"{sample['id']}: its arm already ran with a claim gate")
    stats = kept_claim_stats(sample, row["input"]) if gate.needs_logprobs else None
    if gate.needs_logprobs and stats is None:
        raise EvalError(f"{sample['id']}: no token log-probabilities for the gate "
                        f"{gate.spec!r} (run the arm with eval/run.py --logprobs)")
    if verifier is None and gate.needs_verifier:
        verifier = Verifier.load()
    out = _only(sample, gate_mask(gate, row, sample, stats, verifier))
    out["verdicts"] = grade_sample(row, out)
    return out


def load_pair(specs: list[str], differ: tuple[str, ...] = (),
              gates: dict[str, ClaimGate] | None = None, with_rules: tuple[str, ...] = (),
              corpus: str | Path | None = None
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str], dict[str, Any]]:
    """(rows, samples renamed to their arm names, arm names, config) of the arms in `specs`;
    the `SAMPLER_FIELDS` named in `differ` may differ (the config's `differ` records them);
    `gates` {arm name: claim gate}: that arm's recorded proposals gated (`gated_sample`);
    `with_rules`: those arms' extract answers composed with their folder's rules arm as the
    hybrid worker composes them (`rowtools.compose_row`, policy union), after the gate;
    `corpus`: the rows read from this copy of the folders' corpus (`rowtools.folder_corpus`)."""
    unknown = sorted(set(differ) - set(SAMPLER_FIELDS))
    if unknown:
        raise EvalError(f"--differ {', '.join(unknown)}: not a sampler field compared here "
                        f"({', '.join(SAMPLER_FIELDS)})")
    if len(specs) != 2:
        raise EvalError("give exactly two --arm NAME=FOLDER:ARM")
    arms = [parse_arm(s) for s in specs]
    names = [a[0] for a in arms]
    if names[0] == names[1]:
        raise EvalError(f"the two arms need different names, got {names[0]!r} twice")
    configs = [_config(folder) for _, folder, _ in arms]
    if configs[0].get("set") != configs[1].get("set"):
        raise EvalError(f"the folders evaluate different sets: {configs[0].get('set')!r} and "
                        f"{configs[1].get('set')!r}")
    manifests = [(c.get("corpus") or {}).get("manifest_sha256") for c in configs]
    if manifests[0] != manifests[1]:
        raise EvalError(f"the folders evaluate different corpora (manifest {manifests[0]} and "
                        f"{manifests[1]})")
    differs: dict[str, list[Any]] = {}
    for field in SAMPLER_FIELDS:
        values = [(c.get("sampler") or {}).get(field, LATER_DEFAULTS.get(field))
                  for c in configs]
        if field in differ:
            differs[field] = values
        elif values[0] != values[1]:
            raise EvalError(f"the folders' samplers differ in {field}: {values[0]!r} and "
                            f"{values[1]!r}: not one comparison")
    rows = load_eval_rows(folder_corpus(configs[0], f"{arms[0][1]}/config.json", corpus),
                          configs[0]["set"])
    samples = []
    for (name, folder, arm), config in zip(arms, configs, strict=True):
        got = [s for s in read_samples(folder / SAMPLES) if s["arm"] == arm]
        if not got:
            raise EvalError(f"{folder}/{SAMPLES}: no samples of arm {arm!r} (arms there: "
                            f"{', '.join(sorted(config.get('arms') or {})) or 'none'})")
        samples += [{**s, "arm": name} for s in got]
    # the rows both arms ran, and only theirs: each arm's values are then those the paired
    # difference is computed on (a folder of the whole split beside one of its first N rows)
    ran = [{s["id"] for s in samples if s["arm"] == n} for n in names]
    both = ran[0] & ran[1]
    if not both:
        raise EvalError("the two arms ran no row in common")
    rows = [r for r in rows if r["id"] in both]
    samples = [s for s in samples if s["id"] in both]
    gates = gates or {}
    unknown = sorted((set(gates) | set(with_rules)) - set(names))
    if unknown:
        raise EvalError(f"--gate/--with-rules {', '.join(unknown)}: not an arm compared here")
    by_id = {r["id"]: r for r in rows}
    if gates:
        verifier = Verifier.load() if any(g.needs_verifier for g in gates.values()) else None
        samples = [gated_sample(by_id[s["id"]], s, gates[s["arm"]], verifier)
                   if s["arm"] in gates else s for s in samples]
    for name, folder, _ in arms:
        if name not in with_rules:
            continue
        rules = {s["id"]: s for s in read_samples(folder / SAMPLES) if s["arm"] == "rules"}
        missing = sorted({s["id"] for s in samples if s["arm"] == name} - set(rules))
        if missing:
            raise EvalError(f"--with-rules {name}: {folder} has no rules samples of "
                            f"{len(missing)} of its rows (e.g. {missing[0]})")
        composed = []
        for s in samples:
            if s["arm"] == name and by_id[s["id"]]["task"] == "extract":
                row = by_id[s["id"]]
                s = compose_row(row, rules[s["id"]], s, {"extract": "union"}, name)
                s["verdicts"] = grade_sample(row, s)
            composed.append(s)
        samples = composed
    config = {"set": configs[0]["set"], "corpus": configs[0].get("corpus"),
              "rows_paired": len(rows),
              **({"rows_left_out": {n: len(r - both) for n, r in zip(names, ran, strict=True)}}
                 if ran[0] != ran[1] else {}),
              "rows_in_set": configs[0].get("rows_in_set"), "sampler": configs[0].get("sampler"),
              "paired_from": {n: {"folder": str(f), "arm": a} for n, f, a in arms},
              **({"differ": {field: dict(zip(names, values, strict=True))
                             for field, values in differs.items()}} if differs else {}),
              **({"gated_here": {n: g.spec for n, g in gates.items()}} if gates else {}),
              **({"with_rules_here": sorted(with_rules)} if with_rules else {})}
    return rows, samples, names, config


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eval/studies/pair.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--arm", action="append", required=True, metavar="NAME=FOLDER:ARM",
                   help="an arm of an evaluation folder, under a name (twice; the second "
                        "minus the first is reported, unless one is named base or rules: that "
                        "one is subtracted, as in eval/run.py)")
    p.add_argument("--to", default=None, help="write summary.json and report.md here")
    p.add_argument("--resamples", type=int, default=stats.DEFAULT_RESAMPLES)
    p.add_argument("--differ", action="append", default=[], metavar="FIELD",
                   help="a sampler field the two folders may differ in, the setting compared "
                        f"(one of {', '.join(SAMPLER_FIELDS)}; repeatable)")
    p.add_argument("--gate", action="append", default=[], metavar="NAME=SPEC",
                   help="apply this claim gate to the arm NAME's recorded proposals (an arm run "
                        "proposing without a gate; a log-probability gate needs --logprobs "
                        "samples) before comparing: that worker's answers; repeatable")
    p.add_argument("--with-rules", action="append", default=[], metavar="NAME",
                   help="compose the arm NAME's extract answers (after --gate) with its "
                        "folder's rules arm as the hybrid worker does (union): that worker's "
                        "answers; repeatable")
    p.add_argument("--corpus", type=Path, default=None, metavar="DIR",
                   help="read the rows from DIR, a copy of the corpus the folders recorded "
                        "(same manifest sha256), instead of the recorded path")
    args = p.parse_args(argv)
    try:
        rows, samples, names, config = load_pair(args.arm, tuple(args.differ),
                                                 parse_gates(args.gate), tuple(args.with_rules),
                                                 args.corpus)
    except (EvalError, VerifierError, OSError, ValueError) as exc:
        print(f"eval/studies/pair.py: error: {exc}", file=sys.stderr)
        return 2
    summary = S.summarise(rows, samples, names, config=config, resamples=args.resamples)
    comp = summary["comparisons"][0]
    across = "".join(f"; {field}: " + ", ".join(f"{n} {v!r}" for n, v in values.items())
                     for field, values in config.get("differ", {}).items())
    print(f"{comp['label']} on {comp['rows']} rows both ran ({config['set']}{across}); value "
          "(num/den) per arm, paired difference [95 % interval over episodes]:")
    for task, block in comp["tasks"].items():
        for metric, m in sorted(block.items()):
            vals = []
            for arm in (comp["a"], comp["b"]):
                e = summary["metrics"][arm].get(task, {}).get("metrics", {}).get(metric)
                vals.append("–" if not e or e["value"] is None else
                            f"{e['value']:.3f} ({e['num']:g}/{e['den']:g})")
            diff = ("–" if m["diff"] is None or m["ci"] is None else
                    f"{m['diff']:+.3f} [{m['ci'][0]:+.3f}, {m['ci'][1]:+.3f}]")
            print(f"  {task:<12}{metric:<28}{comp['a']} {vals[0]:<22}{comp['b']} "
                  f"{vals[1]:<22}{diff}")
    if args.to:
        out = Path(args.to)
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "summary.json", summary)
        (out / "report.md").write_text(S.report_markdown(summary), "utf-8")
        print(f"wrote {out}/summary.json and report.md")
    return 0
