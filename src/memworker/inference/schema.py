"""The dynamic wire schema of one request: the model chooses what is in the input.

`build_schema(task, inputs)` narrows the static wire contract (schemas/extract_wire,
consolidate_wire, reflect_wire) to this request (ARCHITECTURE decisions 4, 5 and 8):

- **extract** (wire v3: a claim is a fixed-order array, `memworker.wire`): a quote is one `anyOf`
  branch per citable event, each a whole pair `[{"enum": candidate_spans(text_i)}, {"const": i}]`:
  the span comes first, so the model copies words and the grammar then leaves only the event(s)
  holding them (a 135M student that had to name the event before the words wrote the wrong index
  and the grammar then forced a span of that wrong event: train/README "Decisions, not tokens");
  an event without a usable span cannot be cited, and without any citable event `claims` has
  `maxItems: 0`. The predicate is an enum of the request's vocabulary (`memworker.ontology.
  vocabulary`: the episode's `predicates`, else the default ontology plus the existing facts'
  predicates). `supersedes` items are an enum of the existing fact ids (none: `maxItems: 0`).
  The time expression is an enum of the expressions `memworker.temporal.find_expressions`
  detects in the events (only those that resolve against the event they occur in) plus null;
  with none detected it must be null.
- **consolidate** (wire v4: text only, `memworker.wire`): `observations` is a list of statements,
  bounded in count and length; fewer than two facts means `maxItems: 0`. The codec reads each
  observation's supports from its statement (`memworker.derive`).
- **reflect** (wire v4): only the answer text, bounded in length; the codec reads its citations
  and abstention from it.

Property order is the static wire schema's, so `memworker.wire.dump_answer` and the grammar agree.

**Subset of the static contract.** Every answer valid under a dynamic schema is valid under the
static wire schema (no wire schema uses `uniqueItems`, which a grammar cannot express).

**Token budget.** Every string and array is bounded. Two sizes are computed:

- `worst_case_chars(schema)`: the longest compact JSON answer the schema allows (a free string
  counted one character per character, every enum at its longest choice, every array full of its
  costliest item). `max_tokens_for(schema)` is what a backend is given: this worst case counted
  conservatively (each free-text character one token: a degenerate "1.1.1." string runs at ~2
  characters per token, measured; the rest at `CHARS_PER_TOKEN`), capped by the context left
  (n_ctx minus prompt tokens), so that prompt + answer always fit the window.
- `typical_tokens(schema)`: the size of a full, realistic answer, used to choose the bounds.
  Free strings are counted full; an enum counts its *mean* choice (a quote array of 3 items from
  a 24-event window costs 3 typical spans of the wordiest event, not 3 times the longest whole
  event text); everything at `TYPICAL_CHARS_PER_TOKEN` (gold claims without their quotes measured
  3.05 characters per SmolLM2 token at the 1st percentile, 3.37 median; candidate spans 3.67
  median: `data/corpus` train, the embedded tokenizer).

With `budget_tokens` set (the default is per task, `DEFAULT_BUDGET`; `codec.prepare` caps it by
the context left), the first of the `LIMIT_STAGES` whose typical size fits the budget is used:
free-text lengths shrink first, then counts. An answer that still runs out of tokens finishes
with `finish_reason == "length"` and the codec reports it as truncated (never silently).
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from memworker import temporal
from memworker.contracts import TASKS, load_schema, validate_input
from memworker.ontology import vocabulary
from memworker.safety import contains_credential
from memworker.spans import candidate_spans
from memworker.wire import SEPARATORS

CHARS_PER_TOKEN = 2.5
#: characters per token of a realistic answer (budget fitting only; see the module docstring)
TYPICAL_CHARS_PER_TOKEN = 3.0
TOKEN_MARGIN = 8
MAX_TIME_EXPRESSION_CHARS = 80
_SEP, _KEY_SEP = (len(sep) for sep in SEPARATORS)
DEFAULT_BUDGET = {"extract": 3072, "consolidate": 640, "reflect": 384}


class InputError(ValueError):
    """Task inputs that cannot make a request (contract violation, duplicate ids or indices)."""


@dataclass(frozen=True)
class Limits:
    """Upper bounds of the dynamic schema. The defaults are the static contract's."""

    claims: int = 12
    quotes: int = 6
    supersedes: int = 4
    name: int = 120
    value: int = 200
    statement: int = 300
    observations: int = 4
    answer: int = 300

    def __post_init__(self) -> None:
        for field, value in self.__dict__.items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Limits.{field} must be a positive integer, got {value!r}")
        if self.statement > 300 or self.claims > 12 or self.quotes > 6 or self.supersedes > 4 \
                or self.name > 120 or self.value > 200 or self.observations > 4 \
                or self.answer > 300:
            raise ValueError("Limits may only tighten the static contract's bounds")


