"""`python eval/studies/fork.py`: propose only where the student would write a claim — the fork
threshold, replayed on a proposing student's recorded turns (issue 48: a worker that writes
less without a new student).

A proposing worker (`codec.run_turns(propose=True)`) makes every turn write at least one claim:
its grammar takes the "no claim" side away at the turn's first decision, the fork where the
answer `{"claims":[` either closes (`]`) or opens a claim (`[`). On val's windows (~7 turns)
that is ~6 claims a window, of which the chosen gate keeps about one, and the answer tokens are
mostly those dropped claims. The **fork threshold** keeps proposing where the student's own
probability of opening a claim is at least `exp(T)` and ends the turn with no claim elsewhere:
the turn's answer is `{"claims":[]}` and its decoding stops at the fork token. The fork score is
the sum of the recorded token log-probabilities (the log-softmax of the raw logits, before the
grammar: the model's own belief) of the answer's tokens up to and including the one that writes
the first claim's opening bracket (`{"claims":[[`), the same score the codec computes live
(`memworker.inference.codec.FORK_TEXT`). T = -inf is today's proposing worker. The score is
the log-probability of the opening the grammar let the greedy sampler take (its best-scoring
claim-opening token, e.g. `[[` or `[[[`), so P(open a claim) is at least exp(score) and at most a
few times it (the other tokenizations of the opening score lower).

A bound rides along too: **the oracle turn skip**, where only the turns whose event is the latest
source of a gold claim are asked (the others cost nothing, not even their question). No worker
can know that; it bounds what any turn-level decision (a classifier of fact-bearing events, a
probe) could save and keep.

A second lever rides along: **a turn stopped at its first repeat**. A greedy student that writes
a claim again within a turn (the same array) usually repeats it until the claim limit; the codec
drops the repeats. Stopping the turn after the first repeat (the codec closing the list there)
costs its tokens up to that claim's end and loses the turn's claims after it (none, when the
loop runs to the limit).

Input: an evaluation folder whose model arm ran `--extract-form turns --propose --logprobs` with
no gate at run time. For each design the claims the gate keeps (default `verifier>=0.9`, release
v4's; `--gate`), graded alone and, with `--union`, as the release's hybrid worker composes them
with the rules' claims; and the answer tokens a window (the turns' recorded completion tokens,
a cut turn counting its tokens up to the fork, a stopped turn its tokens up to the repeat's
end plus the `]}` and end token that close it). A replay assumes each turn's answer is as
recorded: in today's schedule (each turn reading the answers before it) a cut turn changes the
prompts of the turns after it, so a live run is the measurement that counts (the turn gate's:
`eval/run.py --turn-gate`, `inference/bench.py --turn-gate`; the fork threshold and the repeat
stop are replayed only, not built).

    python eval/studies/fork.py --folder val=receipts/eval/val-47/e22:e22 \\
        --folder natural-dev=receipts/eval/natural-dev/e22:n1 --union
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from memworker.eval.runner import EvalError, grade_sample
from memworker.eval.studies.confidence import Rows
from memworker.eval.studies.gate_choice import _floats
from memworker.eval.studies.pair import parse_arm
from memworker.eval.studies.rowtools import compose_row, gate_mask
from memworker.eval.studies.verifier_auc import _only
from memworker.inference.codec import fork_score
from memworker.inference.gate import (
    ClaimGate,
    GateError,
    check_tokens,
    claim_spans,
    kept,
    turn_parts,
)
from memworker.inference.turn_gate import TurnGate, TurnGateError
from memworker.inference.verifier import DEFAULT_WEIGHTS, Verifier, VerifierError
from memworker.turns import asked as asked_turns

#: fork thresholds replayed when none is given (-inf: today's proposing worker)
THRESHOLDS = (-math.inf, -3.0, -2.0, -1.5, -1.0, -0.7, -0.5, -0.3, -0.2, -0.1)
CLOSE_TOKENS = 2  # a turn stopped at a repeat: the `]}` that closes it and the end token


class Turn:
    """One asked turn of a recorded window: its accepted answer, its fork score, the tokens it
    cost as recorded (every attempt), up to the fork, and if stopped at its first repeat."""

    def __init__(self, attempts: list[dict[str, Any]], raw: str, tokens: list[Any] | None,
                 where: str):
        tokens_of = [int(a.get("completion_tokens") or 0) for a in attempts]
        self.recorded = sum(tokens_of)
        first = attempts[0]
        first_tokens = check_tokens(first["raw"], first.get("token_logprobs"), where)
        if first_tokens is None:
            raise EvalError(f"{where}: no token log-probabilities recorded; run the arm with "
                            "`eval/run.py --logprobs`")
        score, n = fork_score(first_tokens)
        if score is None:
            raise EvalError(f"{where}: the answer does not open a claim ({first['raw'][:40]!r}): "
                            "was the arm run with `--propose`?")
        self.fork, self.fork_tokens = score, n
        # the first claim that repeats one before it in the same answer, and what stopping there
        # costs: the accepted answer's pieces up to that claim's end, the tokens that close it,
        # and the tokens of the attempts a retry replaced
        def cut_at(end: int) -> int:
            pieces, written = 0, 0
            for piece, _ in tokens or []:
                if written >= end:
                    break
                written += len(piece)
                pieces += 1
            return pieces + CLOSE_TOKENS + sum(tokens_of[:-1])

        self.repeat_at: int | None = None
        self.stopped = self.recorded
        spans = [s["claim"] for s in claim_spans(raw)]
        # a turn cut after its first claim (the grammar's maxItems 1): its tokens up to that end
        self.first_claim = min(self.recorded, cut_at(spans[0][1])) if spans else self.recorded
        seen: set[str] = set()
        for k, span in enumerate(spans):
            text = raw[span[0]:span[1]]
            if text in seen:
                self.repeat_at = k
                self.stopped = cut_at(span[1])
                break
            seen.add(text)


class Window:
    """One extract row: its turns, and for each claim of the model's output the turn it came
    from and its position in that turn's answer."""

    def __init__(self, row: dict[str, Any], sample: dict[str, Any]):
        where = sample["id"]
        asked = asked_turns(row["input"]["events"], sample.get("extract_form") or "turns")
        try:
            parts = turn_parts(sample["turns"], asked, where)
        except GateError as exc:
            raise EvalError(str(exc)) from None
        groups: list[list[dict[str, Any]]] = [[]]
        for t in sample["turns"]:
            groups[-1].append(t)
            if t.get("error") is None:
                groups.append([])
        self.turns = [Turn(g, raw, tokens, f"{where} turn {i}")
                      for i, (g, (raw, tokens, _)) in enumerate(zip(groups, parts, strict=False))]
        # the oracle's turns: those whose event is the latest source of a gold claim
        gold = {max(c["source_indices"]) for c in (row.get("gold") or {}).get("claims", [])
                if c.get("source_indices")}
        self.fact_turns = [a.event in gold for a in asked]
        text = {e["index"]: e.get("text") for e in row["input"]["events"]}
        self.texts = [text[a.event] for a in asked]
        self.asked_by: list[float] = []   # the turn gate's P(fact) of each turn, when given
        merged: list[tuple[int, int]] = []
        for i, (raw, _, prefix) in enumerate(parts):
            merged += [(i, k) for k, _ in kept(list(enumerate(claim_spans(raw))),
                                               sample["diagnostics"], prefix)]
        n_out = len(sample["output"]["claims"])
        self.origin = kept(merged, sample["diagnostics"])[:n_out]
        if len(self.origin) != n_out:
            raise EvalError(f"{where}: {len(self.origin)} claims found in the turns, {n_out} "
                            "in the output")

    def skipped(self, oracle: bool = False, turn_gate: float | None = None) -> list[bool]:
        """Per turn: whether the design does not ask it (the oracle: no gold fact; the turn
        gate: its P(fact) below `turn_gate`)."""
        return [(oracle and not fact) or (turn_gate is not None and p < turn_gate)
                for fact, p in zip(self.fact_turns, self.asked_by or [1.0] * len(self.turns),
                                   strict=True)]

    def tokens(self, threshold: float, stop_repeats: bool, skipped: list[bool],
               one_claim: bool = False) -> int:
        """The answer tokens of the window under a design (`skipped`: `self.skipped`'s;
        `one_claim`: each turn cut after its first claim)."""
        return sum(0 if skip
                   else t.fork_tokens if t.fork < threshold
                   else t.first_claim if one_claim
                   else (t.stopped if stop_repeats else t.recorded)
                   for t, skip in zip(self.turns, skipped, strict=True))

    def alive(self, threshold: float, stop_repeats: bool, skipped: list[bool],
              one_claim: bool = False) -> list[bool]:
        """Per output claim: whether the design still writes it (`skipped`: `self.skipped`'s)."""
        out = []
        for turn, k in self.origin:
            t = self.turns[turn]
            out.append(t.fork >= threshold and not skipped[turn] and not (one_claim and k > 0)
                       and not (stop_repeats and t.repeat_at is not None and k > t.repeat_at))
        return out


