"""inference/bench.py's pure parts: the mixed request order and the report's arithmetic."""

from __future__ import annotations

from memworker.inference.bench import Stats, mixed_plan, percentile, report


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
