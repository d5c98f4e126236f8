"""The claim confidence gate (`memworker.inference.gate`): the worker keeps only the extract claims
its model scores at or above a threshold from the answer tokens' log-probabilities, in the store's
worker, the evaluator and every backend that can return them.

The gate's logic is tested with `TokenReplay`, a transport double that returns scripted answers
with scripted token log-probabilities (through the real codec). The transports are tested for
what they send and parse: Ollama against a local server speaking its /api/generate protocol (no
Ollama can be installed here), OpenAI-compatible likewise, and (slow) a real llama_cpp.server,
whose log-probabilities equal llama.cpp's in process token for token."""

from __future__ import annotations

import json

import pytest

from memworker.eval import runner
from memworker.eval.cli import main as eval_main
from memworker.eval.cli import planned_config
from memworker.eval.studies import confidence
from memworker.inference import codec
from memworker.inference.backends import (
    BackendError,
    Generation,
    LlamaCppBackend,
    OllamaBackend,
    OpenAICompatBackend,
    ReplayBackend,
)
from memworker.inference.gate import (
    DEFAULT_SCORE,
    VERIFIER,
    ClaimGate,
    GateError,
    needs_logprobs,
)
from memworker.inference.hmem import MemWorkerBackend
from memworker.inference.samples import SAMPLES
from memworker.inference.verifier import Verifier
from tests.helpers import RecordingServer
from tests.helpers import token_pieces as pieces

PORTO = ('[[["I live in Porto.",1]],"the user","person","lives_in","Porto","fact",null,[]]')
NURSE = ('[[["I work as a nurse.",2]],"the user","person","job_title","nurse","fact",null,[]]')
WINDOW = '{"claims":[' + PORTO + "," + NURSE + "]}"
MESSAGES = [{"role": "assistant", "content": "Tell me about you."},
            {"role": "user", "content": "I live in Porto."},
            {"role": "user", "content": "I work as a nurse."}]
WHEN = "2025-10-08T09:12:00+02:00"


class TokenReplay:
    """Scripted answers with their token log-probabilities (a transport double)."""

    name = "token-replay"

    def __init__(self, answers: list[tuple[str, dict[str, float]]]):
        self.answers = list(answers)

    def generate(self, messages, *, schema=None, grammar=None, max_tokens, temperature=0.0,
                 seed=0):
        text, logprob = self.answers.pop(0)
        return Generation(text=text, finish_reason="stop", backend=self.name,
                          token_logprobs=pieces(text, logprob))


def test_a_gate_is_a_score_and_a_threshold():
    gate = ClaimGate.parse("first(predicate)+first(value)>=-0.249")
    assert (gate.score, gate.threshold) == (DEFAULT_SCORE, -0.249)
    assert ClaimGate.parse(gate.spec) == gate and ClaimGate.parse("-0.249") == gate
    assert ClaimGate.parse("min(claim) >= -1.5") == ClaimGate(-1.5, "min(claim)")
    with pytest.raises(ValueError, match="unknown claim score"):
        ClaimGate.parse("max(claim)>=-1")
    with pytest.raises(ValueError, match="expected SCORE>=T"):
        ClaimGate.parse("first(predicate)+first(value)>=sure")
    with pytest.raises(ValueError, match="NaN"):
        ClaimGate(float("nan"))


def test_the_worker_drops_the_claims_its_model_is_unsure_of():
    """Window form: the nurse claim's first predicate and value tokens are unsure (-2 - 1 = -3),
    the Porto claim's are not (-0.1): a gate at -1 keeps Porto only, says so, and records every
    claim's score; one at -5 keeps both."""
    answer = (WINDOW, {"job": -2.0, "nurse": -1.0, "lives_in": -0.1})
    worker = MemWorkerBackend(TokenReplay([answer]), claim_gate=f"{DEFAULT_SCORE}>=-1")
    claims = worker.extract(MESSAGES, observed_at=WHEN)
    assert [c["predicate"] for c in claims] == ["lives_in"]
    assert worker.last.gate == {"score": DEFAULT_SCORE, "threshold": -1.0,
                                "scores": [-0.1, -3.0], "dropped": [1]}
    assert any(d.startswith("gate: claim 1 ") and "-3.0 < -1" in d
               for d in worker.last.diagnostics)
    assert [c[3] for c in worker.last.wire["claims"]] == ["lives_in"]
    lenient = MemWorkerBackend(TokenReplay([answer]), claim_gate=ClaimGate(-5.0))
    assert [c["predicate"] for c in lenient.extract(MESSAGES, observed_at=WHEN)] == \
        ["lives_in", "job_title"]
    assert lenient.last.gate["dropped"] == []
    ungated = MemWorkerBackend(TokenReplay([answer]))
    assert len(ungated.extract(MESSAGES, observed_at=WHEN)) == 2 and ungated.last.gate is None


