"""An evaluation's samples file: `samples.jsonl` in an evaluation folder, one line per row and
arm, appended a line at a time by the evaluator (`memworker.eval.runner.run_arm`).

`read_samples` reads it and never writes: a last line cut off by an interruption is left out.
`repair_samples` is the one call that rewrites the file without that line, made where the
evaluator resumes appending to it. Shared by the evaluation stage, the worker benchmark
(`memworker.eval.bench`), the export's replay check and the main job; `EvalError` is the
evaluation's one error type (the message says what to do).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memworker.hashing import canonical_json

SAMPLES = "samples.jsonl"


class EvalError(ValueError):
    """An evaluation cannot start or continue; the message says what to do."""


def _read(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """(samples, whether the file needs repair: its last line cut off or unterminated)."""
    if not path.is_file():
        return [], False
    good, lines, cut = [], path.read_bytes().splitlines(keepends=True), False
    for n, line in enumerate(lines):
        try:
            good.append(json.loads(line))
        except json.JSONDecodeError:
            if n != len(lines) - 1:
                raise EvalError(f"{path}: line {n + 1} is not JSON; the file is damaged "
                                "(remove it to start over)") from None
            cut = True
    return good, cut or bool(lines and not lines[-1].endswith(b"\n"))


def read_samples(path: Path) -> list[dict[str, Any]]:
    """Samples in `path` (none when it does not exist); a last line cut off by an interruption
    is left out, so that its row runs again. EvalError when an earlier line is not JSON."""
    return _read(path)[0]


def repair_samples(path: Path) -> list[dict[str, Any]]:
    """`read_samples`, and the file rewritten without a last line cut off by an interruption
    (and with its last line ended), so that the rows appended next start on a line of their
    own."""
    good, damaged = _read(path)
    if damaged:
        path.write_bytes(b"".join(canonical_json(s) + b"\n" for s in good))
    return good
