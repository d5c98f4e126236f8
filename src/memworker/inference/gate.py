"""The claim confidence gate: drop the extract claims the model itself is unsure of.

A claim's score comes from the log-probabilities of its own answer tokens under the model (what
the backend returns as `Generation.token_logprobs`: llama.cpp in process with `record_logprobs`,
an OpenAI-compatible server or Ollama asked for `logprobs`). The tokens of each wire field of a
kept claim (quote text, subject name and type, predicate, value, kind) are found in the raw answer
— in the turns form, in each turn's own answer and tokens — and a claim's score is one of `SCORES`
(the release uses `first(predicate)+first(value)`: the first predicate token's log-probability
plus the first value token's). `ClaimGate(score, threshold).apply(result, inputs)` returns the
codec's result without the claims scoring below the threshold, and says so in its diagnostics and
in `result.gate`.

The threshold belongs to one model: it is chosen on the val split (`eval/studies/confidence.py`,
half A of the rows, read on half B) and travels with that model's release (its receipt and
Modelfile). A backend that returns no log-probabilities cannot be gated: that is an error
(`GateError`), never a silent pass of every claim.

    gate = ClaimGate.parse("first(predicate)+first(value)>=-0.249")
    worker = MemWorkerBackend.from_gguf("student.gguf", claim_gate=gate, extract_form="turns")

The score `verifier` (`ClaimGate.parse("verifier>=0.9")`) is the other kind: the learned claim
verifier's P(keep) of each decoded claim read against the request (`memworker.inference.verifier`,
the committed weights), no log-probabilities needed; its threshold is a probability in [0, 1],
chosen on natural-dev and val together (docs/research/train-natural.md).

Two gates joined by `|` keep a claim that either keeps
(`ClaimGate.parse("first(predicate)+first(value)>=-0.055|verifier>=0.93")`: the setting chosen on
natural-dev and val together for E22, docs/research/train-natural.md "val, every row"): each
scores every claim, `result.gate` records both, and the gate needs log-probabilities when either
part does. `eval/studies/verifier_auc.py --either A,B` regrades the same gate from samples.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memworker import wire
from memworker.inference.backends import BackendError
from memworker.inference.verifier import Verifier
from memworker.turns import TURN_FORMS, asked

Span = tuple[int, int]
Fields = dict[str, dict[str, float]]
Tokens = list[list[Any]]

#: a claim's score from its fields' token log-probabilities (higher: surer)
SCORES: dict[str, Callable[[Fields], float]] = {
    "first(predicate)+first(value)": lambda f: f["predicate"]["first"] + f["value"]["first"],
    "sum(predicate,value)": lambda f: f["predicate"]["sum"] + f["value"]["sum"],
    "min(name,predicate,value)": lambda f: min(f["name"]["min"], f["predicate"]["min"],
                                               f["value"]["min"]),
    "mean(claim)": lambda f: f["claim"]["mean"],
    "min(claim)": lambda f: f["claim"]["min"],
    "min(quote)": lambda f: f["quote"]["min"],
}
DEFAULT_SCORE = "first(predicate)+first(value)"
#: the learned verifier's P(keep) (`memworker.inference.verifier`): read from the claim and the
#: request, not from token log-probabilities
VERIFIER = "verifier"
_DROPPED = re.compile(r"^claims/(\d+): dropped")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")


class GateError(BackendError):
    """The gate cannot score a result: the backend returned no token log-probabilities, or ones
    that do not spell its answer, or the answer's form is one the gate does not read."""


def auc(positive: Sequence[float], negative: Sequence[float]) -> float:
    """How well a score ranks claims: P(a positive scores above a negative), ties counted half
    (the rank-sum form, by average ranks: exact for these half-integer sums, n log n); nan when
    either side is empty. The verifier's trainer and the confidence studies share it."""
    if not positive or not negative:
        return float("nan")
    scored = sorted([(float(s), 1) for s in positive] + [(float(s), 0) for s in negative])
    rank_sum, i = 0.0, 0
    while i < len(scored):
        j = i
        while j + 1 < len(scored) and scored[j + 1][0] == scored[i][0]:
            j += 1
        rank_sum += ((i + j) / 2 + 1) * sum(label for _, label in scored[i:j + 1])
        i = j + 1
    n = len(positive)
    return (rank_sum - n * (n + 1) / 2) / (n * len(negative))


