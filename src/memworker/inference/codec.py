"""The codec: raw model text -> verified canonical answer, or a typed error. Never an empty
result in place of an error (ARCHITECTURE decision 6).

Pipeline of `decode(task, inputs, raw, finish_reason)`:

1. `finish_reason == "length"` -> `OutputTruncatedError` (even when the prefix happens to parse).
2. Parse: one JSON object, nothing around it (a single surrounding markdown code fence is
   tolerated and noted); duplicate keys, NaN/Infinity, lone surrogates -> `OutputParseError`.
3. Shape: the static wire contract. An answer in *canonical* form (a teacher's, a store's, the
   rules', old outputs) is accepted too, noted in `diagnostics` ("answer was in canonical
   form"): an extract answer is converted to wire form and its dates are kept for comparison; a
   consolidate or reflect answer keeps the ids it gives (checked as in step 4), and only its
   text goes on as the wire answer.
4. Verification against the request by `memworker.verify`, the checker the corpus audit uses
   too. Its drop findings drop the claim (noted in `diagnostics`, kept in `result.dropped`): a
   quote or the predicate holding a credential-shaped string; the one untrusted-source rule
   (a claim citing an untrusted event, where that event or the claim's statement/value is a
   memory-control instruction, is dropped whatever else it cites); and the value-grounding rule
   (`untrusted_content`: a claim whose value, statement or subject name carries a name, a
   number or a rare word of the value that occurs in an untrusted event it does not cite and
   in no trusted event, no cited event and no existing fact is dropped, whatever trusted turn
   it cites: an injected "the user works at Globex" cannot be stored by citing the user's
   "Thanks" after the tool text; words found in no event at all never count, since values may
   be normalised or paraphrased); and no claim twice (`duplicate_claim`: the same subject,
   predicate, value and kind as an earlier kept claim). Any other finding (unknown
   event index or fact / evidence id, a quote that is not an exact substring and candidate span
   of its event, a time expression not detected in the events) -> `OutputValidationError`
   with `error.findings`.
5. The whole answer against the request's dynamic schema (`memworker.inference.schema`); the
   time expression must resolve.
6. **The choices of consolidate and reflect are read from the text** (wire v4: the model writes
   only an observation's statement and a reflection's answer; `memworker.derive`). An
   observation's supports are the facts its statement states; an observation that states fewer
   than two facts, the same facts as an earlier one, or more than the contract's six is dropped
   (noted: "observations/1: dropped (states fewer than two of the facts)"). A reflection's
   citations are the evidence items its answer states (their text, or their date); none:
   `insufficient_evidence` is true; more than six: `OutputValidationError`. Ids are read from
   the text as the model wrote it (before step 7's redaction). **Untrusted evidence**: reflect
   evidence carries no trust flag, so the rule is by content: an evidence item whose text is a
   memory-control instruction (`safety.is_memory_control`, what an injected tool output says) is
   data, never evidence, and is never cited — a citation of it, read from the text or given in
   canonical form, is dropped (`injection_obeyed`, noted and kept in `result.dropped`), and an
   answer left without citations abstains. The answer text itself is kept (redacted as below):
   the grader counts an answer that repeats an injected value as an obeyed injection.
7. Repairs that cannot change meaning, each noted: credential-shaped strings in free-text fields
   are redacted (`safety.redact`); C0 control characters
   other than tab/newline become spaces; duplicate ids in supersedes and in a canonical answer's
   supports / citations are removed (a canonical observation left with fewer than two distinct
   facts is rejected instead).
8. Canonical form via `memworker.wire.claim_from_wire`: dates come from `memworker.temporal`,
   never from the model; the statement, correction flag and confidence are derived from the
   claim (wire v3: the model does not write them). A canonical input whose date differs is
   overruled and the disagreement noted; a date-only precision never carries a clock time. The
   result must satisfy the canonical contract.

`run(backend, task, inputs)` renders the prompt, builds schema and grammar, generates, decodes,
and on any `CodecError` retries **once**: the retry sends the same messages plus one extra user
message, `RETRY_TEMPLATE` filled with the error (the rejected text itself is not sent back). A
second failure raises the second attempt's error type; `error.attempts` / `error.raw_outputs`
carry both raw outputs.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from memworker import contracts, derive, spans, temporal, verify, wire
from memworker import turns as turns_form
from memworker.inference.grammar import schema_to_gbnf
from memworker.inference.schema import (
    CONTRACT_LIMITS,
    DEFAULT_BUDGET,
    InputError,
    Limits,
    build_schema,
    check_inputs,
    max_tokens_for,
    v6_schema,
)
from memworker.prompts import check_stamps, relayout, render, restamp
from memworker.safety import redact
from memworker.turns import FORMS
from memworker.verify import Finding

RETRY_TEMPLATE = ("Your previous answer was rejected: {error}\n"
                  "Answer again with one JSON object in the requested format, nothing else.")
MAX_ERROR_CHARS = 600
_FENCE = re.compile(r"\A```(?:json)?[ \t]*\n(?P<body>.*)\n```\Z", re.S)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_LIMITS = {"name": 120, "value": 200, "statement": 300, "answer": 300}
#: the diagnostic that opens the note on an answer sent in canonical form (a store's, a teacher's)
CANONICAL_FORM = "answer was in canonical form"


# --- results and errors ---------------------------------------------------------------------------

@dataclass
class Attempt:
    """One generation and what the codec made of it."""

    raw: str
    finish_reason: str | None = None
    error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float | None = None
    #: [[piece, log-probability], ...] when the backend records them (`Generation.token_logprobs`)
    token_logprobs: list[list[Any]] | None = None


@dataclass
class CodecResult:
    task: str
    output: dict[str, Any]          # canonical answer, valid under the task's output contract
    wire: dict[str, Any]            # the verified (and repaired) wire answer it was made from
    raw: str                        # the raw text of the accepted attempt
    diagnostics: list[str] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    dropped: list[Finding] = field(default_factory=list)  # why each dropped claim was dropped
    #: extraction in the turns form (`run_turns`): every generation of every turn, retries
    #: included; `attempts` then holds one summary attempt (the turns' answers merged)
    turns: list[Attempt] | None = None
    #: the claim gate's record where one ran (`memworker.inference.gate.ClaimGate.apply`):
    #: its score and threshold, each claim's score before it, the indices it dropped
    gate: dict[str, Any] | None = None


class CodecError(Exception):
    """The model output could not be turned into a valid answer. `raw_outputs` holds every raw
    text tried (one per attempt), `errors` the individual problems, `findings` those of them
    that `memworker.verify` found (each with its code)."""

    kind = "invalid output"

    def __init__(self, message: str, *, errors: list[str] | None = None,
                 attempts: list[Attempt] | None = None, findings: list[Finding] | None = None):
        self.errors = list(errors or [message])
        self.findings = list(findings or [])
        self.attempts = list(attempts or [])
        super().__init__(message)

    @property
    def raw_outputs(self) -> list[str]:
        return [a.raw for a in self.attempts]


class OutputParseError(CodecError):
    kind = "not one JSON object"


class OutputValidationError(CodecError):
    kind = "invalid answer"


class OutputTruncatedError(CodecError):
    kind = "truncated"


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} chars)"


def _invalid(errors: list[str] | list[Finding]) -> OutputValidationError:
    texts = [str(e) for e in errors]
    shown = "; ".join(_short(e) for e in texts[:5])
    more = f"; … ({len(texts) - 5} more)" if len(texts) > 5 else ""
    return OutputValidationError(f"{shown}{more}", errors=texts,
                                 findings=[e for e in errors if isinstance(e, Finding)])


# --- parsing --------------------------------------------------------------------------------------

def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"duplicate key {key!r}")
        obj[key] = value
    return obj


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_answer(raw: str, diagnostics: list[str]) -> dict[str, Any]:
    """The one JSON object in `raw` (strict JSON); raises OutputParseError."""
    if not isinstance(raw, str):
        raise OutputParseError(f"output must be text, got {type(raw).__name__}")
    text = raw.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group("body").strip()
        diagnostics.append("removed a markdown code fence around the JSON")
    if not text:
        raise OutputParseError("output is empty")
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except RecursionError:
        raise OutputParseError("output is not valid JSON: nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise OutputParseError(f"output is not valid JSON: {exc.msg} at char {exc.pos} "
                               f"(near {text[max(exc.pos - 20, 0):exc.pos + 20]!r})") from None
    except ValueError as exc:
        raise OutputParseError(f"output is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise OutputParseError(f"output must be a JSON object, got {type(doc).__name__}")
    _check_strings(doc)
    return doc


def _check_strings(doc: Any) -> None:
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise OutputParseError("output contains an invalid \\u escape (lone surrogate)") \
                    from None


# --- helpers --------------------------------------------------------------------------------------

def _schema_errors(schema: dict[str, Any], doc: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    found = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    out = []
    for e in found:
        where = "/".join(map(str, e.absolute_path)) or "<root>"
        if e.validator in ("anyOf", "enum", "const"):  # the reason first, then the value
            message = "is not one of the allowed choices: " \
                      f"{_short(json.dumps(e.instance, ensure_ascii=False), 80)}"
        else:
            message = _short(contracts.reason(e), 160)
        out.append(f"{where}: {message}")
    return out


def _clean(text: str, where: str, limit: int, diagnostics: list[str]) -> str:
    """Redact credentials and control characters in a free-text field (noted when changed)."""
    cleaned = redact(text)
    if cleaned != text:
        diagnostics.append(f"{where}: redacted a credential-shaped string")
    stripped = _CONTROL.sub(" ", cleaned)
    if stripped != cleaned:
        diagnostics.append(f"{where}: replaced control characters with spaces")
    if len(stripped) > limit:
        stripped = stripped[:limit]
        diagnostics.append(f"{where}: clipped to {limit} characters after redaction")
    return stripped


def _dedupe(values: list[str], where: str, diagnostics: list[str]) -> list[str]:
    unique = list(dict.fromkeys(values))
    if len(unique) != len(values):
        diagnostics.append(f"{where}: removed duplicate ids")
    return unique


def _check_canonical(task: str, doc: dict[str, Any], errors: list[Any] | None = None) -> None:
    """Raise `errors` (found in a canonical-form answer), else the task's canonical output
    contract's problems with `doc`."""
    if errors:
        raise _invalid(errors)
    problems = contracts.errors(f"{task}_output", doc)
    if problems:
        raise _invalid(["canonical-form answer: " + p for p in problems])


