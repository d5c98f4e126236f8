"""inference/bench.py's pure parts: the mixed request order and the report's arithmetic."""

from __future__ import annotations

from memworker.eval.bench import Stats, mixed_plan, percentile, report


def test_mixed_plan_alternates_tasks_and_cycles_samples():
    plan = mixed_plan(4, ("extract", "reflect"), start=1)
    assert plan == [("extract", 1), ("reflect", 1), ("extract", 2), ("reflect", 2),
                    ("extract", 0), ("reflect", 0), ("extract", 1), ("reflect", 1)]


def test_percentile_interpolates():
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0], 95) == 1.95


def stats(latencies, answer_tokens, texts, gen_seconds, tokens=None):
    return Stats(latencies=latencies, prompt_evaluated=[100] * len(latencies),
                 answer_tokens=answer_tokens, texts=texts,
                 tokens=sum(answer_tokens) if tokens is None else tokens,
                 gen_seconds=gen_seconds, accepted=len(latencies))


def test_report_ratios_speed_up_and_grammar_overhead():
    results = {
        ("extract", "before"): stats([4.0, 6.0], [100, 100], ["a", "b"], 8.0),
        ("extract", "after"): stats([2.0, 3.0], [100, 100], ["a", "x"], 4.0),
        ("extract", "no grammar"): stats([2.0, 2.0], [100, 100], ["", ""], 2.0),
    }
    text = report(results, decode_rate=50.0)
    after = next(line for line in text.splitlines() if line.startswith("extract     after"))
    # ratio: wall / (100 tokens / 50 tok/s) -> 1.0 and 1.5, p50 1.25; p50@85: 2.5 * 50 / 85
    assert " 1.25 " in after and " 1.47 " in after and " 1/2 " in after
    assert "speed-up extract: p50 2.00x" in text
    assert "grammar overhead (argmax first) extract: 2.00x" in text  # 100 tok/s vs 50 tok/s
    assert "llama-cpp-python sampler" not in text  # no "prefix" mode measured


def _counted():
    """The scripted backend of tests/test_claim_gate.py, reporting its answer tokens as
    completion tokens (one piece a token)."""
    from tests.test_claim_gate import TokenReplay

    class Counted(TokenReplay):
        def generate(self, *a, **kw):
            gen = super().generate(*a, **kw)
            gen.completion_tokens = len(gen.token_logprobs)
            return gen
    return Counted


def test_the_worker_bench_counts_every_generation_and_the_gate():
    """`--worker`: each window through the store's worker (here the turns form with a gate over
    scripted answers and log-probabilities): answer tokens of every turn, claims kept and gated
    away, and the ratio of wall time to the decode floor."""
    from memworker.eval.bench import worker_bench, worker_report
    from memworker.inference.gate import ClaimGate
    from memworker.inference.hmem import MemWorkerBackend
    from tests.test_claim_gate import MESSAGES, NURSE, PORTO, WHEN

    turn1 = ('{"claims":[' + PORTO + "]}", {"lives_in": -0.2})
    turn2 = ('{"claims":[' + NURSE + "]}", {"job": -3.0})
    worker = MemWorkerBackend(_counted()([turn1, turn2] * 3), extract_form="turns",
                              claim_gate=ClaimGate(-1.0))
    inputs, _ = worker.episode(MESSAGES, observed_at=WHEN)
    calls = worker_bench(worker, [{"input": inputs}] * 2, log=lambda _: None)  # + 1 warm-up
    tokens = len(turn1[0]) + len(turn2[0])   # one piece per character but the scored words
    assert [(c["calls"], c["kept"], c["gated"]) for c in calls] == [(2, 1, 1), (2, 1, 1)]
    assert all(0 < c["tokens"] <= tokens for c in calls)
    line = worker_report([{**c, "wall": 2.0} for c in calls], decode_rate=calls[0]["tokens"])
    assert "p50 2.00 s" in line and "decode ratio p50 2.00" in line
    assert "claims kept 2, gated away 2" in line


def test_lookup_steps_copy_what_the_context_holds_and_fall_back_to_one_token():
    """Prompt-lookup replay: a draft is the continuation of the latest earlier occurrence of the
    last two tokens; a step yields the draft's matching prefix plus the model's own token, and a
    step with no occurrence is one token in a batch of one."""
    from memworker.eval.bench import lookup_steps

    prompt = [1, 2, 3, 4, 5, 9]
    # the answer copies 3 4 5 after "1 2", then leaves the copy (7), then has no match (8)
    steps = lookup_steps(prompt, [1, 2, 3, 4, 5, 7, 8], draft=8)
    # step 1: key (5, 9) never occurred before -> batch 1, yields "1"
    # step 2: key (9, 1) -> none -> yields "2"
    # step 3: key (1, 2) at 0 -> draft 3 4 5 9 1 2 (6 tokens); the answer continues 3 4 5 7:
    #         3 match, plus the model's own token (7)
    # step 4: key (5, 7) -> none -> yields "8"
    assert steps == [(1, 1), (1, 1), (7, 4), (1, 1)]
    assert sum(y for _, y in steps) == 7
    assert lookup_steps([], [5], draft=4) == [(1, 1)]
    # the draft is what follows the occurrence (3 1 2), checked whole; the answer has one token
    assert lookup_steps([1, 2, 3, 1, 2], [3], draft=4) == [(4, 1)]


def test_cost_of_reads_measured_batches_and_interpolates():
    from memworker.eval.bench import cost_of

    costs = {1: 16.0, 2: 34.0, 4: 46.0, 8: 58.0}
    assert cost_of(costs, 4) == 46.0
    assert cost_of(costs, 3) == 40.0              # between 2 and 4
    assert cost_of(costs, 12) == 70.0             # beyond 8: the 4 -> 8 slope


def test_the_worker_bench_does_not_count_a_turn_the_turn_gate_left_unasked(monkeypatch):
    """A turn the turn gate does not ask is no call and no answer token."""
    from memworker.eval.bench import worker_bench
    from memworker.inference import turn_gate
    from memworker.inference.hmem import MemWorkerBackend
    from tests.test_claim_gate import MESSAGES, PORTO, WHEN

    turn = ('{"claims":[' + PORTO + "]}", {"lives_in": -0.2})
    probe = MemWorkerBackend(_counted()([turn] * 9), extract_form="turns")
    inputs, _ = probe.episode(MESSAGES, observed_at=WHEN)
    texts = {e["index"]: e["text"] for e in inputs["events"]}
    users = [e["index"] for e in inputs["events"] if e["role"] == "user"]
    assert len(users) == 2
    # a gate that asks only the first user event
    gate = turn_gate.TurnGate({"version": turn_gate.VERSION, "bias": -5.0, "weights": {
        f: 10.0 for f in turn_gate.features(texts[users[0]])
        if f not in turn_gate.features(texts[users[1]])}})
    monkeypatch.setattr(turn_gate, "committed", lambda: gate)
    worker = MemWorkerBackend(_counted()([turn] * 3), extract_form="turns", turn_gate=0.5)
    calls = worker_bench(worker, [{"input": inputs}] * 2, log=lambda _: None)  # + 1 warm-up
    assert [c["calls"] for c in calls] == [1, 1]
    assert all(0 < c["tokens"] <= len(turn[0]) for c in calls)
    assert [len(c["answers"]) for c in calls] == [2, 2]
