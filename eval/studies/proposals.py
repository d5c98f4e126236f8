#!/usr/bin/env python
"""A model's proposed extract claims on a training corpus's train split, graded by the evaluator,
as the labelled file the claim verifier trains on (`memworker.eval.studies.proposals`; runs no
model):

    python eval/studies/proposals.py --out /tmp/nt-v3 --model v3 --write receipts/verifier/nt-v3.jsonl
"""

import sys

from memworker.eval.studies.proposals import main

if __name__ == "__main__":
    sys.exit(main())
