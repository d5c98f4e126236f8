#!/usr/bin/env python
"""Whether the learned claim verifier tells the model's supported extract claims from the rest
better than its own log-probability score, and what dropping the claims it doubts would score
(`memworker.eval.studies.verifier_auc`; runs no model):

    python eval/studies/verifier_auc.py --out receipts/eval/val --model student --json /tmp/v.json
"""

import sys

from memworker.eval.studies.verifier_auc import main

if __name__ == "__main__":
    sys.exit(main())
