"""The turn gate: which turns of a window the worker asks the model about.

A proposing worker (`codec.run_turns(propose=True)`) makes the model write at least one claim in
every turn, and the claim gate then drops most of them: on val's windows (~7 turns) release v4's
student writes a median 368 answer tokens a window and its gate keeps 0.7 claims
(`eval/studies/fork.py`). Most of those turns' events hold no fact at all ("Morning!", "thanks,
that helps"). The turn gate reads a turn's event text *before* the model is asked and gives
P(the event holds a fact worth storing): a turn below the worker's threshold is not generated;
its answer is `{"claims":[]}`, written into the conversation as if the model had answered it
(`codec.TURN_SKIPPED`, `codec.run_turns(ask=)`), so the turns after it see what they were trained on.

The model is an L2 logistic regression over the event's word stems, stem pairs and a few shape
features (length, a digit, a capitalised word inside a sentence), fitted by `train/turn_gate.py`
on the train splits of the corpus and natural-train, where an event is a positive when it is the
latest source of a gold claim (the turn that claim belongs to). Pure Python: what the store runs.
"""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path
from typing import Any

from memworker.textnorm import norm, stem
from memworker.turns import turn_events

VERSION = 1
#: the committed weights (`train/turn_gate.py` writes them)
DEFAULT_WEIGHTS = Path(__file__).with_name("turn_gate.json")

_CAPITAL_INSIDE = re.compile(r"(?<=[a-z,;:] )[A-Z][a-z]")


class TurnGateError(ValueError):
    """A turn gate weights file that cannot be used (missing, not JSON, wrong version)."""


def features(text: str | None) -> list[str]:
    """The event text's features: word stems (`w:`), pairs of neighbouring stems (`b:`), its
    length in words as a log2 bucket, whether it holds a digit and whether a capitalised word
    stands inside a sentence (a name). Sorted, no repeats."""
    raw = text or ""
    stems = [stem(w) for w in norm(raw).split()]
    out = {f"w:{s}" for s in stems} | {f"b:{a}_{b}" for a, b in zip(stems, stems[1:],
                                                                     strict=False)}
    out.add(f"len:{min(7, int(math.log2(len(stems) + 1)))}")
    if any(c.isdigit() for c in raw):
        out.add("digit")
    if _CAPITAL_INSIDE.search(raw):
        out.add("name")
    return sorted(out)


class TurnGate:
    """P(an event holds a fact) from the committed (or given) weights."""

    def __init__(self, weights: dict[str, Any]):
        if weights.get("version") != VERSION:
            raise TurnGateError(f"turn gate weights version {weights.get('version')!r}, "
                                f"expected {VERSION}")
        try:
            self.bias = float(weights["bias"])
            self.weights = {str(k): float(v) for k, v in weights["weights"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise TurnGateError(f"turn gate weights: {exc!r}") from None
        self.provenance = weights.get("provenance", {})

    @classmethod
    def load(cls, path: str | Path | None = None) -> TurnGate:
        path = Path(path) if path is not None else DEFAULT_WEIGHTS
        try:
            data = json.loads(path.read_text("utf-8"))
        except FileNotFoundError:
            raise TurnGateError(f"turn gate weights not found: {path} (train/turn_gate.py "
                                "writes them)") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise TurnGateError(f"turn gate weights {path}: {exc}") from None
        if not isinstance(data, dict):
            raise TurnGateError(f"turn gate weights {path}: not a JSON object")
        return cls(data)

    def logit(self, text: str | None) -> float:
        return self.bias + sum(self.weights.get(f, 0.0) for f in features(text))

    def prob(self, text: str | None) -> float:
        z = self.logit(text)
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    def asks(self, events: list[dict[str, Any]], turn_events: list[int], threshold: float
             ) -> list[bool]:
        """For each turn (its event index): whether the worker asks the model (P >= threshold)."""
        text = {e["index"]: e.get("text") for e in events}
        return [self.prob(text[i]) >= threshold for i in turn_events]


@functools.cache
def committed() -> TurnGate:
    """The committed turn gate, read once."""
    return TurnGate.load()


def check_threshold(threshold: float) -> float:
    """`threshold` when it is a probability, else TurnGateError."""
    if not isinstance(threshold, int | float) or isinstance(threshold, bool) or \
            not 0.0 <= float(threshold) <= 1.0:
        raise TurnGateError(f"the turn gate's threshold is a probability, got {threshold!r}")
    return float(threshold)


def asks(inputs: dict[str, Any], threshold: float, gate: TurnGate | None = None) -> list[bool]:
    """For each turn of an extract request in the turns form (`memworker.turns.turn_events`):
    whether the worker asks it (`codec.run_turns(ask=)`), by `gate` (default the committed one)."""
    events = inputs["events"]
    return (gate or committed()).asks(events, turn_events(events), check_threshold(threshold))
