"""Run arms over the same rows through the same codec; one `samples.jsonl` line per row and arm.

Every arm runs each row through `memworker.inference.codec` (`prepare` + `run_request`: the same
rendered prompt, dynamic schema, grammar, max tokens and one retry) with temperature 0 and one
seed. The file is appended a line at a time, so an interrupted run resumes where it stopped:
rows already in `samples.jsonl` for an arm are skipped.

Arm specs (`--arm NAME=SPEC`): `NAME=path/to/model.gguf` (llama.cpp in process),
`NAME=ollama:MODEL` (an Ollama server), `NAME=http://host:port/v1` (an OpenAI-compatible
server), or `rules` / `NAME=rules` (the deterministic baseline, `memworker.inference.rules`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from memworker import turns as tforms

# the evaluation sets and the samples file live below the stages (the worker benchmark and the
# export read them too); their names stay importable from here
from memworker.corpus.sets import DEFAULT_NATURAL, HAND_WRITTEN, SETS, load_eval_rows  # noqa: F401
from memworker.eval.grade import grade
from memworker.hashing import canonical_json, sha256_bytes
from memworker.inference import backends, codec, hybrid
from memworker.inference import turn_gate as tgate
from memworker.inference.backends import BackendError
from memworker.inference.gate import ClaimGate, needs_logprobs
from memworker.inference.rules import RulesBackend
from memworker.prompts import EVENT_STAMPS, to_chatml
from memworker.samples import SAMPLES, EvalError, read_samples, repair_samples  # noqa: F401
from memworker.wire import LAYOUTS

MAX_BACKEND_FAILURES = 3


class ConfigMismatch(EvalError):
    """An output folder holds samples this invocation must not join: `what` says why (a sentence
    on its own), `advice` what the user can do; the message is both."""

    def __init__(self, what: str, advice: str) -> None:
        super().__init__(f"{what}: {advice}")
        self.what, self.advice = what, advice


@dataclass(frozen=True)
class Arm:
    name: str
    kind: str    # "gguf" | "ollama" | "openai" | "rules"
    target: str  # path, model name, URL, or "" for rules
    #: the model's claim confidence gate (`ClaimGate.spec`; `memworker.inference.gate`): its
    #: extract claims scoring below it are dropped. A threshold is one model's own, so it
    #: belongs to the arm, not to the sampler every arm shares; the rules arm has none.
    claim_gate: str | None = None
    #: turns forms: every turn answers at least one claim, for the arm's claim gate to keep or
    #: drop (`codec.run_turns(propose=True)`). A decoding policy that pairs with the model's own
    #: gate, so it belongs to the arm too: an ungated arm (the base beside a proposing student)
    #: answers as it would, and the rules arm never proposes.
    propose: bool = False
    #: the hybrid worker (`memworker.inference.hybrid`): the rules' extract claims kept beside
    #: the arm's (after its claim gate); a worker policy, so it belongs to the arm
    with_rules: bool = False
    #: the worker's reflection fallback (`memworker.inference.hybrid.reflect_fallback`): where
    #: the arm abstains and the rules answer from a memory holding every content word of the
    #: question, the rules' answer; a worker policy, so it belongs to the arm
    reflect_rules: bool = False
    #: the worker's consolidation by the rules (`memworker.inference.hybrid.rules_result`): the
    #: arm's consolidation requests answered by the rules, the model not called
    consolidate_rules: bool = False
    #: the turns form: a turn whose event the turn gate (`memworker.inference.turn_gate`) gives
    #: P(fact) below this is not asked (`codec.run_turns(ask=)`); a worker policy, so it belongs
    #: to the arm; None: every turn
    turn_gate: float | None = None

    @property
    def spec(self) -> str:
        return {"gguf": self.target, "ollama": f"ollama:{self.target}",
                "openai": self.target, "rules": "rules"}[self.kind]


def parse_arm(text: str) -> Arm:
    """`rules`, `NAME=rules`, `NAME=ollama:MODEL`, `NAME=http(s)://…`, `NAME=path.gguf`."""
    if text == "rules":
        return Arm("rules", "rules", "")
    name, sep, spec = text.partition("=")
    if not sep or not name or not spec:
        raise EvalError(f"--arm {text!r}: expected NAME=SPEC (SPEC: a .gguf path, ollama:MODEL, "
                        "http://host:port/v1 or rules), or just `rules`")
    if not all(ch.isalnum() or ch in "-_." for ch in name):
        raise EvalError(f"--arm {text!r}: the name may use letters, digits, '-', '_' and '.'")
    if spec == "rules":
        return Arm(name, "rules", "")
    if spec.startswith("ollama:"):
        return Arm(name, "ollama", spec[len("ollama:"):])
    if spec.startswith(("http://", "https://")):
        return Arm(name, "openai", spec)
    if spec.endswith(".gguf"):
        return Arm(name, "gguf", spec)
    raise EvalError(f"--arm {text!r}: {spec!r} is not a .gguf path, ollama:MODEL, an http(s) URL "
                    "or rules")


@dataclass(frozen=True)
class Sampler:
    temperature: float = 0.0
    seed: int = 0
    n_ctx: int = 4096
    threads: int | None = None
    grammar: bool = True
    retries: int = 1
    #: per-attempt cap on the codec's max_tokens (memworker.inference.schema.max_tokens_for the
    #: request's schema); None = the codec's value. The same cap applies to every arm.
    max_tokens_cap: int | None = None
    #: the form model arms extract in (`memworker.turns.FORMS`: "window", one call; "turns", one
    #: short answer per event with user words, the cap per turn; "walk", one answer walking those
    #: events); the rules arm answers in the window form always
    extract_form: str = "window"
    #: which events a turn's quotes may cite in the turns form: "upto" (its own and the earlier
    #: ones) or "own" (its own only: `codec.run_turns(own_quotes=True)`)
    turn_quotes: str = "upto"
    #: what a turn's prompt holds before its question in the turns forms: "answers" (every
    #: earlier turn and answer) or "none" (the window read once: `codec.run_turns(history=)`)
    turn_history: str = "answers"
    #: how extract prompts write the events' timestamps (`memworker.prompts.EVENT_STAMPS`:
    #: "full" as the event has it, or "minute"), every form, every model arm
    event_stamps: str = "full"
    #: how a model arm writes an extract claim in the turns forms (`memworker.wire.LAYOUTS`:
    #: "v3", or "v6", no quotes, the codec quoting the turn's sentence: `codec.run_turns(layout=)`)
    claim_layout: str = "v3"
    #: what the prompts of an arm with a turn gate show after its last asked turn's event
    #: (`codec.TAILS`: "read", the whole window; "drop", nothing: `codec.run_turns(tail=)`)
    turn_gate_tail: str = "read"


#: sampler fields added after samples were first recorded: a record omits them at these defaults,
#: so an evaluation folder or a stored live result made before them has the same sampler
LATER_DEFAULTS: dict[str, Any] = {"extract_form": "window", "turn_quotes": "upto",
                                  "turn_history": "answers", "event_stamps": "full",
                                  "claim_layout": "v3", "turn_gate_tail": "read"}


def sampler_doc(sampler: Sampler) -> dict[str, Any]:
    """The sampler as a folder's config.json and a live result's identity record it."""
    doc = asdict(sampler)
    for key, default in LATER_DEFAULTS.items():
        if doc.get(key) == default:
            doc.pop(key)
    return doc


def _per_arm(arms: list[Arm], specs: list[str] | None, flag: str, parse: Callable[[str], Any],
             rules_refusal: str, what: str) -> dict[str, Any]:
    """{arm name: value} from the values of a per-arm option `flag`: `ARM=VALUE` sets that
    arm's, a bare `VALUE` every model arm's; `parse` reads a value (ValueError when bad).
    EvalError for a bad value, an unknown arm, the rules arm (`rules_refusal` says why) or two
    values for one arm (`what` names them)."""
    chosen: dict[str, Any] = {}
    for text in specs or []:
        m = re.match(r"^([A-Za-z0-9_.-]+)=(?!=)(.*)$", text)
        name, value = (m.group(1), m.group(2)) if m else (None, text)
        try:
            value = parse(value)
        except ValueError as exc:
            raise EvalError(f"{flag} {text!r}: {exc}") from None
        targets = [a for a in arms if a.kind != "rules"] if name is None else \
            [a for a in arms if a.name == name]
        if name is not None and not targets:
            raise EvalError(f"{flag} {text!r}: no arm named {name!r}")
        if any(a.kind == "rules" for a in targets):
            raise EvalError(f"{flag} {text!r}: {rules_refusal}")
        for arm in targets:
            if arm.name in chosen:
                raise EvalError(f"{flag}: two {what} for arm {arm.name!r}")
            chosen[arm.name] = value
    return chosen


def assign_gates(arms: list[Arm], specs: list[str] | None,
                 extract_form: str = "window") -> list[Arm]:
    """`arms` with their claim gates from `--claim-gate` values: `ARM=SPEC` gates that arm,
    a bare `SPEC` (`ClaimGate.parse`: `SCORE>=T` or `T`) every model arm; EvalError for an
    unknown or rules arm, a bad spec, two gates for one arm, or a gate in the walk form (the
    gate reads window, turns and sentences answers only)."""
    gates = _per_arm(arms, specs, "--claim-gate", lambda spec: ClaimGate.parse(spec).spec,
                     "the rules arm has no token log-probabilities to gate", "gates")
    if gates and extract_form == "walk":
        raise EvalError("--claim-gate reads extract answers of the window, turns and sentences "
                        "forms only")
    return [replace(a, claim_gate=gates.get(a.name)) for a in arms]


def add_turn_gate_option(parser: Any) -> None:
    """The `--turn-gate [ARM=]T` option of eval/run.py and eval/live.py (values for
    `assign_turn_gates`)."""
    parser.add_argument("--turn-gate", action="append", default=None, metavar="[ARM=]T",
                        help="--extract-form turns: the arm ARM (without ARM=: every model arm) "
                             "does not ask a turn whose event the committed turn gate gives "
                             "P(fact) below T (memworker.inference.turn_gate; the turn's answer "
                             "is no claim); repeatable")


def assign_turn_gates(arms: list[Arm], specs: list[str] | None,
                      extract_form: str = "window") -> list[Arm]:
    """`arms` with `turn_gate` set from `--turn-gate` values (`ARM=T`, or a bare `T` for every
    model arm); EvalError for an unknown or rules arm, a threshold that is not a probability,
    two for one arm, or a form other than turns."""
    chosen = _per_arm(arms, specs, "--turn-gate", lambda t: tgate.check_threshold(float(t)),
                      "the rules arm answers in the window form", "turn gates")
    if chosen and extract_form != "turns":
        raise EvalError("--turn-gate applies to --extract-form turns only")
    return [replace(a, turn_gate=chosen.get(a.name)) for a in arms]


def turn_gates_config(arms: list[Arm]) -> dict[str, Any]:
    """A config's record of the arms' turn gates: {"turn_gates": {arm: T}, "turn_gate_sha256":
    the committed weights' sha256}, or {} when no arm has one."""
    chosen = {a.name: a.turn_gate for a in arms if a.turn_gate is not None}
    if not chosen:
        return {}
    return {"turn_gates": chosen,
            "turn_gate_sha256": sha256_bytes(tgate.DEFAULT_WEIGHTS.read_bytes())}


#: `--propose` given without an arm name: every model arm proposes
EVERY_ARM = "*"


def add_sampler_options(parser: Any) -> None:
    """The `--n-ctx`, `--threads` and `--seed` options of eval/run.py and eval/live.py (the
    `Sampler` of every model arm)."""
    parser.add_argument("--n-ctx", type=int, default=4096,
                        help="context window of every model arm")
    parser.add_argument("--threads", type=int, default=None,
                        help="llama.cpp threads (default ≤ 2)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed of every model arm (0)")


def add_turn_options(parser: Any) -> None:
    """The options of eval/run.py and eval/live.py that say how model arms are asked in the
    turns forms (the sampler's `turn_quotes`, `turn_history`) and how their extract prompts write
    the events' timestamps (`event_stamps`)."""
    parser.add_argument("--turn-quotes", choices=tforms.TURN_QUOTES, default="upto",
                        help="with --extract-form turns or sentences: the events a turn's quotes "
                             "may cite, its own and the earlier ones (upto, the default) or its "
                             "own only (own)")
    parser.add_argument("--turn-history", choices=tforms.HISTORIES, default="answers",
                        help="with --extract-form turns or sentences: what a turn's prompt holds "
                             "before its question, every earlier turn and answer (answers, the "
                             "default) or nothing, the window read once (none; memworker.turns "
                             "\"Read once\")")
    parser.add_argument("--event-stamps", choices=EVENT_STAMPS, default="full",
                        help="how extract prompts write the events' timestamps: as the event "
                             "has them (full, the default) or to the minute without seconds and "
                             "UTC offset (minute; memworker.prompts.restamp); evaluate a student "
                             "so when it was trained so (train/run.py --event-stamps)")
    parser.add_argument("--claim-layout", choices=LAYOUTS, default="v3",
                        help="with --extract-form turns or sentences: how model arms write an "
                             "extract claim, v3 (the default) or v6 (no quotes: the codec quotes "
                             "the sentence of the turn's event each claim points at; the "
                             "trailing defaults left out); for a student trained so "
                             "(train/run.py --claim-layout)")
    parser.add_argument("--turn-gate-tail", choices=codec.TAILS, default="read",
                        help="with --turn-gate: what the prompts show after the last asked "
                             "turn's event, the rest of the window (read, the default) or "
                             "nothing (drop: the unasked events after it are not read; omit: that, "
                             "and the unasked turns before it left out of the conversation)")


def check_turn_options(args: Any) -> None:
    """EvalError when `add_turn_options`' turns-only options are set outside the turns forms."""
    if args.turn_quotes != "upto" and args.extract_form not in tforms.TURN_FORMS:
        raise EvalError("--turn-quotes applies to --extract-form turns or sentences only")
    if args.turn_history != "answers" and args.extract_form not in tforms.TURN_FORMS:
        raise EvalError("--turn-history applies to --extract-form turns or sentences only")
    if args.claim_layout != "v3" and args.extract_form not in tforms.TURN_FORMS:
        raise EvalError("--claim-layout applies to --extract-form turns or sentences only")
    if args.turn_gate_tail != "read" and not args.turn_gate:
        raise EvalError("--turn-gate-tail applies to arms with a --turn-gate only")


def add_propose_option(parser: Any) -> None:
    """The `--propose [ARM]` option of eval/run.py, eval/studies/restyle.py and eval/live.py
    (values for `assign_proposals`)."""
    parser.add_argument("--propose", action="append", nargs="?", const=EVERY_ARM, default=None,
                        metavar="ARM",
                        help="turns forms: the arm ARM (without ARM: every model arm) answers "
                             "at least one claim in every turn (its grammar's minItems 1), for "
                             "its claim gate to keep or drop; an arm not named answers as it "
                             "would (the base beside a proposing student); repeatable")


def assign_proposals(arms: list[Arm], names: list[str] | None,
                     extract_form: str = "window") -> list[Arm]:
    """`arms` with `propose` set from `--propose` values: an arm's name, or `EVERY_ARM` (the
    option without a value) for every model arm; EvalError for an unknown or rules arm (the
    rules answer in the window form) and outside the turns forms."""
    chosen: set[str] = set()
    for name in names or []:
        if name == EVERY_ARM:
            chosen |= {a.name for a in arms if a.kind != "rules"}
            continue
        arm = next((a for a in arms if a.name == name), None)
        if arm is None:
            raise EvalError(f"--propose {name}: no arm named {name!r}")
        if arm.kind == "rules":
            raise EvalError(f"--propose {name}: the rules arm answers in the window form and "
                            "proposes nothing")
        chosen.add(name)
    if names and extract_form not in tforms.TURN_FORMS:
        raise EvalError("--propose applies to --extract-form turns or sentences only")
    return [replace(a, propose=a.name in chosen) for a in arms]


def add_rules_options(parser: Any) -> None:
    """The worker's rules settings of eval/run.py and eval/live.py, each naming model arms
    (`assign_with_rules`, `assign_reflect_rules`, `assign_consolidate_rules`): `--with-rules`,
    `--reflect-rules`, `--consolidate-rules` (`memworker.inference.hybrid`)."""
    for flag, what in (
            ("--with-rules", "runs as the hybrid worker: the rules' extract claims kept beside "
                             "its own (after its claim gate)"),
            ("--reflect-rules", "falls back to the rules' reflect answer where it abstains and "
                                "the rules answer from a memory holding every content word of "
                                "the question"),
            ("--consolidate-rules", "has its consolidation requests answered by the rules")):
        parser.add_argument(flag, action="append", default=None, metavar="ARM",
                            help=f"the arm ARM {what} (memworker.inference.hybrid); repeatable")


def rules_lists(arms: list[Arm]) -> dict[str, list[str]]:
    """The arms' rules settings as an evaluation config records them: each setting that some
    arm has (`hybrid.SETTINGS`) -> the names of those arms."""
    lists = {key: sorted(a.name for a in arms if getattr(a, key)) for key in hybrid.SETTINGS}
    return {key: names for key, names in lists.items() if names}


def _rules_setting(arms: list[Arm], names: list[str] | None, flag: str, field: str
                  ) -> list[Arm]:
    """`arms` with the boolean `field` set for the model arms `names` (the values of `flag`);
    EvalError for an unknown or rules arm."""
    chosen: set[str] = set()
    for name in names or []:
        arm = next((a for a in arms if a.name == name), None)
        if arm is None:
            raise EvalError(f"{flag} {name}: no arm named {name!r}")
        if arm.kind == "rules":
            raise EvalError(f"{flag} {name}: the rules arm is the rules already")
        chosen.add(name)
    return [replace(a, **{field: a.name in chosen}) for a in arms]


def assign_reflect_rules(arms: list[Arm], names: list[str] | None) -> list[Arm]:
    """`arms` with `reflect_rules` set from `--reflect-rules` values (model arms' names);
    EvalError for an unknown or rules arm."""
    return _rules_setting(arms, names, "--reflect-rules", "reflect_rules")


def assign_consolidate_rules(arms: list[Arm], names: list[str] | None) -> list[Arm]:
    """`arms` with `consolidate_rules` set from `--consolidate-rules` values (model arms'
    names); EvalError for an unknown or rules arm."""
    return _rules_setting(arms, names, "--consolidate-rules", "consolidate_rules")


def assign_with_rules(arms: list[Arm], names: list[str] | None,
                      extract_form: str = "window") -> list[Arm]:
    """`arms` with `with_rules` set from `--with-rules` values (model arms' names); EvalError
    for an unknown or rules arm and in the walk form."""
    arms = _rules_setting(arms, names, "--with-rules", "with_rules")
    if names and extract_form == "walk":
        raise EvalError("--with-rules merges extract answers of the window, turns and sentences "
                        "forms only")
    return arms


def make_backend(arm: Arm, sampler: Sampler, *, record_logprobs: bool = False) -> Any:
    """The arm's backend; `record_logprobs` asks a model arm for its answer tokens'
    log-probabilities (kept in each attempt of the samples; the answers do not change). An arm
    gated by a log-probability score asks for them always."""
    record_logprobs = record_logprobs or needs_logprobs(arm.claim_gate)
    if arm.kind == "rules":
        return RulesBackend()
    if arm.kind == "gguf":
        if not Path(arm.target).is_file():
            raise EvalError(f"arm {arm.name}: GGUF file not found: {arm.target} (export one with "
                            "`python export/run.py`, or use the embedded base: `python -c \"from "
                            "memworker.registry import embedded_gguf_path; "
                            "print(embedded_gguf_path())\"`)")
        return backends.LlamaCppBackend(arm.target, n_ctx=sampler.n_ctx,
                                        n_threads=sampler.threads, seed=sampler.seed,
                                        record_logprobs=record_logprobs)
    if arm.kind == "ollama":
        return backends.OllamaBackend(arm.target, num_ctx=sampler.n_ctx, logprobs=record_logprobs)
    return backends.OpenAICompatBackend(arm.target, logprobs=record_logprobs)


def close_backend(backend: Any) -> None:
    llm = getattr(backend, "llm", None)
    if llm is not None and hasattr(llm, "close"):
        llm.close()


def prompt_sha256(messages: list[dict[str, str]]) -> str:
    return sha256_bytes(to_chatml(messages).encode("utf-8"))


Grader = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


def run_row(backend: Any, row: dict[str, Any], sampler: Sampler,
            grader: Grader | None = None, form: str = "window",
            claim_gate: str | None = None, propose: bool = False,
            with_rules: bool = False, reflect_rules: bool = False,
            consolidate_rules: bool = False, turn_gate: float | None = None) -> dict[str, Any]:
    """One row through the codec with `backend`; the sample (without the arm name), graded by
    `grader(row, sample)` (default: `grade_sample`, the corpus rows' truth). Backend errors
    propagate (they are not the model's answer). `form`: an extract row's form
    (`memworker.turns.FORMS`; in the turns form the sample's `turns` holds every generation).
    With `claim_gate` (the arm's `ClaimGate.spec`), an extract answer's claims the model scores
    below it are dropped (`memworker.inference.gate`; the sample's `gate` records
    the scores, and the dropped claims are in its diagnostics; a backend that returns no
    log-probabilities raises `GateError`, a backend error). `propose` (turns forms): every turn
    answers at least one claim (`codec.run_turns(propose=True)`). `with_rules`: the rules' extract
    claims are merged in after the gate (`memworker.inference.hybrid`; the sample's `with_rules`
    says how many each side gave). `reflect_rules`: a reflect answer that abstains falls back to
    the rules' where `hybrid.falls_back` (the sample's `reflect_rules` says whether it did).
    `consolidate_rules`: a consolidate row is answered by the rules, the backend not called (the
    sample's `consolidate_rules` says so)."""
    task, inputs = row["task"], row["input"]
    bound = backend.bind(task, inputs) if hasattr(backend, "bind") else backend
    request = codec.prepare(task, inputs, backend=bound, use_grammar=sampler.grammar,
                            stamps=sampler.event_stamps)
    if sampler.max_tokens_cap is not None:
        request.max_tokens = min(request.max_tokens, sampler.max_tokens_cap)
    form = form if task == "extract" else "window"
    turns = form in tforms.TURN_FORMS
    started = time.perf_counter()
    result, error, generations = None, None, None
    try:
        if consolidate_rules and task == "consolidate":
            result = hybrid.rules_result(task, inputs)
        elif form != "window":
            result = codec.run_extract(bound, inputs, form, temperature=sampler.temperature,
                                       seed=sampler.seed, use_grammar=sampler.grammar,
                                       max_tokens=sampler.max_tokens_cap,
                                       retries=sampler.retries,
                                       **({"own_quotes": True} if turns and
                                          sampler.turn_quotes == "own" else {}),
                                       **({"history": sampler.turn_history} if turns and
                                          sampler.turn_history != "answers" else {}),
                                       stamps=sampler.event_stamps,
                                       **({"layout": sampler.claim_layout} if turns and
                                          sampler.claim_layout != "v3" else {}),
                                       **({"propose": True} if turns and propose
                                          else {}),
                                       **({"ask": tgate.asks(inputs, turn_gate)}
                                          if turns and turn_gate is not None else {}),
                                       **({"tail": sampler.turn_gate_tail}
                                          if turns and turn_gate is not None
                                          and sampler.turn_gate_tail != "read" else {}))
            generations = result.turns
        else:
            result = codec.run_request(bound, request, temperature=sampler.temperature,
                                       seed=sampler.seed, retries=sampler.retries)
        attempts = result.attempts
        if claim_gate is not None and task == "extract":
            result = ClaimGate.parse(claim_gate).apply(result, inputs, form)
        if with_rules and task == "extract":
            model_claims = len(result.output["claims"])
            result = hybrid.with_rules(result, inputs)
        if reflect_rules and task == "reflect":
            model_output = result.output
            result = hybrid.reflect_fallback(result, inputs)
    except codec.CodecError as exc:
        error = exc
        attempts = exc.attempts
        generations = list(exc.attempts) if turns else None
    seconds = time.perf_counter() - started
    status = "failed" if result is None else "first_try" if len(attempts) == 1 else "retry"
    if turns and result is not None:  # one generation per turn; more: a turn was retried
        status = "first_try" if len(generations) <= len(tforms.asked(inputs["events"], form)) \
            else "retry"
    sample = {
        "id": row["id"], "episode": row["episode"], "task": task,
        # the form's first prompt; its schemas are built per turn / walk by the codec
        "prompt_sha256": prompt_sha256(_first_prompt(form, inputs, request.messages)),
        "schema_sha256": sha256_bytes(canonical_json(request.schema)) if form == "window"
        else None,
        "max_tokens": request.max_tokens if form == "window" else sampler.max_tokens_cap,
        **({"extract_form": form} if form != "window" else {}),
        "attempts": [_attempt_doc(a) for a in attempts],
        "status": status,
        "error": None if error is None else {"type": type(error).__name__, "kind": error.kind,
                                              "message": str(error)},
        "output": None if result is None else result.output,
        "wire": None if result is None else result.wire,
        "diagnostics": [] if result is None else result.diagnostics,
        "seconds": round(seconds, 4),
    }
    if generations is not None:
        sample["turns"] = [_attempt_doc(a) for a in generations]
    if result is not None and result.gate is not None:
        sample["gate"] = result.gate
    if with_rules and task == "extract" and result is not None:
        sample["with_rules"] = {"policy": "union", "model_claims": model_claims,
                                "claims": len(result.output["claims"])}
    if consolidate_rules and task == "consolidate":
        sample["consolidate_rules"] = "rules"
    if reflect_rules and task == "reflect" and result is not None:
        sample["reflect_rules"] = {"policy": "fallback",
                                   "fell_back": result.output is not model_output}
    sample["verdicts"] = (grader or grade_sample)(row, sample)
    return sample


def _first_prompt(form: str, inputs: dict[str, Any], messages: list[dict[str, str]]
                  ) -> list[dict[str, str]]:
    if form in tforms.TURN_FORMS and tforms.turn_events(inputs["events"]):
        return tforms.messages(inputs, form=form)
    if form == "walk":
        return tforms.walk_messages(inputs)
    return messages


def _attempt_doc(attempt: Any) -> dict[str, Any]:
    """An attempt as a sample keeps it; token log-probabilities only where they were recorded."""
    doc = asdict(attempt)
    if doc.get("token_logprobs") is None:
        doc.pop("token_logprobs", None)
    return doc


def grade_sample(row: dict[str, Any], sample: dict[str, Any]) -> dict[str, Any]:
    accepted = sample["attempts"][-1]["raw"] if sample["output"] is not None else None
    return grade(row, status=sample["status"], output=sample["output"], raw=accepted,
                 diagnostics=sample["diagnostics"],
                 raw_outputs=[a["raw"] for a in sample.get("turns") or sample["attempts"]])


def run_arm(arm: Arm, rows: list[dict[str, Any]], out_dir: Path, sampler: Sampler, *,
            progress: bool = True, backend: Any = None,
            grader: Grader | None = None, record_logprobs: bool = False) -> dict[str, Any]:
    """Run `arm` over the rows it has no sample for yet; append samples (graded by `grader`,
    default `grade_sample`). Returns this invocation's speed record for the arm."""
    path = out_dir / SAMPLES
    # the evaluator resumes here: a line an interruption cut off goes before rows are appended
    done = {s["id"] for s in repair_samples(path) if s["arm"] == arm.name}
    todo = [r for r in rows if r["id"] not in done]
    record = {"arm": arm.name, "rows_run": 0, "rows_skipped": len(rows) - len(todo),
              "wall_seconds": 0.0}
    if not todo:
        return record
    own = backend is None
    backend = make_backend(arm, sampler, record_logprobs=record_logprobs) if own else backend
    bar = _bar(len(todo), arm.name, progress)
    started = time.perf_counter()
    failures: list[str] = []
    try:
        with open(path, "ab") as fh:
            for row in todo:
                try:
                    sample = run_row(backend, row, sampler, grader,
                                     form="window" if arm.kind == "rules"
                                     else sampler.extract_form, claim_gate=arm.claim_gate,
                                     propose=arm.propose, with_rules=arm.with_rules,
                                     reflect_rules=arm.reflect_rules,
                                     consolidate_rules=arm.consolidate_rules,
                                     turn_gate=arm.turn_gate)
                except BackendError as exc:
                    failures.append(f"{row['id']}: {exc}")
                    if len(failures) >= MAX_BACKEND_FAILURES:
                        raise EvalError(f"arm {arm.name}: the backend failed "
                                        f"{len(failures)} rows in a row; last: {exc}") from None
                    bar.update(1)
                    continue
                if failures:  # an isolated backend failure is the arm's failure on that row
                    for line in failures:
                        fh.write(canonical_json(_backend_failure(arm, rows, line, grader)) + b"\n")
                    failures = []
                sample = {"arm": arm.name, **sample}
                fh.write(canonical_json(sample) + b"\n")
                fh.flush()
                record["rows_run"] += 1
                bar.update(1)
            if failures and len(failures) < MAX_BACKEND_FAILURES:
                for line in failures:
                    fh.write(canonical_json(_backend_failure(arm, rows, line, grader)) + b"\n")
    finally:
        bar.close()
        record["wall_seconds"] = round(time.perf_counter() - started, 3)
        if own:
            close_backend(backend)
    return record


def _backend_failure(arm: Arm, rows: list[dict[str, Any]], line: str,
                     grader: Grader | None = None) -> dict[str, Any]:
    row_id, _, message = line.partition(": ")
    row = next(r for r in rows if r["id"] == row_id)
    sample = {"arm": arm.name, "id": row_id, "episode": row["episode"], "task": row["task"],
              "prompt_sha256": None, "schema_sha256": None, "max_tokens": None,
              "attempts": [], "status": "failed",
              "error": {"type": "BackendError", "kind": "backend", "message": message},
              "output": None, "wire": None, "diagnostics": [], "seconds": 0.0}
    sample["verdicts"] = (grader(row, sample) if grader is not None
                          else grade(row, status="failed", output=None))
    return sample


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(total: int, name: str, progress: bool) -> Any:
    if not progress:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError as exc:
        raise EvalError("tqdm is not installed: pip install 'memworker[eval]' (or pass "
                        "--no-progress)") from exc
    return tqdm(total=total, desc=f"arm {name}", unit="row", dynamic_ncols=True)
