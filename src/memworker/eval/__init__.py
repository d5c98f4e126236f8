"""The evaluation stage: matched arms, deterministic grading against each row's truth, paired
statistics (EVAL_SPEC). Entry script: `python eval/run.py` (see eval/README.md).

Modules: `runner` (arms, samples.jsonl, resume; the rules arm is `memworker.inference.rules`),
`grade` (verdicts per row), `stats` (bootstrap, McNemar, z-scores), `summary` (summary.json,
report.md, receipt), `plots` (tasks.png, temporal.png; the task chart the report draws too),
`judge` (optional LLM judge), `cli` (arguments), `bench` (the worker's speed,
`inference/bench.py`). The one-off studies are `memworker.eval.studies` (they import the
evaluator; it never imports them).
"""
