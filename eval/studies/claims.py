#!/usr/bin/env python
"""Which part of an arm's extract claims is wrong, per arm, from an evaluation folder
(`memworker.eval.studies.claims`): claims, distinct, citing a source event of a current fact, and of
those the subject, predicate family, value and kind that agree; supported.

    python eval/studies/claims.py --out receipts/eval/heldout
"""

import sys

from memworker.eval.studies.claims import main

if __name__ == "__main__":
    sys.exit(main())