class SetReplay:
    """One folder: its rows, the gate's verdict on each model claim, the windows."""

    def __init__(self, name: str, folder: Path, model: str, gate: ClaimGate, verifier: Verifier,
                 rules: str = "rules", union: bool = False, turn_gate: TurnGate | None = None,
                 corpus: str | Path | None = None, first: int | None = None):
        self.name, self.folder, self.model, self.union = name, folder, model, union
        self.rows = Rows(folder, model, rules, corpus)
        if first is not None:       # the windows `inference/bench.py --worker SET:N` times
            self.rows.items = self.rows.items[:first]
        self.windows, self.keep = [], []
        for row, sample, _, stats in self.rows.items:
            if stats is None or sample.get("turns") is None:
                raise EvalError(f"{folder}: {sample['id']} has no turns with token "
                                "log-probabilities (run with --extract-form turns --logprobs)")
            self.windows.append(Window(row, sample))
            if turn_gate is not None:
                self.windows[-1].asked_by = [turn_gate.prob(t) for t in self.windows[-1].texts]
            self.keep.append(gate_mask(gate, row, sample, stats, verifier))

    def design(self, threshold: float, stop_repeats: bool, oracle: bool = False,
               turn_gate: float | None = None, one_claim: bool = False) -> dict[str, Any]:
        counts = [0, 0, 0, 0]
        tokens, turns_cut, turns, written = [], 0, 0, 0
        for (row, sample, rules, _), window, keep in zip(self.rows.items, self.windows,
                                                         self.keep, strict=True):
            skipped = window.skipped(oracle, turn_gate)
            alive = window.alive(threshold, stop_repeats, skipped, one_claim)
            written += sum(alive)
            gated = _only(sample, [a and k for a, k in zip(alive, keep, strict=True)])
            if self.union:
                gated = compose_row(row, rules, gated, {"extract": "union"}, "union")
            c = grade_sample(row, gated)["counts"]
            counts = [a + c[k] for a, k in zip(counts, ("claims", "supported", "covered",
                                                        "required"), strict=True)]
            tokens.append(window.tokens(threshold, stop_repeats, skipped, one_claim))
            turns += len(window.turns)
            turns_cut += sum(t.fork < threshold or skip
                             for t, skip in zip(window.turns, skipped, strict=True))
        tokens.sort()
        return {"threshold": threshold, "stop_repeats": stop_repeats, "oracle": oracle,
                "turn_gate": turn_gate, "one_claim": one_claim,
                "turns": turns, "turns_cut": turns_cut, "claims_written": written,
                "kept": counts[0], "supported": counts[1], "covered": counts[2],
                "required": counts[3],
                "tokens_median": statistics.median(tokens),
                "tokens_p90": tokens[min(len(tokens) - 1, math.ceil(0.9 * len(tokens)) - 1)]}


