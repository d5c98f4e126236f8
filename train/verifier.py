#!/usr/bin/env python
"""Train the claim verifier (`memworker.train.verifier`): keep/drop of an extract claim judged
against its window, an L2 logistic regression over hand-chosen features, trained on the train
splits of natural-train and the corpus (gold claims against realistic perturbations of them) and
measured on their val splits; writes src/memworker/inference/verifier.json:

    python train/verifier.py
    python train/verifier.py --corpus data/natural-train --out /tmp/verifier.json
"""

import sys

from memworker.train.verifier import main

if __name__ == "__main__":
    sys.exit(main())
