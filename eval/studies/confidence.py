#!/usr/bin/env python
"""Whether the model's own token probabilities tell its supported extract claims from the rest,
and what dropping the unsure ones would score, alone and beside the rules
(`memworker.eval.studies.confidence`; runs no model):

    python eval/studies/confidence.py --out /tmp/e15 --model student
"""

import sys

from memworker.eval.studies.confidence import main

if __name__ == "__main__":
    sys.exit(main())
