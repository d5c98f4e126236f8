"""The studies: one-off measurements over recorded samples or a file the user supplies, each with
its entry script beside the evaluator's (`eval/studies/*.py`, see eval/README.md "Studies").

Modules: `claims` (which part of an arm's extract claims is wrong), `confidence` (the model's own
token probabilities as a claim score), `hybrid` (a rules-and-model worker composed from two
arms), `rowtools` (the rows helpers hybrid and confidence share), `pair` (two arms of two
folders compared), `restyle` (the same conversation in fewer, longer messages), `external` (the
LoCoMo-format diagnostic), `verifier_auc` (the learned claim verifier against the confidence score),
`wire_cost` (what candidate extract wires and reading schedules would cost, on gold answers).

They import the evaluator (`memworker.eval`: its grader, runner and summariser); the evaluator
never imports them (tests/test_import_direction.py).
"""
