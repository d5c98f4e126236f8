#!/usr/bin/env python
"""An evaluation folder's recorded answers graded again with today's ruler, before beside after,
and the claims whose verdict changed (`memworker.eval.regrade`; runs no model):

    python eval/regrade.py --out receipts/eval/heldout --claims
"""

import sys

from memworker.eval.regrade import main

if __name__ == "__main__":
    sys.exit(main())
