"""A keep file for training on what the student gets right (issue 48, "Only what it gets
right"): from `eval/run.py` folders of a student on **train** splits, each window's gold facts
that its claims cover, ungated (`supported`) or kept by a claim gate (`kept`). A stage with
`extract_keep: FILE` (train/README "Only what it gets right") trains each listed window on those
facts only and leaves the unlisted windows out, so a student learns to stay silent where it was
wrong. Only train splits: a folder of any other set is refused, and so is a set's row id a
train split does not hold (the stage checks that too).

    python eval/studies/keep_facts.py --folder receipts/eval/train-48/train-e22:e22 \\
        --folder receipts/eval/train-48/nt-e22:e22 --facts supported --out FILE
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from memworker.eval.runner import EvalError, grade_sample
from memworker.eval.studies.pair import gated_sample
from memworker.eval.studies.rowtools import read_folder
from memworker.hashing import write_json
from memworker.inference.gate import ClaimGate, GateError
from memworker.inference.verifier import DEFAULT_WEIGHTS, Verifier, VerifierError

KIND = "memworker-extract-keep"
FACTS = ("supported", "kept")


def keep_folder(folder: Path, arm: str, facts: str, gate: ClaimGate | None,
                verifier: Verifier | None) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """(its source record, {row id: gold fact indices covered}) of one train-split folder: every
    extract row with a sample of `arm` (a sample with no output, e.g. refused: no facts)."""
    config, rows, samples = read_folder(folder)
    if config.get("set") != "train":
        raise EvalError(f"{folder}: evaluated on set {config.get('set')!r}; a keep file is built "
                        "from train splits only (val, natural-dev and the test sets are never "
                        "trained on)")
    mine = {s["id"]: s for s in samples if s.get("arm") == arm}
    if not mine:
        raise EvalError(f"{folder}: no samples of arm {arm!r}")
    listed: dict[str, list[int]] = {}
    total = covered = 0
    for row in rows:
        sample = mine.get(row["id"])
        if row["task"] != "extract" or sample is None:
            continue
        answer = sample if sample.get("output") is not None else {**sample, "output":
                                                                  {"claims": []}}
        verdicts = gated_sample(row, answer, gate, verifier)["verdicts"] \
            if facts == "kept" and answer["output"]["claims"] else grade_sample(row, answer)
        cover = sorted(verdicts["facts_covered"])
        listed[row["id"]] = cover
        total += len((row.get("gold") or {}).get("claims", []))
        covered += len(cover)
    if not listed:
        raise EvalError(f"{folder}: no extract row has a sample of arm {arm!r}")
    corpus = config.get("corpus") or {}
    return ({"folder": str(folder), "arm": arm, "corpus": corpus.get("path"),
             "manifest_sha256": corpus.get("manifest_sha256"),
             "gguf_sha256": ((config.get("gguf") or {}).get(arm) or {}).get("sha256"),
             "windows": len(listed), "facts": covered, "of": total}, listed)


def build(folders: list[tuple[Path, str]], facts: str, gate_spec: str | None = None,
          weights: Path = DEFAULT_WEIGHTS) -> dict[str, Any]:
    if facts not in FACTS:
        raise EvalError(f"--facts must be one of {', '.join(FACTS)}, not {facts!r}")
    gate = verifier = None
    if facts == "kept":
        try:
            gate = ClaimGate.parse(gate_spec or "")
        except GateError as exc:
            raise EvalError(f"--gate: {exc}") from None
        if gate.needs_verifier:
            try:
                verifier = Verifier.load(weights)
            except VerifierError as exc:
                raise EvalError(str(exc)) from None
    sources, corpora = [], {}
    for folder, arm in folders:
        source, listed = keep_folder(folder, arm, facts, gate, verifier)
        if not source["manifest_sha256"]:
            raise EvalError(f"{folder}: its config.json records no corpus manifest sha256")
        mine = corpora.setdefault(source["manifest_sha256"], {})
        twice = sorted(set(mine) & set(listed))
        if twice:
            raise EvalError(f"{folder}: window {twice[0]} is listed by another folder too")
        mine.update(listed)
        sources.append(source)
    return {"kind": KIND, "facts": facts, "gate": gate_spec if facts == "kept" else None,
            "sources": sources,
            "corpora": {sha: dict(sorted(rows.items())) for sha, rows in corpora.items()}}


def _folder(spec: str) -> tuple[Path, str]:
    folder, sep, arm = spec.rpartition(":")
    if not sep or not folder or not arm:
        raise argparse.ArgumentTypeError(f"expected FOLDER:ARM, not {spec!r}")
    return Path(folder), arm


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--folder", action="append", required=True, type=_folder,
                   metavar="FOLDER:ARM", help="an eval/run.py folder of a train split and the "
                   "student's arm in it (repeat for more corpora)")
    p.add_argument("--facts", default="supported", choices=FACTS,
                   help="supported: the facts the student's claims cover, ungated; kept: those "
                   "its claims kept by --gate cover")
    p.add_argument("--gate", default="verifier>=0.9", help="the claim gate of --facts kept")
    p.add_argument("--weights", type=Path, default=DEFAULT_WEIGHTS,
                   help="the verifier's weights, for a gate that reads it")
    p.add_argument("--out", type=Path, required=True, help="the keep file (JSON) to write")
    args = p.parse_args(argv)
    try:
        keep = build(args.folder, args.facts, args.gate, args.weights)
    except EvalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_json(args.out, keep)
    for s in keep["sources"]:
        print(f"{s['folder']} ({s['arm']}): {s['windows']} windows, {s['facts']} of {s['of']} "
              f"gold facts kept ({args.facts})")
    print(f"wrote {args.out}")
    return 0