def test_the_gate_reads_each_turn_of_the_turns_form():
    """Turns form: one answer per user event, each scored from its own tokens; the merge's
    drop of a repeated claim is followed (the second turn repeats Porto, then says nurse)."""
    turn1 = ('{"claims":[' + PORTO + "]}", {"lives_in": -0.2})
    turn2 = ('{"claims":[' + PORTO + "," + NURSE + "]}", {"lives_in": -4.0, "job": -0.3})
    worker = MemWorkerBackend(TokenReplay([turn1, turn2]), extract_form="turns",
                              claim_gate=ClaimGate(-0.25))
    claims = worker.extract(MESSAGES, observed_at=WHEN)
    assert [c["predicate"] for c in claims] == ["lives_in"]
    assert worker.last.gate["scores"] == [-0.2, -0.3] and worker.last.gate["dropped"] == [1]


def test_a_backend_without_log_probabilities_cannot_be_gated():
    worker = MemWorkerBackend(ReplayBackend([WINDOW]), claim_gate=ClaimGate(-1.0))
    with pytest.raises(GateError, match="log-probability") as info:
        worker.extract(MESSAGES, observed_at=WHEN)
    assert isinstance(info.value, BackendError)
    inputs, _ = MemWorkerBackend(None).episode(MESSAGES, observed_at=WHEN)
    result = codec.decode("extract", inputs, WINDOW, finish_reason="stop")
    with pytest.raises(GateError, match="window, turns and sentences forms"):
        ClaimGate(-1.0).apply(result, inputs, "walk")
    # tokens that do not spell the answer are refused, not guessed at
    result.attempts[-1].token_logprobs = [["{", 0.0]]
    with pytest.raises(GateError, match="do not spell"):
        ClaimGate(-1.0).apply(result, inputs, "window")


def test_the_evaluator_gates_an_arm_and_scores_the_kept_claims():
    inputs, _ = MemWorkerBackend(None).episode(MESSAGES, observed_at=WHEN)
    row = {"id": "r1", "episode": "g", "task": "extract", "input": inputs,
           "gold": {"claims": []}}
    answer = (WINDOW, {"job": -2.0, "nurse": -1.0, "lives_in": -0.1})
    grader = (lambda row, sample: {})  # noqa: E731 (the grade is not what is tested)
    sample = runner.run_row(TokenReplay([answer]), row, runner.Sampler(), grader,
                            claim_gate=ClaimGate(-1.0).spec)
    assert [c["predicate"] for c in sample["output"]["claims"]] == ["lives_in"]
    assert sample["gate"]["dropped"] == [1]
    # the analysis tools score what the gate kept
    stats = confidence.kept_claim_stats(sample, inputs)
    assert [round(confidence.SCORES[DEFAULT_SCORE](f), 4) for f in stats] == [-0.1]
    plain = runner.run_row(TokenReplay([answer]), row, runner.Sampler(), grader)
    assert len(plain["output"]["claims"]) == 2 and "gate" not in plain