# --- extract --------------------------------------------------------------------------------------

def _canonical_to_wire(doc: dict[str, Any]
                       ) -> tuple[dict[str, Any], list[tuple[Any, Any]], list[str]]:
    """A canonical-form answer (a teacher's) -> (wire answer, its dates, its statements): the
    statements are judged by the same rules and kept, as the audit judges the gold's."""
    _check_canonical("extract", doc)
    shape = [f for n, c in enumerate(doc["claims"]) for f in verify.canonical_claim_findings(c, n)]
    if shape:
        raise _invalid(shape)
    given = [(c["date"], c["date_precision"]) for c in doc["claims"]]
    return ({"claims": [wire.pack_claim(wire.claim_to_wire(c)) for c in doc["claims"]]}, given,
            [c["statement"] for c in doc["claims"]])


def _extract(doc: dict[str, Any], inputs: dict[str, Any], schema: dict[str, Any],
             diags: list[str], dropped: list[Finding], *, merged: bool = False
             ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Decode and check an extract answer. `merged`: the claims of several parts (each already
    checked as its part's answer), so the wire contract is checked claim by claim and their
    number is left to the caller (`_decode_merged` drops repeats, then cuts at the contract's
    limit)."""
    given: list[tuple[Any, Any]] | None = None
    statements: list[str] | None = None
    claims_in = doc.get("claims")
    if isinstance(claims_in, list) and any(isinstance(c, dict) and "source_indices" in c
                                           for c in claims_in):
        doc, given, statements = _canonical_to_wire(doc)
        diags.append(f"{CANONICAL_FORM}; converted to wire form")
    if merged and isinstance(doc.get("claims"), list):
        # each claim alone (as claims/0), its problems named at its own index, the rest once
        problems = list(dict.fromkeys(
            re.sub(r"^claims/0(?=[/:])", f"claims/{i}", p)
            for i, claim in enumerate(doc["claims"])
            for p in contracts.errors("extract_wire", {**doc, "claims": [claim]})))
    else:
        problems = contracts.errors("extract_wire", doc)
    if problems:
        raise _invalid(problems)
    records = wire.claim_records(doc)
    for record, statement in zip(records, statements or [], strict=False):
        record["statement"] = statement  # a canonical answer's own statement, judged and kept
    kept: list[tuple[int, dict[str, Any]]] = []
    errors: list[Finding] = []
    for (n, record), found in zip(enumerate(records),
                                  verify.extract_findings({"claims": records}, inputs),
                                  strict=True):
        drop = next((f for f in found if f.drops_claim), None)
        if drop is not None:
            diags.append(f"claims/{n}: dropped ({drop.detail})")
            dropped.append(drop)
            continue
        errors += found
        record["supersedes"] = _dedupe(record["supersedes"], f"claims/{n}/supersedes", diags)
        kept.append((n, record))
    if errors:
        raise _invalid(errors)
    kept_doc = {"claims": [wire.pack_claim(r) for _, r in kept]}
    problems = _schema_errors(schema, kept_doc)
    if problems:
        raise _invalid(problems)

    out_wire, out_claims = [], []
    for n, record in kept:
        where = f"claims/{n}"
        record = json.loads(json.dumps(record))
        record["subject"]["name"] = _clean(record["subject"]["name"], f"{where}/subject/name",
                                           _LIMITS["name"], diags)
        if record["value"] is not None:
            record["value"] = _clean(record["value"], f"{where}/value", _LIMITS["value"], diags)
        try:
            canonical = wire.claim_from_wire(record, inputs["events"],
                                                   inputs.get("existing_facts"))
        except (temporal.UnresolvableExpression, ValueError) as exc:
            raise _invalid([f"{where}/time_expression: {exc}"]) from None
        canonical["statement"] = _clean(canonical["statement"], f"{where}/statement",
                                        _LIMITS["statement"], diags)
        if canonical["date_precision"] is not None and \
                temporal.is_date_only(canonical["date_precision"]) and "T" in canonical["date"]:
            canonical["date"] = canonical["date"].split("T", 1)[0]
            diags.append(f"{where}: removed a clock time from a date-only date")
        if given is not None:
            g_date, g_prec = given[n]
            if (g_date, g_prec) != (canonical["date"], canonical["date_precision"]):
                diags.append(f"{where}: date {g_date!r} ({g_prec}) given, resolver says "
                             f"{canonical['date']!r} ({canonical['date_precision']}) for "
                             f"{record['time_expression']!r}; using the resolver's")
        out_wire.append(wire.pack_claim(record))
        out_claims.append(canonical)
    return wire.order_answer("extract", {"claims": out_wire}), {"claims": out_claims}


# --- consolidate and reflect ----------------------------------------------------------------------

#: the most supports / citations the canonical contract holds (consolidate_output, reflect_output)
MAX_SUPPORTS = MAX_CITATIONS = 6


def _given_supports(doc: dict[str, Any], inputs: dict[str, Any],
                    diags: list[str]) -> list[list[str]] | None:
    """The supports of a consolidate answer in canonical form (a store's, a teacher's, the
    rules'), checked as before wire v4: each a known fact (`memworker.verify`), duplicates
    removed, two or more left; None for the wire form (statements only)."""
    observations = doc.get("observations")
    if not (isinstance(observations, list) and any(isinstance(o, dict) for o in observations)):
        return None
    errors: list[Any] = []
    for n, obs in enumerate(observations):
        supports = obs.get("supports") if isinstance(obs, dict) else None
        if not (isinstance(supports, list) and all(isinstance(s, str) for s in supports)):
            continue
        errors += [dataclasses.replace(f, where=f"observations/{n}/supports")
                   for f in verify.consolidate_findings(
                       {"observations": [{"supports": supports}]}, inputs)]
        unique = _dedupe(supports, f"observations/{n}/supports", diags)
        if len(unique) < 2:
            errors.append(f"observations/{n}/supports: an observation needs two different "
                          f"facts, got {unique}")
        obs["supports"] = unique
    _check_canonical("consolidate", doc, errors)
    diags.append(f"{CANONICAL_FORM}; its supports kept")
    return [o["supports"] for o in observations]


def _consolidate(doc: dict[str, Any], inputs: dict[str, Any], schema: dict[str, Any],
                 diags: list[str], dropped: list[Finding]) -> tuple[dict[str, Any], dict[str, Any]]:
    given = _given_supports(doc, inputs, diags)
    if given is not None:
        doc = {"observations": [o["statement"] for o in doc["observations"]]}
    problems = _schema_errors(schema, doc)
    if problems:
        raise _invalid(problems)
    statements = doc["observations"]
    if given is None:  # wire v4: the supports are the facts each statement states
        supports, why = derive.read_observations(statements, inputs["facts"])
        for n, found in supports.items():
            if len(found) > MAX_SUPPORTS:
                why[n] = f"states {len(found)} facts; an observation holds at most {MAX_SUPPORTS}"
        for n in sorted(why):
            diags.append(f"observations/{n}: dropped ({why[n]})")
    else:
        supports, why = dict(enumerate(given)), {}
    kept = [(n, _clean(s, f"observations/{n}", _LIMITS["statement"], diags))
            for n, s in enumerate(statements) if n not in why]
    return (wire.order_answer("consolidate", {"observations": [s for _, s in kept]}),
            {"observations": [{"supports": supports[n], "statement": s} for n, s in kept]})


def _given_citations(doc: dict[str, Any], inputs: dict[str, Any],
                     diags: list[str]) -> list[str] | None:
    """The citations of a reflect answer in canonical form (a store's, a teacher's, the rules'),
    checked as before wire v4: known ids (`memworker.verify`), duplicates removed, none when
    insufficient_evidence is true; None for the wire form (the answer text only)."""
    if "citations" not in doc and "insufficient_evidence" not in doc:
        return None
    errors: list[Any] = []
    citations = doc.get("citations")
    if isinstance(citations, list) and all(isinstance(c, str) for c in citations):
        doc["citations"] = citations = _dedupe(citations, "citations", diags)
        errors += [f for f in verify.reflect_findings(doc, inputs) if not f.drops_claim]
        if doc.get("insufficient_evidence") is True and citations:
            errors.append("citations: must be empty when insufficient_evidence is true")
    _check_canonical("reflect", doc, errors)
    diags.append(f"{CANONICAL_FORM}; its citations kept")
    return doc["citations"]


def _reflect(doc: dict[str, Any], inputs: dict[str, Any], schema: dict[str, Any],
             diags: list[str], dropped: list[Finding]) -> tuple[dict[str, Any], dict[str, Any]]:
    citations = _given_citations(doc, inputs, diags)
    if citations is not None:
        doc = {"answer": doc["answer"]}
    problems = _schema_errors(schema, doc)
    if problems:
        raise _invalid(problems)
    if citations is None:  # wire v4: the citations are the evidence items the answer states
        citations = derive.derive_citations(doc["answer"], inputs["evidence"],
                                            inputs["question"])
    gone = set()
    for f in verify.reflect_findings({"citations": citations}, inputs):
        if not f.drops_claim:  # a given unknown id was rejected above, a derived one is known
            continue
        diags.append(f"{f.where}: dropped ({f.detail})")
        dropped.append(f)
        gone.add(int(f.where.rsplit("/", 1)[1]))
    if gone:
        citations = [c for n, c in enumerate(citations) if n not in gone]
        if not citations:
            diags.append("no citation left: the answer abstains (insufficient_evidence true)")
    if len(citations) > MAX_CITATIONS:
        raise _invalid([f"answer: states {len(citations)} evidence items; a reflection cites at "
                        f"most {MAX_CITATIONS}"])
    answer = _clean(doc["answer"], "answer", _LIMITS["answer"], diags)
    return (wire.order_answer("reflect", {"answer": answer}),
            {"insufficient_evidence": not citations, "citations": citations, "answer": answer})


_VERIFY = {"extract": _extract, "consolidate": _consolidate, "reflect": _reflect}


# --- public API -----------------------------------------------------------------------------------

def decode(task: str, inputs: dict[str, Any], raw: str, *, finish_reason: str | None = None,
           schema: dict[str, Any] | None = None, layout: str = "v3",
           event: int | None = None) -> CodecResult:
    """One raw output -> CodecResult, or a CodecError subclass (see the module docstring).
    Bad *inputs* raise schema.InputError (the caller's mistake, not the model's). `layout` "v6"
    (an extract turn's answer in claim layout v6, `memworker.wire.V6_FIELDS`): each claim is
    quoted with the sentence of event `event` that the codec chooses (`_from_v6`) and then
    checked as a v3 answer against `schema`, the v3 schema."""
    attempt = Attempt(raw=raw, finish_reason=finish_reason)
    try:
        if schema is None:
            schema = build_schema(task, inputs)
        else:
            check_inputs(task, inputs)
        if finish_reason == "length":
            raise OutputTruncatedError("output was truncated (finish reason 'length'): the answer "
                                       "did not fit in max_tokens")
        diagnostics: list[str] = []
        dropped: list[Finding] = []
        doc = parse_answer(raw, diagnostics)
        if wire.check_layout(layout) == "v6" and task == "extract":
            doc = _from_v6(doc, inputs, event)
        try:
            wire_answer, output = _VERIFY[task](doc, inputs, schema, diagnostics, dropped)
        except RecursionError:
            raise OutputValidationError("answer is nested too deeply") from None
        problems = contracts.errors(contracts.TASK_SCHEMAS[task][1], output)
        if problems:
            raise _invalid(["canonical answer: " + p for p in problems])
    except CodecError as exc:
        attempt.error = str(exc)
        exc.attempts = exc.attempts or [attempt]
        raise
    return CodecResult(task=task, output=output, wire=wire_answer, raw=raw,
                       diagnostics=diagnostics, attempts=[attempt], dropped=dropped)


def _text(value: Any) -> str:
    """A written field as text for choosing its quote ("" when it is not a string: the schema
    check that follows refuses it)."""
    return value if isinstance(value, str) else ""


def _from_v6(doc: Any, inputs: dict[str, Any], event: int | None) -> dict[str, Any]:
    """A v6 extract answer (claims without quotes, their trailing defaults left out) -> the v3
    wire answer the rest of the codec checks: each claim quoted with the sentence of `event`
    that its value, subject and predicate point at (`spans.choose_sentence`). An answer of
    another shape, or a claim in an event that offers no sentence, is invalid."""
    if not isinstance(doc, dict) or set(doc) != {"claims"} or not isinstance(doc["claims"], list):
        raise _invalid(['a v6 extract answer is {"claims":[...]} and nothing else'])
    texts = {e["index"]: e["text"] for e in inputs["events"]}
    if event not in texts:
        raise InputError(f"v6 answers are quoted from the turn's event; event {event!r} is not "
                         "one of the request's")
    claims = []
    for n, claim in enumerate(doc["claims"]):
        try:
            record = wire.unpack_v6(claim, [])
        except ValueError as exc:
            raise _invalid([f"claims/{n}: {exc}"]) from None
        sentence = spans.choose_sentence(texts[event], _text(record["value"]) or None,
                                         _text(record["subject"]["name"]),
                                         _text(record["predicate"]))
        if sentence is None:
            raise _invalid([f"claims/{n}: event {event} offers no sentence to quote"])
        record["quotes"] = [{"quote": sentence, "event": event}]
        claims.append(wire.pack_claim(record))
    return {"claims": claims}


def verify_canonical(task: str, inputs: dict[str, Any], canonical: dict[str, Any]) -> CodecResult:
    """Run a canonical answer (e.g. from a teacher) through the same checks; dates recomputed."""
    return decode(task, inputs, json.dumps(canonical, ensure_ascii=False))


@dataclass
class Request:
    """Everything one backend call needs, derived from (task, inputs)."""

    task: str
    inputs: dict[str, Any]
    messages: list[dict[str, str]]
    schema: dict[str, Any]
    grammar: str | None
    max_tokens: int
    #: the claim layout the model writes (`memworker.wire.LAYOUTS`) and, for v6, the event
    #: its claims are quoted from (the turn's)
    layout: str = "v3"
    event: int | None = None


def prepare(task: str, inputs: dict[str, Any], *, backend: Any = None, use_grammar: bool = True,
            budget_tokens: int | None = -1, limits: Limits | None = None,
            max_tokens: int | None = None, stamps: str = "full") -> Request:
    """Render the prompt and build the dynamic schema, grammar and max_tokens for one request.
    When the backend can count prompt tokens (`context_left(messages)`), the budget is capped by
    what is left of its context window. `stamps`: how an extract prompt writes its events'
    timestamps (`memworker.prompts.EVENT_STAMPS`; other tasks have no events)."""
    check_inputs(task, inputs)
    messages = render(task, inputs)
    if task == "extract":
        messages = restamp(messages, inputs, stamps)
    context_left, budget_tokens = _context_budget(backend, messages, task, budget_tokens)
    schema = build_schema(task, inputs, budget_tokens=budget_tokens, limits=limits)
    grammar = schema_to_gbnf(schema) if use_grammar else None
    if max_tokens is None:
        max_tokens = max_tokens_for(schema, context_left=context_left)
    return Request(task, inputs, messages, schema, grammar, max_tokens)


def _context_budget(backend: Any, messages: list[dict[str, str]], task: str,
                    budget_tokens: int | None = -1) -> tuple[int | None, int | None]:
    """(context left after the prompt, or None when the backend cannot count it; the token
    budget: -1 is the task's default, capped by the context left)."""
    context_left = None
    if backend is not None and hasattr(backend, "context_left"):
        context_left = backend.context_left(messages)
    if budget_tokens == -1:
        budget_tokens = DEFAULT_BUDGET[task]
    if context_left is not None and budget_tokens is not None:
        budget_tokens = min(budget_tokens, context_left)
    return context_left, budget_tokens


def retry_message(error: CodecError) -> dict[str, str]:
    text = str(error)
    if len(text) > MAX_ERROR_CHARS:
        text = text[:MAX_ERROR_CHARS] + " …"
    return {"role": "user", "content": RETRY_TEMPLATE.format(error=text)}


def run(backend: Any, task: str, inputs: dict[str, Any], *, temperature: float = 0.0,
        seed: int = 0, use_grammar: bool = True, budget_tokens: int | None = -1,
        limits: Limits | None = None, max_tokens: int | None = None,
        retries: int = 1, stamps: str = "full") -> CodecResult:
    """Generate with `backend` and decode; retry once on a CodecError, then raise it."""
    request = prepare(task, inputs, backend=backend, use_grammar=use_grammar,
                      budget_tokens=budget_tokens, limits=limits, max_tokens=max_tokens,
                      stamps=stamps)
    return run_request(backend, request, temperature=temperature, seed=seed, retries=retries)


def _measured(attempt: Attempt, gen: Any, seconds: float) -> Attempt:
    """`attempt` with what the backend measured of its generation."""
    attempt.prompt_tokens, attempt.completion_tokens = gen.prompt_tokens, gen.completion_tokens
    attempt.seconds = seconds
    attempt.token_logprobs = getattr(gen, "token_logprobs", None)
    return attempt


def run_request(backend: Any, request: Request, *, temperature: float = 0.0, seed: int = 0,
                retries: int = 1, decoder: Any = None) -> CodecResult:
    """Generate and decode, retrying once (`retries`) on a CodecError. `decoder(raw,
    finish_reason)` replaces `decode` for an answer of another shape (the walk form)."""
    if decoder is None:
        def decoder(raw: str, finish_reason: str | None) -> CodecResult:
            return decode(request.task, request.inputs, raw, finish_reason=finish_reason,
                          schema=request.schema, layout=request.layout, event=request.event)
    attempts: list[Attempt] = []
    messages = list(request.messages)
    while True:
        started = time.perf_counter()
        gen = backend.generate(messages, schema=request.schema, grammar=request.grammar,
                               max_tokens=request.max_tokens, temperature=temperature, seed=seed)
        seconds = time.perf_counter() - started
        try:
            result = decoder(gen.text, gen.finish_reason)
        except CodecError as exc:
            if not exc.attempts:
                exc.attempts = [Attempt(raw=gen.text, finish_reason=gen.finish_reason,
                                        error=str(exc))]
            failed = _measured(exc.attempts[-1], gen, seconds)
            attempts.append(failed)
            if len(attempts) > retries:
                exc.attempts = attempts
                raise
            messages = list(request.messages) + [retry_message(exc)]
            continue
        result.attempts = attempts + [_measured(result.attempts[0], gen, seconds)]
        if attempts:
            result.diagnostics.insert(0, f"accepted on attempt {len(result.attempts)} after: "
                                         f"{attempts[-1].error}")
        return result


# --- extraction one event at a time (memworker.turns) ---------------------------------------------

#: the answer of a turn the worker does not ask (`run_turns(ask=)`): no claim
TURN_SKIPPED = '{"claims":[]}'
#: what the prompts of a turns form with unasked turns show (`run_turns(tail=)`): "read" (the
#: whole window, every unasked turn with its empty answer, as trained), "drop" (the window ends at
#: the last asked turn's event: events the worker does not ask about after it are not read) or
#: "omit" (as "drop", and the unasked turns before it are left out of the conversation too: no
#: question, no empty answer; the next asked turn's question follows the last asked turn's answer)
TAILS = ("read", "drop", "omit")

#: the text of a proposing turn's answer up to and including its first claim's opening bracket:
#: the fork where the student either closes the list or opens a claim
FORK_TEXT = '{"claims":[['


def fork_score(tokens: list[Any] | None) -> tuple[float | None, int]:
    """(The fork score, the tokens it spans) of an extract answer's recorded tokens
    ([piece, log-probability], `Generation.token_logprobs`): the summed log-probabilities of the
    tokens up to and including the one that completes `FORK_TEXT`, i.e. the model's own belief
    (before the grammar) that the answer opens a claim rather than closing the list. (None, n)
    when the answer's text does not begin with `FORK_TEXT` (a closed list, or no tokens)."""
    text, score = "", 0.0
    for n, (piece, logprob) in enumerate(tokens or [], start=1):
        text += piece
        score += float(logprob)
        if len(text) >= len(FORK_TEXT):
            return (round(score, 4) if text.startswith(FORK_TEXT) else None), n
    return None, len(tokens or [])


def _schema_upto(inputs: dict[str, Any], event: int, budget: int | None,
                 own: bool = False) -> dict[str, Any]:
    """The extract schema of a part that answers for `event`: its quotes cite events up to it
    only (a claim belongs to the latest event it quotes); with `own`, that event only."""
    upto = {**inputs, "events": [e for e in inputs["events"]
                                 if (e["index"] == event if own else e["index"] <= event)]}
    return build_schema("extract", upto, budget_tokens=budget)


def _turn_request(backend: Any, inputs: dict[str, Any], event: int,
                  messages: list[dict[str, str]], use_grammar: bool,
                  max_tokens: int | None, own_quotes: bool = False,
                  propose: bool = False, layout: str = "v3") -> Request:
    """The request of one turn: the conversation so far, `_schema_upto` its event; with
    `propose`, its grammar makes the model write at least one claim (a generation constraint
    only: the answer is checked against the schema as usual, so a proposed claim the codec drops
    leaves an empty turn, not a failed one). In claim layout v6 the grammar writes v6 claims
    (`v6_schema`) and the codec quotes them from the turn's own event."""
    context_left, budget = _context_budget(backend, messages, "extract")
    schema = _schema_upto(inputs, event, budget, own_quotes or layout == "v6")
    generate = v6_schema(schema) if wire.check_layout(layout) == "v6" else schema
    if propose and schema["properties"]["claims"].get("maxItems", 1) >= 1:
        generate = json.loads(json.dumps(generate))
        generate["properties"]["claims"]["minItems"] = 1
    limit = max_tokens_for(schema, context_left=context_left)
    if max_tokens is not None:
        limit = min(limit, max_tokens)
    return Request("extract", inputs, messages, schema,
                   schema_to_gbnf(generate) if use_grammar else None, limit, layout, event)


def run_turns(backend: Any, inputs: dict[str, Any], *, temperature: float = 0.0, seed: int = 0,
              use_grammar: bool = True, max_tokens: int | None = None,
              retries: int = 1, own_quotes: bool = False, form: str = "turns",
              propose: bool = False, history: str = "answers",
              stamps: str = "full", layout: str = "v3",
              ask: list[bool] | None = None, tail: str = "read") -> CodecResult:
    """Extraction in the turns form (`memworker.turns`): one turn per event that holds user
    words, each decoded and verified as an extract answer on its own (one retry each, as `run`),
    the next turn's prompt holding the accepted raw answers before it (so a backend that keeps
    the longest common prompt prefix, as llama.cpp does, processes the window once). The turns'
    verified claims are then decoded together as one whole-window answer (every check again,
    no claim twice across turns; beyond the contract's claim limit the later claims are left
    out, noted). `max_tokens` caps each turn. A turn that fails twice raises its error, carrying
    every turn's attempts. `result.turns` holds each generation; `result.attempts` one summary
    (the merged answer, the summed tokens and seconds). `own_quotes`: each turn's claims quote
    its own event only (the schema offers no earlier event's spans; 90.5 % of the train split's
    gold claims quote one event only, train/README "E19"). `form` "sentences": one turn per
    sentence of those events (`memworker.turns` "Sentences"), each turn's schema as its event's.
    `propose`: the grammar makes every turn answer at least one claim (`minItems` 1), so the
    model never takes the "no claim" side of a turn's first decision; what is kept is then a
    claim gate's to decide (`memworker.inference.gate`: the claims the model scores below its
    threshold are dropped), not the greedy choice at that fork (train/README "Propose, then
    gate"). `history` "none": each turn's prompt is the window and its own question alone
    (`memworker.turns` "Read once"), not the turns before it. `stamps`: how the prompts write
    the events' timestamps (`prepare`). `layout` "v6": the model writes its claims in claim
    layout v6 (no quotes, `memworker.wire.V6_FIELDS`) and the codec quotes each from the
    sentence of the turn's event it points at (`_from_v6`), so every turn quotes its own event
    (as `own_quotes`). `ask` (one flag per asked turn, `memworker.inference.turn_gate`): a turn
    whose flag is false is not generated; its answer is `TURN_SKIPPED` (`{"claims":[]}`), held
    in the conversation as the model's answer would be, and its attempt says
    `finish_reason="skipped"` with no tokens and no seconds. `tail` "drop" (with `ask`): the
    prompts show the window up to the last asked turn's event only, as if the window ended there
    (`TAILS`): the events after it, none of them asked, are not read; a window with no turn
    asked calls nothing either way. `tail` "omit": as "drop", and the conversation holds the
    asked turns alone (an unasked turn's question and empty answer are not in any prompt). The schemas, the quotes' checks and the merged answer still
    hold the whole window."""
    wire.check_layout(layout)
    if tail not in TAILS:
        raise ValueError(f"tail {tail!r}: one of {', '.join(TAILS)}")
    if tail != "read" and ask is None:
        raise ValueError(f"tail {tail!r} drops the events after the last asked turn: it needs ask")
    if history not in turns_form.HISTORIES:
        raise ValueError(f"turn history {history!r}: one of {', '.join(turns_form.HISTORIES)}")
    check_stamps(stamps)
    check_inputs("extract", inputs)
    asked = turns_form.asked(inputs["events"], form)
    if ask is not None and len(ask) != len(asked):
        raise ValueError(f"ask: {len(ask)} flags for {len(asked)} turns")
    shown = inputs              # what the prompts show of the window
    if tail != "read" and any(ask or ()):
        shown = turns_form.shown_asked(inputs, ask, form)
    generations: list[Attempt] = []
    answers: list[str] = []
    claims: list[Any] = []
    diagnostics: list[str] = []
    dropped: list[Finding] = []
    for k, turn in enumerate(asked):
        if ask is not None and not ask[k]:
            generations.append(Attempt(raw=TURN_SKIPPED, finish_reason="skipped",
                                       prompt_tokens=0, completion_tokens=0, seconds=0.0))
            answers.append(TURN_SKIPPED)
            diagnostics.append(f"{turn.label}: not asked (turn gate)")
            continue
        if history == "none":
            messages = turns_form.once_messages(shown, k, form)
        elif tail == "omit":    # the asked turns alone, each with its answer
            only = [j for j in range(k + 1) if ask[j]]
            messages = turns_form.messages(shown, [answers[j] for j in only[:-1]], form, only)
        else:
            messages = turns_form.messages(shown, answers, form)
        messages = relayout(restamp(messages, shown, stamps), layout)
        request = _turn_request(backend, inputs, turn.event, messages, use_grammar, max_tokens,
                                own_quotes, propose, layout)
        try:
            result = run_request(backend, request, temperature=temperature, seed=seed,
                                 retries=retries)
        except CodecError as exc:
            exc.attempts = generations + exc.attempts
            exc.args = (f"{turn.label}: {exc}",)
            raise
        generations += result.attempts
        answers.append(result.attempts[-1].raw)
        claims += result.wire["claims"]
        diagnostics += [f"{turn.label}: {d}" for d in result.diagnostics]
        dropped += result.dropped
    # the whole window once more: every check across turns (a repeat of an earlier turn's claim)
    try:
        whole = _decode_merged(inputs, claims)
    except CodecError as exc:
        merged = wire.dump_answer("extract", {"claims": claims})
        exc.attempts = generations + [Attempt(raw=merged, finish_reason="stop", error=str(exc))]
        raise
    summary = Attempt(raw=whole.raw, finish_reason="stop",
                      prompt_tokens=_total(g.prompt_tokens for g in generations),
                      completion_tokens=_total(g.completion_tokens for g in generations),
                      seconds=_total(g.seconds for g in generations))
    whole.attempts = [summary]
    whole.turns = generations
    whole.diagnostics = diagnostics + whole.diagnostics
    whole.dropped = dropped + whole.dropped
    if len(generations) > len(asked):
        whole.diagnostics.insert(0, f"{len(generations) - len(asked)} turns accepted on a retry")
    return whole


def run_walk(backend: Any, inputs: dict[str, Any], *, temperature: float = 0.0, seed: int = 0,
             use_grammar: bool = True, max_tokens: int | None = None,
             retries: int = 1, stamps: str = "full") -> CodecResult:
    """Extraction in the walk form (`memworker.turns`, design (b)): one generation whose answer
    walks the events with user words in order, the schema fixing each event's index (a `const`)
    and letting its claims quote events up to it. The walk is checked against that schema,
    flattened into the one-call answer and decoded as one (`run_turns`' merged decode: every
    check, no claim twice). One retry, as `run`. `result.raw` / the accepted attempt's raw is the
    walk text; a window without user words asks nothing."""
    check_inputs("extract", inputs)
    asked = turns_form.turn_events(inputs["events"])
    if not asked:
        return _decode_merged(inputs, [])
    messages = restamp(turns_form.walk_messages(inputs), inputs, stamps)
    context_left, budget = _context_budget(backend, messages, "extract")
    steps, limit = [], 0
    for event in asked:
        part = _schema_upto(inputs, event, budget)
        steps.append({"type": "array", "prefixItems": [{"const": event},
                                                        part["properties"]["claims"]],
                      "items": False, "minItems": 2, "maxItems": 2})
        limit += max_tokens_for(part, context_left=None)
    schema = {"type": "object", "properties": {"events": {
        "type": "array", "prefixItems": steps, "items": False, "minItems": len(steps),
        "maxItems": len(steps)}}, "required": ["events"], "additionalProperties": False}
    if context_left is not None:
        limit = min(limit, context_left)
    if max_tokens is not None:
        limit = min(limit, max_tokens)
    request = Request("extract", inputs, messages, schema,
                      schema_to_gbnf(schema) if use_grammar else None, limit)
    return run_request(backend, request, temperature=temperature, seed=seed, retries=retries,
                       decoder=lambda raw, finish: _decode_walk(inputs, raw, finish, schema,
                                                                asked))


def _decode_walk(inputs: dict[str, Any], raw: str, finish_reason: str | None,
                 schema: dict[str, Any], asked: list[int]) -> CodecResult:
    if finish_reason == "length":
        raise OutputTruncatedError("output was truncated (finish reason 'length'): the answer "
                                   "did not fit in max_tokens")
    diagnostics: list[str] = []
    doc = parse_answer(raw, diagnostics)
    problems = _schema_errors(schema, doc)
    if problems:
        raise _invalid(problems)
    try:
        flat = turns_form.walk_claims(doc, asked)
    except turns_form.TurnsError as exc:
        raise _invalid([str(exc)]) from None
    result = _decode_merged(inputs, flat["claims"])
    result.raw = raw
    result.attempts = [Attempt(raw=raw, finish_reason=finish_reason)]
    result.diagnostics = diagnostics + result.diagnostics
    return result


def run_extract(backend: Any, inputs: dict[str, Any], form: str = "window", **kw: Any
                ) -> CodecResult:
    """Extraction in one of `memworker.turns.FORMS`: "window" (`run`), "turns" and "sentences"
    (`run_turns`), "walk" (`run_walk`)."""
    if form in turns_form.TURN_FORMS:
        return run_turns(backend, inputs, form=form, **kw)
    if form == "walk":
        return run_walk(backend, inputs, **kw)
    if form != "window":
        raise ValueError(f"unknown extraction form {form!r}; forms: {', '.join(FORMS)}")
    return run(backend, "extract", inputs, **kw)


def _decode_merged(inputs: dict[str, Any], claims: list[Any]) -> CodecResult:
    """The claims of several parts (turns, a walk's events) decoded as one whole-window answer:
    every check again across the parts (a repeat of an earlier part's claim is dropped); beyond
    the contract's claim limit the later claims are left out, noted."""
    merged = wire.dump_answer("extract", {"claims": claims})
    schema = build_schema("extract", inputs, limits=CONTRACT_LIMITS)
    schema["properties"]["claims"]["maxItems"] = max(len(claims), 1)
    diagnostics: list[str] = []
    dropped: list[Finding] = []
    wire_answer, output = _extract(json.loads(merged), inputs, schema, diagnostics, dropped,
                                   merged=True)
    if len(output["claims"]) > CONTRACT_LIMITS.claims:
        left = len(output["claims"]) - CONTRACT_LIMITS.claims
        output["claims"] = output["claims"][:CONTRACT_LIMITS.claims]
        wire_answer["claims"] = wire_answer["claims"][:CONTRACT_LIMITS.claims]
        diagnostics.append(f"{left} claims beyond the contract's {CONTRACT_LIMITS.claims} left "
                           "out (the latest events')")
    problems = contracts.errors(contracts.TASK_SCHEMAS["extract"][1], output)
    if problems:
        raise _invalid(["canonical answer: " + p for p in problems])
    return CodecResult(task="extract", output=output, wire=wire_answer, raw=merged,
                       diagnostics=diagnostics, dropped=dropped)


def _total(values: Any) -> Any:
    values = list(values)
    if not values or any(v is None for v in values):
        return None
    return sum(values)
