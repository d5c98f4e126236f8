#!/usr/bin/env python
"""Train the turn gate (`memworker.train.turn_gate`): P(an event holds a fact) from its text, an
L2 logistic regression over word stems and stem pairs, trained on the train splits of the corpus
and natural-train and measured on their val splits; writes
src/memworker/inference/turn_gate.json:

    python train/turn_gate.py
    python train/turn_gate.py --corpus data/natural-train --out /tmp/turn_gate.json
"""

import sys

from memworker.train.turn_gate import main

if __name__ == "__main__":
    sys.exit(main())