def test_a_gate_belongs_to_an_arm():
    """A threshold is one model's own: `--claim-gate ARM=SPEC` gates that arm, a bare SPEC every
    model arm; never the rules arm."""
    arms = [runner.parse_arm(a) for a in ("base=b.gguf", "student=s.gguf", "rules")]
    gated = runner.assign_gates(arms, ["student=first(predicate)+first(value)>=-0.249"])
    assert [a.claim_gate for a in gated] == [None, f"{DEFAULT_SCORE}>=-0.249", None]
    assert [a.claim_gate for a in runner.assign_gates(arms, ["-1"])] == \
        [f"{DEFAULT_SCORE}>=-1", f"{DEFAULT_SCORE}>=-1", None]
    for specs, why in ((["rules=-1"], "rules arm"), (["nobody=-1"], "no arm named"),
                       (["student=-1", "-2"], "two gates"), (["student=max(x)>=1"], "unknown")):
        with pytest.raises(runner.EvalError, match=why):
            runner.assign_gates(arms, specs)


def test_eval_run_records_each_arms_gate_and_refuses_to_mix_gates(tiny_corpus, tmp_path,
                                                                  capsys):
    out = tmp_path / "ev"
    base = ["--arm", "rules", "--arm", "student=s.gguf", "--set", "val", "--corpus",
            str(tiny_corpus), "--out", str(out)]
    _, config = planned_config(base + ["--claim-gate", "student=-0.249"])
    assert config["claim_gates"] == {"student": f"{DEFAULT_SCORE}>=-0.249"}
    assert "claim_gate" not in config["sampler"]
    _, plain = planned_config(base)
    assert "claim_gates" not in plain   # folders made before gates still join
    assert eval_main(base + ["--claim-gate", "max(x)>=1"]) == 2
    assert "unknown claim score" in capsys.readouterr().err
    assert eval_main(base + ["--claim-gate", "-1", "--extract-form", "walk"]) == 2
    assert "window, turns and sentences forms" in capsys.readouterr().err
    # samples made with one gate are not joined by a run with another
    from memworker.eval.cli import continue_config

    (out / "config.json").parent.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(config))
    (out / runner.SAMPLES).write_text(json.dumps({"arm": "student", "id": "x"}) + "\n")
    with pytest.raises(runner.EvalError, match="another claim gate for arm 'student'"):
        continue_config(out, planned_config(base + ["--claim-gate", "student=-1"])[1])
    with pytest.raises(runner.EvalError, match="another claim gate"):
        continue_config(out, plain)
    assert continue_config(out, config)["claim_gates"] == config["claim_gates"]


# --- transports -----------------------------------------------------------------------------------

def test_ollama_asks_for_log_probabilities_only_when_gated():
    text = '{"claims":[]}'
    reply = {"model": "m", "created_at": "2025-01-01T00:00:00Z", "response": text, "done": True,
             "done_reason": "stop", "prompt_eval_count": 3, "eval_count": 3,
             "logprobs": [{"token": '{"', "logprob": -0.5}, {"token": "claims", "logprob": -0.25},
                          {"token": '":[]}', "logprob": -0.125}]}
    request = codec.prepare("extract", SAMPLES["extract"][0])
    with RecordingServer([(200, reply), (200, reply)]) as srv:
        gen = OllamaBackend("m", host=srv.url, logprobs=True).generate(
            request.messages, schema=request.schema, max_tokens=16)
        plain = OllamaBackend("m", host=srv.url).generate(
            request.messages, schema=request.schema, max_tokens=16)
    assert gen.token_logprobs == [['{"', -0.5], ["claims", -0.25], ['":[]}', -0.125]]
    assert plain.token_logprobs is None
    assert srv.requests[0]["body"]["logprobs"] is True
    assert "logprobs" not in srv.requests[1]["body"]


