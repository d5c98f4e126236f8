#!/usr/bin/env python
"""Propose only where the student would write a claim: the fork threshold (and a turn stopped at
its first repeat) replayed on a proposing student's recorded turns, with the gate's kept claims
regraded and the answer tokens a window counted (`memworker.eval.studies.fork`; runs no model):

    python eval/studies/fork.py --folder val=receipts/eval/val-47/e22:e22 \\
        --folder natural-dev=receipts/eval/natural-dev/e22:n1 --union
"""

import sys

from memworker.eval.studies.fork import main

if __name__ == "__main__":
    sys.exit(main())
