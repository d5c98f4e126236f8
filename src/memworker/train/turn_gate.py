"""Train the turn gate (`memworker.inference.turn_gate`): P(an event holds a fact) from its text,
an L2 logistic regression over sparse text features, fitted on the train splits of the given
corpora and measured on their val splits (AUC, and at each reported threshold the share of
events asked and of fact events asked); writes src/memworker/inference/turn_gate.json.

An example is one event with user words of an extract row (a turn the worker asks), labelled
positive when it is the latest source of one of the row's gold claims (the turn that claim
belongs to in the turns form). An event text met in several windows is one example (positive
when any window labels it so). Each corpus weighs the same, and within it each class.

    python train/turn_gate.py
    python train/turn_gate.py --corpus data/corpus --corpus data/natural-train --out /tmp/tg.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from memworker.corpus.sets import load_eval_rows
from memworker.inference import turn_gate as tg
from memworker.inference.gate import auc
from memworker.train.verifier import dump  # one key a line, as the verifier's weights
from memworker.turns import turn_events

CORPORA = (Path("data/corpus"), Path("data/natural-train"))
L2 = 1e-3
MIN_COUNT = 3
STEPS = 400
LR = 0.05
REPORT_AT = (0.1, 0.2, 0.3, 0.4, 0.5)


class TurnGateTrainError(ValueError):
    """A corpus the trainer refuses (no manifest, a test split)."""


def examples(rows: list[dict[str, Any]], corpus: str) -> list[dict[str, Any]]:
    """One example per distinct event text with user words: {text, label, corpus}."""
    label: dict[str, bool] = {}
    for row in rows:
        if row["task"] != "extract":
            continue
        events = row["input"]["events"]
        sources = {max(c["source_indices"]) for c in row["gold"]["claims"]
                   if c.get("source_indices")}
        text = {e["index"]: e["text"] for e in events}
        for i in turn_events(events):
            label[text[i]] = label.get(text[i], False) or i in sources
    return [{"text": t, "label": y, "corpus": corpus} for t, y in label.items()]


def fit(feats: list[list[int]], y: np.ndarray, w: np.ndarray, dim: int, l2: float = L2,
        steps: int = STEPS, lr: float = LR) -> tuple[np.ndarray, float]:
    """Weighted L2 logistic regression over sparse binary features by full-batch Adam
    (deterministic): (weights, bias)."""
    lengths = np.array([len(f) for f in feats])
    flat = np.concatenate([np.asarray(f, dtype=np.int64) for f in feats]) if len(feats) else \
        np.zeros(0, dtype=np.int64)
    owner = np.repeat(np.arange(len(feats)), lengths)
    w = w / w.sum()
    beta = np.zeros(dim + 1)
    m, v = np.zeros(dim + 1), np.zeros(dim + 1)
    b1, b2, eps = 0.9, 0.999, 1e-8
    for t in range(1, steps + 1):
        z = np.bincount(owner, weights=beta[flat], minlength=len(feats)) + beta[-1]
        p = 1.0 / (1.0 + np.exp(-z))
        r = w * (p - y)
        grad = np.zeros(dim + 1)
        grad[:dim] = np.bincount(flat, weights=r[owner], minlength=dim) + l2 * beta[:dim]
        grad[-1] = r.sum()
        m = b1 * m + (1 - b1) * grad
        v = b2 * v + (1 - b2) * grad * grad
        beta -= lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return beta[:-1], float(beta[-1])


def _weights(exs: list[dict[str, Any]]) -> np.ndarray:
    count = Counter((e["corpus"], e["label"]) for e in exs)
    return np.array([1.0 / count[(e["corpus"], e["label"])] for e in exs])


def _manifest(folder: Path) -> str:
    path = folder / "manifest.json"
    if not path.is_file():
        raise TurnGateTrainError(f"no manifest.json: training corpus {folder}")
    return json.loads(path.read_text("utf-8"))["manifest_sha256"]


def evaluate(gate: tg.TurnGate, exs: list[dict[str, Any]]) -> dict[str, Any]:
    """AUC, and at each threshold the events asked and the fact events asked."""
    probs = [gate.prob(e["text"]) for e in exs]
    pos = [p for p, e in zip(probs, exs, strict=True) if e["label"]]
    neg = [p for p, e in zip(probs, exs, strict=True) if not e["label"]]
    at = {}
    for t in REPORT_AT:
        at[f"{t:g}"] = {"asked": round(sum(p >= t for p in probs) / len(probs), 4),
                        "facts_asked": round(sum(p >= t for p in pos) / len(pos), 4)
                        if pos else None}
    return {"events": len(exs), "positives": len(pos), "negatives": len(neg),
            "auc": round(auc(pos, neg), 4) if pos and neg else None, "at": at}


def train(corpora: list[Path], *, l2: float = L2, min_count: int = MIN_COUNT,
          command: str = "", validate: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    exs: list[dict[str, Any]] = []
    rows_used = {}
    for folder in corpora:
        rows = load_eval_rows(folder, "train")
        rows_used[str(folder)] = sum(r["task"] == "extract" for r in rows)
        exs += examples(rows, str(folder))
    if not exs or all(e["label"] for e in exs) or not any(e["label"] for e in exs):
        raise TurnGateTrainError("the train splits give no events of both kinds")
    counts = Counter(f for e in exs for f in tg.features(e["text"]))
    vocab = sorted(f for f, c in counts.items() if c >= min_count)
    index = {f: i for i, f in enumerate(vocab)}
    feats = [[index[f] for f in tg.features(e["text"]) if f in index] for e in exs]
    y = np.array([e["label"] for e in exs], dtype=float)
    coef, bias = fit(feats, y, _weights(exs), len(vocab), l2)
    weights = {
        "version": tg.VERSION, "bias": round(bias, 6),
        "weights": {f: round(float(c), 6) for f, c in zip(vocab, coef, strict=True)
                    if abs(c) >= 1e-6},
        "provenance": {
            "command": command, "l2": l2, "min_count": min_count, "steps": STEPS, "lr": LR,
            "corpora": {str(f): {"manifest_sha256": _manifest(f), "split": "train",
                                 "extract_rows": rows_used[str(f)]} for f in corpora},
            "examples": {name: dict(sorted(Counter(
                "positive" if e["label"] else "negative" for e in exs
                if e["corpus"] == name).items())) for name in rows_used}}}
    report: dict[str, Any] = {}
    if validate:
        gate = tg.TurnGate(weights)
        for folder in corpora:
            report[str(folder)] = evaluate(gate, examples(load_eval_rows(folder, "val"),
                                                          str(folder)))
        weights["provenance"]["validation"] = {
            name: {"split": "val", "auc": r["auc"], "positives": r["positives"],
                   "negatives": r["negatives"]} for name, r in report.items()}
    return weights, report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="train/turn_gate.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", action="append", type=Path,
                   help="a training corpus (repeat; default data/corpus and data/natural-train)")
    p.add_argument("--out", type=Path, default=tg.DEFAULT_WEIGHTS,
                   help="the weights file (default: the committed turn_gate.json)")
    p.add_argument("--l2", type=float, default=L2)
    p.add_argument("--min-count", type=int, default=MIN_COUNT)
    args = p.parse_args(argv)
    corpora = args.corpus or list(CORPORA)
    command = "python train/turn_gate.py" + "".join(
        f" --corpus {c}" for c in (args.corpus or [])) + \
        (f" --l2 {args.l2:g}" if args.l2 != L2 else "") + \
        (f" --min-count {args.min_count}" if args.min_count != MIN_COUNT else "")
    try:
        weights, report = train(corpora, l2=args.l2, min_count=args.min_count, command=command)
    except (TurnGateTrainError, OSError, KeyError, ValueError) as exc:
        print(f"train/turn_gate.py: error: {exc}", file=sys.stderr)
        return 2
    args.out.write_text(dump(weights), encoding="utf-8")
    print(f"turn gate: {len(weights['weights'])} features; examples "
          f"{weights['provenance']['examples']}; wrote {args.out}")
    for name, r in report.items():
        at = ", ".join(f"P>={t}: asks {a['asked']:.0%} of events, {a['facts_asked']:.0%} of "
                       "fact events" for t, a in r["at"].items())
        print(f"  {name} val: {r['events']} events ({r['positives']} with a fact), AUC "
              f"{r['auc']}; {at}")
    return 0