CONTRACT_LIMITS = Limits()
#: tried in order until the worst case fits the budget: free text shrinks first, then counts.
LIMIT_STAGES: tuple[Limits, ...] = (
    CONTRACT_LIMITS,
    Limits(name=80, value=120, statement=200, answer=200),
    Limits(name=80, value=120, statement=200, answer=200, quotes=3, supersedes=2, claims=8,
           observations=3),
    # a long extract window (corpus v2: up to 24 events, ~1,300 event tokens) within n_ctx 4096
    Limits(name=40, value=80, statement=160, answer=160, quotes=3, supersedes=2, claims=8,
           observations=3),
    Limits(name=60, value=80, statement=160, answer=160, quotes=2, supersedes=2, claims=6,
           observations=2),
    Limits(name=60, value=80, statement=160, answer=160, quotes=2, supersedes=2, claims=4,
           observations=2),
    Limits(name=40, value=60, statement=120, answer=120, quotes=2, supersedes=1, claims=2,
           observations=1),
    Limits(name=24, value=32, statement=64, answer=64, quotes=1, supersedes=1, claims=1,
           observations=1),
)


# --- input checks and choices ---------------------------------------------------------------------

def check_inputs(task: str, inputs: dict[str, Any]) -> None:
    """Raise InputError unless `inputs` satisfies the task's input contract and its ids/indices
    are unique (a quote or citation must point at exactly one thing), and an extract request's
    predicate vocabulary, when given, is non-empty and has no predicate twice."""
    if task not in TASKS:
        raise InputError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    if task == "extract" and isinstance(inputs, dict) and "predicates" in inputs:
        vocabulary = inputs["predicates"]
        if isinstance(vocabulary, list) and not vocabulary:
            raise InputError("extract inputs: predicates is empty (leave it out to use the "
                             "default vocabulary)")
        if isinstance(vocabulary, list):
            dupes = sorted({str(v) for v in vocabulary if vocabulary.count(v) > 1})
            if dupes:
                raise InputError(f"extract inputs: predicates lists {', '.join(dupes)} twice")
    try:
        validate_input(task, inputs)
    except ValueError as exc:
        raise InputError(f"{task} inputs: {exc}") from None
    if task == "extract":
        groups = {"event index": [e["index"] for e in inputs["events"]],
                  "existing fact id": [f["id"] for f in inputs["existing_facts"]]}
    elif task == "consolidate":
        groups = {"fact id": [f["id"] for f in inputs["facts"]]}
    else:
        groups = {"evidence id": [e["id"] for e in inputs["evidence"]]}
    for what, values in groups.items():
        dupes = sorted({str(v) for v in values if values.count(v) > 1})
        if dupes:
            raise InputError(f"{task} inputs: duplicate {what}(s) {', '.join(dupes)}")


def citable_spans(events: list[dict[str, Any]]) -> dict[int, list[str]]:
    """{event index: candidate spans} for every event that has at least one span."""
    out = {}
    for event in events:
        spans = candidate_spans(event["text"])
        if spans:
            out[event["index"]] = spans
    return out


def time_expressions(events: list[dict[str, Any]]) -> list[str]:
    """Time expressions the model may choose: detected in an event's text, resolvable against that
    event's timestamp, at most 80 characters, credential-free; first occurrence order."""
    found: list[str] = []
    for event in events:
        for expr in temporal.find_expressions(event["text"], event["timestamp"]):
            if expr in found or len(expr) > MAX_TIME_EXPRESSION_CHARS or contains_credential(expr):
                continue
            try:
                temporal.resolve(expr, event["timestamp"])
            except ValueError:
                continue
            found.append(expr)
    return found


# --- schema construction --------------------------------------------------------------------------

def _string(lo: int, hi: int) -> dict[str, Any]:
    return {"type": "string", "minLength": lo, "maxLength": hi}


def _extract_choices(inputs: dict[str, Any]) -> tuple[dict[int, list[str]], list[str]]:
    """(citable spans per event, time expressions) of a window: the same for every limit stage."""
    return citable_spans(inputs["events"]), time_expressions(inputs["events"])