def _value_spans(text: str, i: int = 0) -> tuple[tuple[Span, list[Any]], int]:
    """((span, children), end) of the JSON value at text[i:]; a string's span is inside its
    quotes; an object's children are its values (keys skipped)."""
    while text[i] in " \t\r\n":
        i += 1
    if text[i] == '"':
        j = i + 1
        while text[j] != '"':
            j += 2 if text[j] == "\\" else 1
        return ((i + 1, j), []), j + 1
    if text[i] in "[{":
        close, kids, j = ("]" if text[i] == "[" else "}"), [], i + 1
        while True:
            while text[j] in " \t\r\n,":
                j += 1
            if text[j] == close:
                return ((i, j + 1), kids), j + 1
            if close == "}":
                _, j = _value_spans(text, j)   # the key
                while text[j] in " \t\r\n:":
                    j += 1
            kid, j = _value_spans(text, j)
            kids.append(kid)
    m = _NUMBER.match(text, i)
    if m is None:
        raise ValueError(f"not JSON at offset {i}: {text[i:i + 20]!r}")
    return ((i, m.end()), []), m.end()


def claim_spans(raw: str) -> list[dict[str, Span]]:
    """Character spans of each wire claim's fields in a raw extract answer `{"claims":[...]}`:
    the `CLAIM_FIELDS`, `quote` (the first quote's text) and `claim` (the whole array). A claim
    in layout v6 (its first item the predicate, `wire.V6_FIELDS`) has the fields it wrote; a
    field it left out, and its `quote` (the codec's, never written), take the span of the whole
    claim."""
    (_, (claims,)), _ = _value_spans(raw)
    out = []
    for span, fields in claims[1]:
        if fields and raw[fields[0][0][0]] != "[":  # v6: no quotes, the predicate first
            spans = {name: span for name in wire.CLAIM_FIELDS}
            spans.update({name: value[0]
                          for name, value in zip(wire.V6_FIELDS, fields, strict=False)})
            spans["quote"] = span
        else:
            spans = {name: value[0]
                     for name, value in zip(wire.CLAIM_FIELDS, fields, strict=False)}
            quotes = fields[0][1]
            spans["quote"] = quotes[0][1][0][0] if quotes else spans["quotes"]
        spans["claim"] = span
        out.append(spans)
    return out


def field_stats(spans: dict[str, Span], tokens: Tokens) -> Fields:
    """Per field, the log-probabilities of the tokens that overlap its span: min, sum, mean and
    the first one (an empty field — "" — takes the token that holds its position)."""
    offsets, pos = [], 0
    for piece, logprob in tokens:
        offsets.append((pos, pos + len(piece), float(logprob)))
        pos += len(piece)
    stats = {}
    for name, (a, b) in spans.items():
        overlap = [lp for s, e, lp in offsets if s < b and e > a] if b > a else []
        lps = overlap or [lp for s, e, lp in offsets if s <= a < e] or [0.0]
        stats[name] = {"min": min(lps), "sum": sum(lps), "mean": sum(lps) / len(lps),
                       "first": lps[0]}
    return stats


def kept(spans: list[Any], diagnostics: Sequence[str], prefix: str = "") -> list[Any]:
    """`spans` (one per claim of an answer, in order) without the claims the codec dropped
    (its diagnostics `<prefix>claims/N: dropped ...`)."""
    dropped = {int(m.group(1)) for d in diagnostics if d.startswith(prefix)
               and (m := _DROPPED.match(d[len(prefix):]))}
    return [s for n, s in enumerate(spans) if n not in dropped]


def check_tokens(raw: str, tokens: Tokens | None, where: str) -> Tokens | None:
    """`tokens` (None or empty: none recorded), after checking that their pieces spell `raw`."""
    if tokens and "".join(p for p, _ in tokens) != raw:
        raise GateError(f"{where}: the recorded tokens do not spell the raw answer")
    return tokens or None


