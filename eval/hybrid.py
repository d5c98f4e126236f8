#!/usr/bin/env python
"""What a hybrid rules-and-model worker would score, composed from an evaluation folder's rules and
model arms (`memworker.eval.hybrid`; runs no model):

    python eval/hybrid.py --out receipts/eval/val --model student --to /tmp/hybrid
"""

import sys

from memworker.eval.hybrid import main

if __name__ == "__main__":
    sys.exit(main())