def _extract(inputs: dict[str, Any], lim: Limits,
             choices: tuple[dict[int, list[str]], list[str]] | None = None) -> dict[str, Any]:
    schema = load_schema("extract_wire")
    claims = schema["properties"]["claims"]
    items = claims["items"]["prefixItems"]
    spans, exprs = choices if choices is not None else _extract_choices(inputs)
    if spans:
        branches = [
            {"type": "array", "prefixItems": [{"enum": choices}, {"const": index}],
             "items": False, "minItems": 2, "maxItems": 2}
            for index, choices in spans.items()
        ]
        n_pairs = sum(len(v) for v in spans.values())
        items[0] = {"type": "array", "minItems": 1, "maxItems": min(lim.quotes, n_pairs),
                    "items": {"anyOf": branches}}
        claims["maxItems"] = lim.claims
    else:
        claims["maxItems"] = 0
    items[1] = _string(1, lim.name)
    items[3] = {"enum": vocabulary(inputs)}
    items[4] = {"type": ["string", "null"], "maxLength": lim.value}
    items[6] = {"enum": [*exprs, None]}
    fact_ids = [f["id"] for f in inputs["existing_facts"]]
    if fact_ids:
        items[7] = {"type": "array", "maxItems": min(lim.supersedes, len(fact_ids)),
                    "items": {"enum": fact_ids}}
    else:
        items[7] = {**items[7], "maxItems": 0}
    return schema


def _consolidate(inputs: dict[str, Any], lim: Limits) -> dict[str, Any]:
    schema = load_schema("consolidate_wire")
    obs = schema["properties"]["observations"]
    obs["maxItems"] = lim.observations if len(inputs["facts"]) >= 2 else 0
    obs["items"] = _string(1, lim.statement)
    return schema


def _reflect(inputs: dict[str, Any], lim: Limits) -> dict[str, Any]:
    schema = load_schema("reflect_wire")
    schema["properties"]["answer"] = _string(1, lim.answer)
    return schema


_BUILDERS = {"extract": _extract, "consolidate": _consolidate, "reflect": _reflect}


def build_schema(task: str, inputs: dict[str, Any], *, budget_tokens: int | None = -1,
                 limits: Limits | None = None) -> dict[str, Any]:
    """The dynamic wire schema of one request.

    budget_tokens: fit the worst case into this many tokens (-1: `DEFAULT_BUDGET[task]`; None: no
    fitting, contract bounds). limits: use exactly these bounds instead of fitting."""
    check_inputs(task, inputs)
    build = _BUILDERS[task]
    if limits is not None:
        return build(inputs, limits)
    if budget_tokens == -1:
        budget_tokens = DEFAULT_BUDGET[task]
    if budget_tokens is None:
        return build(inputs, CONTRACT_LIMITS)
    if task == "extract":  # spans and expressions are found once, not once per stage
        build = partial(_extract, choices=_extract_choices(inputs))
    schema = None
    for stage in LIMIT_STAGES:
        schema = build(inputs, stage)
        if typical_tokens(schema) <= budget_tokens:
            break
    return schema