def parts_fields(parts: list[tuple[str, Tokens | None, str]], diagnostics: Sequence[str],
                 n_out: int, where: str) -> list[Fields] | None:
    """Field statistics of each claim an extract answer kept, in order, from its parts: (raw
    answer, its tokens, the prefix of its diagnostics) — one part for a window answer, one per
    accepted turn in the turns form (the claims each kept, joined in order, less those the
    merged decode dropped and those beyond the `n_out` the output holds). None when a part has
    no tokens recorded."""
    merged: list[tuple[dict[str, Span], Tokens]] = []
    for raw, tokens, prefix in parts:
        tokens = check_tokens(raw, tokens, where)
        if tokens is None:
            if not claim_spans(raw):   # a turn not asked (`codec.TURN_SKIPPED`): nothing to score
                continue
            return None
        merged += [(spans, tokens) for spans in kept(claim_spans(raw), diagnostics, prefix)]
    if len(parts) > 1 or (parts and parts[0][2]):
        merged = kept(merged, diagnostics)[:n_out]
    if len(merged) != n_out:
        raise GateError(f"{where}: {len(merged)} claims found in the raw answer after the codec's "
                        f"drops, {n_out} in its output")
    return [field_stats(spans, tokens) for spans, tokens in merged]


def turn_parts(turns: Sequence[Any], asked: Sequence[Any], where: str
               ) -> list[tuple[str, Tokens | None, str]]:
    """The parts of a turns-form answer: each accepted turn (`error` None; an attempt object or
    a sample's dict) with its diagnostics prefix; `asked` the turns asked
    (`memworker.turns.asked`: each one's `label`)."""
    def get(t: Any, key: str) -> Any:
        return t.get(key) if isinstance(t, dict) else getattr(t, key)

    accepted = [t for t in turns if get(t, "error") is None]
    if len(accepted) != len(asked):
        raise GateError(f"{where}: {len(accepted)} accepted turns for {len(asked)} asked")
    return [(get(t, "raw"), get(t, "token_logprobs"), f"{u.label}: ")
            for u, t in zip(asked, accepted, strict=True)]


def result_fields(result: Any, inputs: dict[str, Any], form: str = "window") -> list[Fields]:
    """Field statistics of each claim in a codec extract result (`codec.CodecResult` of `run`,
    form "window", or `run_turns`, form "turns" or "sentences"); GateError when they cannot be
    had."""
    n_out = len(result.output["claims"])
    if form in TURN_FORMS:
        parts = turn_parts(result.turns or [], asked(inputs["events"], form), "extract")
    elif form == "window":
        attempt = result.attempts[-1]
        parts = [(attempt.raw, attempt.token_logprobs, "")]
    else:
        raise GateError(f"the claim gate reads answers of the window, turns and sentences forms, not {form!r}")
    fields = parts_fields(parts, result.diagnostics, n_out, "extract")
    if fields is None:
        raise GateError("the claim gate needs each answer token's log-probability, and the "
                        "backend returned none (llama.cpp in process: record_logprobs=True; an "
                        "OpenAI-compatible server: one that answers `logprobs`, e.g. "
                        "llama_cpp.server with --logits_all true; Ollama: 0.12.11 or later)")
    return fields


def needs_logprobs(gate: ClaimGate | str | None) -> bool:
    """Whether a worker with this claim gate (a `ClaimGate`, its spec, or None) must ask its
    backend for the answer tokens' log-probabilities: every gate but the verifier's."""
    if gate is None:
        return False
    return (ClaimGate.parse(gate) if isinstance(gate, str) else gate).needs_logprobs


@functools.cache
def _verifier() -> Verifier:
    """The committed verifier, read once (only a verifier gate reads it)."""
    return Verifier.load()


