"""The evaluation sets and their rows, as the evaluator and the worker benchmark load them: the
corpus's `heldout` (its frozen 64), `test` and `val` splits, and the hand-written sets `natural`
and `natural-dev` (each frozen like a corpus, its rows the `test` split), and a corpus's `train`
split (`--corpus data/natural-train --set train`: a model's proposals on rows a verifier is trained
on, `train/verifier.py --proposals`; a model's figures there measure nothing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memworker.corpus.build import CorpusIntegrityError, load_rows
from memworker.samples import EvalError

SETS = ("heldout", "test", "val", "natural", "natural-dev", "train")
DEFAULT_NATURAL = "data/natural"
#: the hand-written sets (each frozen like a corpus, its rows the `test` split) and where each
#: is frozen by default (`python corpus/build.py --natural corpus/<set> --out data/<set>`)
HAND_WRITTEN = {"natural": DEFAULT_NATURAL, "natural-dev": "data/natural-dev"}


def load_eval_rows(corpus: str | Path, set_name: str) -> list[dict[str, Any]]:
    """Canonical rows of an evaluation set: `heldout` (the corpus's frozen 64), `test`, `val`,
    `train` (to gather proposals, not to measure), or a hand-written set, `natural` or
    `natural-dev` (its test split, frozen like a corpus)."""
    if set_name not in SETS:
        raise EvalError(f"unknown set {set_name!r}; expected one of {SETS}")
    root = Path(corpus)
    if not (root / "manifest.json").is_file():
        hint = ("build it with `python corpus/build.py --out data/corpus --seed 13`"
                if set_name not in HAND_WRITTEN else
                f"freeze it with `python corpus/build.py --natural corpus/{set_name} --out "
                f"{root}`")
        raise EvalError(f"no corpus at {root} (no manifest.json): {hint}")
    split = "test" if set_name in HAND_WRITTEN else {"heldout": "heldout"}.get(set_name, set_name)
    try:
        return load_rows(root, split, form="canonical")
    except CorpusIntegrityError as exc:
        raise EvalError(str(exc)) from None
