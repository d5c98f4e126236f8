"""External diagnostic on a LoCoMo-format file that you supply (EVAL_SPEC § External diagnostic).

Evaluation only: the file is never trained on, and the numbers are a diagnostic of the worker on
real conversations, not LoCoMo QA accuracy. See eval/README.md § External diagnostic.

Usage (from the repository root):

    # rules baseline only: 24 windows of 8 turns and 24 QA rows, seed 0
    python eval/studies/external.py --locomo /path/to/locomo10.json --arm rules --out runs/external

    # base vs student vs rules, more windows, QA evidence with 2 distractor turns each
    python eval/studies/external.py --locomo /path/to/locomo10.json \\
        --arm base=release/base-q8_0.gguf --arm student=release/student-q8_0.gguf --arm rules \\
        --window 8 --windows 48 --questions 48 --distractors 2 --seed 0 --out runs/external

    # for the report notebook: copy the summary next to the receipts
    cp runs/external/summary.json receipts/external-summary.json

An interrupted run resumes: rerun the same command. Outputs in --out: samples.jsonl,
summary.json, report.md, config.json.
"""

import sys

from memworker.eval.studies.external import main

if __name__ == "__main__":
    sys.exit(main())