def study(sets: list[SetReplay], thresholds: tuple[float, ...] = THRESHOLDS,
          turn_gates: tuple[float, ...] = (), one_claim: bool = False) -> dict[str, Any]:
    """Every design of each set: the fork thresholds with and without the repeat stop, the
    oracle, the turn gates, and with `one_claim` today's worker and each turn gate with every
    turn cut after its first claim."""
    return {"sets": {s.name: {"folder": str(s.folder), "model": s.model, "union": s.union,
                              "rows": len(s.windows),
                              "designs": [s.design(t, r) for r in (False, True)
                                          for t in thresholds]
                              + [s.design(-math.inf, False, oracle=True)]
                              + [s.design(-math.inf, False, turn_gate=g) for g in turn_gates]
                              + ([s.design(-math.inf, False, turn_gate=g, one_claim=True)
                                  for g in (None, *turn_gates)] if one_claim else [])}
                     for s in sets}}


def report(figures: dict[str, Any], gate: str) -> list[str]:
    lines = []
    for name, f in figures["sets"].items():
        what = "the hybrid worker (rules' claims + the gated model's)" if f["union"] \
            else "the gated model alone"
        lines += [f"{name}: {f['folder']} arm {f['model']}, {f['rows']} windows; gate `{gate}`; "
                  f"graded: {what}", "",
                  "| fork threshold | turn stopped at its first repeat | turns cut | claims written "
                  "| kept, supported, covered of required | answer tokens a window, median (p90) |",
                  "|---|---|---|---|---|---|"]
        for d in f["designs"]:
            t = "none (today)" if d["threshold"] == -math.inf else f"{d['threshold']:g}"
            if d["oracle"]:
                t = "oracle: only the turns whose event holds a gold fact are asked (a bound)"
            if d.get("turn_gate") is not None:
                t = f"turn gate: only the turns with P(fact) >= {d['turn_gate']:g} are asked"
            if d.get("one_claim"):
                t += ", each turn cut after its first claim"
            lines.append(f"| {t} | {'yes' if d['stop_repeats'] else 'no'} | "
                         f"{d['turns_cut']}/{d['turns']} | {d['claims_written']} | "
                         f"{d['kept']}, {d['supported']}, {d['covered']} of {d['required']} | "
                         f"{d['tokens_median']:g} ({d['tokens_p90']}) |")
        lines.append("")
    return lines


