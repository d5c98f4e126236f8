#!/usr/bin/env python
"""Decide first, roll back: what a wire that scores a claim early and rolls a dropped claim back
would cost (answer tokens a window) and keep (support, coverage), replayed on a proposing
student's recorded claims before anyone trains in it (`memworker.eval.studies.rollback`; runs no
model, the embedded tokenizer, the grader and the committed verifier only):

    python eval/studies/rollback.py --out receipts/eval/natural-dev/e22-once --model n1
    python eval/studies/rollback.py --out receipts/eval/val-47/e22-once --model e22 --json /tmp/rb.json
"""

import sys

from memworker.eval.studies.rollback import main

if __name__ == "__main__":
    sys.exit(main())
