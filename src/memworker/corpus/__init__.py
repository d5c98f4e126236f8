"""The corpus stage: procedural episodes with gold labels from a structured world state.

    >>> from memworker.corpus import build_corpus, verify_corpus, load_rows
    >>> manifest = build_corpus("data/corpus", seed=13)            # doctest: +SKIP
    >>> rows = load_rows("data/corpus", "train", form="wire")       # doctest: +SKIP

Command line: `python corpus/build.py --out data/corpus --seed 13` (see corpus/README.md).
"""

from memworker.corpus.audit import Violation, audit_row, audit_rows, repair_from_truth
from memworker.corpus.behaviours import BEHAVIOURS
from memworker.corpus.build import (
    DEFAULT_EPISODES,
    GENERATOR_VERSION,
    CorpusIntegrityError,
    audit_corpus,
    build_corpus,
    load_rows,
    verify_corpus,
)

__all__ = [
    "BEHAVIOURS", "DEFAULT_EPISODES", "GENERATOR_VERSION", "CorpusIntegrityError", "Violation",
    "audit_corpus", "audit_row", "audit_rows", "build_corpus", "load_rows", "repair_from_truth",
    "verify_corpus",
]
