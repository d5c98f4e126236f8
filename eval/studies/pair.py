#!/usr/bin/env python
"""Two arms from two evaluation folders, compared on the rows both ran
(`memworker.eval.studies.pair`; runs no model):

    python eval/studies/pair.py --arm g3=receipts/eval/val-e20:g3 --arm e21=/tmp/e21/val:e21
"""

import sys

from memworker.eval.studies.pair import main

if __name__ == "__main__":
    sys.exit(main())