def test_openai_compatible_log_probabilities_from_bytes_or_tokens():
    def reply(content):
        return 200, {"choices": [{"message": {"role": "assistant", "content": "Zoë"},
                                  "finish_reason": "stop", "logprobs": {"content": content}}]}

    # "ë" is two UTF-8 bytes split over two tokens: with bytes, the completing token carries it
    with_bytes = [{"token": "Zo", "logprob": -0.1, "bytes": [90, 111]},
                  {"token": "", "logprob": -0.2, "bytes": [195]},
                  {"token": "ë", "logprob": -0.3, "bytes": [171]}]
    tokens_only = [{"token": "Zo", "logprob": -0.1, "bytes": None},
                   {"token": "ë", "logprob": -0.3, "bytes": None}]
    with RecordingServer([reply(with_bytes), reply(tokens_only), reply(None)]) as srv:
        backend = OpenAICompatBackend(srv.url + "/v1", logprobs=True)
        one = backend.generate([], max_tokens=4)
        two = backend.generate([], max_tokens=4)
        none = backend.generate([], max_tokens=4)
    assert one.token_logprobs == [["Zo", -0.1], ["", -0.2], ["ë", -0.3]]
    assert two.token_logprobs == [["Zo", -0.1], ["ë", -0.3]]
    assert none.token_logprobs is None
    body = srv.requests[0]["body"]
    assert body["logprobs"] is True and body["top_logprobs"] == 0
    assert "logprobs" not in OpenAICompatBackend("http://x/v1").request_body(
        [], schema=None, grammar=None, max_tokens=1, temperature=0.0, seed=0)


@pytest.mark.slow
def test_a_real_server_returns_llama_cpps_own_log_probabilities(logprob_server, embedded_gguf):
    """The same request through llama_cpp.server (`logprobs`) and llama.cpp in process
    (`record_logprobs`): the same answer, the same pieces, the same log-probabilities (both the
    raw logits' log-softmax, before the grammar), so one threshold gates both alike. (Before the
    backend sent repeat_penalty 1, the server's default 1.1 changed token 44 of this answer.)"""
    request = codec.prepare("reflect", SAMPLES["reflect"][1], budget_tokens=160)
    kw = {"schema": request.schema, "grammar": request.grammar, "max_tokens": 48, "seed": 1}
    served = OpenAICompatBackend(logprob_server + "/v1", logprobs=True).generate(
        request.messages, **kw)
    local = LlamaCppBackend(embedded_gguf, n_ctx=2048, n_threads=1, record_logprobs=True)
    try:
        mine = local.generate(request.messages, **kw)
    finally:
        local.llm.close()
    assert served.text == mine.text and served.completion_tokens > 0
    assert [p for p, _ in served.token_logprobs] == [p for p, _ in mine.token_logprobs]
    assert [lp for _, lp in served.token_logprobs] == pytest.approx(
        [lp for _, lp in mine.token_logprobs], abs=1e-3)
    assert served.finish_reason == mine.finish_reason


def test_the_verifier_gate_reads_the_claims_not_log_probabilities():
    """`verifier>=T`: each decoded claim's P(keep) from the committed verifier, with a backend
    that returns no log-probabilities at all; a value its quote does not hold scores lower."""
    wrong = '[[["I live in Porto.",1]],"the user","person","job_title","nurse","fact",null,[]]'
    answer = '{"claims":[' + PORTO + "," + wrong + "]}"
    inputs, _ = MemWorkerBackend(None).episode(MESSAGES, observed_at=WHEN)
    decoded = codec.decode("extract", inputs, answer, finish_reason="stop").output["claims"]
    right_p, wrong_p = Verifier.load().probs(decoded, inputs)
    assert right_p > wrong_p
    middle = round((right_p + wrong_p) / 2, 4)
    gate = ClaimGate.parse(f"verifier>={middle}")
    assert (gate.score, gate.needs_logprobs) == (VERIFIER, False)
    # only a log-probability gate makes the worker ask its backend for log-probabilities
    assert not needs_logprobs(gate) and not needs_logprobs(gate.spec) and not needs_logprobs(None)
    assert needs_logprobs(ClaimGate(-1.0)) and needs_logprobs("first(predicate)+first(value)>=-1")
    assert gate.needs_verifier and not ClaimGate(-1.0).needs_verifier
    assert ClaimGate.parse(gate.spec) == gate
    worker = MemWorkerBackend(ReplayBackend([answer]), claim_gate=gate)
    claims = worker.extract(MESSAGES, observed_at=WHEN)
    assert [(c["predicate"], c["value"]) for c in claims] == [("lives_in", "Porto")]
    assert worker.last.gate == {"score": VERIFIER, "threshold": middle,
                                "scores": [round(right_p, 4), round(wrong_p, 4)],
                                "dropped": [1]}
    assert any(d.startswith("gate: claim 1 ") for d in worker.last.diagnostics)
    with pytest.raises(ValueError, match="probability"):
        ClaimGate.parse("verifier>=1.5")
    with pytest.raises(ValueError, match="reads claims"):
        gate.keep({})


