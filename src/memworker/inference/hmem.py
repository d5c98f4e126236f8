"""The store-facing worker: hmem-shaped candidates from extract / consolidate / reflect.

`MemWorkerBackend` wraps any backend (llama.cpp, Ollama, OpenAI-compatible) and the codec, so
the store gets verified candidates or a `CodecError`, never a silently empty list:

    >>> from memworker.inference.hmem import MemWorkerBackend     # doctest: +SKIP
    >>> worker = MemWorkerBackend.from_gguf()                     # embedded base GGUF
    >>> worker.extract([{"role": "user", "content": "I moved to Lisbon last month."}],
    ...                existing=[], observed_at="2025-10-08T09:12:00+02:00")

Candidate fields (a plain dict per candidate):

| field | extract | consolidate |
|---|---|---|
| text | the claim's statement | the observation's statement |
| category | semantic / episodic / procedural (below) | semantic |
| importance | 1-10 (below) | 6 + 1 per support beyond two, at most 9 |
| event_date, date_precision | from memworker.temporal (None when undated) | None |
| entities | [{"name", "type"}] of the subject | [] |
| links | [{"relation": "supersedes", "id"}] | [{"relation": "supported_by", "id"}] |
| supersedes | existing fact ids this claim replaces | [] |
| source_ids | ids of the cited messages (their "id", else their index) | supporting fact ids |
| kind, predicate, value, quotes, confidence, is_correction, time_expression | as decoded | – |

Category: kind "event" or "plan" -> episodic; a predicate naming a procedure (how_to, steps,
procedure, workaround, command, routine, setting, config, workflow) -> procedural; else semantic.
Importance: by kind (relationship 7, retraction 7, preference 6, fact 6, plan 6, event 5,
belief 4), +1 for a correction, +1 for high and -1 for low confidence, clamped to 1-10.

With `claim_gate` (`memworker.inference.gate.ClaimGate` or its spec, e.g.
`MemWorkerBackend.from_gguf(path, extract_form="turns",
claim_gate="first(predicate)+first(value)>=-0.249")`), `extract` keeps only the claims the model
scores at or above the gate's threshold from its own token log-probabilities; the constructors
ask their backend for them, and a backend that returns none raises `GateError` (a
`BackendError`). The threshold is the model's own (its release receipt). With `propose=True`
as well (the turns forms only), every turn answers at least one claim and the gate alone decides
which are kept (`codec.run_turns(propose=True)`); `from_release` applies it when the receipt's
`worker` says so. `worker_config(extract_form, claim_gate, propose)` is the one check of such a
configuration (`WorkerError`, an `InputError`, when it cannot run) and its normal form, the
release receipt's `worker`: the constructor and the export (`export/run.py`) both use it.

`reflect` returns {"text", "citations", "insufficient_evidence", "source_ids"}. The full codec
result of the last call (diagnostics, raw outputs, attempts) is `worker.last`.

`MemWorkerBackend(RulesBackend())` gives the deterministic rules baseline
(`memworker.inference.rules`) behind the same interface: a backend with a `bind(task, inputs)`
method is bound to each request before the codec runs it (the rules read the structured inputs,
not the rendered prompt); everything else (codec, retry, candidate mapping) is the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from memworker import registry, temporal
from memworker.inference import codec, hybrid
from memworker.inference.backends import LlamaCppBackend, OllamaBackend, OpenAICompatBackend
from memworker.inference.gate import ClaimGate, needs_logprobs
from memworker.inference.schema import InputError
from memworker.inference.turn_gate import TurnGateError, asks, check_threshold
from memworker.prompts import EVENT_STAMPS
from memworker.turns import FORMS, HISTORIES, TURN_FORMS, TURN_QUOTES
from memworker.wire import LAYOUTS

ROLES = ("user", "assistant", "tool")
_KIND_IMPORTANCE = {"relationship": 7, "retraction": 7, "preference": 6, "fact": 6, "plan": 6,
                    "event": 5, "belief": 4}
_PROCEDURAL = ("how_to", "steps", "procedure", "workaround", "command", "routine", "setting",
               "config", "workflow")


class WorkerError(InputError):
    """A worker configuration (extraction form, claim gate, proposing) that cannot run."""


def worker_config(extract_form: str = "window", claim_gate: str | None = None,
                  propose: bool = False, turn_history: str = "answers",
                  event_stamps: str = "full", turn_quotes: str = "upto",
                  claim_layout: str = "v3", with_rules: str = "none",
                  reflect_rules: str = "none", consolidate_rules: str = "none",
                  turn_gate: float | None = None, turn_gate_tail: str = "read"
                  ) -> dict[str, Any]:
    """The worker's configuration checked and in its normal form, as a release's `worker` record
    keeps it (the export writes it, `from_release` runs it, `MemWorkerBackend` checks it):
    WorkerError when invalid. `propose` (every turn answers a claim for the gate to keep or drop)
    needs a turns form and a claim gate, and is recorded only when set (a record without it: not
    proposing). `turn_history` "none" (turns forms: the window read once, `memworker.turns`
    "Read once") likewise, recorded only when set; and `event_stamps` "minute" (extract prompts
    write the events' timestamps to the minute, `memworker.prompts.restamp`) and `turn_quotes`
    "own" (turns forms: each turn's claims quote its own event only, `codec.run_turns(own_quotes=
    True)`) likewise, and `claim_layout` "v6" (turns forms: claims written without quotes, the
    codec quoting the turn's sentence, `codec.run_turns(layout="v6")`), and `with_rules` "union"
    (the rules' extract claims kept beside the model's, `memworker.inference.hybrid`), and
    `reflect_rules` "fallback" (a reflection the model abstains from answered by the rules where
    they answer from a memory holding every content word of the question,
    `hybrid.reflect_fallback`), and `consolidate_rules` "rules" (consolidation requests answered
    by the rules, the model not called, `hybrid.rules_result`), and `turn_gate` T (the turns
    form: a turn whose event the turn gate gives P(fact) below T is not asked,
    `memworker.inference.turn_gate`), and with it `turn_gate_tail` "drop" (the prompts end at the
    last asked turn's event: the unasked events after it are not read, `codec.run_turns(tail=)`)
    or "omit" (that, and the unasked turns before it left out of the conversation), recorded
    only when set."""
    if extract_form not in FORMS:
        raise WorkerError(f"extract form {extract_form!r}: one of {', '.join(FORMS)}")
    if claim_gate is not None:
        if extract_form == "walk":
            raise WorkerError("a claim gate reads extract answers of the window, turns and "
                              "sentences forms only")
        try:
            claim_gate = ClaimGate.parse(claim_gate).spec
        except ValueError as exc:
            raise WorkerError(f"claim gate: {exc}") from None
    if propose and (extract_form not in TURN_FORMS or claim_gate is None):
        raise WorkerError("propose needs extract form " + " or ".join(TURN_FORMS) + " and a "
                          "claim gate (every turn writes a claim for the gate to keep or drop)")
    if turn_history not in HISTORIES:
        raise WorkerError(f"turn history {turn_history!r}: one of {', '.join(HISTORIES)}")
    if turn_history != "answers" and extract_form not in TURN_FORMS:
        raise WorkerError("turn history " + repr(turn_history) + " needs extract form "
                          + " or ".join(TURN_FORMS))
    if turn_quotes not in TURN_QUOTES:
        raise WorkerError(f"turn quotes {turn_quotes!r}: one of {', '.join(TURN_QUOTES)}")
    if turn_quotes != "upto" and extract_form not in TURN_FORMS:
        raise WorkerError("turn quotes " + repr(turn_quotes) + " needs extract form "
                          + " or ".join(TURN_FORMS))
    if event_stamps not in EVENT_STAMPS:
        raise WorkerError(f"event stamps {event_stamps!r}: one of {', '.join(EVENT_STAMPS)}")
    if claim_layout not in LAYOUTS:
        raise WorkerError(f"claim layout {claim_layout!r}: one of {', '.join(LAYOUTS)}")
    if claim_layout != "v3" and extract_form not in TURN_FORMS:
        raise WorkerError("claim layout " + repr(claim_layout) + " needs extract form "
                          + " or ".join(TURN_FORMS))
    if with_rules not in hybrid.POLICIES:
        raise WorkerError(f"with rules {with_rules!r}: one of {', '.join(hybrid.POLICIES)}")
    if with_rules != "none" and extract_form == "walk":
        raise WorkerError("with rules merges extract answers of the window, turns and sentences "
                          "forms only")
    if reflect_rules not in hybrid.REFLECT_POLICIES:
        raise WorkerError(f"reflect rules {reflect_rules!r}: one of "
                          f"{', '.join(hybrid.REFLECT_POLICIES)}")
    if consolidate_rules not in hybrid.CONSOLIDATE_POLICIES:
        raise WorkerError(f"consolidate rules {consolidate_rules!r}: one of "
                          f"{', '.join(hybrid.CONSOLIDATE_POLICIES)}")
    if turn_gate is not None:
        try:
            turn_gate = check_threshold(turn_gate)
        except TurnGateError as exc:
            raise WorkerError(str(exc)) from None
        if extract_form != "turns":
            raise WorkerError("a turn gate needs extract form turns (it decides which events "
                              "are asked)")
    if turn_gate_tail not in codec.TAILS:
        raise WorkerError(f"turn gate tail {turn_gate_tail!r}: one of {', '.join(codec.TAILS)}")
    if turn_gate_tail != "read" and turn_gate is None:
        raise WorkerError("turn gate tail " + repr(turn_gate_tail) + " needs a turn gate (it "
                          "drops the unasked events after the last asked turn)")
    return {"extract_form": extract_form, "claim_gate": claim_gate,
            **({"propose": True} if propose else {}),
            **({"turn_history": turn_history} if turn_history != "answers" else {}),
            **({"event_stamps": event_stamps} if event_stamps != "full" else {}),
            **({"turn_quotes": turn_quotes} if turn_quotes != "upto" else {}),
            **({"claim_layout": claim_layout} if claim_layout != "v3" else {}),
            **({"with_rules": with_rules} if with_rules != "none" else {}),
            **({"reflect_rules": reflect_rules} if reflect_rules != "none" else {}),
            **({"consolidate_rules": consolidate_rules} if consolidate_rules != "none" else {}),
            **({"turn_gate": turn_gate} if turn_gate is not None else {}),
            **({"turn_gate_tail": turn_gate_tail} if turn_gate_tail != "read" else {})}


def record_config(worker: Mapping[str, Any]) -> dict[str, Any]:
    """`worker_config` of a release's `worker` record, a field it leaves out at its default
    (`propose` only when it is true): what a record in its normal form equals."""
    return worker_config(worker.get("extract_form", "window"), worker.get("claim_gate"),
                         worker.get("propose") is True, worker.get("turn_history", "answers"),
                         worker.get("event_stamps", "full"), worker.get("turn_quotes", "upto"),
                         worker.get("claim_layout", "v3"), worker.get("with_rules", "none"),
                         worker.get("reflect_rules", "none"),
                         worker.get("consolidate_rules", "none"), worker.get("turn_gate"),
                         worker.get("turn_gate_tail", "read"))


def worker_flags(worker: Mapping[str, Any], arm: str | None = None) -> list[str]:
    """The command-line flags that run a release's `worker` record (checked by `worker_config`):
    export/run.py's (`arm` None) or, for the model arm `arm`, eval/run.py's and eval/live.py's
    (`--claim-gate ARM=…`, `--propose ARM`, `--with-rules ARM`). scripts/release.sh builds the
    same from its variables."""
    w = record_config(worker)
    flags = ["--extract-form", w["extract_form"]]
    if w["claim_gate"]:
        flags += ["--claim-gate", w["claim_gate"] if arm is None else f"{arm}={w['claim_gate']}"]
    if w.get("propose"):
        flags += ["--propose"] if arm is None else ["--propose", arm]
    for key in ("turn_history", "event_stamps", "turn_quotes", "claim_layout"):
        if key in w:
            flags += ["--" + key.replace("_", "-"), w[key]]
    for key in hybrid.SETTINGS:   # one policy each: the flag names the arm, as --propose
        if key in w:
            flag = "--" + key.replace("_", "-")
            flags += [flag] if arm is None else [flag, arm]
    if "turn_gate" in w:
        flags += ["--turn-gate", f"{w['turn_gate']:g}" if arm is None
                  else f"{arm}={w['turn_gate']:g}"]
    if "turn_gate_tail" in w:
        flags += ["--turn-gate-tail", w["turn_gate_tail"]]
    return flags


def _timestamp(value: str | datetime, what: str) -> str:
    """`value` checked by the one timestamp validator (`temporal.parse_timestamp`) and written
    in the input contracts' form."""
    try:
        stamp = temporal.parse_timestamp(value, what)
    except (ValueError, TypeError) as exc:
        raise InputError(str(exc)) from None
    return stamp.isoformat(timespec="seconds")


def category(claim: Mapping[str, Any]) -> str:
    if claim["kind"] in ("event", "plan"):
        return "episodic"
    if any(word in claim["predicate"] for word in _PROCEDURAL):
        return "procedural"
    return "semantic"


def importance(claim: Mapping[str, Any]) -> int:
    score = _KIND_IMPORTANCE[claim["kind"]]
    score += 1 if claim["is_correction"] else 0
    score += 1 if claim["confidence"] >= 0.9 else (-1 if claim["confidence"] <= 0.35 else 0)
    return max(1, min(10, score))


class MemWorkerBackend:
    """hmem's memory worker on top of one generation backend."""

    def __init__(self, backend: Any, *, temperature: float = 0.0, seed: int = 0,
                 use_grammar: bool = True, budget_tokens: int | None = -1,
                 max_tokens: int | None = None, extract_form: str = "window",
                 claim_gate: ClaimGate | str | None = None, propose: bool = False,
                 turn_history: str = "answers", event_stamps: str = "full",
                 turn_quotes: str = "upto", claim_layout: str = "v3",
                 with_rules: str = "none", reflect_rules: str = "none",
                 consolidate_rules: str = "none", turn_gate: float | None = None,
                 turn_gate_tail: str = "read"):
        worker_config(extract_form, claim_gate.spec if isinstance(claim_gate, ClaimGate)
                      else claim_gate, propose, turn_history, event_stamps, turn_quotes,
                      claim_layout, with_rules, reflect_rules, consolidate_rules, turn_gate,
                      turn_gate_tail)
        self.backend = backend
        #: the claim confidence gate (`memworker.inference.gate`; a `ClaimGate` or its spec,
        #: e.g. "first(predicate)+first(value)>=-0.249"): extract claims the model scores below
        #: its threshold are dropped; the backend must return token log-probabilities
        self.claim_gate = ClaimGate.parse(claim_gate) if isinstance(claim_gate, str) \
            else claim_gate
        #: the extraction form (memworker.turns.FORMS) of a student trained in it; in the
        #: turns form `max_tokens` caps each turn
        self.extract_form = extract_form
        #: turns forms: every turn answers at least one claim, for the claim gate to keep or drop
        #: (`codec.run_turns(propose=True)`)
        self.propose = propose
        #: turns forms: "none", each turn's prompt the window and its own question alone
        #: (`memworker.turns` "Read once"); "answers", every earlier turn and answer too
        self.turn_history = turn_history
        #: how extract prompts write the events' timestamps (`memworker.prompts.EVENT_STAMPS`)
        self.event_stamps = event_stamps
        #: turns forms: "own", each turn's claims quote its own event only; "upto", it and the
        #: events before it
        self.turn_quotes = turn_quotes
        #: turns forms: "v6", claims written without quotes, the codec quoting the turn's
        #: sentence (`memworker.wire.V6_FIELDS`); "v3", as the wire was
        self.claim_layout = claim_layout
        #: "union": the rules' extract claims kept beside the model's (after its gate;
        #: `memworker.inference.hybrid`); "none", the model's alone
        self.with_rules = with_rules
        #: "fallback": a reflection the model abstains from is answered by the rules where they
        #: answer from a memory holding every content word of the question
        #: (`hybrid.reflect_fallback`); "none", the model's alone
        self.reflect_rules = reflect_rules
        #: "rules": consolidation requests answered by the rules, the model not called
        #: (`hybrid.rules_result`); "none", the model's
        self.consolidate_rules = consolidate_rules
        #: the turns form: a turn whose event the turn gate gives P(fact) below this is not
        #: asked (`memworker.inference.turn_gate`, `codec.run_turns(ask=)`); None: every turn
        self.turn_gate = turn_gate
        #: with a turn gate: "drop", the prompts end at the last asked turn's event (the unasked
        #: events after it are not read, `codec.run_turns(tail=)`); "read", the whole window
        self.turn_gate_tail = turn_gate_tail
        self.temperature, self.seed = temperature, seed
        self.use_grammar, self.budget_tokens = use_grammar, budget_tokens
        self.max_tokens = max_tokens  # None: derived from each request's schema
        self.last: codec.CodecResult | None = None

    # --- constructors ---------------------------------------------------------------------------
    # a worker gated by a log-probability score asks its backend for the answer tokens'
    # log-probabilities (the verifier's gate reads none)
    @classmethod
    def from_gguf(cls, path: str | Path | None = None, *, n_ctx: int = 4096,
                  n_threads: int | None = None, kv_cache: str = "prefix",
                  **kwargs: Any) -> MemWorkerBackend:
        gguf = Path(path) if path is not None else registry.embedded_gguf_path()
        logprobs = needs_logprobs(kwargs.get("claim_gate"))
        return cls(LlamaCppBackend(gguf, n_ctx=n_ctx, n_threads=n_threads, kv_cache=kv_cache,
                                   record_logprobs=logprobs), **kwargs)

    @classmethod
    def from_release(cls, folder: str | Path = "release", **kwargs: Any) -> MemWorkerBackend:
        """The student of a release folder (`export/run.py`) as its receipt says to run it: its
        GGUF through llama.cpp, in the extraction form and with the claim gate of the receipt's
        `worker` (a receipt without one: the window form, no gate, no proposing). Keyword
        arguments go to `from_gguf`; an explicit `extract_form`, `claim_gate` or `propose` among
        them is an error."""
        folder = Path(folder)
        path = folder / "release-receipt.json"
        try:
            receipt = json.loads(path.read_text("utf-8"))
            gguf = folder / receipt["student"]["gguf"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{path}: not a release receipt with a student ({exc})") from None
        clash = sorted({"extract_form", "claim_gate", "propose", "turn_history",
                        "event_stamps", "turn_quotes", "claim_layout", "with_rules",
                        "reflect_rules", "consolidate_rules", "turn_gate", "turn_gate_tail"}
                       & set(kwargs))
        if clash:
            raise InputError(f"from_release takes {', '.join(clash)} from the receipt's worker")
        worker = receipt.get("worker") or {}
        return cls.from_gguf(gguf, extract_form=worker.get("extract_form", "window"),
                             claim_gate=worker.get("claim_gate"),
                             propose=bool(worker.get("propose", False)),
                             turn_history=worker.get("turn_history", "answers"),
                             event_stamps=worker.get("event_stamps", "full"),
                             turn_quotes=worker.get("turn_quotes", "upto"),
                             claim_layout=worker.get("claim_layout", "v3"),
                             with_rules=worker.get("with_rules", "none"),
                             reflect_rules=worker.get("reflect_rules", "none"),
                             consolidate_rules=worker.get("consolidate_rules", "none"),
                             turn_gate=worker.get("turn_gate"),
                             turn_gate_tail=worker.get("turn_gate_tail", "read"), **kwargs)

    @classmethod
    def from_ollama(cls, model: str, *, host: str | None = None, **kwargs: Any) -> MemWorkerBackend:
        return cls(OllamaBackend(model, host=host,
                                 logprobs=needs_logprobs(kwargs.get("claim_gate"))), **kwargs)

    @classmethod
    def from_openai(cls, base_url: str, *, model: str = "mem-worker",
                    **kwargs: Any) -> MemWorkerBackend:
        return cls(OpenAICompatBackend(base_url, model=model,
                                       logprobs=needs_logprobs(kwargs.get("claim_gate"))), **kwargs)

    def _run(self, task: str, inputs: dict[str, Any]) -> codec.CodecResult:
        self.last = None
        # a backend that reads the structured request (the rules baseline,
        # memworker.inference.rules.RulesBackend) is bound to it first, as the evaluator does
        backend = self.backend.bind(task, inputs) if hasattr(self.backend, "bind") \
            else self.backend
        if task == "consolidate" and self.consolidate_rules == "rules":
            result = hybrid.rules_result(task, inputs)
        elif task == "extract" and self.extract_form != "window":
            result = codec.run_extract(backend, inputs, self.extract_form,
                                       temperature=self.temperature, seed=self.seed,
                                       use_grammar=self.use_grammar, max_tokens=self.max_tokens,
                                       **({"propose": True} if self.propose else {}),
                                       **({"history": self.turn_history}
                                          if self.turn_history != "answers" else {}),
                                       stamps=self.event_stamps,
                                       **({"own_quotes": True}
                                          if self.turn_quotes == "own" else {}),
                                       **({"layout": self.claim_layout}
                                          if self.claim_layout != "v3" else {}),
                                       **({"ask": asks(inputs, self.turn_gate)}
                                          if self.turn_gate is not None else {}),
                                       **({"tail": self.turn_gate_tail}
                                          if self.turn_gate_tail != "read" else {}))
        else:
            result = codec.run(backend, task, inputs, temperature=self.temperature,
                               seed=self.seed, use_grammar=self.use_grammar,
                               budget_tokens=self.budget_tokens, max_tokens=self.max_tokens,
                               stamps=self.event_stamps)
        if task == "extract" and self.claim_gate is not None:
            result = self.claim_gate.apply(result, inputs, self.extract_form)
        if task == "extract" and self.with_rules != "none":
            result = hybrid.with_rules(result, inputs, self.with_rules)
        if task == "reflect" and self.reflect_rules != "none":
            result = hybrid.reflect_fallback(result, inputs, self.reflect_rules)
        self.last = result
        return result

    # --- extract --------------------------------------------------------------------------------
    def episode(self, messages: Iterable[Mapping[str, Any]], existing: Iterable[Mapping[str, Any]]
                = (), observed_at: str | datetime | None = None,
                episode_id: str = "hmem", predicates: Iterable[str] | None = None
                ) -> tuple[dict[str, Any], dict[int, Any]]:
        """(episode input, {event index: source id}) for hmem messages and existing facts.

        A message: {"role": user|assistant|tool, "content" (or "text"), optional "timestamp",
        "trusted" (default: role != tool), "id"}; "system" messages are skipped. An existing fact:
        {"id", "text" (or "statement"), optional "valid_from", optional "predicate" (joins the
        default predicate vocabulary)}. `predicates`: the store's own vocabulary, which replaces
        the default (`memworker.ontology.vocabulary`)."""
        default_ts = _timestamp(observed_at, "observed_at") if observed_at is not None else None
        events, sources = [], {}
        for n, msg in enumerate(messages):
            role = msg.get("role")
            if role == "system":
                continue
            if role not in ROLES:
                raise InputError(f"message {n}: role must be one of {', '.join(ROLES)} "
                                 f"(or system, skipped), got {role!r}")
            text = msg.get("content", msg.get("text"))
            if not isinstance(text, str):
                raise InputError(f"message {n}: needs a text 'content'")
            stamp = msg.get("timestamp")
            if stamp is None and default_ts is None:
                raise InputError(f"message {n} has no timestamp and no observed_at was given")
            index = len(events)
            events.append({"index": index, "role": role,
                           "timestamp": _timestamp(stamp, f"message {n} timestamp")
                           if stamp is not None else default_ts,
                           "text": text, "trusted": bool(msg.get("trusted", role != "tool"))})
            sources[index] = msg.get("id", n)
        facts = []
        for n, fact in enumerate(existing):
            statement = fact.get("statement", fact.get("text"))
            if "id" not in fact or not isinstance(statement, str):
                raise InputError(f"existing fact {n}: needs 'id' and 'text'")
            facts.append({"id": fact["id"], "statement": statement,
                          "valid_from": fact.get("valid_from")})
            if fact.get("predicate") is not None:
                facts[-1]["predicate"] = fact["predicate"]
        inputs = {"episode_id": episode_id, "events": events, "existing_facts": facts}
        if predicates is not None:
            inputs["predicates"] = list(predicates)
        return inputs, sources

    def extract(self, messages: Iterable[Mapping[str, Any]],
                existing: Iterable[Mapping[str, Any]] = (),
                observed_at: str | datetime | None = None,
                predicates: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Candidate facts from a window of conversation messages (at most 40); `predicates`:
        the store's predicate vocabulary (default: the corpus ontology plus the existing facts'
        predicates)."""
        inputs, sources = self.episode(messages, existing, observed_at, predicates=predicates)
        result = self._run("extract", inputs)
        return [self.claim_candidate(c, sources) for c in result.output["claims"]]

    @staticmethod
    def claim_candidate(claim: Mapping[str, Any], sources: Mapping[int, Any]) -> dict[str, Any]:
        return {
            "text": claim["statement"],
            "category": category(claim),
            "importance": importance(claim),
            "event_date": claim["date"],
            "date_precision": claim["date_precision"],
            "entities": [dict(claim["subject"])],
            "links": [{"relation": "supersedes", "id": fid} for fid in claim["supersedes"]],
            "supersedes": list(claim["supersedes"]),
            "source_ids": list(dict.fromkeys(sources[i] for i in claim["source_indices"])),
            "kind": claim["kind"],
            "predicate": claim["predicate"],
            "value": claim["value"],
            "quotes": list(claim["quotes"]),
            "confidence": claim["confidence"],
            "is_correction": claim["is_correction"],
            "time_expression": claim["time_expression"],
        }

    # --- consolidate ----------------------------------------------------------------------------
    def consolidate(self, facts: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Observations (each supported by two or more of the given facts) as candidates."""
        items = []
        for n, fact in enumerate(facts):
            statement = fact.get("statement", fact.get("text"))
            if "id" not in fact or not isinstance(statement, str):
                raise InputError(f"fact {n}: needs 'id' and 'text'")
            items.append({"id": fact["id"], "statement": statement})
        result = self._run("consolidate", {"facts": items})
        return [{
            "text": obs["statement"],
            "category": "semantic",
            "importance": min(9, 6 + len(obs["supports"]) - 2),
            "event_date": None,
            "date_precision": None,
            "entities": [],
            "links": [{"relation": "supported_by", "id": fid} for fid in obs["supports"]],
            "supersedes": [],
            "source_ids": list(obs["supports"]),
        } for obs in result.output["observations"]]

    # --- reflect --------------------------------------------------------------------------------
    def reflect(self, question: str, evidence: Iterable[Mapping[str, Any]],
                asked_at: str | datetime | None = None) -> dict[str, Any]:
        """An answer citing evidence ids, or insufficient_evidence with no citations.
        Evidence: {"id", "text", "timestamp"}; asked_at defaults to now (UTC)."""
        stamp = _timestamp(asked_at if asked_at is not None
                           else datetime.now().astimezone(), "asked_at")
        items = []
        for n, item in enumerate(evidence):
            if not all(k in item for k in ("id", "text", "timestamp")):
                raise InputError(f"evidence {n}: needs 'id', 'text' and 'timestamp'")
            items.append({"id": item["id"], "text": item["text"],
                          "timestamp": _timestamp(item["timestamp"], f"evidence {n} timestamp")})
        result = self._run("reflect", {"question": question, "asked_at": stamp,
                                       "evidence": items})
        out = result.output
        return {"text": out["answer"], "citations": list(out["citations"]),
                "insufficient_evidence": out["insufficient_evidence"],
                "source_ids": list(out["citations"])}