def v6_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The generation schema of an extract request in claim layout v6 (`memworker.wire.V6_FIELDS`)
    from its v3 dynamic schema (`build_schema`): each claim `[predicate, value, name, type, kind,
    time expression, supersedes]` with the same choices and bounds as v3's, no quotes (the codec
    quotes the turn's sentence), the items after the value optional in order (left out while at
    their defaults). The codec checks the answer, once its quotes are filled, against the v3
    schema."""
    out = copy.deepcopy(schema)
    claims = out["properties"]["claims"]
    v3 = claims["items"]["prefixItems"]
    claims["items"] = {"type": "array", "items": False, "minItems": 2, "maxItems": 7,
                       "description": "[predicate, value, name, type, kind, time expression, "
                                      "supersedes], the trailing defaults left out (wire v6)",
                       "prefixItems": [v3[3], v3[4], v3[1], v3[2], v3[5], v3[6], v3[7]]}
    return out


def with_limits(base: Limits = CONTRACT_LIMITS, **changes: int) -> Limits:
    return replace(base, **changes)


# --- size of the longest answer -------------------------------------------------------------------

def _worst(schema: dict[str, Any]) -> tuple[int, int]:
    """(characters, of which free-text characters) of the costliest compact JSON answer the schema
    allows ("costliest" by `_cost`; a free string character counts as one character)."""
    if "anyOf" in schema:
        return max((_worst(b) for b in schema["anyOf"]), key=_cost)
    if "const" in schema:
        return len(json.dumps(schema["const"], ensure_ascii=False)), 0
    if "enum" in schema:
        return max(len(json.dumps(v, ensure_ascii=False)) for v in schema["enum"]), 0
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    return max((_type_worst(t, schema) for t in types), key=_cost)


def _type_worst(t: str, schema: dict[str, Any]) -> tuple[int, int]:
    if t == "null":
        return 4, 0
    if t == "boolean":
        return 5, 0
    if t == "number":
        return 40, 0
    if t == "integer":
        lo, hi = schema.get("minimum"), schema.get("maximum")
        return (max(len(str(lo)), len(str(hi))) if lo is not None and hi is not None else 17), 0
    if t == "string":
        return 2 + schema["maxLength"], schema["maxLength"]
    if t == "array":
        if "prefixItems" in schema:
            parts = [_worst(sub) for sub in schema["prefixItems"]]
            return (2 + sum(c for c, _ in parts) + _SEP * (len(parts) - 1),
                    sum(f for _, f in parts))
        n = schema["maxItems"]
        if n == 0:
            return 2, 0
        chars, free = _worst(schema["items"])
        return 2 + n * chars + _SEP * (n - 1), n * free
    chars, free = 2 + _SEP * max(len(schema.get("properties", {})) - 1, 0), 0
    for key, sub in schema.get("properties", {}).items():
        c, f = _worst(sub)
        chars += len(json.dumps(key, ensure_ascii=False)) + _KEY_SEP + c
        free += f
    return chars, free


def _typical(schema: dict[str, Any]) -> float:
    """Characters of a full, realistic compact JSON answer: like `_worst`, except that an enum
    counts its mean choice (an anyOf still counts its costliest branch)."""
    if "anyOf" in schema:
        return max(_typical(b) for b in schema["anyOf"])
    if "enum" in schema:
        sizes = [len(json.dumps(v, ensure_ascii=False)) for v in schema["enum"]]
        return sum(sizes) / len(sizes)
    types = schema.get("type")
    if "const" in schema or types not in ("array", "object"):
        return _worst(schema)[0]
    if types == "array":
        if "prefixItems" in schema:
            prefix = schema["prefixItems"]
            return 2 + sum(_typical(sub) for sub in prefix) + _SEP * (len(prefix) - 1)
        n = schema["maxItems"]
        return 2 if n == 0 else 2 + n * _typical(schema["items"]) + _SEP * (n - 1)
    props = schema.get("properties", {})
    return 2 + _SEP * max(len(props) - 1, 0) + sum(
        len(json.dumps(key, ensure_ascii=False)) + _KEY_SEP + _typical(sub)
        for key, sub in props.items())


def typical_tokens(schema: dict[str, Any]) -> int:
    """Tokens of a full, realistic answer under `schema` (what budget fitting compares)."""
    return math.ceil(_typical(schema) / TYPICAL_CHARS_PER_TOKEN) + TOKEN_MARGIN


def _cost(worst: tuple[int, int]) -> float:
    chars, free = worst
    return free + (chars - free) / CHARS_PER_TOKEN


def worst_case_chars(schema: dict[str, Any]) -> int:
    """Characters of the longest JSON text (`memworker.wire.SEPARATORS`) the schema allows; a free
    string character counts as one character."""
    return _worst(schema)[0]


def estimate_tokens(chars: int) -> int:
    """Typical tokens of `chars` characters of JSON answer (used to fit the schema to a budget)."""
    return math.ceil(chars / CHARS_PER_TOKEN) + TOKEN_MARGIN


def max_tokens_for(schema: dict[str, Any], *, context_left: int | None = None) -> int:
    """max_tokens for a request: the schema's worst case counted conservatively (every free-text
    character one token, as a degenerate "1.1.1." string costs; the rest at CHARS_PER_TOKEN),
    capped by what is left of the context window (n_ctx minus prompt tokens) when known."""
    tokens = math.ceil(_cost(_worst(schema))) + TOKEN_MARGIN
    if context_left is not None:
        if context_left <= 0:
            raise InputError(f"the prompt leaves no room for an answer ({context_left} tokens left)")
        tokens = min(tokens, context_left)
    return tokens
