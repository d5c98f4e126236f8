#!/usr/bin/env python
"""Which required facts an arm's extract claims cover and which they miss, by kind of fact,
subject, behaviour and predicate (`memworker.eval.studies.misses`; runs no model):

    python eval/studies/misses.py --out receipts/eval/natural-dev/e22 --model n1
"""

import sys

from memworker.eval.studies.misses import main

if __name__ == "__main__":
    sys.exit(main())
