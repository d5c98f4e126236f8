#!/usr/bin/env python
"""What a hybrid rules-and-model worker would score, composed from an evaluation folder's rules and
model arms (`memworker.eval.studies.hybrid`; runs no model):

    python eval/studies/hybrid.py --out receipts/eval/val --model student --to /tmp/hybrid
"""

import sys

from memworker.eval.studies.hybrid import main

if __name__ == "__main__":
    sys.exit(main())