def _corpus_spec(spec: str) -> tuple[str, Path]:
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise EvalError(f"--corpus {spec!r}: expected SET=DIR")
    return name, Path(path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eval/studies/fork.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--folder", action="append", required=True, metavar="SET=FOLDER:ARM",
                   help="an evaluation folder and its proposing model arm (repeat)")
    p.add_argument("--gate", default="verifier>=0.9",
                   help="the claim gate (`memworker.inference.gate` spec; default release v4's)")
    p.add_argument("--thresholds", type=_floats, default=THRESHOLDS, metavar="A,B,…",
                   help="fork thresholds, log-probabilities (-inf: propose everywhere)")
    p.add_argument("--union", action="store_true",
                   help="grade the hybrid worker: the rules' claims plus the gated model's new ones")
    p.add_argument("--weights", type=Path, default=DEFAULT_WEIGHTS,
                   help="the verifier's weights (default: the committed verifier.json)")
    p.add_argument("--turn-gate", type=_floats, default=(), metavar="A,B,…",
                   help="also replay the turn gate (`memworker.inference.turn_gate`) at these "
                        "P(fact) thresholds: a turn below is not asked")
    p.add_argument("--turn-gate-weights", type=Path, default=None,
                   help="the turn gate's weights (default: the committed turn_gate.json)")
    p.add_argument("--corpus", action="append", default=[], metavar="SET=DIR",
                   help="read SET's rows from DIR, a copy of the corpus the folder recorded "
                        "(same manifest sha256), instead of the recorded path (repeatable)")
    p.add_argument("--one-claim", action="store_true",
                   help="also replay each turn cut after its first claim (a grammar's maxItems "
                        "1), today's worker and at each --turn-gate threshold")
    p.add_argument("--first", type=int, default=None, metavar="N",
                   help="replay only each folder's first N extract windows (in the set's order: "
                        "the windows `inference/bench.py --worker SET:N` times)")
    p.add_argument("--json", type=Path, help="also write the figures here (JSON)")
    args = p.parse_args(argv)
    if args.first is not None and args.first < 1:
        p.error("--first needs a positive number of windows")
    try:
        corpora = dict(_corpus_spec(c) for c in args.corpus)
        gate = ClaimGate.parse(args.gate)
        verifier = Verifier.load(args.weights)
        turns = TurnGate.load(args.turn_gate_weights) if args.turn_gate else None
        sets = []
        for spec in args.folder:
            name, folder, arm = parse_arm(spec)
            sets.append(SetReplay(name, folder, arm, gate, verifier, union=args.union,
                                  turn_gate=turns, corpus=corpora.pop(name, None),
                                  first=args.first))
        if corpora:
            raise EvalError(f"--corpus {', '.join(sorted(corpora))}: no --folder of that set")
        figures = study(sets, args.thresholds, args.turn_gate, args.one_claim)
    except (EvalError, GateError, VerifierError, TurnGateError, OSError, KeyError,
            ValueError) as exc:
        print(f"eval/studies/fork.py: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report(figures, args.gate)))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=str) + "\n", encoding="utf-8")
    return 0
