"""`python eval/studies/gate_choice.py`: which claim gate would a release ship, chosen by the
release gate's own extraction checks on the design sets (issue 50 item 2)?

The release gate (`memworker.export.gate`) holds the student above the rules on extract support
and coverage in every gated set: the paired 95 % bootstrap interval over episodes of student -
rules must lie entirely above 0 (or, where even an arm writing exactly the gold could not show
that on the set's rows, `reach`, not below 0). This study asks that question of each candidate
worker gate on the sets designs are chosen on (val and natural-dev), before any test set is
run: for every gate of a grid (keep a claim when its log-probability score
`first(predicate)+first(value)` is at least A, or the learned verifier's P(keep) at least B), the
model arm's recorded proposals are gated as the store's worker gates them at run time (the same
claims, dropped or kept: `receipts/eval/natural-dev/e22-either` matched the regrade claim for
claim), regraded by the evaluator's grader, and compared with the rules arm of the same folder,
row for row. A gate **qualifies** when both checks pass in every set; the **choice** is the
qualifying gate with the most facts covered over the sets together (ties: fewer claims kept).

Input: evaluation folders whose model arm ran proposing with token log-probabilities
(`eval/run.py --propose ARM --logprobs`, no gate at run time) beside the rules arm. No model
runs; nothing is written unless `--json`.

    python eval/studies/gate_choice.py --folder val=receipts/eval/val-47/e22:e22 \\
        --folder natural-dev=receipts/eval/natural-dev/e22:n1

With `--union` each gated arm is the hybrid worker's instead: the rules' claims, then the gated
model claims that say something the rules did not (`memworker.inference.hybrid`'s `union`, composed
and decoded as `eval/studies/hybrid.py` composes it), compared with the rules alone.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from memworker.eval import summary as S
from memworker.eval.runner import EvalError, grade_sample
from memworker.eval.studies.confidence import Rows
from memworker.eval.studies.rowtools import compose_row
from memworker.eval.studies.verifier_auc import _only
from memworker.inference.gate import DEFAULT_SCORE, SCORES
from memworker.inference.verifier import DEFAULT_WEIGHTS, Verifier, VerifierError

#: the grid: log-probability thresholds (-inf: that side keeps nothing) and verifier thresholds
#: (above 1: that side keeps nothing); (-inf, >1) is the empty gate and is left out
LOGPROB = (-math.inf, -1.0, -0.5, -0.3, -0.14, -0.055)
VERIFIER = (0.3, 0.5, 0.7, 0.8, 0.9, 0.93, 2.0)
CHECKS = ("extract_support", "extract_coverage")


def keeps(score: float, prob: float, lp: float, vt: float) -> bool:
    """The either-gate on one claim; lp = -inf and vt > 1 are sides that keep nothing."""
    return (lp > -math.inf and score >= lp) or prob >= vt


def _gate_text(lp: float, vt: float) -> str:
    parts = ([f"{DEFAULT_SCORE}>={lp:g}"] if lp > -math.inf else []) + \
        ([f"verifier>={vt:g}"] if vt <= 1 else [])
    return "|".join(parts)


class SetFigures:
    """One folder: its rows, the model's claims with both scores, and the rules' graded rows."""

    def __init__(self, name: str, folder: Path, model: str, verifier: Verifier,
                 rules: str = "rules", union: bool = False):
        self.name, self.folder, self.model, self.union = name, folder, model, union
        self.rows = Rows(folder, model, rules)
        self.scores: list[list[tuple[float, float]] | None] = []
        for row, sample, _, field_stats in self.rows.items:
            if field_stats is None:
                self.scores.append(None)
                continue
            self.scores.append([(SCORES[DEFAULT_SCORE](f), verifier.prob(c, row["input"]))
                                for c, f in zip(sample["output"]["claims"], field_stats,
                                                strict=True)])
        self.by_id = {row["id"]: row for row, *_ in self.rows.items}
        self.ids = list(self.by_id)
        self.rules_by_id = {row["id"]: grade_sample(row, r) for row, _, r, _ in self.rows.items}

    def gated(self, lp: float, vt: float) -> list[dict[str, Any]]:
        """The model's rows graded with its claims gated (a row without statistics as it ran);
        with `union`, the rules' claims and the gated model's new ones."""
        out = []
        for (row, sample, rules, _), scores in zip(self.rows.items, self.scores, strict=True):
            if scores is not None:
                sample = _only(sample, [keeps(a, b, lp, vt) for a, b in scores])
            if self.union:
                sample = compose_row(row, rules, sample, {"extract": "union"}, "union")
            out.append(grade_sample(row, sample))
        return out

    def judge(self, lp: float, vt: float, *, resamples: int, seed: int) -> dict[str, Any]:
        graded = self.gated(lp, vt)
        counts = [sum(g["counts"][k] for g in graded)
                  for k in ("claims", "supported", "covered", "required")]
        fig: dict[str, Any] = {"kept": counts[0], "supported": counts[1], "covered": counts[2],
                               "required": counts[3],
                               "support": round(counts[1] / counts[0], 4) if counts[0] else None,
                               "coverage": round(counts[2] / counts[3], 4) if counts[3] else None}
        ok = True
        graded_by_id = {row["id"]: g for (row, *_), g in zip(self.rows.items, graded,
                                                              strict=True)}
        for metric in CHECKS:   # the evaluator's own paired figures (`summary.paired_metric`)
            item = S.paired_metric(graded_by_id, self.rules_by_id, self.ids, metric, self.by_id,
                                   binary=False, resamples=resamples, seed=seed)
            ci, reach = item["ci"], item.get("reach")
            above = reach is None or reach[0] > 0   # else: "not below" (the gate's rule)
            passed = ci is not None and (ci[0] > 0 if above else ci[1] >= 0)
            ok = ok and passed
            fig[metric] = {"ci": [round(x, 4) for x in ci] if ci else None,
                           "check": "above rules" if above else "not below rules",
                           "pass": passed}
        fig["qualifies"] = ok
        return fig


def study(sets: list[SetFigures], logprob: tuple[float, ...] = LOGPROB,
          verifier: tuple[float, ...] = VERIFIER, *, resamples: int = 1000,
          seed: int = 0) -> dict[str, Any]:
    grid = []
    for lp in logprob:
        for vt in verifier:
            if lp == -math.inf and vt > 1:
                continue
            per_set = {s.name: s.judge(lp, vt, resamples=resamples, seed=seed) for s in sets}
            grid.append({"gate": _gate_text(lp, vt), "logprob": lp, "verifier": vt,
                         "sets": per_set,
                         "covered": sum(f["covered"] for f in per_set.values()),
                         "kept": sum(f["kept"] for f in per_set.values()),
                         "qualifies": all(f["qualifies"] for f in per_set.values())})
    qualifying = [g for g in grid if g["qualifies"]]
    choice = max(qualifying, key=lambda g: (g["covered"], -g["kept"]))["gate"] \
        if qualifying else None
    return {"sets": {s.name: {"folder": str(s.folder), "model": s.model,
                              "rows": len(s.rows.items)} for s in sets},
            "grid": grid, "choice": choice}


def report(figures: dict[str, Any]) -> list[str]:
    names = list(figures["sets"])
    head = "| gate | " + " | ".join(
        f"{n}: kept / supported / covered | {n}: support, coverage − rules [95 %]"
        for n in names) + " | qualifies |"
    lines = [head, "|---|" + "---|---|" * len(names) + "---|"]
    for g in figures["grid"]:
        cells = []
        for n in names:
            f = g["sets"][n]
            cells.append(f"{f['kept']} / {f['supported']} / {f['covered']}")
            parts = []
            for metric in CHECKS:
                c = f[metric]
                ci = "–" if c["ci"] is None else f"[{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}]"
                parts.append(f"{ci}{'' if c['pass'] else ' ✗'}")
            cells.append(", ".join(parts))
        lines.append(f"| `{g['gate']}` | " + " | ".join(cells)
                     + f" | {'yes' if g['qualifies'] else 'no'} |")
    lines += ["", f"choice (qualifies in every set, most facts covered): "
              f"{figures['choice'] or 'none qualifies'}"]
    return lines


def _floats(text: str) -> tuple[float, ...]:
    return tuple(-math.inf if x.strip() in ("-inf", "none") else float(x)
                 for x in text.split(","))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eval/studies/gate_choice.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--folder", action="append", required=True, metavar="SET=FOLDER:ARM",
                   help="a design set's evaluation folder and its proposing model arm (repeat)")
    p.add_argument("--logprob", type=_floats, default=LOGPROB, metavar="A,B,…",
                   help="log-probability thresholds (-inf: that side keeps nothing)")
    p.add_argument("--verifier", type=_floats, default=VERIFIER, metavar="A,B,…",
                   help="verifier thresholds (above 1: that side keeps nothing)")
    p.add_argument("--weights", type=Path, default=DEFAULT_WEIGHTS,
                   help="the verifier's weights (default: the committed verifier.json)")
    p.add_argument("--union", action="store_true",
                   help="judge the hybrid worker: the rules' claims plus the gated model's new ones")
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--json", type=Path, help="also write the figures here (JSON)")
    args = p.parse_args(argv)
    try:
        verifier = Verifier.load(args.weights)
        sets = []
        for spec in args.folder:
            name, eq, rest = spec.partition("=")
            folder, colon, arm = rest.rpartition(":")
            if not (eq and colon and name and folder and arm):
                raise EvalError(f"--folder {spec!r}: expected SET=FOLDER:ARM")
            sets.append(SetFigures(name, Path(folder), arm, verifier, union=args.union))
        figures = study(sets, args.logprob, args.verifier, resamples=args.resamples)
    except (EvalError, VerifierError, OSError, KeyError, ValueError) as exc:
        print(f"eval/studies/gate_choice.py: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report(figures)))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=str) + "\n", "utf-8")
    return 0