@dataclass(frozen=True)
class ClaimGate:
    """Keep an extract claim only if `SCORES[score]` of it is at least `threshold`."""

    threshold: float
    score: str = DEFAULT_SCORE
    #: a second gate: a claim is kept when this one or that one keeps it (spec `A|B`)
    either: ClaimGate | None = None

    def __post_init__(self) -> None:
        if self.either is not None and (self.either.either is not None
                                        or self.either.score == self.score):
            raise ValueError("an either-gate joins two gates of different scores, no more")
        if self.score not in SCORES and self.score != VERIFIER:
            raise ValueError(f"unknown claim score {self.score!r} (one of: "
                             f"{', '.join(sorted([*SCORES, VERIFIER]))})")
        if self.threshold != self.threshold:
            raise ValueError("the gate's threshold is NaN")
        if self.score == VERIFIER and not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"the verifier gate's threshold is a probability, got "
                             f"{self.threshold:g}")

    @property
    def spec(self) -> str:
        own = f"{self.score}>={self.threshold:g}"
        return own if self.either is None else f"{own}|{self.either.spec}"

    @classmethod
    def parse(cls, text: str) -> ClaimGate:
        """`SCORE>=T` (e.g. `first(predicate)+first(value)>=-0.249`), just `T` (the default
        score), or two of them joined by `|` (a claim kept when either keeps it)."""
        first, bar, second = text.partition("|")
        if bar:
            if not first.strip() or not second.strip() or "|" in second:
                raise ValueError(f"claim gate {text!r}: expected A|B, two gates")
            one = cls.parse(first.strip())
            try:
                return cls(one.threshold, one.score, either=cls.parse(second.strip()))
            except ValueError as err:
                raise ValueError(f"claim gate {text!r}: {err}") from None
        score, sep, value = text.rpartition(">=")
        try:
            threshold = float(value if sep else text)
        except ValueError:
            raise ValueError(f"claim gate {text!r}: expected SCORE>=T or T (a number)") from None
        return cls(threshold=threshold, score=score.strip() if sep else DEFAULT_SCORE)

    @property
    def needs_logprobs(self) -> bool:
        """Whether the gate reads the answer tokens' log-probabilities (the verifier does not;
        an either-gate does when one of its parts does)."""
        return self.score != VERIFIER or (self.either is not None and self.either.needs_logprobs)

    @property
    def needs_verifier(self) -> bool:
        """Whether the gate reads the verifier's P(keep) (it, or one part of an either-gate)."""
        return self.score == VERIFIER or (self.either is not None and self.either.needs_verifier)

    def keep(self, fields: Fields) -> bool:
        if self.score == VERIFIER or self.either is not None:
            raise ValueError("the verifier gate reads claims, not log-probabilities: use apply")
        return SCORES[self.score](fields) >= self.threshold

    def scores(self, result: Any, inputs: dict[str, Any], form: str = "window") -> list[float]:
        """This gate's own score of each claim of a codec extract `result` (its `either` not
        asked)."""
        if self.score != VERIFIER:
            return [round(SCORES[self.score](f), 4) for f in result_fields(result, inputs, form)]
        return [round(p, 4) for p in _verifier().probs(result.output["claims"], inputs)]

    def apply(self, result: Any, inputs: dict[str, Any], form: str = "window") -> Any:
        """A copy of the codec's extract `result` (of the extraction `form`) without its claims
        scoring below the threshold (diagnostics `gate: claim N ... dropped`); `result.gate`
        records the gate, each claim's score and which were dropped. An either-gate drops a
        claim that both its parts drop; its record holds the second part's scores under
        `either`."""
        scores = self.scores(result, inputs, form)
        other = self.either.scores(result, inputs, form) if self.either is not None else None
        keep = [s >= self.threshold or (other is not None and other[n] >= self.either.threshold)
                for n, s in enumerate(scores)]
        gated = copy.copy(result)
        gated.output = {**result.output, "claims": [
            c for c, k in zip(result.output["claims"], keep, strict=True) if k]}
        gated.wire = {**result.wire, "claims": [
            c for c, k in zip(result.wire["claims"], keep, strict=True) if k]}
        gated.diagnostics = list(result.diagnostics) + [
            f"gate: claim {n} ({c['statement'][:60]!r}) dropped: {self.score} {s} < "
            f"{self.threshold:g}" + ("" if other is None else
                                     f", {self.either.score} {other[n]} < {self.either.threshold:g}")
            for n, (c, s, k) in enumerate(zip(result.output["claims"], scores, keep, strict=True))
            if not k]
        gated.gate = {"score": self.score, "threshold": self.threshold, "scores": scores,
                      "dropped": [n for n, k in enumerate(keep) if not k]}
        if other is not None:
            gated.gate["either"] = {"score": self.either.score,
                                    "threshold": self.either.threshold, "scores": other}
        return gated
