"""The hybrid worker: the rules' extract claims kept beside the model's (issue 50).

A worker configured `with_rules="union"` answers an extract request as the model does (its form,
proposing and claim gate unchanged), then adds the rules' answer to the same request: the rules'
claims first, then the model's claims that say something the rules did not (another subject,
predicate or value), up to the request schema's claim limit. The merged wire answer goes through
the same codec (`codec.decode`) as any answer, so the store sees one verified extract answer.
Consolidation and reflection stay the model's, unless the worker is also configured
`consolidate_rules="rules"` or `reflect_rules="fallback"` (below).

Why: the rules (`memworker.inference.rules`) store plain first-person sentences ("I use Neovim
for all my Go work.") that a gated student drops, and the gated student stores facts in wording
the rules cannot read. `eval/studies/hybrid.py` and `eval/studies/gate_choice.py --union`
measure the same union from recorded samples (they call `merge_extract`).

**Reflection falls back to the rules** (`reflect_rules="fallback"`, `reflect_fallback`): where the
model abstains and the rules answer from a memory that holds every content word of the question
(beyond the phrase naming its subject: "Where does the user work?" and "The user works at
Arcadis."), the worker answers with the rules' answer, which quotes that memory and cites it. A
student trained on templated evidence abstains on plain memories in other words (issue 50);
the condition keeps the fallback off the answerable-looking rows where the rules copy a memory
that does not answer (on natural-dev the rules' answer is right in 2 of the 34 rows where the
student abstains and they answer). `eval/studies/hybrid.py --reflect fallback` composes it from
recorded samples (`falls_back`).

**Consolidation by the rules** (`consolidate_rules="rules"`, `rules_result`): the worker answers
every consolidation request with the rules' observations, decoded by the codec, and does not call
the model for it. Chosen where the rules consolidate better than the student on the design sets
(E22 against the rules, val 30 of 96 against 51, natural-dev 2 of 35 against 4;
`eval/studies/hybrid.py --consolidate rules` composes it).

Two claims "say the same" when their subjects match (normalised, with or without the
parenthesised relation; "the user" and its synonyms are one), their predicates are equal (both
sides write the request's ontology vocabulary) and their values have one value key
(`textnorm.value_key`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from memworker import wire
from memworker.inference import codec
from memworker.inference.rules import ANSWERS, answer_text, reflect_choice
from memworker.inference.schema import build_schema
from memworker.textnorm import bare_name, norm, value_key

#: the hybrid policies a worker record may name (`hmem.worker_config(with_rules=…)`)
POLICIES = ("none", "union")
#: the reflection policies a worker record may name (`hmem.worker_config(reflect_rules=…)`)
REFLECT_POLICIES = ("none", "fallback")
#: the consolidation policies a worker record may name (`hmem.worker_config(consolidate_rules=…)`)
CONSOLIDATE_POLICIES = ("none", "rules")
#: the worker's rules settings, each with the one policy it names when on: a release's `worker`
#: record holds `{setting: policy}`, an evaluation arm the setting as a flag (`eval.runner.Arm`),
#: the command lines `--with-rules`, `--reflect-rules`, `--consolidate-rules`
SETTINGS = {"with_rules": "union", "reflect_rules": "fallback", "consolidate_rules": "rules"}


def settings_of(flags: Any) -> dict[str, str]:
    """The rules settings as a worker takes them (`MemWorkerBackend(**…)`,
    `hmem.worker_config(**…)`), from an object with one boolean attribute per setting (an
    evaluation arm, `eval.runner.Arm`; export/run.py's parsed flags): its policy, or "none"."""
    return {key: policy if getattr(flags, key) else "none" for key, policy in SETTINGS.items()}
#: the policies `merge_extract` knows: `fill` adds only model claims that quote no event the
#: rules took a claim from (a study's policy, not a worker's); `rules` and `model` one side alone
MERGES = ("union", "fill", "rules", "model")


#: subject names that mean the user (normalised)
_USER = frozenset(("the user", "user", "i", "me", "myself", "users", "you"))


def _subject_keys(name: str) -> frozenset[str]:
    keys = {norm(name), norm(bare_name(name))} - {""}
    return frozenset({"the user"}) if keys & _USER else frozenset(keys)


def same_fact(a: tuple[str, str, str], b: tuple[str, str, str]) -> bool:
    """Two `says` tuples state one fact: one subject, one predicate, one value key."""
    return a[1] == b[1] and a[2] == b[2] and bool(_subject_keys(a[0]) & _subject_keys(b[0]))


def says(record: dict[str, Any]) -> tuple[str, str, str]:
    """What a claim says: subject name, predicate, value key."""
    return record["subject"]["name"], record["predicate"], value_key(record["value"])


def merge_extract(rules_wire: dict[str, Any] | None, model_wire: dict[str, Any] | None,
                  policy: str, limit: int) -> dict[str, Any]:
    """The merged wire extract answer (claims as arrays, the rules' first)."""
    if policy not in MERGES:
        raise ValueError(f"merge policy {policy!r}: one of {', '.join(MERGES)}")
    rules_claims = list((rules_wire or {}).get("claims", []))
    model_claims = list((model_wire or {}).get("claims", []))
    if policy == "rules":
        return {"claims": rules_claims[:limit]}
    if policy == "model":
        return {"claims": model_claims[:limit]}
    out = rules_claims[:limit]
    said = [says(wire.unpack_claim(c)) for c in out]
    rule_events = {q["event"] for c in out for q in wire.unpack_claim(c)["quotes"]}
    for claim in model_claims:
        if len(out) >= limit:
            break
        record = wire.unpack_claim(claim)
        this = says(record)
        if any(same_fact(this, s) for s in said):
            continue
        if policy == "fill" and {q["event"] for q in record["quotes"]} & rule_events:
            continue
        out.append(claim)
        said.append(this)
    return {"claims": out}


def claim_limit(schema: dict[str, Any]) -> int:
    return int(schema["properties"]["claims"].get("maxItems", 0))


def rules_wire(inputs: dict[str, Any], schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """The rules' verified wire extract answer to `inputs` (`schema`: the request's extract
    schema, built when not given)."""
    return _rules_decoded("extract", inputs, schema).wire


def _rules_decoded(task: str, inputs: dict[str, Any], schema: dict[str, Any] | None = None
                   ) -> codec.CodecResult:
    """The rules' answer to a `task` request through the codec (`schema`: the request's, built
    when not given)."""
    return codec.decode(task, inputs, answer_text(task, ANSWERS[task](inputs)),
                        finish_reason="stop", schema=schema)


def with_rules(result: codec.CodecResult, inputs: dict[str, Any],
               policy: str = "union") -> codec.CodecResult:
    """The model's extract `result` (gated where the worker gates) with the rules' claims merged
    in by `policy`, decoded by the codec: the same result otherwise (attempts, turns, gate), a
    diagnostic saying how many claims each side gave. `policy` "none" returns `result`."""
    if policy == "none":
        return result
    if policy not in POLICIES:
        raise ValueError(f"with_rules {policy!r}: one of {', '.join(POLICIES)}")
    schema = build_schema("extract", inputs)
    limit = claim_limit(schema)
    rules = rules_wire(inputs, schema)
    merged = merge_extract(rules, result.wire, policy, limit)
    decoded = codec.decode("extract", inputs, wire.dump_answer("extract", merged),
                           finish_reason="stop", schema=schema)
    n_rules = min(len(rules.get("claims", [])), limit)
    note = (f"with rules ({policy}): {n_rules} rules claim(s), "
            f"{len(merged['claims']) - n_rules} of the model's {len(result.wire.get('claims', []))}"
            " added")
    return replace(result, output=decoded.output, wire=decoded.wire,
                   diagnostics=[*result.diagnostics, *decoded.diagnostics, note])


def falls_back(inputs: dict[str, Any], model_output: dict[str, Any] | None) -> bool:
    """The reflection fallback's condition: the model's reflect answer (canonical output; None
    when it failed, which the worker raises and never falls back from) abstains, and the rules
    answer from an evidence item holding every content word of the question beyond its
    subject's phrase (`rules.reflect_choice`); where that phrase names a relation ("Daniel (the
    user's friend)"), the item names it too (the rules match the name alone, and another
    Daniel's memory does not answer)."""
    if model_output is None or not model_output.get("insufficient_evidence", False):
        return False
    chosen, q_words, held, found = reflect_choice(inputs)
    if chosen is None or not q_words or held != q_words:
        return False
    return found is None or found[0] == found[1] or found[0] == "the user" \
        or found[1].lower() in chosen["text"].lower()


def reflect_fallback(result: codec.CodecResult, inputs: dict[str, Any],
                     policy: str = "fallback") -> codec.CodecResult:
    """The model's reflect `result`, or, where `falls_back`, the rules' answer decoded by the
    codec (the same result otherwise: attempts, a diagnostic saying so). `policy` "none"
    returns `result`."""
    if policy == "none":
        return result
    if policy not in REFLECT_POLICIES:
        raise ValueError(f"reflect_rules {policy!r}: one of {', '.join(REFLECT_POLICIES)}")
    if not falls_back(inputs, result.output):
        return result
    decoded = _rules_decoded("reflect", inputs)
    return replace(result, output=decoded.output, wire=decoded.wire,
                   diagnostics=[*result.diagnostics, *decoded.diagnostics,
                                "reflect rules (fallback): the model abstained; the rules' answer "
                                f"cites {', '.join(decoded.output.get('citations', []))}"])


def rules_result(task: str, inputs: dict[str, Any]) -> codec.CodecResult:
    """The rules' answer to a `task` request, decoded by the codec as any answer (one attempt; a
    diagnostic saying whose answer it is)."""
    decoded = _rules_decoded(task, inputs)
    return replace(decoded, diagnostics=[*decoded.diagnostics, f"{task} by the rules"])