def test_an_either_gate_keeps_a_claim_that_either_part_keeps():
    """`A|B`: the log-probability gate or the verifier's; a claim is dropped only when both drop
    it. Porto is sure by its tokens (-0.1) and read right by the verifier; the nurse claim is
    unsure by its tokens (-3.1) but read right; a wrong claim (a job from the Porto quote) is sure
    by its tokens (-0.2) but read wrong. The verifier's threshold sits between its own scores of
    the right claims and the wrong one."""
    wrong = '[[["I live in Porto.",1]],"the user","person","job_title","cook","fact",null,[]]'
    answer = '{"claims":[' + PORTO + "," + NURSE + "," + wrong + "]}"
    inputs, _ = MemWorkerBackend(None).episode(MESSAGES, observed_at=WHEN)
    decoded = codec.decode("extract", inputs, answer, finish_reason="stop").output["claims"]
    porto_p, nurse_p, wrong_p = Verifier.load().probs(decoded, inputs)
    assert min(porto_p, nurse_p) > wrong_p
    bar = round((min(porto_p, nurse_p) + wrong_p) / 2, 4)
    logprobs = {"lives_in": -0.1, "job": -0.1, "nurse": -3.0, "cook": -0.1}
    spec = f"{DEFAULT_SCORE}>=-1|verifier>={bar}"
    gate = ClaimGate.parse(spec)
    assert gate.spec == spec and ClaimGate.parse(gate.spec) == gate
    assert gate.either == ClaimGate(bar, VERIFIER) and gate.needs_logprobs and needs_logprobs(spec)
    assert gate.needs_verifier                    # through its second part
    # the log-probability part alone drops the nurse (-3.1), keeps the wrong claim (-0.2)
    alone = MemWorkerBackend(TokenReplay([(answer, logprobs)]), claim_gate=f"{DEFAULT_SCORE}>=-1")
    assert [c["value"] for c in alone.extract(MESSAGES, observed_at=WHEN)] == ["Porto", "cook"]
    # the either-gate keeps the nurse (its verifier part does) and the wrong claim (its
    # log-probability part does): it drops what both drop, here nothing ...
    both = MemWorkerBackend(TokenReplay([(answer, logprobs)]), claim_gate=gate)
    assert [c["value"] for c in both.extract(MESSAGES, observed_at=WHEN)] == \
        ["Porto", "nurse", "cook"]
    record = both.last.gate
    assert record["scores"] == [-0.1, -3.1, -0.2] and record["dropped"] == []
    assert record["either"]["score"] == VERIFIER and record["either"]["threshold"] == bar
    assert record["either"]["scores"] == [round(p, 4) for p in (porto_p, nurse_p, wrong_p)]
    # ... and with the wrong claim unsure by its tokens too, that one alone
    unsure = {**logprobs, "cook": -5.0}
    both = MemWorkerBackend(TokenReplay([(answer, unsure)]), claim_gate=gate)
    assert [c["value"] for c in both.extract(MESSAGES, observed_at=WHEN)] == ["Porto", "nurse"]
    assert both.last.gate["dropped"] == [2]
    assert any(d.startswith("gate: claim 2 ") and f"verifier {round(wrong_p, 4)} < {bar:g}" in d
               for d in both.last.diagnostics)
    for bad in ("|verifier>=0.5", "-1|", "-1|verifier>=0.5|-2"):
        with pytest.raises(ValueError, match="two gates"):
            ClaimGate.parse(bad)
    with pytest.raises(ValueError, match="different scores"):
        ClaimGate.parse("verifier>=0.5|verifier>=0.9")
    with pytest.raises(ValueError, match="use apply"):
        gate.keep({})
