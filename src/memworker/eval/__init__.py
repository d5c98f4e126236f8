"""The evaluation stage: matched arms, deterministic grading against each row's truth, paired
statistics (EVAL_SPEC). Entry script: `python eval/run.py` (see eval/README.md).

Modules: `runner` (arms, samples.jsonl, resume; the rules arm is `memworker.inference.rules`),
`grade` (verdicts per row), `stats` (bootstrap, McNemar, z-scores), `summary` (summary.json,
report.md, plots, receipt), `judge` (optional LLM judge), `cli` (arguments), `bench` (the worker's
speed, `inference/bench.py`).
"""
