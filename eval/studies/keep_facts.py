#!/usr/bin/env python
"""A keep file for training on what the student gets right: each train-split window's gold facts
its recorded claims cover (`memworker.eval.studies.keep_facts`; runs no model):

    python eval/studies/keep_facts.py --folder receipts/eval/train-48/train-e22:e22 \\
        --folder receipts/eval/train-48/nt-e22:e22 --facts supported --out FILE
"""

import sys

from memworker.eval.studies.keep_facts import main

if __name__ == "__main__":
    sys.exit(main())
